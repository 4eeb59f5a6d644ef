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

import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx

from memsync.api import RetryPolicy, open_client
from memsync.rules import Dialect
from memsync.sync.pull import pull_store
from tests.reliability.harness import Finished, GitOracle, MemsyncCli, write_config
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
            f"faults-{seed}-{uuid.uuid4().hex[:6]}", request_id=f"faults-{uuid.uuid4()}"
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
