"""Turning cycle requests into cycles (docs/design.md §3, "One cycle does it all").

The scheduler and the watcher only *request* a store's cycle. Requests coalesce: many requests before
the cycle starts make one cycle, and requests that arrive while it runs make exactly one more after
it. A store never runs two cycles at once. A failed cycle is retried after a growing delay (requests
in the meantime wait for it); after ``max_failures`` failures in a row the store is paused and its
requests are dropped; the other stores go on. A cycle that found the store lock held (the CLI is at
work) is neither a success nor a failure: it is retried shortly.

Everything that touches time or threads is injected (``clock``, ``submit``, ``call_at``), so the
rules are tested with a fake clock and a hand-cranked executor.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from memsync.errors import storage_fault_hint

log = logging.getLogger("memsync.daemon")


class Outcome(enum.StrEnum):
    """How a cycle ended: what git-sync calls success (something changed), noop, error; and locked."""

    SUCCESS = "success"
    NOOP = "noop"
    ERROR = "error"
    LOCKED = "locked"  # the store lock was held by another memsync: skipped, retried shortly


@dataclass(frozen=True)
class Request:
    """What a cycle was asked for: a full scan or not, and every trigger folded into it."""

    full_scan: bool
    triggers: frozenset[str]


@dataclass
class CycleOutcome:
    """What the cycle runner returns to the coordinator: the outcome, and an error message for logs."""

    outcome: Outcome
    error: str | None = None


@dataclass
class SlotView:
    """A consistent snapshot of one store's scheduling state."""

    running: bool
    pending: bool
    paused: bool
    pause_reason: str | None
    failures: int
    retry_at: float | None  # clock time before which no cycle starts (backoff or lock retry)


@dataclass
class _Slot:
    store_id: str
    pending: bool = False
    full_scan: bool = False
    triggers: set[str] = field(default_factory=set)
    submitted: bool = False
    running: bool = False
    # Between the end of a cycle and its listeners having heard of it: no new cycle starts, so the
    # listeners (state file, metrics) see cycles strictly in order.
    finishing: bool = False
    paused: bool = False
    pause_reason: str | None = None
    removed: bool = False
    failures: int = 0
    not_before: float = 0.0
    timer_at: float | None = None


Runner = Callable[[str, Request], CycleOutcome]
Listener = Callable[[str, Request, CycleOutcome], None]


class CycleCoordinator:
    """Runs each store's cycle through ``submit``, at most one at a time per store, coalescing requests.

    ``run(store_id, request)`` is the cycle itself (it must not raise). ``submit(fn)`` runs ``fn`` on a
    worker; ``call_at(when, fn)`` calls ``fn`` at clock time ``when`` (a retry); ``clock`` is
    monotonic seconds. ``backoff(n)`` is the delay after the n-th failure in a row, ``lock_retry`` the
    delay after finding the store lock held. Listeners hear every finished cycle (outside the lock).
    """

    def __init__(
        self,
        run: Runner,
        *,
        submit: Callable[[Callable[[], None]], None],
        call_at: Callable[[float, Callable[[], None]], None],
        clock: Callable[[], float],
        max_failures: int,
        backoff: Callable[[int], float],
        lock_retry: float,
    ) -> None:
        self._run = run
        self._submit = submit
        self._call_at = call_at
        self._clock = clock
        self.max_failures = max_failures
        self._backoff = backoff
        self._lock_retry = lock_retry
        self._slots: dict[str, _Slot] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._closed = False
        self._listeners: list[Listener] = []
        # Calls to start and timers to set, collected under the lock and made after releasing it, so
        # an executor that runs work inline (tests) or a slow timer API never runs under our lock.
        self._deferred: list[Callable[[], None]] = []

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    # --- stores ----------------------------------------------------------------------------------

    def add(self, store_id: str) -> None:
        with self._lock:
            slot = self._slots.get(store_id)
            if slot is None or slot.removed:
                self._slots[store_id] = _Slot(store_id)

    def remove(self, store_id: str) -> None:
        """Stop serving a store; a cycle in flight finishes, pending requests are dropped."""
        with self._lock:
            slot = self._slots.get(store_id)
            if slot is not None:
                slot.removed = True
                slot.pending = False

    def store_ids(self) -> list[str]:
        with self._lock:
            return [s.store_id for s in self._slots.values() if not s.removed]

    def view(self, store_id: str) -> SlotView | None:
        """The store's scheduling state; None for a store never added or since removed."""
        with self._lock:
            slot = self._slots.get(store_id)
            if slot is None or slot.removed:
                return None
            return self._view(slot)

    def views(self) -> dict[str, SlotView]:
        """Every served store's scheduling state, taken at one instant."""
        with self._lock:
            return {s.store_id: self._view(s) for s in self._slots.values() if not s.removed}

    def _view(self, slot: _Slot) -> SlotView:
        retry = slot.not_before if slot.not_before > self._clock() else None
        return SlotView(
            running=slot.running,
            pending=slot.pending or slot.submitted,
            paused=slot.paused,
            pause_reason=slot.pause_reason,
            failures=slot.failures,
            retry_at=retry,
        )

    def busy(self, store_id: str) -> bool:
        """Whether the store's cycle is running right now."""
        with self._lock:
            slot = self._slots.get(store_id)
            return slot is not None and slot.running

    def all_paused(self) -> bool:
        """True when there are stores and every one of them is paused."""
        with self._lock:
            live = [s for s in self._slots.values() if not s.removed]
            return bool(live) and all(s.paused for s in live)

    # --- requests --------------------------------------------------------------------------------

    def request(self, store_id: str, trigger: str, *, full_scan: bool = False) -> bool:
        """Ask for a cycle of ``store_id``; False if it cannot be served (unknown, removed, paused)."""
        with self._lock:
            slot = self._slots.get(store_id)
            if self._closed or slot is None or slot.removed or slot.paused:
                return False
            slot.pending = True
            slot.full_scan = slot.full_scan or full_scan
            slot.triggers.add(trigger)
            self._dispatch(slot)
        self._flush()
        return True

    def close(self) -> None:
        """Accept no more requests and drop the pending ones; cycles in flight go on."""
        with self._lock:
            self._closed = True
            for slot in self._slots.values():
                slot.pending = False

    def wait_idle(self, timeout: float) -> list[str]:
        """Wait up to ``timeout`` seconds for cycles in flight; the stores still running after it."""
        deadline = self._clock() + timeout
        with self._idle:
            while True:
                # A cycle submitted but not started does nothing once closed: only running ones count.
                running = [s.store_id for s in self._slots.values() if s.running or s.finishing]
                remaining = deadline - self._clock()
                if not running or remaining <= 0:
                    return running
                self._idle.wait(remaining)

    # --- the machinery ---------------------------------------------------------------------------

    def _dispatch(self, slot: _Slot) -> None:
        """Start the slot's cycle if it is wanted and allowed now (called under the lock)."""
        if not slot.pending or slot.running or slot.finishing or slot.submitted:
            return
        if slot.removed or slot.paused:
            return
        if self._closed:
            return
        now = self._clock()
        if now < slot.not_before:
            # Backing off (or waiting for the lock): one timer per slot, at the earliest time needed.
            if slot.timer_at is None or slot.timer_at > slot.not_before:
                slot.timer_at = slot.not_before
                when = slot.not_before
                self._deferred.append(lambda: self._call_at(when, lambda: self._on_timer(slot)))
            return
        slot.submitted = True
        self._deferred.append(lambda: self._submit(lambda: self._execute(slot)))

    def _on_timer(self, slot: _Slot) -> None:
        with self._lock:
            slot.timer_at = None
            self._dispatch(slot)
        self._flush()

    def _execute(self, slot: _Slot) -> None:
        with self._lock:
            slot.submitted = False
            if not slot.pending or slot.removed or slot.paused or self._closed:
                self._idle.notify_all()
                return
            request = Request(full_scan=slot.full_scan, triggers=frozenset(slot.triggers))
            slot.pending = False
            slot.full_scan = False
            slot.triggers = set()
            slot.running = True
        try:
            result = self._run(slot.store_id, request)
        except Exception as exc:  # the runner must not raise; if it does, it is a failed cycle
            log.exception("the cycle of %s raised", slot.store_id)
            result = CycleOutcome(Outcome.ERROR, f"internal error: {type(exc).__name__}: {exc}")
        with self._lock:
            slot.running = False
            slot.finishing = True
            self._settle(slot, request, result)
        for listener in self._listeners:
            try:
                listener(slot.store_id, request, result)
            except Exception:
                log.exception("a cycle listener failed for %s", slot.store_id)
        with self._lock:
            slot.finishing = False
            self._dispatch(slot)
            self._idle.notify_all()
        self._flush()

    def _settle(self, slot: _Slot, request: Request, result: CycleOutcome) -> None:
        """Book a finished cycle: reset or count failures, pause, or plan a retry (under the lock)."""
        now = self._clock()
        if result.outcome is Outcome.LOCKED:
            # Not the store's fault: run the same request again once the other memsync is done.
            self._requeue(slot, request)
            slot.not_before = now + self._lock_retry
            return
        if result.outcome is not Outcome.ERROR:
            slot.failures = 0
            slot.not_before = 0.0
            return
        slot.failures += 1
        # A full, read-only or failing disk is the machine's fault, not the store's: pausing would
        # leave the store stopped after the disk is mended, so it keeps retrying at the backoff cap
        # (about one interval) and recovers by itself; /healthz and the metrics say meanwhile.
        on_disk = result.error is not None and storage_fault_hint(result.error) is not None
        if slot.failures >= self.max_failures and not on_disk:
            slot.paused = True
            slot.pause_reason = (
                f"{slot.failures} failed cycles in a row; last error: {result.error or 'unknown'}"
            )
            slot.pending = False
            log.error(
                "pausing %s after %d failed cycles in a row (the other stores go on); last error: %s",
                slot.store_id,
                slot.failures,
                result.error,
                extra={"store": slot.store_id},
            )
            return
        # Retry by itself after the backoff: a failing store must not wait a whole interval.
        self._requeue(slot, request)
        slot.triggers.add("retry")
        slot.not_before = now + self._backoff(slot.failures)

    @staticmethod
    def _requeue(slot: _Slot, request: Request) -> None:
        slot.pending = True
        slot.full_scan = slot.full_scan or request.full_scan
        slot.triggers.update(request.triggers)

    def _flush(self) -> None:
        with self._lock:
            work, self._deferred = self._deferred, []
        for item in work:
            item()
