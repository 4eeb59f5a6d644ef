"""``memsync pull`` through the reference server's injected faults (tests/reliability/faultruns.py).

At 10 % and 30 % of requests, seeded, every kind of fault (500, 429 with Retry-After, 1 s delays,
connections dropped before and after a write is applied), across stores of the three dialects:
the mirrors end with the same commit ids as fault-free pulls, and the store holds exactly the
versions written, none doubled by a retry and none lost.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from memsync.rules import Dialect
from tests.reliability.faultruns import FAULT_KINDS, FaultOutcome, FaultPlan, run_fault_plan

PLANS = [
    FaultPlan(
        0.1, 7, ((Dialect.FORWARD, 70), (Dialect.FORWARD, 50), (Dialect.ANTHROPIC, 50), (Dialect.CLOUD, 30))
    ),
    FaultPlan(0.3, 11, ((Dialect.FORWARD, 25), (Dialect.ANTHROPIC, 20), (Dialect.CLOUD, 15))),
]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[float, FaultOutcome | BaseException]:
    """Both plans at once, each with its own server: their retry waits and 1 s faults overlap."""

    def run(plan: FaultPlan) -> FaultOutcome | BaseException:
        try:
            return run_fault_plan(plan, tmp_path_factory.mktemp(f"faults-{plan.seed}"))
        except Exception as failed:  # reported by the plan's own test
            return failed

    with ThreadPoolExecutor(max_workers=len(PLANS)) as pool:
        return dict(zip([p.rate for p in PLANS], pool.map(run, PLANS), strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("plan", PLANS, ids=[f"{int(p.rate * 100)}%" for p in PLANS])
def test_pull_through_faults_equals_a_fault_free_pull(
    plan: FaultPlan, outcomes: dict[float, FaultOutcome | BaseException]
) -> None:
    outcome = outcomes[plan.rate]
    if isinstance(outcome, BaseException):
        raise outcome
    assert outcome.writes_lost == outcome.writes_doubled == 0
    assert outcome.versions == sum(versions for _, versions in plan.stores)
    assert all(outcome.faults[kind] > 0 for kind in FAULT_KINDS)
