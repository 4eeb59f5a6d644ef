"""memsync.daemon: scheduled pulls, a watcher that pushes, and the operations around them (docs/daemon.md).

The scheduler and the watcher only *request* a store's cycle; requests coalesce and a store never
runs two cycles at once. The daemon keeps a per-store state file that ``memsync status`` reads
without any lock, and logs text or JSON lines with secrets scrubbed.
"""

from __future__ import annotations

from memsync.daemon._coordinator import CycleCoordinator, CycleOutcome, Outcome, Request, SlotView
from memsync.daemon._debounce import Debouncer
from memsync.daemon._logs import SecretFilter, configure_logging
from memsync.daemon._state import STATE_FILE, LastCycle, StoreState, read_state, state_path

__all__ = [
    "STATE_FILE",
    "CycleCoordinator",
    "CycleOutcome",
    "Debouncer",
    "LastCycle",
    "Outcome",
    "Request",
    "SecretFilter",
    "SlotView",
    "StoreState",
    "configure_logging",
    "read_state",
    "state_path",
]
