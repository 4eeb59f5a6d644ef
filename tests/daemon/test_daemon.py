"""The daemon in-process with an injected cycle runner: health, pause, shutdown deadline, discovery;
and the real runner's handling of a held store lock."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memsync.api import Client, Store
from memsync.config import Config, parse_config
from memsync.daemon import Outcome, StoreState, read_state
from memsync.daemon._daemon import CycleResult, Daemon, StoreCycles
from memsync.daemon._state import write_state
from memsync.rules import Dialect
from memsync.sync.pull import store_lock
from memsync.sync.resolve import find_target, resolve_conflict
from memsync.sync.stores import Selection
from tests.support.server import ServerProcess
from tests.support.waiting import wait_for


def _store(name: str) -> Store:
    return Store(id=f"memstore_{name}", name=name, created_at=datetime.now(UTC))


def _config(root: Path, **daemon: Any) -> Config:
    settings = {"interval": "1h", "jitter": "0s", "max_failures": 2, **daemon}
    return parse_config(
        {
            "api": {
                "dialect": "forward",
                "base_url": "http://127.0.0.1:9",
                "token_env": "MEMSYNC_TEST_UNUSED",
            },
            "mirror": {"root": str(root)},
            "daemon": settings,
        }
    )


def _checkout(root: Path, store: Store) -> Path:
    # Enough of a mirror for the daemon's own files (state): the runner is injected.
    (root / store.id / ".git" / "memsync").mkdir(parents=True)
    return root / store.id


def _get(daemon: Daemon, path: str) -> tuple[int, bytes]:
    assert daemon.http is not None
    try:
        with urllib.request.urlopen(f"http://{daemon.http.address}{path}", timeout=5) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class Runner:
    """Per-store scripted cycles: each store's calls wait for its gate (if any), then return outcomes."""

    def __init__(self) -> None:
        self.gates: dict[str, threading.Event] = {}
        self.outcomes: dict[str, Outcome] = {}
        self.calls: dict[str, int] = {}
        self.full_scans: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, store: Store, full_scan: bool) -> CycleResult:
        with self.lock:
            self.calls[store.id] = self.calls.get(store.id, 0) + 1
            if full_scan:
                self.full_scans.append(store.id)
        gate = self.gates.get(store.id)
        if gate is not None:
            assert gate.wait(30), "the test never opened the gate"
        outcome = self.outcomes.get(store.id, Outcome.NOOP)
        return CycleResult(outcome, "server said no" if outcome is Outcome.ERROR else None)

    def count(self, store_id: str) -> int:
        with self.lock:
            return self.calls.get(store_id, 0)


@pytest.fixture
def stopper() -> Iterator[list[Daemon]]:
    started: list[Daemon] = []
    yield started
    for daemon in started:
        if not daemon._stop_requested:
            daemon.stop()


def test_health_is_503_until_a_first_success_and_while_a_store_is_paused(
    tmp_path: Path, stopper: list[Daemon]
) -> None:
    good, bad = _store("good"), _store("bad")
    for store in (good, bad):
        _checkout(tmp_path, store)
    runner = Runner()
    runner.gates = {good.id: threading.Event(), bad.id: threading.Event()}
    runner.outcomes = {bad.id: Outcome.ERROR}
    config = _config(tmp_path, http={"listen": "127.0.0.1:0"})
    daemon = Daemon(config, runner=runner, discovery=lambda: Selection([good, bad]), backoff_base=0.01)
    daemon.start()
    stopper.append(daemon)

    wait_for(lambda: runner.count(good.id) == 1, what="the first cycle to start")
    status, body = _get(daemon, "/healthz")
    assert status == 503 and json.loads(body)["status"] == "starting"

    runner.gates[good.id].set()
    wait_for(lambda: _get(daemon, "/healthz")[0] == 200, what="healthz 200")

    runner.gates[bad.id].set()
    wait_for(lambda: _get(daemon, "/healthz")[0] == 503, what="healthz 503 after the pause")
    assert json.loads(_get(daemon, "/healthz")[1]) == {"status": "paused", "stores": 2, "paused": [bad.id]}
    assert runner.count(bad.id) == 2  # max_failures, then no more

    status, metrics = _get(daemon, "/metrics")
    text = metrics.decode()
    assert status == 200
    assert f'memsync_cycles_total{{result="noop",store="{good.id}"}} 1.0' in text
    assert f'memsync_cycles_total{{result="error",store="{bad.id}"}} 2.0' in text
    assert f'memsync_store_paused{{store="{bad.id}"}} 1.0' in text
    assert f'memsync_lag_seconds{{store="{good.id}"}}' in text
    assert _get(daemon, "/nope")[0] == 404

    state = read_state(tmp_path / bad.id)
    assert state is not None and state.paused and state.status == "paused"
    assert state.consecutive_failures == 2 and "server said no" in (state.pause_reason or "")
    assert state.next_run is None and state.last_success is None
    good_state = read_state(tmp_path / good.id)
    assert good_state is not None and good_state.status == "idle" and good_state.last_success is not None
    assert good_state.next_run is not None and good_state.lag() is not None

    assert daemon.stop() == []
    final = read_state(tmp_path / good.id)
    assert final is not None and final.status == "stopped" and final.next_run is None


def test_the_daemon_exits_1_only_when_every_store_is_paused(tmp_path: Path) -> None:
    stores = [_store("one"), _store("two")]
    runner = Runner()
    runner.outcomes = {s.id: Outcome.ERROR for s in stores}
    daemon = Daemon(_config(tmp_path), runner=runner, discovery=lambda: Selection(stores), backoff_base=0.01)
    code, abandoned = daemon.run()  # returns by itself once both are paused
    assert (code, abandoned) == (1, [])
    assert all(runner.count(s.id) == 2 for s in stores)


@pytest.mark.parametrize("finishes_in_time", [True, False])
def test_stop_waits_for_the_cycle_in_flight_up_to_the_deadline(
    tmp_path: Path, finishes_in_time: bool
) -> None:
    store = _store("slow")
    _checkout(tmp_path, store)
    runner = Runner()
    runner.gates = {store.id: threading.Event()}
    daemon = Daemon(
        _config(tmp_path, shutdown_deadline="300ms"), runner=runner, discovery=lambda: Selection([store])
    )
    daemon.start()
    wait_for(lambda: runner.count(store.id) == 1, what="the cycle to start")
    if finishes_in_time:
        # The cycle ends while stop() is waiting for it.
        threading.Timer(0.05, runner.gates[store.id].set).start()
    started = time.monotonic()
    abandoned = daemon.stop()
    elapsed = time.monotonic() - started
    runner.gates[store.id].set()
    if finishes_in_time:
        assert abandoned == []
        state = read_state(tmp_path / store.id)
        assert state is not None and state.last_cycle is not None and state.last_cycle.result == "noop"
    else:
        assert abandoned == [store.id]
        assert 0.3 <= elapsed < 5
        # The abandoned cycle ending later does not overwrite the final state.
        assert daemon.coordinator.wait_idle(10) == []
    assert read_state(tmp_path / store.id).status == "stopped"  # type: ignore[union-attr]


def test_discovery_adds_new_stores_and_drops_removed_ones(tmp_path: Path, stopper: list[Daemon]) -> None:
    first, second = _store("first"), _store("second")
    for store in (first, second):
        _checkout(tmp_path, store)
    selection = Selection([first])
    runner = Runner()
    daemon = Daemon(_config(tmp_path, discovery_interval="50ms"), runner=runner, discovery=lambda: selection)
    daemon.start()
    stopper.append(daemon)
    wait_for(lambda: runner.count(first.id) == 1, what="the first store's cycle")
    selection = Selection([first, second])
    wait_for(lambda: runner.count(second.id) == 1, what="the discovered store's first cycle")
    selection = Selection([second], deleted_remotely=[first.id])
    wait_for(
        lambda: getattr(read_state(tmp_path / first.id), "status", None) == "removed",
        what="the deleted store to be dropped",
    )
    state = read_state(tmp_path / first.id)
    assert state is not None and state.removed_reason == "not listed by the API"
    assert daemon.coordinator.store_ids() == [second.id]
    assert not daemon.watcher.watching(first.id) and daemon.watcher.watching(second.id)


def test_the_real_runner_skips_a_store_whose_lock_is_held(
    server: ServerProcess, client: Client, mirrored: Callable[..., tuple[Store, Path]]
) -> None:
    store, checkout = mirrored()
    config = parse_config(
        {
            "api": {"dialect": "forward", "base_url": server.base_url, "token_env": "MEMSYNC_TEST_TOKEN"},
            "mirror": {"root": str(checkout.parent)},
        }
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MEMSYNC_TEST_TOKEN", server.token)
        cycles = StoreCycles(config)
        try:
            with store_lock(checkout.parent, store.id):
                held = cycles.run(store, False)
            assert held.outcome is Outcome.LOCKED and held.report is None
            assert "try again" in (held.error or "")
            client.create_memory(store.id, "later.md", "after the lock\n")
            free = cycles.run(store, False)
            assert free.outcome is Outcome.SUCCESS and free.report is not None
            assert free.report.pull.imported == 1
            assert cycles.run(store, False).outcome is Outcome.NOOP
        finally:
            cycles.close()


def test_a_full_scan_that_fell_due_while_stopped_runs_at_start_and_new_stores_wait_one_interval(
    tmp_path: Path, stopper: list[Daemon]
) -> None:
    known, fresh = _store("known"), _store("fresh")
    past = datetime.now(UTC) - timedelta(hours=2)
    write_state(
        _checkout(tmp_path, known),
        StoreState(
            store_id=known.id,
            name=known.name,
            status="stopped",
            daemon_pid=1,
            daemon_started_at=past,
            updated_at=past,
            last_success=past,
            next_full_scan=past + timedelta(hours=1),
        ),
    )
    _checkout(tmp_path, fresh)
    runner = Runner()
    daemon = Daemon(_config(tmp_path), runner=runner, discovery=lambda: Selection([known, fresh]))
    daemon.start()
    stopper.append(daemon)
    wait_for(lambda: known.id in runner.full_scans, what="the overdue full scan")
    wait_for(
        lambda: getattr(read_state(tmp_path / known.id), "last_full_scan", None) is not None,
        what="the full scan in the state file",
    )
    state = read_state(tmp_path / fresh.id)
    assert state is not None and state.next_full_scan is not None
    assert state.next_full_scan - datetime.now(UTC) > timedelta(hours=23)
    assert fresh.id not in runner.full_scans
    # The restored success counts for lag until the first cycle of this run replaces it.
    known_state = read_state(tmp_path / known.id)
    assert known_state is not None and known_state.last_success is not None
    assert known_state.last_success > past


def test_metrics_drop_a_conflict_resolved_outside_the_daemon_without_a_cycle(
    server: ServerProcess, client: Client, mirrored: Callable[..., tuple[Store, Path]], stopper: list[Daemon]
) -> None:
    store, checkout = mirrored({"notes/a.md": "one\n"})
    (checkout / "notes" / "a.md").write_text("changed here\n")
    memory = client.find_memory(store.id, "notes/a.md")
    assert memory is not None
    client.update_memory(store.id, memory.id, "changed there\n", expected_sha256=memory.content_sha256)
    config = parse_config(
        {
            "api": {"dialect": "forward", "base_url": server.base_url, "token_env": "MEMSYNC_TEST_TOKEN"},
            "mirror": {"root": str(checkout.parent)},
            # No watcher and no interval within the test: only the start cycle runs.
            "daemon": {"interval": "1h", "jitter": "0s", "watch": False, "http": {"listen": "127.0.0.1:0"}},
        }
    )
    gauge = f'memsync_open_conflicts{{store="{store.id}"}}'
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MEMSYNC_TEST_TOKEN", server.token)
        daemon = Daemon(config)
        daemon.start()
        stopper.append(daemon)
        wait_for(lambda: f"{gauge} 1.0" in _get(daemon, "/metrics")[1].decode(), what="the conflict counted")
        cycles = daemon.state(store.id).last_cycle
        # The user settles the file by hand, then ends the conflict: no file changes at resolve.
        (checkout / "notes" / "a.md").write_text("changed on both sides\n")
        target = find_target(str(checkout / "notes" / "a.md"), cwd=checkout, root=checkout.parent)
        resolve_conflict(target, None, Dialect.FORWARD)
        assert f"{gauge} 0.0" in _get(daemon, "/metrics")[1].decode()
        assert daemon.state(store.id).last_cycle == cycles  # no cycle ran in between
