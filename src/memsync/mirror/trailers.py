"""The commit message of an imported version: a summary line, a blank line, and strict trailers.

The format, each trailer's meaning and the reading rules are in docs/mirror.md, "Trailers". Paths are
C-quoted (:func:`quote_for_message`), so no path can add a line.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from memsync.mirror.errors import FormatError, PathEncodingError
from memsync.mirror.paths import check_memory_path, quote_for_message, unquote_from_message

# Format 2 is format 1 for a tree that spells a path by the rules added for case-insensitive and
# Windows filesystems (docs/mirror.md, "Path spelling"); other trees stay format 1, keeping their commit
# ids, and a memsync that reads format 1 only refuses format 2 commits instead of misreading them.
FORMAT = 1
FORMATS = ("1", "2")  # as Memsync-Format spells them
Operation = Literal["created", "updated", "deleted"]
OPERATIONS: tuple[Operation, ...] = ("created", "updated", "deleted")

ORDER = (
    "Memory-Id",
    "Memory-Version",
    "Operation",
    "Memory-Path",
    "Content-SHA256",
    "Created-At",
    "Redacted",
    "Memsync-Skipped",
    "Memsync-Inferred",
    "History-Truncated",
    "Memsync-Format",
)
REQUIRED = frozenset({"Memory-Id", "Memory-Version", "Operation", "Created-At", "Memsync-Format"})

ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,254}")
SHA256_PATTERN = re.compile(r"[0-9a-f]{64}")
REASON_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
_TIME_PATTERN = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{6}))?Z")
_LINE = re.compile(r"([A-Za-z0-9-]+): (.*)")
_COUNT_PATTERN = re.compile(r"[1-9][0-9]{0,9}")
# The prefix of the Memory-Version of an inferred delete: no API's version id has a colon.
INFERRED_PREFIX = "inferred:"


@dataclass(frozen=True, slots=True)
class Trailers:
    """The parsed trailers of one imported version's commit."""

    memory_id: str
    version_id: str
    operation: Operation
    created_at: datetime
    memory_path: str | None = None
    content_sha256: str | None = None
    redacted: bool = False
    skipped: str | None = None
    inferred: str | None = None
    history_truncated: int | None = None
    format: int = FORMAT


def inferred_version_id(memory_id: str) -> str:
    """The ``Memory-Version`` of a delete memsync inferred for ``memory_id``: unique in a history
    (a memory is deleted once), a pure function of the id, and never an id the API could give."""
    candidate = f"{INFERRED_PREFIX}{memory_id}"
    if ID_PATTERN.fullmatch(candidate) is None:  # an id near the length limit: its digest instead
        candidate = f"{INFERRED_PREFIX}{hashlib.sha256(memory_id.encode()).hexdigest()}"
    return candidate


def format_time(moment: datetime) -> str:
    """``Created-At``'s spelling: UTC, microseconds only when there are any, ``Z``."""
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"


def parse_time(text: str) -> datetime:
    match = _TIME_PATTERN.fullmatch(text)
    if match is None:
        raise ValueError(f"not a UTC time like 2026-01-02T03:04:05.123456Z: {text!r}")
    year, month, day, hour, minute, second, micro = (int(part or 0) for part in match.groups())
    moment = datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)
    if format_time(moment) != text:
        raise ValueError(f"not in canonical form: {text!r}")
    return moment


def format_message(summary: str, trailers: Trailers) -> str:
    """The whole commit message: summary, blank line, the trailers in :data:`ORDER`, final newline."""
    if "\n" in summary or summary.strip() != summary or summary == "":
        raise ValueError(f"a summary is one non-empty line without outer spaces: {summary!r}")
    path = trailers.memory_path
    lines = (
        ("Memory-Id", trailers.memory_id),
        ("Memory-Version", trailers.version_id),
        ("Operation", trailers.operation),
        ("Memory-Path", None if path is None else quote_for_message(path)),
        ("Content-SHA256", trailers.content_sha256),
        ("Created-At", format_time(trailers.created_at)),
        ("Redacted", "true" if trailers.redacted else None),
        ("Memsync-Skipped", trailers.skipped),
        ("Memsync-Inferred", trailers.inferred),
        ("History-Truncated", trailers.history_truncated),
        ("Memsync-Format", trailers.format),
    )
    text = "\n".join(f"{name}: {value}" for name, value in lines if value is not None)
    return f"{summary}\n\n{text}\n"


def parse_message(message: str, commit: str = "") -> Trailers:
    """The trailers of a memsync commit message; :class:`FormatError` naming ``commit`` if invalid."""
    where = f"commit {commit}" if commit else "commit"
    paragraph = message.rstrip("\n").rsplit("\n\n", 1)[-1]
    found: dict[str, str] = {}
    for line in paragraph.split("\n"):
        match = _LINE.fullmatch(line)
        if match is None:
            raise FormatError(f"{where} has no memsync trailers (line {line[:80]!r}); not written by memsync")
        name, value = match.groups()
        if name not in ORDER:
            raise FormatError(f"{where} has an unknown trailer {name!r}")
        if name in found:
            raise FormatError(f"{where} repeats the trailer {name}")
        found[name] = value
    missing = REQUIRED - found.keys()
    if "Memsync-Format" in found and found["Memsync-Format"] not in FORMATS:
        raise FormatError(
            f"{where} is in Memsync-Format {found['Memsync-Format'][:20]!r}; this memsync reads formats "
            f"{', '.join(FORMATS)} only: upgrade memsync (commit ids of a format change are never"
            " mixed silently)"
        )
    if missing:
        raise FormatError(f"{where} lacks the trailers {', '.join(sorted(missing))}; not written by memsync")
    try:
        return _validated(found)
    except ValueError as exc:
        raise FormatError(f"{where} has an invalid trailer: {exc}") from None


def _validated(found: dict[str, str]) -> Trailers:
    for name in ("Memory-Id", "Memory-Version"):
        if ID_PATTERN.fullmatch(found[name]) is None:
            raise ValueError(f"{name} {found[name][:80]!r} is not an id")
    operation = found["Operation"]
    if operation not in OPERATIONS:
        raise ValueError(f"Operation {operation[:20]!r} is not one of {', '.join(OPERATIONS)}")
    path: str | None = None
    if "Memory-Path" in found:
        raw = found["Memory-Path"]
        path = unquote_from_message(raw)
        try:
            check_memory_path(path)
        except PathEncodingError as exc:
            raise ValueError(f"Memory-Path: {exc}") from None
        if quote_for_message(path) != raw:
            raise ValueError("Memory-Path is not quoted the way memsync quotes it")
    sha = found.get("Content-SHA256")
    if sha is not None and SHA256_PATTERN.fullmatch(sha) is None:
        raise ValueError("Content-SHA256 is not 64 lower-case hex digits")
    if found.get("Redacted", "true") != "true":
        raise ValueError("Redacted is not 'true'")
    skipped = found.get("Memsync-Skipped")
    if skipped is not None and REASON_PATTERN.fullmatch(skipped) is None:
        raise ValueError("Memsync-Skipped is not a reason token")
    inferred = found.get("Memsync-Inferred")
    if inferred is not None:
        if REASON_PATTERN.fullmatch(inferred) is None:
            raise ValueError("Memsync-Inferred is not a reason token")
        if operation != "deleted" or not found["Memory-Version"].startswith(INFERRED_PREFIX):
            raise ValueError("Memsync-Inferred is only on a delete whose Memory-Version is inferred:...")
    truncated = found.get("History-Truncated")
    if truncated is not None and _COUNT_PATTERN.fullmatch(truncated) is None:
        raise ValueError("History-Truncated is not a positive count")
    return Trailers(
        memory_id=found["Memory-Id"],
        version_id=found["Memory-Version"],
        operation=operation,
        created_at=parse_time(found["Created-At"]),
        memory_path=path,
        content_sha256=sha,
        redacted="Redacted" in found,
        skipped=skipped,
        inferred=inferred,
        history_truncated=int(truncated) if truncated is not None else None,
        format=int(found["Memsync-Format"]),
    )
