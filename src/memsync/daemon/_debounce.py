"""Debounce with a quiet delay and a maximum wait (after syncthing's watchaggregator).

Editors save in very different ways: an in-place write, a temp file
renamed over the original, vim's rename-to-backup and new file. Every style ends with the file quiet
for a moment, so a key is *due* once no event touched it for ``quiet`` seconds — or, for a file that
never stops changing (a log being appended to), ``max_wait`` seconds after its first event. The class
is pure: time is passed in, so tests drive it with a fake clock.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass
class _Pending:
    first: float
    deadline: float


class Debouncer(Generic[K]):
    """Collects events per key; :meth:`due` hands out the keys whose quiet delay or maximum wait ran out."""

    def __init__(self, quiet: float, max_wait: float) -> None:
        if quiet < 0 or max_wait < 0:
            raise ValueError("quiet and max_wait must not be negative")
        self.quiet = quiet
        # A maximum wait shorter than the quiet delay would make the quiet delay meaningless.
        self.max_wait = max(max_wait, quiet)
        self._pending: dict[K, _Pending] = {}
        # A lazy heap of (deadline, seq, key): an entry may be stale (the key saw a later event, or
        # was handed out); it is re-checked against ``_pending`` when it reaches the top.
        self._heap: list[tuple[float, int, K]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._pending)

    def note(self, key: K, now: float) -> None:
        """An event touched ``key`` at ``now``."""
        pending = self._pending.get(key)
        if pending is None:
            self._set(key, _Pending(first=now, deadline=now + self.quiet))
            return
        # A later event postpones the key (never brings it forward), but never past its maximum wait.
        deadline = min(max(now + self.quiet, pending.deadline), pending.first + self.max_wait)
        if deadline != pending.deadline:
            self._set(key, _Pending(first=pending.first, deadline=deadline))

    def expedite(self, key: K, now: float) -> None:
        """Make ``key`` due at ``now`` (work that was held back and may now go ahead)."""
        self._set(key, _Pending(first=now, deadline=now))

    def next_deadline(self) -> float | None:
        """When the next key falls due, or None when nothing is pending."""
        while self._heap:
            deadline, _, key = self._heap[0]
            pending = self._pending.get(key)
            if pending is None or pending.deadline != deadline:
                heapq.heappop(self._heap)  # stale entry
                continue
            return deadline
        return None

    def due(self, now: float) -> list[K]:
        """Remove and return the keys due at ``now``, oldest deadline first."""
        ready: list[K] = []
        while (deadline := self.next_deadline()) is not None and deadline <= now:
            _, _, key = heapq.heappop(self._heap)
            del self._pending[key]
            ready.append(key)
        return ready

    def _set(self, key: K, pending: _Pending) -> None:
        self._pending[key] = pending
        heapq.heappush(self._heap, (pending.deadline, next(self._seq), key))
