"""Pulls through injected faults end exactly like fault-free pulls, and no write is ever doubled.

One run of a :class:`FaultPlan`: the reference server starts with ``--fault-rate`` and
``--fault-seed``; stores of several dialects get seeded histories written through the faulty server
(one thread per store, so the 1 s faults overlap); ``memsync pull`` (a subprocess per dialect, with
its default retry policy, as a user runs it) mirrors them through the faults. Then the same database
is served again without faults, and everything is compared with a fault-free pull: the same commit
ids, a checkout equal to what was written, and a version listing equal to the ledger of writes (a
write repeated by a retry would show as an extra version, a lost one as a missing version).
"""

from __future__ import annotations

import random
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx

from memsync.api import RetryPolicy, open_client
from memsync.mirror import decode_path, encode_paths
from memsync.rules import Dialect, sha256_hex
from memsync.sync.pull import pull_store
from tests.reliability.backups import assert_backup_matches, backup_remotes
from tests.reliability.harness import MEMSTORE_REF, Finished, GitOracle, MemsyncCli, write_config
from tests.reliability.histories import (
    History,
    assert_versions_match,
    build_history,
    decoded_worktree,
    listed_oldest_first,
)
from tests.support.server import ServerProcess

FAULT_KINDS = ("server_error", "rate_limited", "slow", "drop_before_write", "drop_after_write")
# Writing the test data: retry quickly (the server's Retry-After of 1 s is still honoured) and long
# enough that a run of faults at 30 % never exhausts it.
BUILD_RETRY = RetryPolicy(
    initial_delay=0.02, max_delay=0.2, max_attempts=15, max_elapsed=120, max_retry_after=2
)
# A pull can still exhaust its (default) retry budget at a high fault rate: a user runs it again.
MAX_PULL_RUNS = 4


@dataclass(frozen=True)
class FaultPlan:
    rate: float
    seed: int
    stores: tuple[tuple[Dialect, int], ...]
    """(dialect, versions) per store."""


@dataclass
class FaultOutcome:
    faults: dict[str, int]
    requests: int
    versions: int
    pull_runs: int
    writes_lost: int
    writes_doubled: int


def _assert_only_retries_ran_out(run: Finished) -> None:
    """A pull through faults may fail only because a request's retry budget ran out, which a rerun
    fixes; never by refusing data (the data is honest) or by breaking its mirror."""
    if not run.stdout.strip():  # the store listing itself gave up
        assert run.returncode == 1 and "memsync: error:" in run.stderr, run.describe()
        return
    for entry in run.json()["stores"]:
        assert entry["ok"] or entry["stopped_at_version"] is None, run.describe()


def _pull_until_done(
    server: ServerProcess, histories: list[History], dialect: Dialect, directory: Path
) -> int:
    """``memsync pull`` of the dialect's stores, run again while it fails; how many runs it took."""
    config = write_config(
        directory,
        dialect=dialect.value,
        base_url=server.base_url,
        stores=[h.store.id for h in histories if h.dialect is dialect],
        root=f"faulty-{dialect}",
        name=f"faulty-{dialect}.toml",
    )
    cli = MemsyncCli(config, server.token)
    for run in range(1, MAX_PULL_RUNS + 1):
        pulled = cli.run("pull", "--json")
        if pulled.returncode == 0:
            return run
        _assert_only_retries_ran_out(pulled)
    raise AssertionError(f"{dialect}: pull failed {MAX_PULL_RUNS} times\n{pulled.describe()}")


def fault_counts(server: ServerProcess) -> tuple[dict[str, int], int]:
    answer = httpx.get(
        f"{server.base_url}/debug/faults", headers={"Authorization": f"Bearer {server.token}"}, timeout=10
    )
    answer.raise_for_status()
    data = answer.json()
    return dict(data["faults"]), int(data["requests"])


def _build(server: ServerProcess, dialect: Dialect, versions: int, seed: int) -> History:
    with open_client(dialect, server.base_url, server.token, retry=BUILD_RETRY) as client:
        store = client.create_store(
            f"faults-{seed}-{uuid.uuid4().hex[:6]}",
            request_id=f"faults-{uuid.uuid4()}",
            description="made by tests",
        )
        return build_history(client, store, versions=versions, seed=seed)


def run_fault_plan(plan: FaultPlan, directory: Path) -> FaultOutcome:
    """Run ``plan`` in ``directory``; raises AssertionError on any difference from a fault-free run."""
    db = directory / "faults.sqlite3"
    args = ["--fault-rate", str(plan.rate), "--fault-seed", str(plan.seed)]
    faulty = ServerProcess(db=db, extra_args=args).start()
    try:
        with ThreadPoolExecutor(max_workers=len(plan.stores)) as pool:
            futures = [
                pool.submit(_build, faulty, dialect, versions, plan.seed * 100 + n)
                for n, (dialect, versions) in enumerate(plan.stores)
            ]
            histories = [future.result() for future in futures]
        # One `memsync pull` per dialect, all at once: their retry waits overlap.
        dialects = sorted({h.dialect for h in histories})
        with ThreadPoolExecutor(max_workers=len(dialects)) as pool:
            runs = sum(pool.map(lambda d: _pull_until_done(faulty, histories, d, directory), dialects))
        faults, requests = fault_counts(faulty)
    finally:
        faulty.stop()

    missing = [kind for kind in FAULT_KINDS if faults.get(kind, 0) == 0]
    assert not missing, f"no {missing} fault injected in {requests} requests: {faults}"
    lost = doubled = 0
    clean = ServerProcess(db=db).start()
    try:
        for history in histories:
            with open_client(history.dialect, clean.base_url, clean.token) as client:
                listed = listed_oldest_first(client, history.store.id)
                lost += max(0, history.versions - len(listed))
                doubled += max(0, len(listed) - history.versions)
                assert_versions_match(history, listed)
                reference = pull_store(client, history.store, directory / "fault-free")
                assert reference.ok, reference.error
            mirror = directory / f"faulty-{history.dialect}" / history.store.id
            assert (
                GitOracle(mirror).commits()
                == GitOracle(directory / "fault-free" / history.store.id).commits()
            )
            assert decoded_worktree(mirror) == history.live
            GitOracle(mirror).fsck()
    finally:
        clean.stop()
    return FaultOutcome(faults, requests, sum(h.versions for h in histories), runs, lost, doubled)


# --- push and backup through faults ------------------------------------------------------------------

# A push or backup makes more requests per run than a pull; a run whose retries ran out is run again.
MAX_RUNS = 6
EDITS = (3, 2, 1)  # (updates, creates, deletes) per store: under the delete guard (3 deletes)


@dataclass
class LocalEdits:
    """Edits made in a mirror's checkout, and the version each must make in the store (one each)."""

    expected: list[tuple[str, str, str | None]]
    live: dict[str, str]


def edit_checkout(repo: Path, history: History, rng: random.Random) -> LocalEdits:
    """Seeded updates, creates and deletes in the checkout of ``history``'s mirror."""
    live = dict(history.live)
    spelled = encode_paths(live)
    expected: list[tuple[str, str, str | None]] = []
    updates, creates, deletes = EDITS
    chosen = rng.sample(sorted(live), min(len(live), updates + deletes))
    for path in chosen[:updates]:
        content = f"{live[path]}edited locally {rng.randrange(10**6)}\n"
        (repo / spelled[path]).write_text(content, encoding="utf-8", newline="")
        live[path] = content
        expected.append(("updated", path, sha256_hex(content)))
    for path in chosen[updates:]:
        (repo / spelled[path]).unlink()
        gone = live.pop(path)
        tombstone = None if history.dialect is Dialect.ANTHROPIC else sha256_hex(gone)
        expected.append(("deleted", path, tombstone))
    for n in range(creates):
        path = f"pushed/{history.seed}-{n}.md"
        content = f"created locally {n} ✓\r\n"
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(content, encoding="utf-8", newline="")
        live[path] = content
        expected.append(("created", path, sha256_hex(content)))
    return LocalEdits(expected, live)


def run_until_ok(cli: MemsyncCli, *args: str, max_runs: int = MAX_RUNS) -> int:
    """``memsync args`` run again while it fails the way a retry budget running out fails (exit 1,
    an error message, no traceback); how many runs it took. Anything else fails the test."""
    for run in range(1, max_runs + 1):
        done = cli.run(*args)
        if done.returncode == 0:
            return run
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.describe()
        if done.stdout.strip():
            assert all(entry["ok"] or entry["error"] for entry in done.json()["stores"]), done.describe()
    raise AssertionError(f"memsync {' '.join(args)} failed {max_runs} times\n{done.describe()}")


@dataclass
class PushFaultOutcome:
    faults: dict[str, int]
    phase_faults: dict[str, int]
    """faults injected while each phase ran (first backup, push, second backup)."""
    requests: int
    edits: int
    runs: int
    writes_lost: int
    writes_doubled: int


def run_push_fault_plan(plan: FaultPlan, directory: Path) -> PushFaultOutcome:
    """``memsync backup``, local edits, ``memsync push``, ``memsync backup`` again, all through the
    plan's faults (each run again while its retries run out); then, served without faults: each
    store holds its history and exactly one new version per edit, its live memories are the
    checkout's, the mirror equals a fault-free pull (same commit ids, tip tree = store), and each
    backup remote's refs equal its mirror's, main at the fault-free tip."""
    db = directory / "faults.sqlite3"
    args = ["--fault-rate", str(plan.rate), "--fault-seed", str(plan.seed)]
    faulty = ServerProcess(db=db, extra_args=args).start()
    rng = random.Random(plan.seed)
    phase_faults: dict[str, int] = {}
    edits: dict[str, LocalEdits] = {}
    runs = 0
    try:
        with ThreadPoolExecutor(max_workers=len(plan.stores)) as pool:
            futures = [
                pool.submit(_build, faulty, dialect, versions, plan.seed * 100 + n)
                for n, (dialect, versions) in enumerate(plan.stores)
            ]
            histories = [future.result() for future in futures]
        dialects = sorted({h.dialect for h in histories})
        clis = {d: _cli(faulty, histories, d, directory) for d in dialects}

        def phase(name: str, *command: str) -> None:
            nonlocal runs
            before = sum(fault_counts(faulty)[0].values())
            # One memsync per dialect at once: their retry waits overlap.
            with ThreadPoolExecutor(max_workers=len(dialects)) as pool:
                runs += sum(pool.map(lambda d: run_until_ok(clis[d], *command), dialects))
            phase_faults[name] = sum(fault_counts(faulty)[0].values()) - before

        phase("backup", "backup", "--json")
        for history in histories:
            edits[history.store.id] = edit_checkout(_mirror(directory, history), history, rng)
        phase("push", "push", "--json")
        phase("backup again", "backup", "--json")
        faults, requests = fault_counts(faulty)
    finally:
        faulty.stop()

    missing = [kind for kind in FAULT_KINDS if faults.get(kind, 0) == 0]
    assert not missing, f"no {missing} fault injected in {requests} requests: {faults}"
    lost = doubled = 0
    clean = ServerProcess(db=db).start()
    try:
        for history in histories:
            edit = edits[history.store.id]
            with open_client(history.dialect, clean.base_url, clean.token) as client:
                listed = listed_oldest_first(client, history.store.id)
                wanted = history.versions + len(edit.expected)
                lost += max(0, wanted - len(listed))
                doubled += max(0, len(listed) - wanted)
                assert_versions_match(history, listed[: history.versions])
                pushed = [(v.operation.value, v.path, v.content_sha256) for v in listed[history.versions :]]
                assert sorted(pushed, key=repr) == sorted(edit.expected, key=repr), "one version per edit"
                store_now = {m.path: m.content_sha256 for m in client.list_memories(history.store.id)}
                assert store_now == {p: sha256_hex(c) for p, c in edit.live.items()}
                reference = pull_store(client, history.store, directory / "fault-free")
                assert reference.ok and reference.tip is not None, reference.error
            mirror = _mirror(directory, history)
            oracle = GitOracle(mirror)
            assert oracle.commits() == GitOracle(directory / "fault-free" / history.store.id).commits()
            # The tip's tree is the store, and the checkout, main and base are on it.
            tip_files = {
                decode_path(p.decode()): oracle.git("show", f"{MEMSTORE_REF}:{p.decode()}").decode()
                for p in oracle.tree_paths()
            }
            assert tip_files == edit.live
            assert decoded_worktree(mirror) == edit.live
            assert oracle.ref("refs/heads/main") == oracle.ref("refs/memsync/base") == reference.tip
            oracle.fsck()
            remote = directory / f"faulty-{history.dialect}" / "backups" / f"{history.store.id}.git"
            assert_backup_matches(mirror, remote)
            assert GitOracle(remote).ref("refs/heads/main") == reference.tip
    finally:
        clean.stop()
    return PushFaultOutcome(
        faults,
        phase_faults,
        requests,
        sum(len(e.expected) for e in edits.values()),
        runs,
        lost,
        doubled,
    )


def _cli(server: ServerProcess, histories: list[History], dialect: Dialect, directory: Path) -> MemsyncCli:
    config = write_config(
        directory,
        dialect=dialect.value,
        base_url=server.base_url,
        stores=[h.store.id for h in histories if h.dialect is dialect],
        root=f"faulty-{dialect}/mirrors",
        name=f"faulty-{dialect}.toml",
        extra=backup_remotes(f"faulty-{dialect}/backups/{{store_id}}.git"),
    )
    return MemsyncCli(config, server.token)


def _mirror(directory: Path, history: History) -> Path:
    return directory / f"faulty-{history.dialect}" / "mirrors" / history.store.id
