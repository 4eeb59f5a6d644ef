"""How much fuzzing a run buys: least in the inner loop, small in CI, large in the soak.

The Hypothesis profile (``HYPOTHESIS_PROFILE``: ``ci`` by default, see tests/conftest.py) names the
budget, so ``benchmarks/soak.py`` raises every fuzz test at once and the inner loop lowers them.
The end-to-end properties (a store, a pull and a git fsck per example) and schemathesis (an HTTP
request per example, for each of the schema's operations) get their own, smaller counts than the
profile's ``max_examples``, which is sized for pure functions.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class FuzzBudget:
    openapi_examples: int
    """schemathesis examples per operation (every dialect's operations)."""
    stateful_scenarios: int
    stateful_steps: int
    round_trips: int
    """Hypothesis examples of the full round trip (server → pull → working tree) per dialect."""
    pure_examples: int
    """Hypothesis examples of the pure properties (rules, path encoding)."""


BUDGETS = {
    "ci": FuzzBudget(
        openapi_examples=4, stateful_scenarios=4, stateful_steps=6, round_trips=6, pure_examples=200
    ),
    # The stateful run keeps CI's size: at 2 x 4 steps, some draws make no call that succeeds.
    "quick": FuzzBudget(
        openapi_examples=1, stateful_scenarios=4, stateful_steps=6, round_trips=2, pure_examples=30
    ),
    "soak": FuzzBudget(
        openapi_examples=100, stateful_scenarios=60, stateful_steps=15, round_trips=40, pure_examples=10000
    ),
}


def budget() -> FuzzBudget:
    return BUDGETS.get(os.environ.get("HYPOTHESIS_PROFILE", "ci"), BUDGETS["ci"])
