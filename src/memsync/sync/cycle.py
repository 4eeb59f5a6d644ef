"""One store's cycle, the unit both the CLI (`memsync sync`) and the daemon run.

design.md §3: scheduler ticks and watcher events both request the same per-store cycle — pull (import
new versions) → reconcile the checkout → push local edits → import what the push created. This module
is that sequence; callers hold no git or HTTP knowledge of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memsync.api import Client, Store
from memsync.sync.pull import PullReport, pull_store


@dataclass
class CycleReport:
    """The outcome of one cycle: ``changed`` (anything imported or pushed), ``ok``, and the parts."""

    store_id: str
    pull: PullReport
    pushed: int = 0
    conflicts: list[str] = field(default_factory=list)
    rejected: list[dict[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.pull.ok

    @property
    def changed(self) -> bool:
        return self.pull.imported > 0 or self.pushed > 0

    @property
    def exit_code(self) -> int:
        return self.pull.exit_code

    def to_json(self) -> dict[str, Any]:
        return {
            **self.pull.to_json(),
            "pushed": self.pushed,
            "conflicts": self.conflicts,
            "rejected": self.rejected,
        }


def run_cycle(client: Client, store: Store, root: Path, *, full_scan: bool = False) -> CycleReport:
    """Pull, then (once push lands) reconcile and push; errors end up in the report, never raised."""
    report = pull_store(client, store, root, full_scan=full_scan)
    return CycleReport(store_id=store.id, pull=report)
