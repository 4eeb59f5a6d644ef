"""memsync.daemon: scheduled pulls, a watcher that pushes, and the operations around them (docs/daemon.md).

The scheduler and the watcher only *request* a store's cycle; requests coalesce and a store never
runs two cycles at once.
"""

from __future__ import annotations

from memsync.daemon._coordinator import CycleCoordinator, CycleOutcome, Outcome, Request, SlotView
from memsync.daemon._debounce import Debouncer

__all__ = ["CycleCoordinator", "CycleOutcome", "Debouncer", "Outcome", "Request", "SlotView"]
