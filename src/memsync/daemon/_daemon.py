"""The daemon: scheduling, watching, the lifecycle, health and state — composed around ``run_cycle``.

Threads, and what each one owns:

- the main thread starts everything, then waits for a signal (or for every store to be paused) and
  shuts down within ``shutdown_deadline``;
- APScheduler's thread fires the *request* jobs (interval, full scan, discovery, retries); they only
  set flags, so they run inline (``DebugExecutor``) and never delay one another, and jobs are
  entries in its job store, not threads;
- the watcher's reader thread notes the events of every checkout (one inotify instance), and its
  settling thread re-hashes settled paths and requests; none with ``daemon.watch = false``;
- a pool of ``fleet.concurrency`` worker threads runs the cycles (and discovery), at most one per
  store at a time;
- the HTTP endpoint's thread answers ``/healthz`` and ``/metrics``.

So the threads do not grow with the stores: 1,000 stores have as many as 3 (a content fetch adds
its requests in flight while it runs).
"""

from __future__ import annotations

import functools
import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

from apscheduler.executors.debug import DebugExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from memsync.api import Client, Store
from memsync.config import Config
from memsync.daemon._awareness import AwarenessKeeper
from memsync.daemon._coordinator import CycleCoordinator, CycleOutcome, Outcome, Request, SlotView
from memsync.daemon._http import HttpEndpoint
from memsync.daemon._metrics import CONTENT_TYPE, DaemonMetrics, StoreGauges
from memsync.daemon._state import (
    BACKOFF,
    IDLE,
    PAUSED,
    REMOVED,
    RUNNING,
    STOPPED,
    LastCycle,
    StoreState,
    read_state,
    write_state,
)
from memsync.daemon._watcher import (
    CheckoutWatcher,
    WatchUnavailable,
    checkout_folders,
    native_backend,
    watch_budget,
)
from memsync.errors import (
    EXIT_FAILED,
    EXIT_LOCKED,
    EXIT_OK,
    AuthenticationFailed,
    ConfigError,
    LockHeld,
    MemsyncError,
    combine_exit_codes,
    storage_fault_hint,
)
from memsync.mirror import escape_for_terminal
from memsync.sync.cycle import CycleReport, run_cycle
from memsync.sync.fleet import in_parallel
from memsync.sync.locks import held
from memsync.sync.outputs import CycleOutput
from memsync.sync.pull import PullReport, not_listed, store_lock
from memsync.sync.status import conflict_paths
from memsync.sync.stores import Selection, client_for, select_stores

log = logging.getLogger("memsync.daemon")

# The first retry after a failure waits this long (at most one interval), doubling after each
# further failure up to the interval.
BACKOFF_BASE_S = 10.0
# A store whose lock another memsync holds is tried again after this long (at most one interval).
LOCK_RETRY_S = 5.0


@dataclass
class CycleResult:
    """A finished cycle as the runner reports it: the outcome and, unless skipped, the cycle's report."""

    outcome: Outcome
    error: str | None = None
    report: CycleReport | None = None


CycleRunner = Callable[[Store, bool], CycleResult]
Discovery = Callable[[], Selection]


class StoreCycles:
    """The real cycle of one store: the store lock probed, ``run_cycle`` with an API client of its own.

    One client's connection pool serves every cycle; each cycle sends through its own
    :meth:`Client.share` copy, so its request counts are its own.
    """

    def __init__(self, config: Config) -> None:
        self._config = config
        config.token()  # a missing or unreadable token is a configuration error now, not per cycle
        self._lock = threading.Lock()
        self._shared: Client | None = None

    @contextmanager
    def client(self) -> Iterator[Client]:
        """A client for one cycle (or one discovery, or one view refresh)."""
        with self._lock:
            if self._shared is None:
                self._shared = client_for(self._config)
            shared = self._shared
        own = shared.share()
        try:
            yield own
        finally:
            own.close()

    def close(self) -> None:
        """Close the connections (a cycle abandoned at shutdown fails its next request, if any)."""
        with self._lock:
            shared, self._shared = self._shared, None
        if shared is not None:
            shared.close()

    def discover(self) -> Selection:
        with self.client() as client:
            return select_stores(client, self._config)

    def run(self, store: Store, full_scan: bool) -> CycleResult:
        root = self._config.mirror.root
        try:
            # pull_store takes this lock itself and a second flock in one process conflicts, so the
            # daemon probes it just before: a held lock (the CLI at work) is a skip, not a failure.
            with store_lock(root, store.id):
                pass
        except LockHeld as exc:
            return CycleResult(Outcome.LOCKED, str(exc))
        try:
            with self.client() as client:
                # Never force: a push that would delete more than push.max_delete_share of the store
                # is withheld and reported; `memsync push --force` is the user's decision. Creates
                # past the store's memory limit are withheld too, not an error that pauses the store.
                report = run_cycle(
                    client,
                    store,
                    root,
                    full_scan=full_scan,
                    max_delete_share=self._config.push.max_delete_share,
                    withhold_over_limit=True,
                )
        except MemsyncError as exc:
            return CycleResult(Outcome.ERROR, str(exc))
        if report.ok:
            return CycleResult(Outcome.SUCCESS if report.changed else Outcome.NOOP, None, report)
        # The CLI took the store lock between the probe and the cycle's own locking: still a skip.
        outcome = Outcome.LOCKED if report.exit_code == EXIT_LOCKED else Outcome.ERROR
        return CycleResult(outcome, report.error or "the cycle failed", report)


class WorkerPool:
    """Daemon threads running submitted work in order.

    Not ``concurrent.futures``: its threads are joined at interpreter exit, and a cycle still running
    past the shutdown deadline must not hold the process (an import killed at any point resumes).
    """

    def __init__(self, workers: int, name: str) -> None:
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(workers)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, work: Callable[[], None]) -> None:
        self._queue.put(work)

    def shutdown(self) -> None:
        """Let the threads end after their current work; queued work still runs (cheap once closed)."""
        for _ in self._threads:
            self._queue.put(None)

    def _work(self) -> None:
        while (work := self._queue.get()) is not None:
            try:
                work()
            except Exception:
                log.exception("a daemon task failed")


@dataclass
class _Record:
    """What the daemon knows about one store beyond its scheduling slot."""

    store: Store
    checkout: Path
    last_cycle: LastCycle | None = None
    last_success: datetime | None = None
    last_full_scan: datetime | None = None
    next_full_scan: datetime | None = None
    open_conflicts: list[str] = field(default_factory=list)
    rejected: list[dict[str, str]] = field(default_factory=list)
    withheld: list[dict[str, str]] = field(default_factory=list)
    tip: str | None = None
    warnings: list[str] = field(default_factory=list)
    blocked: str | None = None
    removed_reason: str | None = None
    running_since: datetime | None = None
    # The last cycle failed on the local disk (full, read-only, I/O error): its message, with the fix.
    storage_fault: str | None = None


class Daemon:
    """``memsync daemon``: every selected store kept in sync until a signal stops it.

    ``runner`` and ``discovery`` replace the real cycle and store listing (tests); ``backoff_base``
    and ``lock_retry`` the retry delays.
    """

    def __init__(
        self,
        config: Config,
        *,
        max_failures: int | None = None,
        runner: CycleRunner | None = None,
        discovery: Discovery | None = None,
        backoff_base: float | None = None,
        lock_retry: float | None = None,
    ) -> None:
        self.config = config
        settings = config.daemon
        self.max_failures = max_failures if max_failures is not None else settings.max_failures
        self._cycles: StoreCycles | None = None
        if runner is None or discovery is None:
            self._cycles = StoreCycles(config)
        self._runner: CycleRunner = runner or self._require_cycles().run
        self._discovery: Discovery = discovery or self._require_cycles().discover
        interval = settings.interval
        base = backoff_base if backoff_base is not None else min(interval, BACKOFF_BASE_S)
        cap = max(interval, base)
        self._clock = time.monotonic
        self._pool = WorkerPool(config.fleet.concurrency, "memsync-cycle")
        self._scheduler = BackgroundScheduler(
            executors={"default": DebugExecutor()},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone=UTC,
        )
        self.coordinator = CycleCoordinator(
            self._run_request,
            submit=self._pool.submit,
            call_at=self._call_at,
            clock=self._clock,
            max_failures=self.max_failures,
            backoff=lambda n: min(cap, base * 2 ** (n - 1)),
            lock_retry=lock_retry if lock_retry is not None else min(interval, LOCK_RETRY_S),
        )
        self.coordinator.add_listener(self._cycle_finished)
        # Started by start(), unless daemon.watch is off or the inotify watches do not fit.
        self.watcher: CheckoutWatcher | None = None
        # The [[awareness]] views, refreshed on the same pool after the cycles of their stores.
        self.awareness = AwarenessKeeper(
            config,
            client=lambda: self._require_cycles().client(),
            submit=self._pool.submit,
            managed=self._managed_stores,
        )
        self.metrics = DaemonMetrics(
            self._gauges,
            self.awareness.gauges if self.awareness else None,
            watcher=lambda: None if self.watcher is None else self.watcher.backend,
        )
        self.http: HttpEndpoint | None = None
        self._records: dict[str, _Record] = {}
        self._records_lock = threading.RLock()
        self._state_lock = threading.Lock()
        self._started_at = datetime.now(UTC)
        self._first_success = threading.Event()
        self._wake = threading.Event()
        self._stop_requested = False
        # Set once the final "stopped" states are written: a cycle abandoned at the deadline that
        # ends later must not overwrite them.
        self._states_final = False
        self._all_paused = False
        self._discovering = threading.Lock()
        self._exit = ExitStack()

    def _require_cycles(self) -> StoreCycles:
        if self._cycles is None:
            self._cycles = StoreCycles(self.config)
        return self._cycles

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Take the daemon lock, list the stores, start the endpoint, scheduler and watcher."""
        self._exit.enter_context(daemon_lock(self.config.mirror.root))
        try:
            selection = self._discovery()
        except (AuthenticationFailed, ConfigError):
            # Neither mends itself (a refused token; mirrors of another dialect): exit with it.
            self._exit.close()
            raise
        except MemsyncError as exc:
            # The API may come back: start empty and keep looking, rather than exit.
            log.error("cannot list the stores yet (%s); retrying", exc)
            selection = None
        try:
            if self.config.daemon.http.listen is not None:
                self.http = HttpEndpoint(
                    self.config.daemon.http.listen, self.health, self.metrics.render, CONTENT_TYPE
                )
                self.http.start()
        except BaseException:
            self._exit.close()
            raise
        self._pool.start()
        self._scheduler.start()
        self.watcher = self._start_watcher(selection)
        if selection is not None:
            self._apply_selection(selection, trigger="start")
        else:
            self._retry_discovery()
        self._scheduler.add_job(
            self._discovery_tick,
            IntervalTrigger(seconds=self.config.daemon.discovery_interval),
            id="discovery",
        )
        if self.awareness:
            self.awareness.request_all()
            self._scheduler.add_job(
                self.awareness.request_all,
                IntervalTrigger(seconds=self.config.daemon.interval),
                id="awareness",
            )
        log.info(
            "daemon started: %d store(s), interval %gs, %d worker(s), watching %d checkout(s)",
            len(self._records),
            self.config.daemon.interval,
            self.config.fleet.concurrency,
            sum(1 for store_id in self._records if self._watching(store_id)),
        )

    def _start_watcher(self, selection: Selection | None) -> CheckoutWatcher | None:
        """The watcher of the checkouts, started; None when daemon.watch is off or it cannot watch.

        The backend is ``daemon.watcher`` ("auto": inotify on Linux, watchdog elsewhere). With
        inotify, watching needs one watch per folder of every checkout: when the checkouts need more
        than the kernel's per-user limit leaves (or daemon.max_watches), the daemon does not watch
        at all, says so loudly and goes on with the scheduled cycles: a partial watch would make
        saves in some stores slow for no visible reason. A native backend that cannot start is
        replaced by the stat poller, with a warning: a save is never left for the next cycle.
        """
        settings = self.config.daemon
        if not settings.watch:
            log.info("not watching the checkouts (daemon.watch = false): saves are picked up every interval")
            return None
        backend = native_backend() if settings.watcher == "auto" else settings.watcher
        if backend == "inotify":
            root = self.config.mirror.root
            checkouts = [root / store.id for store in (selection.stores if selection else [])]
            needed = sum(
                sum(1 for _ in checkout_folders(checkout))
                for checkout in checkouts
                if (checkout / ".git").is_dir()
            )
            budget = watch_budget(settings.max_watches)
            available = budget.available
            if available is not None and needed > available:
                log.error(
                    "NOT WATCHING: the checkouts need %d inotify watches (one per folder), %d are"
                    " available; saves are picked up by the scheduled cycles only (every %gs). To"
                    " watch: %s",
                    needed,
                    available,
                    settings.interval,
                    budget.advice(needed),
                )
                return None
        watcher = CheckoutWatcher(
            self._saved,
            self.coordinator.busy,
            quiet=settings.debounce,
            max_wait=settings.max_wait,
            backend=backend,
            max_watches=settings.max_watches,
            poll_interval=settings.poll_interval,
        )
        try:
            watcher.start()
        except WatchUnavailable as exc:
            log.error("NOT WATCHING: %s; saves are picked up by the scheduled cycles only", exc)
            return None
        log.info(
            "watching the checkouts with %s%s",
            watcher.backend,
            f" (every {settings.poll_interval:g}s)" if watcher.backend == "poll" else "",
        )
        return watcher

    def _watching(self, store_id: str) -> bool:
        watcher = self.watcher
        return watcher is not None and watcher.watching(store_id)

    def _watch(self, store_id: str, checkout: Path) -> None:
        """Watch a checkout; when the watches run out (new stores, new folders), watch none."""
        watcher = self.watcher
        if watcher is None:
            return
        watcher.watch(store_id, checkout)
        if watcher.exhausted and self.watcher is watcher:
            # All or nothing, as at start: the watcher said why and what to raise.
            self.watcher = None
            watcher.stop()

    def request_stop(self) -> None:
        """Ask the daemon to stop (signal handlers and tests call this)."""
        self._stop_requested = True
        self._wake.set()

    def wait(self) -> str:
        """Block until stopped ("stop") or until every store is paused ("paused")."""
        while True:
            # A timeout, not a bare wait: the kernel may deliver SIGTERM to any thread, and Python runs
            # handlers only when the main thread gets back to bytecode, which a bare wait never does.
            self._wake.wait(timeout=0.5)
            self._wake.clear()
            if self._stop_requested:
                return "stop"
            if self._all_paused:
                return "paused"

    def stop(self) -> list[str]:
        """Stop within ``shutdown_deadline``; the stores whose cycle was still running at the deadline."""
        self._stop_requested = True
        self.coordinator.close()
        self.awareness.close()
        self._scheduler.shutdown(wait=False)
        watcher, self.watcher = self.watcher, None
        if watcher is not None:
            watcher.stop()
        abandoned = self.coordinator.wait_idle(self.config.daemon.shutdown_deadline)
        if abandoned:
            log.warning(
                "stopping with the cycle of %s still running after %gs; an interrupted import resumes"
                " at the next start",
                ", ".join(abandoned),
                self.config.daemon.shutdown_deadline,
            )
        with self._records_lock:
            store_ids = list(self._records)
        for store_id in store_ids:
            self._write_state(store_id, status=STOPPED)
        self._states_final = True
        if self.http is not None:
            self.http.stop()
        self._pool.shutdown()
        if self._cycles is not None:
            self._cycles.close()
        self._exit.close()
        log.info("daemon stopped")
        return abandoned

    def run(self) -> tuple[int, list[str]]:
        """start, wait for SIGTERM/SIGINT (or every store paused), stop: (exit code, abandoned)."""
        # Handlers first: a signal that lands while the daemon starts still stops it cleanly.
        # Ctrl-Break is how a Windows console asks a program to stop (SIGBREAK exists only there).
        stopping = [
            signal.SIGTERM,
            signal.SIGINT,
            *([signal.SIGBREAK] if hasattr(signal, "SIGBREAK") else []),
        ]
        previous = {sig: signal.signal(sig, self._on_signal) for sig in stopping}
        try:
            self.start()
            try:
                reason = self.wait()
            finally:
                abandoned = self.stop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if reason == "paused":
            log.error("every store is paused; exiting (fix the cause, then start the daemon again)")
            return EXIT_FAILED, abandoned
        return EXIT_OK, abandoned

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._stop_requested:
            # A second Ctrl-C: the user does not want to wait for the cycle in flight.
            os._exit(128 + signum)
        log.info(
            "%s received: finishing the cycles in flight (at most %gs)",
            signal.Signals(signum).name,
            self.config.daemon.shutdown_deadline,
        )
        self.request_stop()

    # --- one pass over every store (--once) ------------------------------------------------------

    def run_once(self) -> tuple[list[CycleOutput], int]:
        """One cycle per selected store, ``fleet.concurrency`` at once: (their reports in the
        selection's order, the exit code of docs/design.md §4)."""
        with daemon_lock(self.config.mirror.root):
            selection = self._discovery()

            def once(store: Store) -> tuple[CycleOutput, int]:
                record = self._record_for(store)
                started = datetime.now(UTC)
                result = self._call_runner(store, full_scan=False)
                self._book(record, result, Request(False, frozenset({"once"})), started)
                failures = 0 if result.outcome in (Outcome.SUCCESS, Outcome.NOOP) else 1
                self._write_state(store.id, status=STOPPED, failures=failures)
                self._log_result(store.id, result, retry_in=None, record=record)
                return _report(store, self.config.mirror.root, result), _exit_code(result)

            done = in_parallel(selection.stores, once, jobs=self.config.fleet.concurrency)
            reports = [report for report, _ in done]
            codes = [code for _, code in done]
            for store_id in selection.deleted_remotely:
                gone = not_listed(selection, self.config.mirror.root, store_id)
                reports.append(CycleReport(store_id=store_id, pull=gone).output())
            for key in self.awareness.views():
                if self.awareness.refresh_now(key) is None:
                    codes.append(EXIT_FAILED)
            if self._cycles is not None:
                self._cycles.close()
        return reports, combine_exit_codes(codes)

    # --- stores ----------------------------------------------------------------------------------

    def _record_for(self, store: Store) -> _Record:
        with self._records_lock:
            record = self._records.get(store.id)
            if record is None:
                record = _Record(store=store, checkout=self.config.mirror.root / store.id)
                previous = read_state(record.checkout)
                if previous is not None:
                    # Survive restarts: lag keeps counting from the last real success, and a full
                    # scan stays due even for a daemon restarted more often than full_scan_interval.
                    record.last_success = previous.last_success
                    record.last_full_scan = previous.last_full_scan
                    record.next_full_scan = previous.next_full_scan
                    record.open_conflicts = previous.open_conflicts
                    record.rejected = previous.rejected
                    record.tip = previous.tip
                self._records[store.id] = record
            record.store = store
            record.removed_reason = None
            return record

    def _apply_selection(self, selection: Selection, *, trigger: str) -> None:
        selected = {store.id: store for store in selection.stores}
        with self._records_lock:
            known = {sid for sid, r in self._records.items() if r.removed_reason is None}
        for store in selection.stores:
            if store.id in known:
                self._record_for(store)  # the name may have changed
            else:
                self._add_store(store, trigger=trigger)
        for store_id in known - set(selected):
            listed = store_id not in selection.deleted_remotely
            self._remove_store(store_id, "no longer selected" if listed else "not listed by the API")

    def _add_store(self, store: Store, *, trigger: str) -> None:
        record = self._record_for(store)
        settings = self.config.daemon
        self.coordinator.add(store.id)
        now = datetime.now(UTC)
        self._scheduler.add_job(
            functools.partial(self._scheduled, store.id, "interval", False),
            IntervalTrigger(seconds=settings.interval, jitter=settings.jitter or None),
            id=f"interval:{store.id}",
            replace_existing=True,
        )
        first_scan = record.next_full_scan
        if first_scan is None:
            first_scan = now + timedelta(seconds=settings.full_scan_interval)
        self._scheduler.add_job(
            functools.partial(self._scheduled, store.id, "full-scan", True),
            IntervalTrigger(seconds=settings.full_scan_interval, jitter=settings.jitter or None),
            id=f"full-scan:{store.id}",
            next_run_time=max(first_scan, now),
            replace_existing=True,
        )
        self._watch(store.id, record.checkout)
        self._write_state(store.id)
        self.coordinator.request(store.id, trigger)

    def _remove_store(self, store_id: str, reason: str) -> None:
        log.warning("no longer syncing %s: %s", store_id, reason, extra={"store": store_id})
        self.coordinator.remove(store_id)
        for job_id in (f"interval:{store_id}", f"full-scan:{store_id}"):
            if self._scheduler.get_job(job_id) is not None:
                self._scheduler.remove_job(job_id)
        watcher = self.watcher
        if watcher is not None:
            watcher.unwatch(store_id)
        with self._records_lock:
            self._records[store_id].removed_reason = reason
        self._write_state(store_id, status=REMOVED)

    def _discovery_tick(self) -> None:
        self._pool.submit(self._discover)

    def _discover(self) -> None:
        if not self._discovering.acquire(blocking=False):
            return
        try:
            selection = self._discovery()
        except MemsyncError as exc:
            log.warning("store discovery failed: %s", exc)
            if not self._records:
                self._retry_discovery()
            return
        finally:
            self._discovering.release()
        if not self._stop_requested:
            self._apply_selection(selection, trigger="discovered")

    def _retry_discovery(self) -> None:
        delay = min(self.config.daemon.discovery_interval, 30.0)
        self._scheduler.add_job(
            self._discovery_tick, "date", run_date=datetime.now(UTC) + timedelta(seconds=delay)
        )

    # --- requests and cycles ---------------------------------------------------------------------

    def _scheduled(self, store_id: str, trigger: str, full_scan: bool) -> None:
        self.coordinator.request(store_id, trigger, full_scan=full_scan)

    def _saved(self, store_id: str, tree_paths: list[str]) -> None:
        if not tree_paths:
            # The kernel dropped events (the watcher says so once): only a cycle can tell what changed.
            self.coordinator.request(store_id, "watch")
            return
        shown = ", ".join(escape_for_terminal(p) for p in tree_paths[:5])
        more = f" and {len(tree_paths) - 5} more" if len(tree_paths) > 5 else ""
        log.info("local change in %s: %s%s", store_id, shown, more, extra={"store": store_id})
        self.coordinator.request(store_id, "watch")

    def _call_at(self, when: float, action: Callable[[], None]) -> None:
        run_date = datetime.now(UTC) + timedelta(seconds=max(0.0, when - self._clock()))
        self._scheduler.add_job(action, "date", run_date=run_date)

    def _call_runner(self, store: Store, *, full_scan: bool) -> CycleResult:
        try:
            return self._runner(store, full_scan)
        except Exception as exc:
            log.exception("the cycle of %s failed unexpectedly", store.id)
            return CycleResult(Outcome.ERROR, f"internal error: {type(exc).__name__}: {exc}")

    def _run_request(self, store_id: str, request: Request) -> CycleOutcome:
        with self._records_lock:
            record = self._records[store_id]
            record.running_since = datetime.now(UTC)
            started = record.running_since
        self._write_state(store_id, status=RUNNING)
        started_clock = self._clock()
        result = self._call_runner(record.store, full_scan=request.full_scan)
        self._book(record, result, request, started)
        self.metrics.record(
            store_id,
            result.outcome.value,
            imported=result.report.pull.imported if result.report else 0,
            pushed=result.report.pushed if result.report else 0,
            seconds=self._clock() - started_clock,
        )
        return CycleOutcome(result.outcome, result.error)

    def _book(self, record: _Record, result: CycleResult, request: Request, started: datetime) -> None:
        report = result.report
        with self._records_lock:
            record.running_since = None
            record.last_cycle = LastCycle(
                started_at=started,
                finished_at=datetime.now(UTC),
                result=result.outcome.value,
                triggers=sorted(request.triggers),
                full_scan=request.full_scan,
                imported=report.pull.imported if report else 0,
                pushed=report.pushed if report else 0,
                error=result.error,
            )
            failed = result.outcome not in (Outcome.SUCCESS, Outcome.NOOP, Outcome.LOCKED)
            if failed and result.error and storage_fault_hint(result.error) is not None:
                record.storage_fault = result.error
            elif result.outcome is not Outcome.LOCKED:
                record.storage_fault = None
            if result.outcome in (Outcome.SUCCESS, Outcome.NOOP):
                record.last_success = started
                if request.full_scan:
                    record.last_full_scan = started
                self._first_success.set()
            if report is not None and result.outcome is not Outcome.LOCKED:
                record.open_conflicts = list(report.conflicts)
                record.rejected = list(report.rejected)
                record.tip = report.pull.tip or record.tip
                record.warnings = list(report.pull.warnings)
                record.withheld = list(report.push.withheld) if report.push is not None else []
                record.blocked = report.blocked

    def _cycle_finished(self, store_id: str, request: Request, outcome: CycleOutcome) -> None:
        view = self.coordinator.view(store_id)
        with self._records_lock:
            record = self._records[store_id]
        result = CycleResult(outcome.outcome, outcome.error)
        retry_in = None
        if view is not None and view.retry_at is not None and not view.paused:
            retry_in = view.retry_at - self._clock()
        self._log_result(store_id, result, retry_in=retry_in, record=record)
        # The cycle may have created the checkout (first import): watch it from now on — before the
        # state says the cycle is done, so whoever waits for that can rely on the watch.
        if view is not None and not self._stop_requested:
            self._watch(store_id, record.checkout)  # nothing when it is watched already
        self._write_state(store_id)
        watcher = self.watcher
        if watcher is not None:
            watcher.cycle_finished(store_id)
        self.awareness.cycle_finished(store_id, outcome.outcome is Outcome.SUCCESS)
        if view is not None and view.paused and self.coordinator.all_paused():
            self._all_paused = True
            self._wake.set()

    def _log_result(
        self,
        store_id: str,
        result: CycleResult,
        *,
        retry_in: float | None,
        record: _Record,
    ) -> None:
        extra: dict[str, Any] = {"store": store_id, "result": result.outcome.value}
        last = record.last_cycle
        if last is not None:
            extra["duration_s"] = round((last.finished_at - last.started_at).total_seconds(), 3)
            extra["trigger"] = ",".join(last.triggers)
        if result.outcome is Outcome.LOCKED:
            log.info("%s: another memsync holds the store lock; trying again shortly", store_id, extra=extra)
        elif result.outcome is Outcome.ERROR:
            when = f"; retrying in {retry_in:.0f}s" if retry_in is not None else ""
            log.warning("%s: cycle failed%s: %s", store_id, when, result.error, extra=extra)
        elif record.blocked is not None:
            # Not a failure (no backoff, no pause): the checkout waits for the user's git command.
            log.info("%s: checkout not synced: %s", store_id, record.blocked, extra=extra)
        elif last is not None and result.outcome is Outcome.SUCCESS:
            attention = ""
            if record.open_conflicts or record.rejected or record.withheld:
                attention = (
                    f"; waiting for you: {len(record.open_conflicts)} conflict(s),"
                    f" {len(record.rejected)} rejected, {len(record.withheld)} change(s) withheld"
                )
            log.info(
                "%s: imported %d version(s), pushed %d%s",
                store_id,
                last.imported,
                last.pushed,
                attention,
                extra={**extra, "imported": last.imported, "pushed": last.pushed},
            )
        else:
            log.debug("%s: nothing new", store_id, extra=extra)
        if result.outcome is not Outcome.ERROR:
            for warning in record.warnings:
                log.warning("%s: %s", store_id, warning, extra=extra)

    def _managed_stores(self) -> set[str]:
        with self._records_lock:
            return {sid for sid, record in self._records.items() if record.removed_reason is None}

    # --- state, health, metrics ------------------------------------------------------------------

    def state(self, store_id: str, *, status: str | None = None, failures: int | None = None) -> StoreState:
        """The store's state as the state file has it (``status`` forces the status)."""
        with self._records_lock:
            record = self._records[store_id]
            view = self.coordinator.view(store_id)
            paused = view.paused if view else False
            if status is None:
                if record.removed_reason is not None:
                    status = REMOVED
                elif paused:
                    status = PAUSED
                elif view is not None and view.running:
                    status = RUNNING
                elif view is not None and view.failures:
                    status = BACKOFF
                else:
                    status = IDLE
            return StoreState(
                store_id=store_id,
                name=record.store.name,
                status=status,
                daemon_pid=os.getpid(),
                daemon_started_at=self._started_at,
                updated_at=datetime.now(UTC),
                paused=paused,
                pause_reason=view.pause_reason if view else None,
                removed_reason=record.removed_reason,
                consecutive_failures=failures if failures is not None else (view.failures if view else 0),
                last_cycle=record.last_cycle,
                last_success=record.last_success,
                last_full_scan=record.last_full_scan,
                next_run=None if status in (PAUSED, REMOVED, STOPPED) else self._next_run(store_id, view),
                next_full_scan=self._next_job_time(f"full-scan:{store_id}") or record.next_full_scan,
                open_conflicts=list(record.open_conflicts),
                rejected=list(record.rejected),
                withheld=list(record.withheld),
                tip=record.tip,
                warnings=list(record.warnings),
            )

    def _next_run(self, store_id: str, view: SlotView | None) -> datetime | None:
        scheduled = self._next_job_time(f"interval:{store_id}")
        if view is not None and view.retry_at is not None and view.pending:
            retry = datetime.now(UTC) + timedelta(seconds=view.retry_at - self._clock())
            return retry if scheduled is None else min(retry, scheduled)
        return scheduled

    def _next_job_time(self, job_id: str) -> datetime | None:
        job = self._scheduler.get_job(job_id)
        when = getattr(job, "next_run_time", None) if job is not None else None
        return when.astimezone(UTC) if isinstance(when, datetime) else None

    def _write_state(self, store_id: str, *, status: str | None = None, failures: int | None = None) -> None:
        with self._state_lock:
            if self._states_final:
                return
            state = self.state(store_id, status=status, failures=failures)
            with self._records_lock:
                record = self._records[store_id]
                if state.next_full_scan is not None:
                    record.next_full_scan = state.next_full_scan
            try:
                write_state(record.checkout, state)
            except OSError as exc:
                log.warning("cannot write the state of %s: %s", store_id, exc, extra={"store": store_id})

    def health(self) -> tuple[int, dict[str, Any]]:
        """``/healthz``: 503 until the first successful cycle and while any store is paused."""
        views = self.coordinator.views()
        paused = sorted(sid for sid, view in views.items() if view.paused)
        document: dict[str, Any] = {"stores": len(views), "paused": paused}
        with self._records_lock:
            faults = {sid: r.storage_fault for sid, r in self._records.items() if r.storage_fault}
        if faults:
            document["storage_faults"] = faults
        if paused:
            return 503, {"status": "paused", **document}
        if faults:
            # Not ready while the disk refuses writes; the stores retry on their backoff and this
            # clears with the first cycle that succeeds. (A restart would not free the disk.)
            return 503, {"status": "storage-fault", **document}
        if not self._first_success.is_set():
            return 503, {"status": "starting", **document}
        return 200, {"status": "ok", **document}

    def _gauges(self) -> list[StoreGauges]:
        now = datetime.now(UTC)
        views = self.coordinator.views()
        with self._records_lock:
            records = [(sid, self._records[sid], view) for sid, view in views.items() if sid in self._records]
        gauges = []
        for store_id, record, view in records:
            if record.open_conflicts:
                self._forget_resolved(record)
            gauges.append(
                StoreGauges(
                    store_id=store_id,
                    open_conflicts=len(record.open_conflicts),
                    rejected_files=len(record.rejected),
                    lag_seconds=(now - record.last_success).total_seconds() if record.last_success else None,
                    paused=view.paused,
                    consecutive_failures=view.failures,
                    last_success_timestamp=record.last_success.timestamp() if record.last_success else None,
                    storage_fault=record.storage_fault is not None,
                )
            )
        return gauges

    def _forget_resolved(self, record: _Record) -> None:
        # ``memsync resolve`` runs in another process and may leave every file as it was, so no
        # watcher event and no cycle follows: the conflicts a scrape reports are read from the refs.
        # Only ended ones are dropped here; new conflicts are a cycle's to find.
        try:
            still_open = set(conflict_paths(record.checkout))
        except MemsyncError:
            return
        with self._records_lock:
            record.open_conflicts = [path for path in record.open_conflicts if path in still_open]


@contextmanager
def daemon_lock(root: Path) -> Iterator[None]:
    """The lock that makes one daemon per mirror root (and so per config): LockHeld (75) if taken.

    An OS file lock: the kernel drops it when the process dies, so a crashed daemon never blocks
    the next one.
    """
    lock_file = root / ".memsync" / "locks" / "daemon.lock"
    with ExitStack() as stack:
        try:
            stack.enter_context(held(lock_file, f"the mirrors under {root}"))
        except LockHeld:
            raise LockHeld(
                f"another memsync daemon is already running for the mirrors under {root} (it holds"
                f" {lock_file}); stop it first, or give this one a config with another mirror.root"
            ) from None
        yield


def _report(store: Store, root: Path, result: CycleResult) -> CycleOutput:
    report = result.report
    if report is None:
        pull = PullReport(id=store.id, name=store.name, path=str(root / store.id))
        pull.fail(result.error or "the cycle did not run")
        report = CycleReport(store_id=store.id, pull=pull)
    return report.output()


def _exit_code(result: CycleResult) -> int:
    if result.outcome is Outcome.LOCKED:
        return EXIT_LOCKED
    if result.report is not None:
        return result.report.exit_code
    return EXIT_FAILED
