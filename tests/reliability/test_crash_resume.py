"""``memsync pull`` killed (SIGKILL) at every crash point, several passes of each, then run again.

Two stores on the real server, imported in batches of :data:`BATCH` commits, so kills land before,
between and after checkpoints and in the second store of a run. Each case starts either from nothing
(the first import) or from a mirror that already holds an older part of the history (an incremental
pull, whose checkout has something to move). After the next run, each mirror must be exactly where an
uninterrupted pull ends: the same tip commit id, a clean ``git fsck --strict``, no stale lock, main,
base and working tree at the tip.
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

import memsync
from memsync.api import open_client
from memsync.rules import Dialect
from memsync.sync.pull import pull_store
from tests.reliability.crashes import CRASH_POINTS, CrashCase, assert_converged, crash_then_finish
from tests.reliability.harness import GitOracle, MemsyncCli, write_config
from tests.reliability.histories import History, assert_mirror_holds, build_history, grow_history
from tests.support.server import ServerProcess

# Every test here runs memsync as a process: killed, faulted, or on a full disk.
pytestmark = pytest.mark.e2e

BATCH = 4
# (versions before the template mirror was pulled, versions added after it) per store.
SHAPES = ((11, 12), (6, 9))


@dataclass
class CrashWorld:
    server: ServerProcess
    histories: list[History]
    tips: dict[str, str]
    template: Path  # a mirror root pulled when the stores held only their first part

    @property
    def store_ids(self) -> list[str]:
        return [h.store.id for h in self.histories]


@pytest.fixture(scope="module")
def world(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> CrashWorld:
    base = tmp_path_factory.mktemp("crash-world")
    template = base / "template"
    histories = []
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        stores = [
            client.create_store(f"crash-{n}-{uuid.uuid4().hex[:6]}", idempotency_key=str(uuid.uuid4()))
            for n in range(len(SHAPES))
        ]
        for n, (store, (first, _)) in enumerate(zip(stores, SHAPES, strict=True)):
            histories.append(build_history(client, store, versions=first, seed=100 + n))
        for store in stores:
            assert pull_store(client, store, template).ok
        for history, (_, more) in zip(histories, SHAPES, strict=True):
            grow_history(client, history, more)
        tips = {}
        for history in histories:
            report = pull_store(client, history.store, base / "reference")
            assert report.ok and report.tip is not None, report.error
            tips[history.store.id] = report.tip
    return CrashWorld(server, histories, tips, template)


def _cli(world: CrashWorld, tmp_path: Path, start: str) -> MemsyncCli:
    if start == "incremental":
        shutil.copytree(world.template, tmp_path / "mirrors")
    config = write_config(tmp_path, dialect="forward", base_url=world.server.base_url, stores=world.store_ids)
    return MemsyncCli(config, world.server.token)


# Passes counted for BATCH = 4: fresh, 23 + 15 versions in 6 + 4 batches; incremental, 12 + 9 in 3 + 3.
# Each point at two passes or more, from both starts; the soak draws points and passes at random.
CASES = [
    ("fresh", CrashCase("mirror.created", 2)),  # the first mirror made, the second half made
    ("fresh", CrashCase("pull.version", 1)),
    ("fresh", CrashCase("pull.version", BATCH)),  # right after the first batch's ref moved
    ("fresh", CrashCase("pull.version", 30)),  # in the second store
    ("incremental", CrashCase("pull.version", 14)),
    ("fresh", CrashCase("mirror.pack_written", 1)),
    ("incremental", CrashCase("mirror.pack_written", 2)),
    ("fresh", CrashCase("mirror.ref_moved", 7)),
    ("incremental", CrashCase("mirror.ref_moved", 4)),
    ("fresh", CrashCase("pull.version", 2)),  # mid-stream, in the first batch
    ("fresh", CrashCase("checkout.file_written", 3)),
    ("incremental", CrashCase("checkout.file_written", 2)),
    ("fresh", CrashCase("checkout.tree_written", 1)),
    ("incremental", CrashCase("checkout.tree_written", 2)),
    ("fresh", CrashCase("checkout.main_moved", 2)),
    ("incremental", CrashCase("checkout.main_moved", 1)),
]


@pytest.mark.parametrize(("start", "case"), CASES, ids=[f"{s}-{c}" for s, c in CASES])
def test_a_killed_pull_resumes_to_the_uninterrupted_commits(
    world: CrashWorld, tmp_path: Path, start: str, case: CrashCase
) -> None:
    cli = _cli(world, tmp_path, start)
    _, final = crash_then_finish(cli, ["pull", "--json"], [case], batch=BATCH)
    root = tmp_path / "mirrors"
    assert_converged({s: GitOracle(root / s) for s in world.store_ids}, world.tips)
    for history in world.histories:
        assert final.store(history.store.id)["ok"] is True
        assert_mirror_holds(root / history.store.id, history)


def test_a_pull_killed_again_and_again_still_converges(world: CrashWorld, tmp_path: Path) -> None:
    # Each run gets one batch further before its kill; the points rotate, so every kind of
    # half-done state is met on top of the previous one's leftovers.
    cli = _cli(world, tmp_path, "fresh")
    crashes = [
        CrashCase("pull.version", BATCH + 2),
        CrashCase("mirror.pack_written", 2),
        CrashCase("mirror.ref_moved", 2),
        CrashCase("pull.version", BATCH * 2 + 1),
        CrashCase("pull.version", BATCH + 1),
        CrashCase("checkout.tree_written", 1),
    ]
    killed, _ = crash_then_finish(cli, ["pull", "--json"], crashes, batch=BATCH)
    assert len(killed) == len(crashes)
    root = tmp_path / "mirrors"
    assert_converged({s: GitOracle(root / s) for s in world.store_ids}, world.tips)
    for history in world.histories:
        assert_mirror_holds(root / history.store.id, history)


def test_every_listed_crash_point_is_in_the_code() -> None:
    # A point renamed in the code would make its kill cases fail only as "expected a kill": say why.
    source = "\n".join(p.read_text(encoding="utf-8") for p in Path(memsync.__file__).parent.rglob("*.py"))
    for command, points in CRASH_POINTS.items():
        for point in points:
            assert f'crash_point("{point}")' in source, f"{command}: no crash_point({point!r}) in memsync"
