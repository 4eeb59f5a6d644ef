"""Prometheus metrics of the daemon, in a registry of its own (two daemons in one test process never mix).

Counters are bumped as cycles finish; per-store gauges (lag, conflicts, paused) are read from the
daemon's live state at scrape time, so the lag grows between cycles as it really does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# The exposition format generate_latest writes, as the library names it.
CONTENT_TYPE = CONTENT_TYPE_LATEST


@dataclass(frozen=True)
class StoreGauges:
    store_id: str
    open_conflicts: int
    rejected_files: int
    lag_seconds: float | None
    paused: bool
    consecutive_failures: int
    last_success_timestamp: float | None
    storage_fault: bool = False


@dataclass(frozen=True)
class ViewGauges:
    """One ``[[awareness]]`` view as ``/metrics`` shows it (``identity``, ``template``: "" but on Forward)."""

    view: str
    identity: str
    template: str
    collisions: int
    files: int
    consecutive_failures: int
    last_success_timestamp: float | None


class _ViewCollector(Collector):
    def __init__(self, read: Callable[[], list[ViewGauges]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        labels = ["identity", "template", "view"]
        families = {
            "collisions": GaugeMetricFamily(
                "memsync_awareness_collisions",
                "Paths that two or more mounted stores hold (a session sees only one copy).",
                labels=labels,
            ),
            "files": GaugeMetricFamily(
                "memsync_awareness_files", "Files a session of the view sees.", labels=labels
            ),
            "failures": GaugeMetricFamily(
                "memsync_awareness_consecutive_failures", "Failed view refreshes in a row.", labels=labels
            ),
            "success": GaugeMetricFamily(
                "memsync_awareness_last_success_timestamp_seconds",
                "Unix time of the view's last successful refresh.",
                labels=labels,
            ),
        }
        for view in self._read():
            pair = [view.identity, view.template, view.view]
            families["collisions"].add_metric(pair, view.collisions)
            families["files"].add_metric(pair, view.files)
            families["failures"].add_metric(pair, view.consecutive_failures)
            if view.last_success_timestamp is not None:
                families["success"].add_metric(pair, view.last_success_timestamp)
        yield from families.values()


class _StoreCollector(Collector):
    def __init__(self, read: Callable[[], list[StoreGauges]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        stores = self._read()
        families = {
            "conflicts": GaugeMetricFamily(
                "memsync_open_conflicts", "Conflicts waiting for memsync resolve.", labels=["store"]
            ),
            "rejected": GaugeMetricFamily(
                "memsync_rejected_files", "Local files the last cycle could not push.", labels=["store"]
            ),
            "lag": GaugeMetricFamily(
                "memsync_lag_seconds",
                "Seconds since the start of the store's last successful cycle.",
                labels=["store"],
            ),
            "paused": GaugeMetricFamily(
                "memsync_store_paused",
                "1 when the store is paused after too many failures.",
                labels=["store"],
            ),
            "failures": GaugeMetricFamily(
                "memsync_consecutive_failures", "Failed cycles in a row.", labels=["store"]
            ),
            "success": GaugeMetricFamily(
                "memsync_last_success_timestamp_seconds",
                "Unix time of the start of the last successful cycle.",
                labels=["store"],
            ),
            "storage": GaugeMetricFamily(
                "memsync_storage_fault",
                "1 while the store's last cycle failed on the local disk (full, read-only, I/O error).",
                labels=["store"],
            ),
        }
        for store in stores:
            labels = [store.store_id]
            families["storage"].add_metric(labels, 1.0 if store.storage_fault else 0.0)
            families["conflicts"].add_metric(labels, store.open_conflicts)
            families["rejected"].add_metric(labels, store.rejected_files)
            families["paused"].add_metric(labels, 1.0 if store.paused else 0.0)
            families["failures"].add_metric(labels, store.consecutive_failures)
            if store.lag_seconds is not None:
                families["lag"].add_metric(labels, store.lag_seconds)
            if store.last_success_timestamp is not None:
                families["success"].add_metric(labels, store.last_success_timestamp)
        yield from families.values()


class _WatcherCollector(Collector):
    """``memsync_watcher_backend{backend=…} 1``: which backend watches the checkouts ("none": none)."""

    def __init__(self, read: Callable[[], str | None]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "memsync_watcher_backend",
            "The backend watching the checkouts for saves: inotify, watchdog, poll, or none.",
            labels=["backend"],
        )
        family.add_metric([self._read() or "none"], 1.0)
        yield family


class DaemonMetrics:
    """The daemon's metrics; :meth:`render` is the body of ``/metrics``."""

    def __init__(
        self,
        read_stores: Callable[[], list[StoreGauges]],
        read_views: Callable[[], list[ViewGauges]] | None = None,
        *,
        watcher: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.registry = CollectorRegistry()
        self.cycles = Counter(
            "memsync_cycles",
            "Finished cycles by result: success (something changed), noop, error.",
            ["store", "result"],
            registry=self.registry,
        )
        self.skipped = Counter(
            "memsync_cycles_skipped",
            "Cycles skipped because another memsync held the store lock (retried shortly).",
            ["store"],
            registry=self.registry,
        )
        self.imported = Counter(
            "memsync_versions_imported",
            "Versions imported into the mirror.",
            ["store"],
            registry=self.registry,
        )
        self.pushed = Counter(
            "memsync_writes_pushed", "Local edits written to the store.", ["store"], registry=self.registry
        )
        self.duration = Histogram(
            "memsync_cycle_duration_seconds",
            "How long cycles take.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=self.registry,
        )
        self.registry.register(_StoreCollector(read_stores))
        if read_views is not None:
            self.registry.register(_ViewCollector(read_views))
        self.registry.register(_WatcherCollector(watcher))

    def record(self, store_id: str, result: str, *, imported: int, pushed: int, seconds: float) -> None:
        if result == "locked":
            self.skipped.labels(store_id).inc()
            return
        self.cycles.labels(store_id, result).inc()
        if imported:
            self.imported.labels(store_id).inc(imported)
        if pushed:
            self.pushed.labels(store_id).inc(pushed)
        self.duration.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
