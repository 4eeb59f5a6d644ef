"""The state file: atomic replacement, round trip, and readers that never crash on a bad file."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memsync.daemon import STATE_FILE, LastCycle, StoreState, read_state, state_path
from memsync.daemon._state import write_state


def _state(**changes: object) -> StoreState:
    now = datetime(2026, 11, 30, 19, 19, 56, 215000, tzinfo=UTC)
    state = StoreState(
        store_id="memstore_1",
        name="bad \x1b[31mname",
        status="backoff",
        daemon_pid=4242,
        daemon_started_at=now - timedelta(hours=1),
        updated_at=now,
        consecutive_failures=2,
        last_cycle=LastCycle(
            started_at=now - timedelta(seconds=2),
            finished_at=now,
            result="error",
            triggers=["interval", "watch"],
            full_scan=False,
            error="the server said 503",
        ),
        last_success=now - timedelta(minutes=5),
        next_run=now + timedelta(seconds=20),
        open_conflicts=["notes/a.md"],
        rejected=[{"path": "100%.md", "reason": "not a valid encoded path"}],
        withheld=[{"path": "c.md", "reason": "a mass delete needs memsync push --force"}],
        tip="a" * 40,
        warnings=["late versions"],
    )
    for key, value in changes.items():
        setattr(state, key, value)
    return state


def test_round_trip_and_lag(tmp_path: Path) -> None:
    (tmp_path / ".git" / "memsync").mkdir(parents=True)
    state = _state()
    write_state(tmp_path, state)
    assert state_path(tmp_path) == tmp_path / STATE_FILE
    data = json.loads(state_path(tmp_path).read_text())
    assert data["format"] == 1 and data["last_success"] == "2026-11-30T19:14:56.215Z"
    assert read_state(tmp_path) == state
    assert state.lag(datetime(2026, 11, 30, 19, 20, 0, tzinfo=UTC)) == 303.785
    assert _state(last_success=None).lag() is None
    # Replaced atomically: no temporary file is left behind.
    assert [p.name for p in state_path(tmp_path).parent.iterdir()] == ["daemon-state.json"]


def test_a_mirror_not_created_yet_gets_no_file(tmp_path: Path) -> None:
    write_state(tmp_path / "nothing-here", _state())
    assert not (tmp_path / "nothing-here").exists()


def test_missing_corrupt_or_unknown_files_read_as_no_state(tmp_path: Path) -> None:
    assert read_state(tmp_path) is None
    path = state_path(tmp_path)
    path.parent.mkdir(parents=True)
    for text in ("", "{not json", json.dumps({"format": 99}), json.dumps({"format": 1})):
        path.write_text(text)
        assert read_state(tmp_path) is None
