"""The daemon's per-store state file, ``<mirror>/.git/memsync/daemon-state.json`` (docs/daemon.md).

Written atomically (a temporary file renamed over the old one) whenever a store's state changes, so
``memsync status`` reads the live state with a plain file read — no repository lock, no daemon call.
The file lives inside ``.git`` so it is never a working-tree change and never pushed. This module
imports no APScheduler: readers do not pay for it.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

STATE_FORMAT = 1
STATE_FILE = Path(".git") / "memsync" / "daemon-state.json"

# The values of ``status``.
RUNNING = "running"  # a cycle is in flight
IDLE = "idle"  # waiting for the next request
BACKOFF = "backoff"  # the last cycle failed; retried at ``next_run``
PAUSED = "paused"  # too many failures in a row: no cycles until the daemon restarts
STOPPED = "stopped"  # the daemon that wrote this file has exited (or ran with --once)
REMOVED = "removed"  # no longer selected, or deleted remotely: the daemon stopped serving it


def state_path(mirror: Path) -> Path:
    return mirror / STATE_FILE


@dataclass
class LastCycle:
    started_at: datetime
    finished_at: datetime
    result: str  # success | noop | error | locked
    triggers: list[str]
    full_scan: bool
    imported: int = 0
    pushed: int = 0
    error: str | None = None


@dataclass
class StoreState:
    """One store as the daemon sees it; ``to_json``/``from_json`` are the file format (format 1)."""

    store_id: str
    name: str
    status: str
    daemon_pid: int
    daemon_started_at: datetime
    updated_at: datetime
    paused: bool = False
    pause_reason: str | None = None
    removed_reason: str | None = None
    consecutive_failures: int = 0
    last_cycle: LastCycle | None = None
    last_success: datetime | None = None
    last_full_scan: datetime | None = None
    next_run: datetime | None = None
    next_full_scan: datetime | None = None
    open_conflicts: list[str] = field(default_factory=list)
    rejected: list[dict[str, str]] = field(default_factory=list)
    withheld: list[dict[str, str]] = field(default_factory=list)
    tip: str | None = None
    warnings: list[str] = field(default_factory=list)

    def lag(self, now: datetime | None = None) -> float | None:
        """Seconds since the start of the last successful cycle (what the checkout may miss), or None."""
        if self.last_success is None:
            return None
        return max(0.0, ((now or datetime.now(UTC)) - self.last_success).total_seconds())

    def to_json(self) -> dict[str, Any]:
        last = self.last_cycle
        return {
            "format": STATE_FORMAT,
            "store_id": self.store_id,
            "name": self.name,
            "status": self.status,
            "paused": self.paused,
            "pause_reason": self.pause_reason,
            "removed_reason": self.removed_reason,
            "consecutive_failures": self.consecutive_failures,
            "last_cycle": None
            if last is None
            else {
                "started_at": _iso(last.started_at),
                "finished_at": _iso(last.finished_at),
                "result": last.result,
                "triggers": last.triggers,
                "full_scan": last.full_scan,
                "imported": last.imported,
                "pushed": last.pushed,
                "error": last.error,
            },
            "last_success": _iso(self.last_success),
            "last_full_scan": _iso(self.last_full_scan),
            "next_run": _iso(self.next_run),
            "next_full_scan": _iso(self.next_full_scan),
            "open_conflicts": self.open_conflicts,
            "rejected": self.rejected,
            "withheld": self.withheld,
            "tip": self.tip,
            "warnings": self.warnings,
            "daemon": {
                "pid": self.daemon_pid,
                "started_at": _iso(self.daemon_started_at),
            },
            "updated_at": _iso(self.updated_at),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StoreState:
        if data.get("format") != STATE_FORMAT:
            raise ValueError(f"unknown daemon state format {data.get('format')!r}")
        last = data.get("last_cycle")
        daemon = data["daemon"]
        return cls(
            store_id=data["store_id"],
            name=data.get("name", ""),
            status=data["status"],
            daemon_pid=int(daemon["pid"]),
            daemon_started_at=_parse(daemon["started_at"]) or datetime.fromtimestamp(0, UTC),
            updated_at=_parse(data["updated_at"]) or datetime.fromtimestamp(0, UTC),
            paused=bool(data.get("paused", False)),
            pause_reason=data.get("pause_reason"),
            removed_reason=data.get("removed_reason"),
            consecutive_failures=int(data.get("consecutive_failures", 0)),
            last_cycle=None
            if last is None
            else LastCycle(
                started_at=_parse(last["started_at"]) or datetime.fromtimestamp(0, UTC),
                finished_at=_parse(last["finished_at"]) or datetime.fromtimestamp(0, UTC),
                result=last["result"],
                triggers=list(last.get("triggers", [])),
                full_scan=bool(last.get("full_scan", False)),
                imported=int(last.get("imported", 0)),
                pushed=int(last.get("pushed", 0)),
                error=last.get("error"),
            ),
            last_success=_parse(data.get("last_success")),
            last_full_scan=_parse(data.get("last_full_scan")),
            next_run=_parse(data.get("next_run")),
            next_full_scan=_parse(data.get("next_full_scan")),
            open_conflicts=list(data.get("open_conflicts", [])),
            rejected=list(data.get("rejected", [])),
            withheld=list(data.get("withheld", [])),
            tip=data.get("tip"),
            warnings=list(data.get("warnings", [])),
        )


def write_state(mirror: Path, state: StoreState) -> None:
    """Replace the mirror's state file atomically; a mirror not created yet gets no file."""
    target = state_path(mirror)
    if not target.parent.is_dir():
        return
    payload = json.dumps(state.to_json(), ensure_ascii=False, indent=2).encode("utf-8") + b"\n"
    fd, tmp = tempfile.mkstemp(prefix=".daemon-state.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_state(mirror: Path) -> StoreState | None:
    """The state the daemon last wrote for this mirror; None if there is none or it is unreadable."""
    try:
        data = json.loads(state_path(mirror).read_text(encoding="utf-8"))
        return StoreState.from_json(data)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
