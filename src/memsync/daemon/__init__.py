"""memsync.daemon: scheduled pulls, a watcher that pushes, and the operations around them (docs/daemon.md).

The scheduler (APScheduler 3) and the watcher (inotify) only *request* a store's cycle,
``memsync.sync.cycle.run_cycle``; requests coalesce and a store never runs two cycles at once. The
daemon keeps a per-store state file that ``memsync status`` reads without any lock, serves
``/healthz`` and ``/metrics`` on loopback when asked, and logs text or JSON lines with secrets scrubbed.

Reading state costs no APScheduler import; :func:`run_daemon` and :func:`run_once` import
them when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memsync.daemon._coordinator import CycleCoordinator, CycleOutcome, Outcome, Request, SlotView
from memsync.daemon._debounce import Debouncer
from memsync.daemon._logs import SecretFilter, configure_logging
from memsync.daemon._state import STATE_FILE, LastCycle, StoreState, read_state, state_path

if TYPE_CHECKING:  # annotations only: the public surface stays exactly __all__
    from memsync.config import Config
    from memsync.sync.outputs import CycleOutput


def run_daemon(config: Config, *, max_failures: int | None = None) -> int:
    """Run until SIGTERM/SIGINT (exit 0) or until every store is paused (exit 1).

    Raises LockHeld (exit 75) when another daemon serves the same mirror root, AuthenticationFailed
    (exit 3) when the token is refused at start, ConfigError (exit 2) for a bad config.
    """
    import logging
    import os
    import sys

    from memsync.daemon._daemon import Daemon

    configure_logging(config.log, secrets=_secrets(config))
    code, abandoned = Daemon(config, max_failures=max_failures).run()
    if abandoned:
        # A cycle outlived the shutdown deadline: leave without waiting for it (its import resumes
        # at the next start, as after kill -9), after the log and the output are out.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def run_once(config: Config) -> tuple[list[CycleOutput], int]:
    """One cycle per selected store: (their ``--json`` outputs, the exit code of docs/design.md §4)."""
    from memsync.daemon._daemon import Daemon

    configure_logging(config.log, secrets=_secrets(config))
    return Daemon(config).run_once()


def _secrets(config: Config) -> list[str]:
    # The token is read once here only to scrub it from logs; a missing one is reported by the daemon.
    from memsync.errors import MemsyncError

    try:
        return [config.token()]
    except MemsyncError:
        return []


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
    "run_daemon",
    "run_once",
    "state_path",
]
