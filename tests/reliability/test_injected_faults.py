"""Every write memsync makes can fail: ``strace -f -e inject=…`` fails the N-th write, pwrite, rename
or fsync of memsync and of every git process it runs (writes libgit2 and git make are out of
Python's reach, not out of strace's), with ENOSPC and with EIO, one injection point per run, as
SQLite's I/O-error tests do. After each faulted run a plain rerun must converge: no traceback, no
loss, nothing pushed twice, no false conflict or local change, the commit ids of a fault-free run,
``git fsck`` clean.

CI runs a seeded sample of the points (``MEMSYNC_FAULT_POINTS``, default 3 per scenario and errno);
``MEMSYNC_FAULT_POINTS=all`` sweeps every point, the soak's budget (docs/reliability.md).
"""

from __future__ import annotations

import collections
import os
import random
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from memsync.api import Client, open_client
from memsync.rules import Dialect
from memsync.sync.pull import pull_store
from tests.reliability.crashes import assert_converged
from tests.reliability.harness import GitOracle, MemsyncCli, write_config
from tests.support.machine import cannot_run_here
from tests.support.server import ServerProcess

# Every test here runs memsync as a process: killed, faulted, or on a full disk.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

SYSCALLS = ("write", "pwrite64", "rename", "fdatasync", "fsync")
ERRNOS = ("ENOSPC", "EIO")
BUDGET = os.environ.get("MEMSYNC_FAULT_POINTS", "3")
SEED = int(os.environ.get("MEMSYNC_FAULT_SEED", "2026"))
FILES = 20


def _strace_missing() -> str | None:
    if shutil.which("strace") is None:
        return "strace is not installed (apt-get install strace)"
    probe = subprocess.run(["strace", "-f", "-qq", "-o", os.devnull, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"strace cannot trace here (ptrace refused?): {probe.stderr.strip()}"
    return None


@dataclass(frozen=True)
class Point:
    syscall: str
    nth: int
    errno: str

    def strace(self) -> list[str]:
        return [
            "strace",
            "-f",
            "-qq",
            "-o",
            os.devnull,
            "-e",
            f"inject={self.syscall}:error={self.errno}:when={self.nth}",
        ]


def _counts(cli: MemsyncCli, trace: Path, *args: str) -> dict[str, int]:
    """Per syscall, the most any one process of a fault-free run made: the points there are to fail."""
    traced = ["strace", "-f", "-qq", "-o", str(trace), "-e", f"trace={','.join(SYSCALLS)}"]
    done = subprocess.run(
        traced + cli.command(*args),
        capture_output=True,
        text=True,
        env=cli.environment(),
        cwd=cli.config.parent,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    per_process: collections.Counter[tuple[str, str]] = collections.Counter()
    for line in trace.read_text(errors="replace").splitlines():
        found = re.match(r"(\d+)\s+(\w+)\(", line)
        if found and found.group(2) in SYSCALLS:
            per_process[(found.group(1), found.group(2))] += 1
    most: dict[str, int] = {}
    for (_, syscall), count in per_process.items():
        most[syscall] = max(most.get(syscall, 0), count)
    return most


def _points(counts: dict[str, int], salt: str) -> list[Point]:
    every = [Point(s, n, e) for e in ERRNOS for s, top in sorted(counts.items()) for n in range(1, top + 1)]
    if BUDGET == "all":
        return every
    rng = random.Random(f"{SEED}-{salt}")
    return sorted(
        rng.sample(every, min(len(every), int(BUDGET) * len(ERRNOS))),
        key=lambda p: (p.errno, p.syscall, p.nth),
    )


def _faulted(cli: MemsyncCli, point: Point, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        point.strace() + cli.command(*args),
        capture_output=True,
        text=True,
        env=cli.environment(),
        cwd=cli.config.parent,
        timeout=300,
    )
    # strace fails pipe writes too (it cannot tell a file's descriptor from a pipe's): a `git
    # --version` whose output was lost is "memsync needs a working git", exit 2. Any other fault is a
    # failed run, exit 1 (or none, where the failed write was one memsync can do without).
    assert done.returncode in (0, 1) or (
        done.returncode == 2 and "version of" in done.stdout + done.stderr
    ), f"{point}: exit {done.returncode}\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}"
    assert "Traceback" not in done.stderr, f"{point}:\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[Client]:
    why = _strace_missing()
    if why is not None:
        cannot_run_here(why)
    with open_client(Dialect.FORWARD, server.base_url, server.token) as opened:
        yield opened


def _store(client: Client) -> str:
    store = client.create_store(f"faults-{uuid.uuid4().hex[:6]}", idempotency_key=str(uuid.uuid4()))
    for n in range(FILES):
        client.create_memory(store.id, f"notes/{n % 3}/m{n:02d}.md", f"memory {n}\n" * (1 + n % 4))
    return store.id


def test_a_first_pull_failing_at_any_write_converges_on_the_next(
    client: Client, server: ServerProcess, tmp_path: Path
) -> None:
    store_id = _store(client)
    reference = pull_store(client, client.get_store(store_id), tmp_path / "reference")
    assert reference.ok and reference.tip is not None
    cli = MemsyncCli(
        write_config(tmp_path, dialect="forward", base_url=server.base_url, stores=[store_id]), server.token
    )
    points = _points(_counts(cli, tmp_path / "trace", "pull"), "pull")
    print(f"pull: {len(points)} injection points")  # the soak's log says how many were swept
    repo = tmp_path / "mirrors" / store_id
    failed = 0
    for point in points:
        shutil.rmtree(tmp_path / "mirrors")
        failed += _faulted(cli, point, "pull").returncode != 0
        rerun = cli.run("pull")
        assert rerun.returncode == 0, f"{point}: {rerun.describe()}"
        assert "local change" not in rerun.stdout, f"{point}: {rerun.stdout[-2000:]}"
        assert_converged({store_id: GitOracle(repo)}, {store_id: reference.tip})
    assert failed, "no injected fault made a pull fail: the points missed every write"


def test_a_sync_failing_at_any_write_pushes_the_edit_once_on_the_next(
    client: Client, server: ServerProcess, tmp_path: Path
) -> None:
    store_id = _store(client)
    cli = MemsyncCli(
        write_config(tmp_path, dialect="forward", base_url=server.base_url, stores=[store_id]), server.token
    )
    assert cli.run("pull").returncode == 0
    repo = tmp_path / "mirrors" / store_id
    memories = {m.path: m.id for m in client.list_memories(store_id)}
    paths = sorted(memories)
    (repo / paths[0]).write_text("counting edit\n", encoding="utf-8")
    points = _points(_counts(cli, tmp_path / "trace", "sync"), "sync")
    print(f"sync: {len(points)} injection points")
    failed = 0
    for index, point in enumerate(points):
        path = paths[1 + index % (len(paths) - 1)]
        edit = f"edited at {point}\n"
        (repo / path).write_text(edit, encoding="utf-8")
        before = len(list(client.iter_versions(store_id, memory_id=memories[path])))
        failed += _faulted(cli, point, "sync").returncode != 0
        rerun = cli.run("sync")
        assert rerun.returncode == 0, f"{point}: {rerun.describe()}"
        assert "conflict" not in rerun.stdout, f"{point}: {rerun.stdout[-2000:]}"
        # The edit reached the store, exactly once, and the checkout holds it with nothing left to push.
        assert client.get_memory(store_id, memories[path]).content == edit, point
        after = len(list(client.iter_versions(store_id, memory_id=memories[path])))
        assert after == before + 1, f"{point}: {after - before} versions written for one edit"
        oracle = GitOracle(repo)
        assert_converged({store_id: oracle}, {store_id: oracle.ref("refs/remotes/memstore/main")})
        assert (repo / path).read_text(encoding="utf-8") == edit
    assert failed, "no injected fault made a sync fail: the points missed every write"
