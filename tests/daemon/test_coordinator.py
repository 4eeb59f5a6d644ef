"""Coalescing, one cycle per store at a time, backoff and pause — with a fake clock and a hand-cranked
executor, then once with real threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from memsync.daemon import CycleCoordinator, CycleOutcome, Outcome, Request


@dataclass
class Harness:
    """A coordinator whose executor and timers the test drives by hand."""

    outcomes: dict[str, list[Outcome]] = field(default_factory=dict)
    now: float = 100.0
    queue: list[Callable[[], None]] = field(default_factory=list)
    timers: list[tuple[float, Callable[[], None]]] = field(default_factory=list)
    runs: list[tuple[str, Request]] = field(default_factory=list)
    during_run: Callable[[str], None] | None = None
    heard: list[tuple[str, Outcome]] = field(default_factory=list)
    coordinator: CycleCoordinator = field(init=False)

    def __post_init__(self) -> None:
        self.coordinator = CycleCoordinator(
            self._run,
            submit=self.queue.append,
            call_at=lambda when, fn: self.timers.append((when, fn)),
            clock=lambda: self.now,
            max_failures=3,
            backoff=lambda n: 10.0 * 2 ** (n - 1),
            lock_retry=5.0,
        )
        self.coordinator.add_listener(lambda store, _req, out: self.heard.append((store, out.outcome)))

    def _run(self, store_id: str, request: Request) -> CycleOutcome:
        self.runs.append((store_id, request))
        if self.during_run is not None:
            self.during_run(store_id)
        planned = self.outcomes.get(store_id, [])
        return CycleOutcome(planned.pop(0) if planned else Outcome.NOOP, "boom")

    def crank(self) -> int:
        """Run everything queued (and whatever that queues) now; how many work items ran."""
        ran = 0
        while self.queue:
            self.queue.pop(0)()
            ran += 1
        return ran

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [t for t in self.timers if t[0] <= self.now]
        self.timers = [t for t in self.timers if t[0] > self.now]
        for _, fn in due:
            fn()


def test_many_requests_before_the_cycle_starts_make_one_cycle() -> None:
    h = Harness()
    h.coordinator.add("s1")
    for trigger in ("interval", "watch", "watch", "watch"):
        assert h.coordinator.request("s1", trigger)
    assert len(h.queue) == 1
    h.crank()
    assert [r[0] for r in h.runs] == ["s1"]
    assert h.runs[0][1].triggers == frozenset({"interval", "watch"})


@pytest.mark.parametrize("during", [1, 2, 25])
def test_requests_during_a_running_cycle_make_exactly_one_more(during: int) -> None:
    h = Harness()
    h.coordinator.add("s1")

    def more_requests(store_id: str) -> None:
        if len(h.runs) == 1:
            assert h.coordinator.busy(store_id)
            for _ in range(during):
                h.coordinator.request(store_id, "watch")
            # Nothing may start while the cycle runs: the store never runs two at once.
            assert h.queue == []

    h.during_run = more_requests
    h.coordinator.request("s1", "interval")
    h.crank()
    assert len(h.runs) == 2
    assert h.runs[1][1].triggers == frozenset({"watch"})
    assert h.queue == [] and not h.coordinator.busy("s1")


def test_a_full_scan_request_folds_into_the_next_cycle() -> None:
    h = Harness()
    h.coordinator.add("s1")
    h.coordinator.request("s1", "watch")
    h.coordinator.request("s1", "full-scan", full_scan=True)
    h.crank()
    assert h.runs[0][1] == Request(full_scan=True, triggers=frozenset({"watch", "full-scan"}))
    h.coordinator.request("s1", "interval")
    h.crank()
    assert h.runs[1][1].full_scan is False


def test_stores_run_independently() -> None:
    h = Harness()
    for store in ("s1", "s2"):
        h.coordinator.add(store)
        h.coordinator.request(store, "start")
    assert len(h.queue) == 2
    h.crank()
    assert sorted(r[0] for r in h.runs) == ["s1", "s2"]


def test_a_failure_backs_off_and_retries_by_itself_and_requests_wait_for_it() -> None:
    h = Harness(outcomes={"s1": [Outcome.ERROR, Outcome.ERROR, Outcome.SUCCESS]})
    h.coordinator.add("s1")
    h.coordinator.request("s1", "start")
    h.crank()
    assert h.coordinator.view("s1").failures == 1  # type: ignore[union-attr]
    assert [t[0] for t in h.timers] == [110.0]
    # A save during the backoff does not start a cycle early...
    h.coordinator.request("s1", "watch")
    assert h.queue == []
    h.advance(9.9)
    assert h.queue == []
    # ...the retry does, with the save folded in.
    h.advance(0.1)
    h.crank()
    assert h.runs[1][1].triggers == frozenset({"start", "watch", "retry"})
    assert [t[0] for t in h.timers] == [130.0]  # 20 s after the second failure
    h.advance(20)
    h.crank()
    view = h.coordinator.view("s1")
    assert view is not None and view.failures == 0 and view.retry_at is None
    assert len(h.runs) == 3


def test_max_failures_in_a_row_pause_the_store_and_the_others_go_on() -> None:
    h = Harness(outcomes={"bad": [Outcome.ERROR] * 10})
    h.coordinator.add("bad")
    h.coordinator.add("good")
    h.coordinator.request("bad", "start")
    h.coordinator.request("good", "start")
    h.crank()
    h.advance(10)
    h.crank()
    h.advance(20)
    h.crank()
    view = h.coordinator.view("bad")
    assert view is not None and view.paused and view.failures == 3
    assert "boom" in (view.pause_reason or "")
    assert not h.coordinator.request("bad", "watch")
    assert h.timers == [] and h.queue == []
    assert not h.coordinator.all_paused()
    assert h.coordinator.request("good", "interval")
    h.crank()
    assert [r[0] for r in h.runs].count("good") == 2
    assert [r[0] for r in h.runs].count("bad") == 3


def test_every_store_paused_is_reported() -> None:
    h = Harness(outcomes={"only": [Outcome.ERROR] * 3})
    h.coordinator.add("only")
    h.coordinator.request("only", "start")
    for step in (0, 10, 20):
        h.advance(step)
        h.crank()
    assert h.coordinator.all_paused()


def test_a_held_lock_is_retried_shortly_and_is_not_a_failure() -> None:
    h = Harness(outcomes={"s1": [Outcome.LOCKED, Outcome.NOOP]})
    h.coordinator.add("s1")
    h.coordinator.request("s1", "watch")
    h.crank()
    view = h.coordinator.view("s1")
    assert view is not None and view.failures == 0 and view.pending
    assert [t[0] for t in h.timers] == [105.0]
    h.advance(5)
    h.crank()
    assert h.runs[1][1].triggers == frozenset({"watch"})
    assert h.heard == [("s1", Outcome.LOCKED), ("s1", Outcome.NOOP)]


def test_success_resets_the_failure_count() -> None:
    h = Harness(outcomes={"s1": [Outcome.ERROR, Outcome.ERROR, Outcome.SUCCESS, Outcome.ERROR]})
    h.coordinator.add("s1")
    h.coordinator.request("s1", "start")
    for step in (0, 10, 20):
        h.advance(step)
        h.crank()
    h.coordinator.request("s1", "interval")
    h.crank()
    view = h.coordinator.view("s1")
    assert view is not None and view.failures == 1 and not view.paused


def test_a_runner_that_raises_is_a_failed_cycle() -> None:
    h = Harness()
    h.coordinator.add("s1")

    def explode(store_id: str) -> None:
        raise RuntimeError("bug")

    h.during_run = explode
    h.coordinator.request("s1", "start")
    h.crank()
    assert h.heard == [("s1", Outcome.ERROR)]


def test_close_drops_pending_requests_and_removed_stores_are_not_served() -> None:
    h = Harness()
    h.coordinator.add("s1")
    h.coordinator.add("s2")
    h.coordinator.request("s1", "start")
    h.coordinator.remove("s2")
    assert not h.coordinator.request("s2", "start")
    h.coordinator.close()
    assert not h.coordinator.request("s1", "watch")
    h.crank()
    assert h.runs == []
    assert h.coordinator.wait_idle(0) == []
    assert h.coordinator.store_ids() == ["s1"]


def test_with_real_threads_a_store_never_runs_two_cycles_and_the_last_request_is_served() -> None:
    running: dict[str, int] = {"s1": 0, "s2": 0}
    overlap: list[str] = []
    cycles: dict[str, int] = {"s1": 0, "s2": 0}
    last_request: dict[str, float] = {}
    last_start: dict[str, float] = {}
    lock = threading.Lock()

    def run(store_id: str, request: Request) -> CycleOutcome:
        with lock:
            running[store_id] += 1
            if running[store_id] > 1:
                overlap.append(store_id)
            cycles[store_id] += 1
            last_start[store_id] = time.monotonic()
        time.sleep(0.002)  # the cycle's work, so that requests land while it runs
        with lock:
            running[store_id] -= 1
        return CycleOutcome(Outcome.NOOP)

    def submit(work: Callable[[], None]) -> None:
        threading.Thread(target=work).start()

    coordinator = CycleCoordinator(
        run,
        submit=submit,
        call_at=lambda when, fn: None,
        clock=time.monotonic,
        max_failures=3,
        backoff=lambda n: 1.0,
        lock_retry=1.0,
    )
    coordinator.add("s1")
    coordinator.add("s2")

    def hammer(store_id: str) -> None:
        for _ in range(200):
            # Stamped before the request: the cycle that serves it must start after this instant.
            with lock:
                last_request[store_id] = max(last_request.get(store_id, 0.0), time.monotonic())
            coordinator.request(store_id, "watch")

    threads = [threading.Thread(target=hammer, args=(s,)) for s in ("s1", "s2", "s1", "s2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    deadline = time.monotonic() + 10
    while coordinator.wait_idle(0.05) or any(v.pending for v in coordinator.views().values()):
        assert time.monotonic() < deadline, "cycles did not settle"
    assert overlap == []
    for store_id in ("s1", "s2"):
        # Coalesced: far fewer cycles than requests, and one started after the last request.
        assert 1 <= cycles[store_id] < 400
        assert last_start[store_id] >= last_request[store_id]
