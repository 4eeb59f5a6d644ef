"""Keeping the ``[[awareness]]`` views current (docs/awareness.md): a refresh after every successful cycle
of a store of the view, one at start, and one every ``daemon.interval`` (which notices mount changes and
keeps the stores the daemon does not sync itself current).

A refresh lists the mounts (Forward) or reads the session (Anthropic, Cloud), pulls the view's stores
the daemon does not cycle (those it cycles are current by construction, and pulling them here would
contend for their lock), and builds the view from the mirrors (:mod:`memsync.sync.awareness`). A session
the API no longer knows keeps its view, with a warning. Requests coalesce like cycles do: one refresh
per view at a time, and requests during it make exactly one more after it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from memsync.api import Client
from memsync.config import AwarenessConfig, Config
from memsync.daemon._metrics import ViewGauges
from memsync.errors import MemsyncError
from memsync.sync.awareness import (
    AwarenessReport,
    MirrorPending,
    refresh_awareness,
    refresh_session,
    refresh_stores,
)

log = logging.getLogger("memsync.daemon.awareness")

ClientLease = Callable[[], AbstractContextManager[Client]]


@dataclass
class _View:
    config: AwarenessConfig
    stores: set[str] | None = None  # the stores shown by the last refresh
    running: bool = False
    again: bool = False
    failures: int = 0
    last_error: str | None = None
    last_success: float | None = None  # Unix time
    collisions: int = 0
    files: int = 0
    refreshes: int = 0
    done: threading.Event = field(default_factory=threading.Event)


class AwarenessKeeper:
    """The daemon's views. ``submit`` runs work on the daemon's pool; ``managed`` names the stores the
    daemon cycles itself."""

    def __init__(
        self,
        config: Config,
        *,
        client: ClientLease,
        submit: Callable[[Callable[[], None]], None],
        managed: Callable[[], set[str]],
    ) -> None:
        self._root = config.mirror.root
        self._client = client
        self._submit = submit
        self._managed = managed
        self._lock = threading.Lock()
        self._views = {view.key: _View(view) for view in config.awareness}
        self._closed = False

    def __bool__(self) -> bool:
        return bool(self._views)

    def request_all(self) -> None:
        for key in list(self._views):
            self.request(key)

    def cycle_finished(self, store_id: str, changed: bool) -> None:
        """A store's cycle ended; refresh the views it is mounted in when it changed something."""
        if not changed:
            return
        for key, view in self._views.items():
            if view.stores is None or store_id in view.stores:
                self.request(key)

    def request(self, key: str) -> None:
        with self._lock:
            view = self._views[key]
            if self._closed:
                return
            if view.running:
                view.again = True
                return
            view.running = True
            view.done.clear()
        self._submit(lambda: self._run(key))

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def refresh_now(self, key: str) -> AwarenessReport | None:
        """One refresh in the calling thread (``daemon --once``); None when it failed (logged)."""
        return self._refresh(self._views[key])

    def views(self) -> list[str]:
        return list(self._views)

    def wait_refreshed(self, key: str, timeout: float) -> bool:
        """Block until no refresh of the view is queued or running (tests)."""
        return self._views[key].done.wait(timeout)

    def gauges(self) -> list[ViewGauges]:
        with self._lock:
            return [
                ViewGauges(
                    view=view.config.key,
                    identity=view.config.identity or "",
                    template=view.config.template or "",
                    collisions=view.collisions,
                    files=view.files,
                    consecutive_failures=view.failures,
                    last_success_timestamp=view.last_success,
                )
                for view in self._views.values()
            ]

    def _run(self, key: str) -> None:
        view = self._views[key]
        while True:
            self._refresh(view)
            with self._lock:
                if view.again and not self._closed:
                    view.again = False
                    continue
                view.running = False
                view.done.set()
                return

    def _refresh(self, view: _View) -> AwarenessReport | None:
        managed = self._managed()
        wanted = view.config
        name = wanted.key

        def pull(store_id: str) -> bool:
            return store_id not in managed

        try:
            with self._client() as client:
                if wanted.stores is not None:
                    report = refresh_stores(client, self._root, wanted.stores, pull=pull)
                elif wanted.session is not None:
                    report = refresh_session(client, self._root, wanted.session, pull=pull, keep_known=True)
                else:
                    identity, template = wanted.identity, wanted.template
                    assert identity is not None and template is not None
                    report = refresh_awareness(client, self._root, identity, template, pull=pull)
        except MirrorPending as exc:
            # The first cycle of a store of the view has not made its mirror yet: that cycle's end
            # requests the refresh again.
            log.info("awareness view %s: %s", name, exc)
            return None
        except MemsyncError as exc:
            with self._lock:
                view.failures += 1
                view.last_error = str(exc)
            log.warning("awareness view %s: refresh failed: %s", name, exc)
            return None
        except Exception:
            with self._lock:
                view.failures += 1
                view.last_error = "internal error"
            log.exception("awareness view %s: refresh failed unexpectedly", name)
            return None
        with self._lock:
            view.failures = 0
            view.last_error = None
            view.last_success = time.time()
            view.collisions = len(report.collisions)
            view.files = report.files
            view.refreshes += 1
            view.stores = {s["memory_store_id"] for s in report.stores if s["refused"] is None}
        extra = {"view": name, "collisions": len(report.collisions)}
        if report.rebuilt:
            log.info("awareness view %s: history rebuilt (%s)", name, report.reason, extra=extra)
        if report.commits or report.rebuilt:
            log.info(
                "awareness view %s: %d new commit(s), %d collision(s)",
                name,
                report.commits,
                len(report.collisions),
                extra=extra,
            )
        for warning in report.warnings:
            log.warning("awareness view %s: %s", name, warning, extra=extra)
        return report
