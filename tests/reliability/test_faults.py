"""``memsync pull``, ``push`` and ``backup`` through the reference server's injected faults
(tests/reliability/faultruns.py).

At 10 % and 30 % of requests, seeded, every kind of fault (500, 429 with Retry-After, 1 s delays,
connections dropped before and after a write is applied), across stores of the three dialects:
the mirrors end with the same commit ids as fault-free pulls, and the store holds exactly the
versions written, none doubled by a retry and none lost. Push plans back the stores up, edit their
checkouts (updates, creates, deletes), push, and back up again, each run again when its retries ran
out: one new version per edit, the store equal to the checkout and to the mirror's tip tree, each
backup remote's refs equal to its mirror's.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from memsync.rules import Dialect
from tests.reliability.faultruns import (
    FAULT_KINDS,
    FaultOutcome,
    FaultPlan,
    PushFaultOutcome,
    run_fault_plan,
    run_push_fault_plan,
)

# Every test here runs memsync as a process: killed, faulted, or on a full disk.
pytestmark = pytest.mark.e2e

PLANS = [
    FaultPlan(
        0.1, 7, ((Dialect.FORWARD, 70), (Dialect.FORWARD, 50), (Dialect.ANTHROPIC, 50), (Dialect.CLOUD, 30))
    ),
    FaultPlan(0.3, 11, ((Dialect.FORWARD, 25), (Dialect.ANTHROPIC, 20), (Dialect.CLOUD, 15))),
]


PUSH_PLANS = [
    FaultPlan(0.1, 13, ((Dialect.FORWARD, 30), (Dialect.ANTHROPIC, 20), (Dialect.CLOUD, 15))),
    FaultPlan(0.3, 17, ((Dialect.FORWARD, 15), (Dialect.ANTHROPIC, 12), (Dialect.CLOUD, 10))),
]
Outcome = FaultOutcome | PushFaultOutcome | BaseException


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, float], Outcome]:
    """Every plan at once, each with its own server: their retry waits and 1 s faults overlap."""

    def run(kind: str, plan: FaultPlan) -> Outcome:
        try:
            directory = tmp_path_factory.mktemp(f"faults-{kind}-{plan.seed}")
            return run_fault_plan(plan, directory) if kind == "pull" else run_push_fault_plan(plan, directory)
        except Exception as failed:  # reported by the plan's own test
            return failed

    planned = [("pull", p) for p in PLANS] + [("push", p) for p in PUSH_PLANS]
    with ThreadPoolExecutor(max_workers=len(planned)) as pool:
        done = pool.map(lambda job: run(*job), planned)
        return dict(zip([(k, p.rate) for k, p in planned], done, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("plan", PLANS, ids=[f"{int(p.rate * 100)}%" for p in PLANS])
def test_pull_through_faults_equals_a_fault_free_pull(
    plan: FaultPlan, outcomes: dict[tuple[str, float], Outcome]
) -> None:
    outcome = outcomes[("pull", plan.rate)]
    if isinstance(outcome, BaseException):
        raise outcome
    assert isinstance(outcome, FaultOutcome)
    assert outcome.writes_lost == outcome.writes_doubled == 0
    assert outcome.versions == sum(versions for _, versions in plan.stores)
    assert all(outcome.faults[kind] > 0 for kind in FAULT_KINDS)


@pytest.mark.slow
@pytest.mark.parametrize("plan", PUSH_PLANS, ids=[f"{int(p.rate * 100)}%" for p in PUSH_PLANS])
def test_push_and_backup_through_faults_equal_fault_free_runs(
    plan: FaultPlan, outcomes: dict[tuple[str, float], Outcome]
) -> None:
    outcome = outcomes[("push", plan.rate)]
    if isinstance(outcome, BaseException):
        raise outcome
    assert isinstance(outcome, PushFaultOutcome)
    # run_push_fault_plan compared everything with fault-free runs; these say the faults were real.
    assert outcome.writes_lost == outcome.writes_doubled == 0
    assert outcome.edits == 6 * len(plan.stores)
    assert all(outcome.faults[kind] > 0 for kind in FAULT_KINDS)
    assert outcome.phase_faults["push"] > 0 and outcome.phase_faults["backup"] > 0, outcome.phase_faults
