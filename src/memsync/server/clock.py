"""Time as the server keeps it: integer milliseconds since the epoch, rendered as RFC 3339 UTC.

The engine reads the time only through a ``Clock`` (a callable returning an aware ``datetime``), so
tests can move time forward to exercise version retention without waiting.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from memsync.errors import UsageError

Clock = Callable[[], datetime]

_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def system_clock() -> datetime:
    return datetime.now(UTC)


def to_ms(moment: datetime) -> int:
    """Milliseconds since the epoch of an aware ``datetime`` (a naive one is taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000


def format_ms(ms: int) -> str:
    """RFC 3339 UTC with exactly three fractional digits, so the strings also sort as times do."""
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def format_optional_ms(ms: int | None) -> str | None:
    return None if ms is None else format_ms(ms)


def parse_timestamp(text: str) -> int:
    """Milliseconds of an RFC 3339 timestamp; raises ``ValueError`` naming the expected form."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise ValueError(f"{text!r} is not an RFC 3339 timestamp such as 2026-08-14T10:00:00Z") from None
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone; add Z or an offset such as +00:00")
    return to_ms(moment)


def parse_duration(text: str) -> timedelta:
    """A duration such as ``90s``, ``15m``, ``12h``, ``30d`` or ``2w`` (a positive whole number)."""
    match = _DURATION.match(text)
    if match is None or int(match.group(1)) == 0:
        raise UsageError(
            f"--version-retention {text!r} is not a duration: give a positive whole number and a unit"
            " s, m, h, d or w, e.g. 90s, 12h or 30d"
        )
    return timedelta(seconds=int(match.group(1)) * _UNIT_SECONDS[match.group(2)])
