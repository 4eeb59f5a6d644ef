"""Object ids: a prefix and a strictly increasing, time-ordered, lexicographically sortable suffix.

The suffix is 12 base-36 digits of ``N = milliseconds << 20 | counter`` followed by 8 random base-36
digits. ``N`` only ever grows, even within one millisecond and across restarts (the generator starts
from the largest ``N`` found in the database), so sorting ids sorts objects by creation, and the time
an object was created is ``N >> 20``: the engine uses exactly that as its ``created_at``.
"""

from __future__ import annotations

import secrets
import string
import threading

_ALPHABET = string.digits + string.ascii_lowercase
_ORDER_DIGITS = 12
_RANDOM_DIGITS = 8
_COUNTER_BITS = 20
_MAX_ORDER = 36**_ORDER_DIGITS - 1

PREFIXES = ("memstore_", "mem_", "memver_", "sesn_")


def _base36(value: int, width: int) -> str:
    digits = []
    for _ in range(width):
        value, rem = divmod(value, 36)
        digits.append(_ALPHABET[rem])
    return "".join(reversed(digits))


def order_of(object_id: str) -> int | None:
    """The ordering number ``N`` of an id this module made, or None for any other string."""
    for prefix in PREFIXES:
        if object_id.startswith(prefix):
            suffix = object_id[len(prefix) :]
            if len(suffix) != _ORDER_DIGITS + _RANDOM_DIGITS:
                return None
            try:
                return int(suffix[:_ORDER_DIGITS], 36)
            except ValueError:
                return None
    return None


def time_ms_of(order: int) -> int:
    return order >> _COUNTER_BITS


class IdGenerator:
    """Hands out ids in strictly increasing order; thread-safe."""

    def __init__(self, last_order: int = 0) -> None:
        self._last = last_order
        self._seeded: dict[int, int] = {}
        self._lock = threading.Lock()

    @property
    def last_order(self) -> int:
        return self._last

    def next(self, prefix: str, now_ms: int) -> tuple[str, int]:
        """A new id and its creation time in ms (never earlier than any id handed out before)."""
        with self._lock:
            order = max(self._last + 1, now_ms << _COUNTER_BITS)
            self._last = order
        return self._render(prefix, order), time_ms_of(order)

    def at(self, prefix: str, at_ms: int) -> tuple[str, int]:
        """An id for an object made at a chosen (usually past) time, for seeding history.

        Successive calls for the same millisecond stay in call order (the random tail keeps ids
        unique even if an earlier run seeded that millisecond too); the high-water mark moves past
        it, so later live ids still sort after everything seeded.
        """
        with self._lock:
            count = self._seeded.get(at_ms, 0)
            if count >> _COUNTER_BITS:
                raise OverflowError(f"more than {1 << _COUNTER_BITS} objects seeded in one millisecond")
            self._seeded[at_ms] = count + 1
            order = at_ms << _COUNTER_BITS | count
            self._last = max(self._last, order)
        return self._render(prefix, order), at_ms

    @staticmethod
    def _render(prefix: str, order: int) -> str:
        if order > _MAX_ORDER:
            raise OverflowError("the id space of this server is exhausted (year 2112)")
        tail = _base36(secrets.randbelow(36**_RANDOM_DIGITS), _RANDOM_DIGITS)
        return f"{prefix}{_base36(order, _ORDER_DIGITS)}{tail}"
