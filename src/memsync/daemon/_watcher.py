"""Watching the checkouts for saves, and turning saves into cycle requests.

Where events come from is a backend's business (``daemon.watcher``): inotify on Linux
(memsync.daemon._inotify: one instance, one thread, whatever the number of checkouts), watchdog
elsewhere (memsync.daemon._watchdog: FSEvents on macOS, ReadDirectoryChangesW on Windows), or a stat
poller where no notification works (memsync.daemon._poller). ``auto`` picks the native one and falls
back to polling, with a warning, when it cannot start.

Events only *note* a path; the debouncer (quiet delay, maximum wait) decides when the path has
settled; then :class:`CheckoutBaseline` re-hashes it and drops whatever is not an edit (memsync's own
checkout writes, a touch, temporaries, ignored files). Paths that settle while their store's cycle
is running are held until it ends: the cycle may be moving the checkout and its base, and comparing
halfway would see its own writes as edits.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Literal, Protocol

from memsync.daemon._baseline import CheckoutBaseline
from memsync.daemon._debounce import Debouncer
from memsync.daemon._inotify import InotifySource, WatchUnavailable, checkout_folders, watch_budget
from memsync.daemon._poller import PollSource

__all__ = [
    "Backend",
    "CheckoutWatcher",
    "WatchUnavailable",
    "checkout_folders",
    "native_backend",
    "watch_budget",
]

log = logging.getLogger("memsync.daemon.watch")

Key = tuple[str, str]  # (store id, tree path)
Backend = Literal["inotify", "watchdog", "poll"]


class EventSource(Protocol):
    """What a backend offers the watcher: paths noted through the ``note`` it was given."""

    name: str
    exhausted: str | None

    @property
    def watch_count(self) -> int: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def add(self, store_id: str, checkout: Path) -> bool: ...

    def remove(self, store_id: str) -> None: ...


def native_backend() -> Backend:
    """What ``daemon.watcher = "auto"`` means on this platform."""
    return "inotify" if sys.platform.startswith("linux") else "watchdog"


class CheckoutWatcher:
    """Watches checkouts; calls ``on_change(store_id, tree_paths)`` for edits that settled.

    ``busy(store_id)`` tells whether the store's cycle is running; call :meth:`cycle_finished` after
    each cycle so the paths held back during it are looked at. ``backend`` is where events come from
    (:attr:`backend` says which one runs once started: a native one that cannot start is replaced by
    the poller). With inotify, ``max_watches`` caps the watches (one per folder); a checkout that
    does not fit is not watched, and :attr:`exhausted` says why (the daemon then stops watching
    altogether). When events were dropped (inotify's queue overflowed), every watched store gets
    ``on_change(store_id, [])``: something may have changed, and only a cycle can tell.
    """

    def __init__(
        self,
        on_change: Callable[[str, list[str]], None],
        busy: Callable[[str], bool],
        *,
        quiet: float,
        max_wait: float,
        clock: Callable[[], float] = time.monotonic,
        backend: Backend = "inotify",
        max_watches: int | None = None,
        poll_interval: float = 2.0,
        fallback: bool = True,
    ) -> None:
        self._on_change = on_change
        self._busy = busy
        self._clock = clock
        self._wanted: Backend = backend
        self._max_watches = max_watches
        self._poll_interval = poll_interval
        self._fallback = fallback
        self._debouncer: Debouncer[Key] = Debouncer(quiet, max_wait)
        self._source: EventSource | None = None
        self._baselines: dict[str, CheckoutBaseline] = {}
        # The baselines: the settling thread holds it while it compares, so that a baseline is
        # never closed under its feet by unwatch.
        self._registry = threading.RLock()
        self._held: dict[str, set[str]] = defaultdict(set)
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._settle_loop, name="memsync-watch", daemon=True)

    @property
    def backend(self) -> str | None:
        """The backend that runs (None before start)."""
        return None if self._source is None else self._source.name

    @property
    def exhausted(self) -> str | None:
        """Why the watches ran out, once they did (inotify): the daemon then stops watching."""
        return None if self._source is None else self._source.exhausted

    @property
    def watch_count(self) -> int:
        """Watches held: inotify's, one per folder; the other backends', one per checkout."""
        return 0 if self._source is None else self._source.watch_count

    def start(self) -> None:
        """Start the backend (or, when the native one cannot start, the poller) and the settling.

        WatchUnavailable when nothing can watch: the chosen backend failed and ``fallback`` is off.
        """
        source = self._make(self._wanted)
        try:
            source.start()
        except WatchUnavailable as exc:
            if not self._fallback or self._wanted == "poll":
                raise
            log.warning(
                "the %s watcher cannot run (%s): polling the checkouts every %gs instead",
                self._wanted,
                exc,
                self._poll_interval,
            )
            source = self._make("poll")
            source.start()
        self._source = source
        self._thread.start()

    def _make(self, backend: Backend) -> EventSource:
        if backend == "inotify":
            return InotifySource(self.note, self._rescan, max_watches=self._max_watches)
        if backend == "watchdog":
            try:
                from memsync.daemon._watchdog import WatchdogSource
            except ImportError as exc:  # a platform watchdog has no observer for
                return _Unavailable("watchdog", f"watchdog cannot be imported ({exc})")
            return WatchdogSource(self.note, self._rescan)
        return PollSource(self.note, self._rescan, interval=self._poll_interval)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._source is not None:
            self._source.stop()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        with self._registry:
            for baseline in self._baselines.values():
                baseline.close()
            self._baselines.clear()

    def watching(self, store_id: str) -> bool:
        return store_id in self._baselines

    def watch(self, store_id: str, checkout: Path) -> bool:
        """Start watching a checkout; False if it does not exist (yet) or its folders do not fit."""
        with self._registry:
            if store_id in self._baselines or self._stopped or self._source is None:
                return store_id in self._baselines
            if not (checkout / ".git").is_dir():
                return False
            self._baselines[store_id] = CheckoutBaseline(checkout)
            if not self._source.add(store_id, checkout):
                self._baselines.pop(store_id).close()
                return False
        log.debug("watching %s", checkout, extra={"store": store_id})
        return True

    def unwatch(self, store_id: str) -> None:
        with self._registry:
            baseline = self._baselines.pop(store_id, None)
            if baseline is None:
                return
            if self._source is not None:
                self._source.remove(store_id)
            with self._cond:
                self._held.pop(store_id, None)
            baseline.close()

    def note(self, store_id: str, *tree_paths: str) -> None:
        """An event touched ``tree_paths`` of ``store_id``'s checkout.

        Paths noted together were seen at one instant (a poll pass) and settle together: noted one
        by one, a path seen in the same pass as a later save could be handed out after it.
        """
        with self._cond:
            before = self._debouncer.next_deadline()
            now = self._clock()
            for tree_path in tree_paths:
                self._debouncer.note((store_id, tree_path), now)
            after = self._debouncer.next_deadline()
            # Wake the settling thread only when it now has to wake up earlier than it planned.
            if before is None or (after is not None and after < before):
                self._cond.notify()

    def cycle_finished(self, store_id: str) -> None:
        """Look at the paths that settled while the store's cycle ran."""
        with self._cond:
            held = self._held.pop(store_id, set())
            now = self._clock()
            for tree_path in held:
                self._debouncer.expedite((store_id, tree_path), now)
            if held:
                self._cond.notify()

    def _rescan(self, store_ids: list[str]) -> None:
        for store_id in store_ids:
            if store_id in self._baselines:
                self._on_change(store_id, [])

    # --- settling --------------------------------------------------------------------------------

    def _settle_loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    deadline = self._debouncer.next_deadline()
                    now = self._clock()
                    if deadline is not None and deadline <= now:
                        break
                    self._cond.wait(None if deadline is None else deadline - now)
                if self._stopped:
                    return
                ready: dict[str, list[str]] = defaultdict(list)
                for store_id, tree_path in self._debouncer.due(self._clock()):
                    if store_id not in self._baselines:
                        continue
                    # Checked under our lock, and cycle_finished takes it too: a path held here is
                    # always released by the end of the cycle that made us hold it.
                    if self._busy(store_id):
                        self._held[store_id].add(tree_path)
                    else:
                        ready[store_id].append(tree_path)
            changes: list[tuple[str, list[str]]] = []
            with self._registry:
                for store_id, tree_paths in ready.items():
                    baseline = self._baselines.get(store_id)
                    if baseline is None:
                        continue
                    try:
                        changed = baseline.changed(tree_paths)
                    except Exception:
                        log.exception("comparing %s with its base failed", baseline.checkout)
                        changed = tree_paths
                    if changed:
                        changes.append((store_id, changed))
            for store_id, changed in changes:
                self._on_change(store_id, changed)


class _Unavailable:
    """A backend that cannot be made here: its start says why, so the watcher falls back."""

    exhausted: str | None = None
    watch_count = 0

    def __init__(self, name: str, why: str) -> None:
        self.name = name
        self._why = why

    def start(self) -> None:
        raise WatchUnavailable(self._why)

    def stop(self) -> None:
        pass

    def add(self, store_id: str, checkout: Path) -> bool:
        return False

    def remove(self, store_id: str) -> None:
        pass
