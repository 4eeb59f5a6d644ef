"""A disk that fills up during a pull's checkout: a real tmpfs mounted with ``size=`` as the mirror
root. The pull fails; once space is freed, the next run finishes the checkout and takes none of
memsync's own half-written files for the user's, and an edit the user made meanwhile reaches the
store as an ordinary edit, not a conflict.

Needs root (mount); skips saying why without it.
"""

from __future__ import annotations

import os
import random
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from memsync.api import Client, Store, open_client
from memsync.rules import Dialect
from tests.reliability.harness import GitOracle, MemsyncCli, wait_until, write_config
from tests.support.machine import cannot_run_here
from tests.support.ports import free_port
from tests.support.server import ServerProcess

# Every test here runs memsync as a process: killed, faulted, or on a full disk.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

FILES = 60
PAGE = 4096
ROOMY = 64 << 20


def _mount(point: Path, size: int, *, remount: bool = False) -> subprocess.CompletedProcess[str]:
    options = f"size={size}" + (",remount" if remount else "")
    return subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs, roomy until a test shrinks it with :func:`_resize`."""
    if os.geteuid() != 0:
        cannot_run_here("mounting a tmpfs needs root")
    point = tmp_path / "disk"
    point.mkdir()
    mounted = _mount(point, ROOMY)
    if mounted.returncode != 0:
        cannot_run_here(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def _resize(point: Path, size: int) -> None:
    resized = _mount(point, size, remount=True)
    assert resized.returncode == 0, resized.stderr


def _used(point: Path) -> int:
    info = os.statvfs(point)
    return (info.f_blocks - info.f_bfree) * info.f_frsize


@pytest.fixture
def store(server: ServerProcess) -> Iterator[tuple[Client, Store]]:
    rng = random.Random(7)
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        made = client.create_store(f"full-disk-{uuid.uuid4().hex[:6]}", idempotency_key=str(uuid.uuid4()))
        for n in range(FILES):
            # Random text: neither git's compression nor the page rounding make the sizes guesswork.
            client.create_memory(made.id, f"notes/m{n:02d}.md", rng.randbytes(3000).hex() + "\n")
        yield client, made


def _cli(point: Path, server: ServerProcess, store: Store, tmp_path: Path) -> MemsyncCli:
    config = write_config(
        tmp_path, dialect="forward", base_url=server.base_url, stores=[store.id], root=str(point / "mirrors")
    )
    return MemsyncCli(config, server.token)


def _full_during_checkout(point: Path, cli: MemsyncCli, store: Store) -> None:
    """Pull once with room to measure, then shrink the disk to what the import needs plus about half
    of the checkout, and pull again into an empty root."""
    assert cli.run("pull").returncode == 0
    used = _used(point)
    checkout = sum(
        -(-f.stat().st_size // PAGE) * PAGE for f in (point / "mirrors" / store.id / "notes").iterdir()
    )
    subprocess.run(["rm", "-rf", str(point / "mirrors")], check=True)
    _resize(point, ((used - checkout // 2) // PAGE) * PAGE)


def test_a_checkout_cut_short_by_a_full_disk_is_finished_once_there_is_room(
    small_disk: Path, server: ServerProcess, store: tuple[Client, Store], tmp_path: Path
) -> None:
    _, made = store
    cli = _cli(small_disk, server, made, tmp_path)
    _full_during_checkout(small_disk, cli, made)
    failed = cli.run("pull")
    assert failed.returncode == 1, failed.describe()
    assert "the disk is full: free space on it, then run again" in failed.stdout, failed.describe()
    assert "Traceback" not in failed.stdout + failed.stderr
    repo = small_disk / "mirrors" / made.id
    written = list((repo / "notes").iterdir()) if (repo / "notes").is_dir() else []
    assert 0 < len(written) < FILES, "the disk filled up before or after the checkout: adjust the sizes"

    _resize(small_disk, ROOMY)
    again = cli.run("pull", "--json")
    assert again.returncode == 0, again.describe()
    assert "local change" not in again.stdout
    oracle = GitOracle(repo)
    assert oracle.ref("refs/heads/main") == oracle.ref("refs/remotes/memstore/main")
    assert oracle.text("status", "--porcelain") == ""
    assert len(list((repo / "notes").iterdir())) == FILES
    oracle.fsck()


def test_an_edit_made_after_a_checkout_was_cut_short_is_pushed_as_an_edit(
    small_disk: Path, server: ServerProcess, store: tuple[Client, Store], tmp_path: Path
) -> None:
    client, made = store
    cli = _cli(small_disk, server, made, tmp_path)
    _full_during_checkout(small_disk, cli, made)
    assert cli.run("pull").returncode != 0
    repo = small_disk / "mirrors" / made.id
    whole = [f for f in sorted((repo / "notes").iterdir()) if f.stat().st_size == 6001]
    assert whole, "no file was written whole before the disk filled up"
    edited = whole[0]
    _resize(small_disk, ROOMY)
    edited.write_text(edited.read_text(encoding="utf-8") + "my edit\n", encoding="utf-8")

    synced = cli.run("sync", "--json")

    assert synced.returncode == 0, synced.describe()
    memory = client.find_memory(made.id, f"notes/{edited.name}")
    assert memory is not None
    assert client.get_memory(made.id, memory.id).content == edited.read_text(encoding="utf-8")
    assert sum(1 for _ in client.list_memories(made.id)) == FILES
    oracle = GitOracle(repo)
    assert oracle.text("status", "--porcelain") == ""
    oracle.fsck()


def test_a_read_only_filesystem_is_named_with_its_fix_and_nothing_is_lost(
    small_disk: Path, server: ServerProcess, store: tuple[Client, Store], tmp_path: Path
) -> None:
    client, made = store
    cli = _cli(small_disk, server, made, tmp_path)
    assert cli.run("pull").returncode == 0
    repo = small_disk / "mirrors" / made.id
    memory = client.find_memory(made.id, "notes/m00.md")
    assert memory is not None
    client.update_memory(made.id, memory.id, "changed remotely\n", expected_sha256=memory.content_sha256)
    (repo / "notes" / "m01.md").write_text("changed locally\n", encoding="utf-8")
    _resize(small_disk, ROOMY)  # the same size, now read-only:
    remounted = subprocess.run(
        ["mount", "-o", "remount,ro", str(small_disk)], capture_output=True, text=True, check=False
    )
    assert remounted.returncode == 0, remounted.stderr

    for command in ("pull", "sync"):
        failed = cli.run(command)
        assert failed.returncode == 1, failed.describe()
        assert "the filesystem is read-only: remount it read-write" in failed.stdout + failed.stderr, (
            failed.describe()
        )
        assert "Traceback" not in failed.stdout + failed.stderr

    subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    synced = cli.run("sync")
    assert synced.returncode == 0, synced.describe()
    assert client.get_memory(made.id, memory.id).content == "changed remotely\n"
    assert (repo / "notes" / "m00.md").read_text(encoding="utf-8") == "changed remotely\n"
    local = client.find_memory(made.id, "notes/m01.md")
    assert local is not None and client.get_memory(made.id, local.id).content == "changed locally\n"
    oracle = GitOracle(repo)
    assert oracle.text("status", "--porcelain") == ""
    oracle.fsck()


def test_the_daemon_on_a_full_disk_backs_off_reports_and_recovers_by_itself(
    small_disk: Path, server: ServerProcess, store: tuple[Client, Store], tmp_path: Path
) -> None:
    _, made = store
    cli = _cli(small_disk, server, made, tmp_path)
    _full_during_checkout(small_disk, cli, made)
    port = free_port()
    config = cli.config
    config.write_text(
        config.read_text(encoding="utf-8")
        + '[daemon]\ninterval = "2s"\njitter = "0s"\nmax_failures = 2\n'
        + f'[daemon.http]\nlisten = "127.0.0.1:{port}"\n',
        encoding="utf-8",
    )
    daemon = subprocess.Popen(
        cli.command("daemon"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=cli.environment(),
        cwd=config.parent,
    )
    try:

        def health() -> tuple[int, dict[str, object]] | None:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
            except httpx.TransportError:
                return None
            return answer.status_code, answer.json()

        # Failing, and past max_failures: still retried, never paused, and said so.
        wait_until(
            lambda: (
                (h := health()) is not None
                and h[1].get("status") == "storage-fault"
                and _failures(port, made.id) >= 3
            ),
            timeout=120,
            what="the daemon to report the full disk past max_failures",
        )
        code, document = health() or (0, {})
        assert code == 503 and document["paused"] == []
        faults = document["storage_faults"]
        assert isinstance(faults, dict) and "the disk is full" in str(faults[made.id])
        assert f'memsync_storage_fault{{store="{made.id}"}} 1.0' in _metrics(port)

        _resize(small_disk, ROOMY)
        wait_until(lambda: (h := health()) is not None and h[0] == 200, timeout=120, what="recovery")
        assert f'memsync_storage_fault{{store="{made.id}"}} 0.0' in _metrics(port)
    finally:
        daemon.terminate()
        _, errors = daemon.communicate(timeout=60)
    assert "retrying in" in errors and "the disk is full" in errors and "Traceback" not in errors
    oracle = GitOracle(small_disk / "mirrors" / made.id)
    assert oracle.ref("refs/heads/main") == oracle.ref("refs/remotes/memstore/main")
    assert oracle.text("status", "--porcelain") == ""
    oracle.fsck()


def _metrics(port: int) -> str:
    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text


def _failures(port: int, store_id: str) -> float:
    for line in _metrics(port).splitlines():
        if line.startswith(f'memsync_consecutive_failures{{store="{store_id}"}}'):
            return float(line.split()[-1])
    return 0.0


def test_a_backup_to_a_full_disk_fails_named_and_the_next_one_completes(
    small_disk: Path, server: ServerProcess, store: tuple[Client, Store], tmp_path: Path
) -> None:
    # The mirrors on the test's own disk, the local backup remote on the small one.
    _, made = store
    config = write_config(
        tmp_path,
        dialect="forward",
        base_url=server.base_url,
        stores=[made.id],
        extra=f'[[backup.remotes]]\nurl = "{small_disk}/backups/{{store_id}}.git"\n',
    )
    cli = MemsyncCli(config, server.token)
    assert cli.run("pull").returncode == 0
    _resize(small_disk, 16 * PAGE)  # room for the folders, not for the objects

    failed = cli.run("backup")
    assert failed.returncode == 1, failed.describe()
    assert "the disk is full: free space on it" in failed.stdout + failed.stderr, failed.describe()
    assert "Traceback" not in failed.stdout + failed.stderr

    _resize(small_disk, ROOMY)
    again = cli.run("backup")
    assert again.returncode == 0, again.describe()
    backup = small_disk / "backups" / f"{made.id}.git"
    mirror = GitOracle(tmp_path / "mirrors" / made.id)
    # The imported history is the backup's main (docs/backup.md).
    shipped = subprocess.run(
        ["git", "--git-dir", str(backup), "rev-parse", "refs/heads/main"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert shipped == mirror.ref("refs/remotes/memstore/main")
    subprocess.run(["git", "--git-dir", str(backup), "fsck", "--strict"], check=True, capture_output=True)
