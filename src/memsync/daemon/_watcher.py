"""Watching the checkouts with watchdog, and turning saves into cycle requests.

One recursive inotify watch per checkout. Events only *note* a path (``.git`` excluded at once); the
debouncer (quiet delay, maximum wait) decides when the path has settled; then
:class:`CheckoutBaseline` re-hashes it and drops whatever is not an edit (memsync's own checkout
writes, a touch, temporaries, ignored files). Paths that settle while their store's cycle is running
are held until it ends: the cycle may be moving the checkout and its base, and comparing halfway
would see its own writes as edits.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import warnings
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch

from memsync.daemon._baseline import CheckoutBaseline
from memsync.daemon._debounce import Debouncer

log = logging.getLogger("memsync.daemon.watch")

# watchdog adds the watch of a directory made by `mkdir -p` twice (once walking its parent, once on
# its own creation event) and warns that it replaced the first: harmless, and noise in our output.
warnings.filterwarnings("ignore", message=r"Callback with id .* already exists", category=RuntimeWarning)

# The events a save can consist of. Leaving out opens and read-only closes keeps memsync's own reads
# (and libgit2's, inside .git) from waking anything; attribute-only changes (touch) arrive as
# FileAttribEvent, which is not listed either.
EVENT_TYPES: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileClosedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]

Key = tuple[str, str]  # (store id, tree path)


@dataclass
class _Watched:
    checkout: Path
    watch: ObservedWatch
    baseline: CheckoutBaseline


class _CheckoutEvents(FileSystemEventHandler):
    def __init__(self, watcher: CheckoutWatcher, store_id: str, checkout: Path) -> None:
        self._watcher = watcher
        self._store_id = store_id
        self._root = os.fsdecode(checkout)

    def dispatch(self, event: FileSystemEvent) -> None:
        for raw in (event.src_path, event.dest_path):
            if not raw:
                continue
            relative = os.path.relpath(os.fsdecode(raw), self._root).replace(os.sep, "/")
            if relative == "." or relative.startswith("../"):
                continue
            if relative == ".git" or relative.startswith(".git/"):
                continue
            self._watcher.note(self._store_id, relative)


class CheckoutWatcher:
    """Watches checkouts; calls ``on_change(store_id, tree_paths)`` for edits that settled.

    ``busy(store_id)`` tells whether the store's cycle is running; call :meth:`cycle_finished` after
    each cycle so the paths held back during it are looked at.
    """

    def __init__(
        self,
        on_change: Callable[[str, list[str]], None],
        busy: Callable[[str], bool],
        *,
        quiet: float,
        max_wait: float,
        clock: Callable[[], float] = time.monotonic,
        observer: BaseObserver | None = None,
    ) -> None:
        self._on_change = on_change
        self._busy = busy
        self._clock = clock
        self._debouncer: Debouncer[Key] = Debouncer(quiet, max_wait)
        self._observer = observer if observer is not None else Observer()
        self._stores: dict[str, _Watched] = {}
        # watch/unwatch come from the main thread and from cycle listeners on worker threads; the
        # settling thread holds it while it compares, so a baseline is never closed under its feet.
        self._registry = threading.RLock()
        self._held: dict[str, set[str]] = defaultdict(set)
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._settle_loop, name="memsync-watch", daemon=True)

    def start(self) -> None:
        self._observer.start()
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._observer.is_alive():
            self._observer.stop()
            self._observer.join(timeout=10)
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        with self._registry:
            for watched in self._stores.values():
                watched.baseline.close()
            self._stores.clear()

    def watching(self, store_id: str) -> bool:
        return store_id in self._stores

    def watch(self, store_id: str, checkout: Path) -> bool:
        """Start watching a checkout; False if it does not exist (yet)."""
        with self._registry:
            return self._watch(store_id, checkout)

    def _watch(self, store_id: str, checkout: Path) -> bool:
        if store_id in self._stores or self._stopped:
            return store_id in self._stores
        if not (checkout / ".git").is_dir():
            return False
        try:
            watch = self._observer.schedule(
                _CheckoutEvents(self, store_id, checkout),
                str(checkout),
                recursive=True,
                event_filter=EVENT_TYPES,
            )
        except OSError as exc:
            # Typically the inotify watch limit (fs.inotify.max_user_watches): say which knob to turn.
            log.error(
                "cannot watch %s: %s; saves there are picked up by the scheduled cycles only"
                " (raising fs.inotify.max_user_watches may help)",
                checkout,
                exc,
                extra={"store": store_id},
            )
            return False
        self._stores[store_id] = _Watched(checkout, watch, CheckoutBaseline(checkout))
        log.debug("watching %s", checkout, extra={"store": store_id})
        return True

    def unwatch(self, store_id: str) -> None:
        with self._registry:
            watched = self._stores.pop(store_id, None)
            if watched is None:
                return
            self._observer.unschedule(watched.watch)
        with self._cond:
            self._held.pop(store_id, None)
        watched.baseline.close()

    def note(self, store_id: str, tree_path: str) -> None:
        """An event touched ``tree_path`` of ``store_id``'s checkout (called from watchdog's thread)."""
        with self._cond:
            before = self._debouncer.next_deadline()
            self._debouncer.note((store_id, tree_path), self._clock())
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
                    if store_id not in self._stores:
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
                    watched = self._stores.get(store_id)
                    if watched is None:
                        continue
                    try:
                        changed = watched.baseline.changed(tree_paths)
                    except Exception:
                        log.exception("comparing %s with its base failed", watched.checkout)
                        changed = tree_paths
                    if changed:
                        changes.append((store_id, changed))
            for store_id, changed in changes:
                self._on_change(store_id, changed)
