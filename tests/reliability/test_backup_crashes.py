"""``memsync backup`` killed (SIGKILL) at its crash points, and at pull's inside it, then run again.

Two Forward stores on the real server, each backed up to two remotes memsync creates (a relative
path by store id, a ``file://`` URL by name). A case starts from nothing or from an earlier backup
(mirrors and remotes made when the stores held their first part), is killed once at a point and
pass, and is run again. After the kill, every remote that exists is a whole bare repository (a kill
while one is made leaves it at its ``.<name>.memsync-tmp-<pid>`` name only). After the rerun (exit
0, never 75: the store lock is an OS lock): every remote's refs, as ``git ls-remote`` lists them,
equal the mirror's (``git for-each-ref``), its ``main`` is the tip an uninterrupted pull makes,
``git fsck --strict`` is clean on both sides, and no ``*.lock`` and no temporary is left anywhere.

A redaction's forced update gets its own cases: a backup killed between the forced push and the
local remote's pruning must still prune on the rerun, or the redacted content stays in the backup
for good (the refs are up to date by then, so nothing else would ask for a prune).
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from memsync.api import Operation, open_client
from memsync.rules import Dialect
from memsync.sync.backup import slug
from memsync.sync.pull import pull_store
from tests.reliability.backups import (
    assert_backup_matches,
    assert_no_half_made_remote,
    backup_config,
    copy_root,
    kill_backup_then_finish,
    remote_temporaries,
)
from tests.reliability.crashes import CRASH_POINTS, CrashCase, assert_converged
from tests.reliability.harness import Finished, GitOracle, MemsyncCli
from tests.reliability.histories import History, assert_mirror_holds, build_history, grow_history
from tests.support.server import ServerProcess

# Every test here runs memsync as a process: killed, faulted, or on a full disk.
pytestmark = pytest.mark.e2e

BATCH = 4
SHAPES = ((9, 8), (5, 6))  # (versions before the template backup, versions added after it)
SECRET = "api_key=sk-live-crash-backup\n"


@dataclass
class BackupWorld:
    server: ServerProcess
    histories: list[History]
    tips: dict[str, str]
    template: Path

    @property
    def store_ids(self) -> list[str]:
        return [h.store.id for h in self.histories]


def remotes_of(directory: Path, history: History) -> list[Path]:
    return [
        directory / "backups" / f"{history.store.id}.git",
        directory / "second" / f"{slug(history.store.name) or history.store.id}.git",
    ]


def assert_backed_up(world: BackupWorld, directory: Path) -> None:
    root = directory / "mirrors"
    assert remote_temporaries(directory) == [], "a killed run's temporary remote was not removed"
    assert_converged({s: GitOracle(root / s) for s in world.store_ids}, world.tips)
    for history in world.histories:
        mirror = root / history.store.id
        assert_mirror_holds(mirror, history)
        for remote in remotes_of(directory, history):
            assert_backup_matches(mirror, remote)
            assert GitOracle(remote).ref("refs/heads/main") == world.tips[history.store.id]


@pytest.fixture(scope="module")
def world(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> BackupWorld:
    base = tmp_path_factory.mktemp("backup-crash-world")
    template = base / "template"
    template.mkdir()
    histories = []
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        for n, (first, _) in enumerate(SHAPES):
            store = client.create_store(
                f"backup-crash-{n}-{uuid.uuid4().hex[:6]}", idempotency_key=str(uuid.uuid4())
            )
            histories.append(build_history(client, store, versions=first, seed=300 + n))
        ids = [h.store.id for h in histories]
        made = MemsyncCli(backup_config(template, server.base_url, ids), server.token).run("backup", "--json")
        assert made.returncode == 0, made.describe()
        for history, (_, more) in zip(histories, SHAPES, strict=True):
            grow_history(client, history, more)
        tips = {}
        for history in histories:
            report = pull_store(client, history.store, base / "reference")
            assert report.ok and report.tip is not None, report.error
            tips[history.store.id] = report.tip
    return BackupWorld(server, histories, tips, template)


# Passes for two stores and two remotes: backup.pulled 2, backup.remote_initialised and
# backup.remote_created 4 each from nothing (0 from the template: the remotes exist),
# backup.remote_pushed 4; pull's own points as in test_crash_resume.py (17 + 11 versions fresh,
# 8 + 6 incremental, in batches of BATCH).
CASES = [
    ("fresh", CrashCase("pull.version", 5)),
    ("incremental", CrashCase("checkout.main_moved", 2)),
    ("fresh", CrashCase("backup.pulled", 1)),
    ("incremental", CrashCase("backup.pulled", 2)),
    ("fresh", CrashCase("backup.remote_initialised", 2)),
    ("fresh", CrashCase("backup.remote_created", 1)),
    ("fresh", CrashCase("backup.remote_created", 4)),
    ("fresh", CrashCase("backup.remote_pushed", 2)),
    ("incremental", CrashCase("backup.remote_pushed", 3)),
]


def assert_killed(directory: Path, case: CrashCase) -> None:
    """What a kill leaves of the remotes: none half made; at ``backup.remote_initialised`` the new
    one whole at its temporary name, nothing at its own (the rerun must remove the temporary)."""
    assert_no_half_made_remote(directory)
    left = remote_temporaries(directory)
    if case.point != "backup.remote_initialised":
        assert left == [], f"{case}: temporaries {left}"
        return
    (temporary,) = left
    target = temporary.with_name(temporary.name.removeprefix(".").rsplit(".memsync-tmp-", 1)[0])
    assert not target.exists(), f"{case}: {target} exists before its rename"
    assert GitOracle(temporary).text("rev-parse", "--is-bare-repository").strip() == "true"


@pytest.fixture(scope="module")
def crashed(
    world: BackupWorld, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, Finished] | BaseException]:
    """Every case, three at a time (each is two memsync processes and git's)."""

    def run(start: str, case: CrashCase) -> tuple[Path, Finished] | BaseException:
        try:
            directory = tmp_path_factory.mktemp(f"backup-{case.point}")
            if start == "incremental":
                copy_root(world.template, directory)
            cli = MemsyncCli(
                backup_config(directory, world.server.base_url, world.store_ids), world.server.token
            )
            _, final = kill_backup_then_finish(
                cli, [case], batch=BATCH, after_kill=lambda killed: assert_killed(directory, killed)
            )
            return directory, final
        except Exception as failed:  # reported by the case's own test
            return failed

    with ThreadPoolExecutor(max_workers=3) as pool:
        done = list(pool.map(lambda c: run(*c), CASES))
    return {f"{s}-{c}": outcome for (s, c), outcome in zip(CASES, done, strict=True)}


@pytest.mark.parametrize(("start", "case"), CASES, ids=[f"{s}-{c}" for s, c in CASES])
def test_a_killed_backup_leaves_the_remotes_equal_to_the_mirror_after_a_rerun(
    world: BackupWorld,
    crashed: dict[str, tuple[Path, Finished] | BaseException],
    start: str,
    case: CrashCase,
) -> None:
    outcome = crashed[f"{start}-{case}"]
    if isinstance(outcome, BaseException):
        raise outcome
    directory, final = outcome
    assert_backed_up(world, directory)
    for history in world.histories:
        entry = final.store(history.store.id)
        assert entry["ok"] is True and len(entry["remotes"]) == 2, final.describe()


REDACTION_POINTS = [
    CrashCase("rewrite.tip_moved", 1),  # in the backup's own pull: the mirror half rewritten
    CrashCase("backup.prune_noted", 1),
    CrashCase("backup.remote_pushed", 1),  # the first remote forced, not pruned
    CrashCase("backup.remote_pushed", 2),  # the first remote pruned, the second forced, not pruned
    CrashCase("backup.remote_pruned", 1),
]


def test_every_backup_crash_point_has_a_kill_case() -> None:
    killed = {case.point for _, case in CASES} | {case.point for case in REDACTION_POINTS}
    assert set(CRASH_POINTS["backup"]) - killed == set()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_backup_killed_around_a_forced_update_still_prunes_the_redacted_content(
    server: ServerProcess, tmp_path: Path
) -> None:
    """One store per point (a version is redacted once), all at once."""

    def run(number: int, case: CrashCase) -> None:
        directory = tmp_path / f"{number}-{case.point}"
        directory.mkdir()
        with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
            store = client.create_store(
                f"redact-crash-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4())
            )
            client.create_memory(store.id, "notes.md", "plain notes\n")
            leak = client.create_memory(store.id, "config.md", SECRET)
            client.update_memory(store.id, leak.id, "api_key=<gone>\n", expected_sha256=leak.content_sha256)
            cli = MemsyncCli(backup_config(directory, server.base_url, [store.id]), server.token)
            first = cli.run("backup", "--json")
            assert first.returncode == 0, first.describe()
            history = History(store, Dialect.FORWARD, 0)
            remotes = remotes_of(directory, history)
            secret = (
                GitOracle(remotes[0]).git("hash-object", "--stdin", input=SECRET.encode()).decode().strip()
            )
            assert GitOracle(remotes[0]).git("cat-file", "-t", secret) == b"blob\n"
            created = next(
                v
                for v in client.iter_versions(store.id)
                if v.memory_id == leak.id and v.operation is Operation.CREATED
            )
            client.redact_version(store.id, created.id)
            _, final = kill_backup_then_finish(cli, [case], full_scan=True)
            fresh = pull_store(client, store, directory / "fresh")
            assert fresh.ok and fresh.tip is not None
        mirror = directory / "mirrors" / store.id
        assert GitOracle(mirror).ref("refs/remotes/memstore/main") == fresh.tip
        for remote in remotes:
            assert_backup_matches(mirror, remote)
            objects = GitOracle(remote).text("cat-file", "--batch-all-objects", "--batch-check")
            assert secret not in objects, f"{case}: the redacted blob is still in {remote}"
        assert secret not in GitOracle(mirror).text("cat-file", "--batch-all-objects", "--batch-check")
        assert final.store(store.id)["ok"] is True

    with ThreadPoolExecutor(max_workers=3) as pool:
        for future in [pool.submit(run, n, case) for n, case in enumerate(REDACTION_POINTS)]:
            future.result()
