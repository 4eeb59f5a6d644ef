"""How much fuzzing a run buys: small in CI, larger in a developer's run, large in the soak.

The Hypothesis profile (``HYPOTHESIS_PROFILE``: ``ci`` by default, see tests/conftest.py) names the
budget, so ``benchmarks/soak.py`` and a developer raise every fuzz test at once. The end-to-end
properties (a store, a pull and a git fsck per example) and schemathesis (an HTTP request per
example, for each of the schema's operations) get their own, smaller counts than the profile's
``max_examples``, which is sized for pure functions.
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
    "dev": FuzzBudget(
        openapi_examples=20, stateful_scenarios=15, stateful_steps=10, round_trips=25, pure_examples=1000
    ),
    "soak": FuzzBudget(
        openapi_examples=100, stateful_scenarios=60, stateful_steps=15, round_trips=40, pure_examples=10000
    ),
}


def budget() -> FuzzBudget:
    return BUDGETS.get(os.environ.get("HYPOTHESIS_PROFILE", "ci"), BUDGETS["ci"])
