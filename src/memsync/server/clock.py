"""Time as the server keeps it: integer milliseconds since the epoch, rendered as RFC 3339 UTC.

The engine reads the time only through a ``Clock`` (a callable returning an aware ``datetime``), so
tests can move time forward to exercise version retention without waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from memsync import rules
from memsync.errors import RuleViolation, UsageError

Clock = Callable[[], datetime]

_MAX_DURATION_S = 100 * 366 * 86_400


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


def parse_duration(text: str, flag: str = "--version-retention") -> timedelta:
    """A positive duration with its unit (``90s``, ``15m``, ``12h``, ``30d``), as :mod:`memsync.rules`
    reads durations; anything else is a :class:`UsageError` naming ``flag``."""
    try:
        seconds = rules.parse_duration(text, flag)
    except RuleViolation as exc:
        raise UsageError(str(exc)) from None
    if not 0 < seconds <= _MAX_DURATION_S:
        raise UsageError(f'{flag}: {text!r} must be more than 0 and at most 100 years, e.g. "30d"')
    return timedelta(seconds=seconds)
