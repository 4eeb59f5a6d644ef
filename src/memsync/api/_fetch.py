"""Bulk content fetching: a bounded pipeline of requests in flight, yielding in input order.

Two regimes matter (benchmarks/api_fetch_bench.py and pull_bench.py measure both): on loopback
the client's own CPU per request is the bottleneck, and more than a few requests in flight only make
the fetch threads fight over the GIL, while across a network each request costs a round trip and
only requests in flight pay. :class:`Pace` picks the number in flight by Little's law: to keep the
client busy, have (latency ÷ client CPU per request) requests in flight. Across 20 ms that ratio is
dozens (capped at 16). On loopback it is about 2, but the floor is 4: against the reference server
(whose own work runs on the other core) 4 in flight was never slower than one at a time.

The latency is measured on the first requests of each call, sent one at a time, and the window is
then held for the call. Measured while the window is open, a request's time includes its wait for
the GIL, which grows with the window: an earlier version that kept measuring fed the window up to its
ceiling on loopback, where a 10,000-version import then spent 8.5–9.7 s of CPU fetching instead of
the 5.2–6.3 s of a window of 4.

Work runs in a small thread pool that shares the client's one keep-alive connection pool. Results are
consumed lazily: while the caller writes one version into git, the next ones are already on their way,
and memory stays bounded by the window (plus a bounded read-ahead of versions that need no request).
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from memsync.api._models import MemoryVersion

# Read-ahead over versions that need no request (contents already listed, tombstones, redacted).
_MAX_QUEUED_JOBS = 256
_SAMPLES = 3
_CPU_FLOOR_S = 0.0002


@dataclass
class Job:
    """Consecutive input versions, and how to fetch those among them that need their content."""

    versions: list[MemoryVersion]
    fetch: Callable[[], dict[str, MemoryVersion]] | None = None


ADAPTIVE_FLOOR = 4


class Pace:
    """The number of requests to keep in flight: fixed, or sized from the first requests' latency."""

    def __init__(self, fixed: int | None, maximum: int, floor: int = ADAPTIVE_FLOOR) -> None:
        if fixed is not None and fixed < 1:
            raise ValueError("fetch concurrency must be at least 1")
        self.fixed = fixed
        self.maximum = max(1, maximum, fixed or 1)
        self.floor = min(max(1, floor), self.maximum)
        # One at a time until the samples are in: a lone request's time is latency plus its own CPU.
        self._window = fixed or 1
        self._lock = threading.Lock()
        self._walls: list[float] = []
        self._cpus: list[float] = []

    @property
    def window(self) -> int:
        return self._window

    @property
    def sampling(self) -> bool:
        """Whether the requests finishing now are measured (their times are worth taking)."""
        return self.fixed is None and len(self._walls) < _SAMPLES

    def record(self, wall_s: float, cpu_s: float) -> None:
        """One request sent alone took ``wall_s`` seconds, of which ``cpu_s`` were this client's CPU."""
        if not self.sampling:
            return
        with self._lock:
            self._walls.append(wall_s)
            self._cpus.append(cpu_s)
            if len(self._walls) < _SAMPLES:
                return
            # The fastest sample is the latency least disturbed (the first may open the connection);
            # the median CPU is what one request costs this process.
            latency = min(self._walls)
            cpu = max(statistics.median(self._cpus), _CPU_FLOOR_S)
            self._window = max(self.floor, min(self.maximum, math.ceil(latency / cpu)))


def timed(job: Job, pace: Pace) -> dict[str, MemoryVersion]:
    assert job.fetch is not None
    if not pace.sampling:
        return job.fetch()
    wall, cpu = time.perf_counter(), time.thread_time()
    result = job.fetch()
    pace.record(time.perf_counter() - wall, time.thread_time() - cpu)
    return result


def run_jobs(jobs: Iterable[Job], pace: Pace) -> Iterator[tuple[Job, dict[str, MemoryVersion]]]:
    """Each job with its fetched versions, in input order, with up to ``pace.window`` jobs in flight.

    The window is refilled before each result is handed over, so requests run while the caller works
    (except while the pace samples latency).
    """
    source = iter(jobs)
    queued: deque[tuple[Job, Future[dict[str, MemoryVersion]] | None]] = deque()
    in_flight = 0
    exhausted = False
    executor = ThreadPoolExecutor(max_workers=pace.maximum, thread_name_prefix="memsync-fetch")

    def fill() -> None:
        nonlocal in_flight, exhausted
        while not exhausted and in_flight < pace.window and len(queued) < _MAX_QUEUED_JOBS:
            job = next(source, None)
            if job is None:
                exhausted = True
            elif job.fetch is None:
                queued.append((job, None))
            else:
                queued.append((job, executor.submit(timed, job, pace)))
                in_flight += 1

    try:
        fill()
        while queued:
            job, future = queued.popleft()
            fetched: dict[str, MemoryVersion] = {}
            if future is not None:
                fetched = future.result()
                in_flight -= 1
            if pace.sampling:
                # A measured request runs alone: sent once the caller is back for more, so that its
                # time holds no wait for the GIL the caller's work (git writing) would cause.
                yield job, fetched
                fill()
            else:
                fill()
                yield job, fetched
    finally:
        for _, pending in queued:
            if pending is not None:
                pending.cancel()
        # Wait for requests already running: none may outlive the client that sends them.
        executor.shutdown(wait=True, cancel_futures=True)
