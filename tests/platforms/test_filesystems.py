"""Mirrors on the filesystems laptops use, mounted for real: exFAT (exfat-fuse over a loop device:
case-insensitive and case-preserving as APFS and NTFS are, and it refuses Windows' forbidden
characters) and NTFS through ntfs-3g with ``windows_names`` (it refuses Windows' reserved names and
characters). A store whose paths collide by case, by normalization and by Windows' rules pulls,
edits, pushes and conflicts there with every memory a distinct file, and with the commit ids of the
same store mirrored on the test's own filesystem.

The mounts and what they need: tests/support/filesystems.py.
"""

from __future__ import annotations

import os
import queue
import stat
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsync.api import Client, open_client
from memsync.daemon._watcher import CheckoutWatcher
from memsync.mirror import decode_path
from memsync.rules import Dialect
from memsync.sync.permissions import exposure
from tests.push.conftest import Side, git
from tests.support.cli import memsync
from tests.support.filesystems import FILESYSTEMS, mounted
from tests.support.server import ServerProcess

# Every test here mounts a real filesystem over a loop device.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

SEED = {
    "notes/readme.md": "lower\n",
    "notes/Readme.md": "title\n",
    "notes/README.md": "upper\n",
    "Docs/a.md": "folder, upper\n",
    "docs/b.md": "folder, lower\n",
    "caf\u00e9.md": "NFC\n",
    "cafe\u0301.md": "NFD\n",
    "stra\u00dfe.md": "sharp s\n",
    "strasse.md": "double s\n",
    "x": "a file\n",
    "X/y.md": "a folder that folds like the file\n",
    "a:b.md": "colon\n",
    "what?.md": "question\n",
    "con.md": "device\n",
    "Aux": "device, no extension\n",
    "dot.": "trailing dot\n",
}


@pytest.fixture(scope="module", params=sorted(FILESYSTEMS))
def mount(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A freshly formatted filesystem of the kind, mounted over a loop device; unmounted after."""
    with mounted(request.param, tmp_path_factory.mktemp(request.param)) as point:
        yield point


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Client]:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as opened:
        yield opened


def _seeded(client: Client, root: Path) -> Side:
    store = client.create_store(f"laptop-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()))
    for path, content in SEED.items():
        client.create_memory(store.id, path, content)
    return Side(client, store, root)


def _files(side: Side) -> dict[str, str]:
    """``{memory path: content}`` of the checkout, read from disk under git's tree paths."""
    tree_paths = git(side.repo, "ls-files", "-z").split("\0")
    return {
        decode_path(tree_path): (side.repo / tree_path).read_text(encoding="utf-8")
        for tree_path in tree_paths
        if tree_path
    }


def test_every_memory_is_a_distinct_file_with_the_commit_ids_of_ext4(
    mount: Path, client: Client, tmp_path: Path
) -> None:
    side = _seeded(client, mount / f"mirrors-{uuid.uuid4().hex[:6]}")
    side.synced()
    assert _files(side) == SEED
    side.assert_in_step()
    # The same store mirrored on the test's own filesystem: the same commits.
    elsewhere = Side(client, side.store, tmp_path / "mirrors")
    elsewhere.synced()
    assert side.ref("refs/remotes/memstore/main") == elsewhere.ref("refs/remotes/memstore/main")
    assert side.ref("refs/heads/main") == elsewhere.ref("refs/heads/main")


def test_an_edit_of_each_round_trips_and_a_conflict_keeps_both_sides(mount: Path, client: Client) -> None:
    side = _seeded(client, mount / f"mirrors-{uuid.uuid4().hex[:6]}")
    side.synced()
    for tree_path in git(side.repo, "ls-files", "-z").split("\0"):
        if tree_path:
            with open(side.repo / tree_path, "a", encoding="utf-8") as out:
                out.write("edited\n")
    report = side.synced()
    assert report.exit_code == 0
    edited = {path: content + "edited\n" for path, content in SEED.items()}
    assert side.remote() == edited
    side.assert_in_step()

    # The same line changed on both sides of the file whose name only differs in case.
    local = side.repo / "notes" / "%52eadme.md"
    local.write_text("title\nlocal\n", encoding="utf-8")
    side.put("notes/Readme.md", "title\nremote\n")
    report = side.sync()
    assert report.ok and report.exit_code == 4
    assert report.conflicts == ["notes/%52eadme.md"]  # named as in the checkout
    assert side.remote()["notes/Readme.md"] == "title\nremote\n"
    text = local.read_text(encoding="utf-8")
    assert "local" in text and "remote" in text
    # The files that fold like it were left alone.
    assert _files(side)["notes/readme.md"] == edited["notes/readme.md"]
    assert _files(side)["notes/README.md"] == edited["notes/README.md"]


def test_a_root_on_a_filesystem_without_modes_is_not_warned_about(mount: Path) -> None:
    # exFAT and ntfs-3g (without its permissions option) show every file 0777 and ignore chmod: a
    # warning to chmod the root could not be acted on, so there is none.
    root = mount / f"modes-{uuid.uuid4().hex[:6]}"
    root.mkdir()
    assert stat.S_IMODE(root.stat().st_mode) & 0o077  # exposed, by the look of its modes
    assert exposure(root, group_readable=False) is None
    assert sorted(p.name for p in root.iterdir()) == []  # the probe left nothing behind


def test_a_token_file_on_it_is_warned_about_not_refused(
    mount: Path, server: ServerProcess, tmp_path: Path
) -> None:
    # chmod 600 cannot work where modes are not kept: refusing the token would leave no way to use
    # it there. The run goes on and says who may read it and which mount options fix that.
    folder = mount / f"token-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    token = folder / "token"
    token.write_text(server.token + "\n")
    token.chmod(0o600)
    assert stat.S_IMODE(token.stat().st_mode) & 0o077  # the chmod did not hold
    done = _stores_with_token_file(server, token, tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"memsync: warning: api.token_file: {token} is on a filesystem that keeps no" in done.stderr
    assert "umask=077" in done.stderr and "uid=" in done.stderr and "chmod 600" not in done.stderr
    assert done.stderr.count("keeps no permissions") == 1
    assert server.token not in done.stderr + done.stdout
    assert sorted(p.name for p in folder.iterdir()) == ["token"]  # the probe left nothing behind


@pytest.mark.parametrize("kind", sorted(FILESYSTEMS))
def test_the_mount_options_docs_give_keep_it_private(
    kind: str, server: ServerProcess, tmp_path: Path
) -> None:
    # docs/platforms.md: mounted with uid, gid and umask=077, what is written there is the user's
    # alone, and a token file there is taken without a warning.
    with mounted(kind, tmp_path, f"uid={os.getuid()},gid={os.getgid()},umask=077") as point:
        token = point / "token"
        token.write_text(server.token + "\n")
        (point / "folder").mkdir()
        for made in (token, point / "folder"):
            assert stat.S_IMODE(made.stat().st_mode) & 0o077 == 0 and made.stat().st_uid == os.getuid()
        done = _stores_with_token_file(server, token, tmp_path)
        assert done.returncode == 0, done.stderr
        assert "keeps no permissions" not in done.stderr
    docs = (Path(__file__).resolve().parents[2] / "docs" / "platforms.md").read_text(encoding="utf-8")
    assert "uid=$(id -u),gid=$(id -g),umask=077" in docs


def test_the_watchdog_watcher_hears_a_save_on_it(mount: Path, client: Client) -> None:
    # The daemon's watcher as on a laptop (watchdog; its inotify emitter here): a save of the file
    # whose name only differs in case is reported by its spelling, and nothing else is.
    side = _seeded(client, mount / f"mirrors-{uuid.uuid4().hex[:6]}")
    side.synced()
    changes: queue.Queue[list[str]] = queue.Queue()
    watcher = CheckoutWatcher(
        lambda _, paths: changes.put(paths),
        lambda _: False,
        quiet=0.1,
        max_wait=2.0,
        backend="watchdog",
        fallback=False,
    )
    watcher.start()
    try:
        assert watcher.backend == "watchdog" and watcher.watch(side.store.id, side.repo)
        (side.repo / "notes" / "%52eadme.md").write_text("saved on a laptop\n", encoding="utf-8")
        assert changes.get(timeout=30) == ["notes/%52eadme.md"]
    finally:
        watcher.stop()


def _stores_with_token_file(
    server: ServerProcess, token: Path, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    """``memsync stores`` as a user runs it, the token read from ``token``."""
    config = tmp_path / "memsync.toml"
    config.write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{server.base_url}"\ntoken_file = "{token}"\n'
        f'[mirror]\nroot = "{tmp_path / "mirrors"}"\n'
    )
    return memsync("--config", str(config), "stores")
