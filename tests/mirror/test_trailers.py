"""Reading trailers is strict: only the last paragraph, known names once each, valid values, format 1."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from memsync.mirror.errors import FormatError
from memsync.mirror.trailers import Trailers, format_message, format_time, parse_message, parse_time

GOOD = (
    "updated notes/a.md\n"
    "\n"
    "Memory-Id: mem_1\n"
    "Memory-Version: memver_2\n"
    "Operation: updated\n"
    "Memory-Path: notes/a.md\n"
    f"Content-SHA256: {'a' * 64}\n"
    "Created-At: 2026-01-02T03:04:05.000007Z\n"
    "Redacted: true\n"
    "Memsync-Format: 1\n"
)


def test_a_good_message_round_trips() -> None:
    trailers = parse_message(GOOD)
    assert trailers == Trailers(
        memory_id="mem_1",
        version_id="memver_2",
        operation="updated",
        created_at=datetime(2026, 1, 2, 3, 4, 5, 7, tzinfo=UTC),
        memory_path="notes/a.md",
        content_sha256="a" * 64,
        redacted=True,
    )
    assert format_message("updated notes/a.md", trailers) == GOOD


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        (("Memsync-Format: 1\n", "Memsync-Format: 3\n"), "upgrade memsync"),
        (("Redacted: true\n", "Redacted: yes\n"), "Redacted"),
        (("Redacted: true\n", "Signed-off-by: x\n"), "unknown trailer"),
        (("Redacted: true\n", "Memory-Id: mem_2\n"), "repeats"),
        (("Operation: updated\n", "Operation: modified\n"), "Operation"),
        (("Operation: updated\n", ""), "lacks the trailers Operation"),
        (("Created-At: 2026-01-02T03:04:05.000007Z", "Created-At: 2026-01-02T03:04:05.000000Z"), "canonical"),
        (("Created-At: 2026-01-02T03:04:05.000007Z", "Created-At: 2026-01-02 03:04:05Z"), "UTC time"),
        (("a" * 64, "A" * 64), "Content-SHA256"),
        (("Memory-Path: notes/a.md", 'Memory-Path: "notes/a.md"'), "quoted"),
        (("Memory-Path: notes/a.md", "Memory-Path: ../x"), "Memory-Path"),
        (("Memory-Id: mem_1", "Memory-Id: mem 1"), "not an id"),
        (("\nMemory-Id", "\nnot a trailer\nMemory-Id"), "no memsync trailers"),
    ],
)
def test_malformed_trailers_are_refused(change: tuple[str, str], complaint: str) -> None:
    message = GOOD.replace(*change)
    assert message != GOOD
    with pytest.raises(FormatError, match=complaint):
        parse_message(message, "abc123")


def test_only_the_last_paragraph_counts() -> None:
    body = "summary\n\nMemory-Id: mem_forged\nMemsync-Format: 1\n\n" + GOOD.split("\n\n", 1)[1]
    assert parse_message(body).memory_id == "mem_1"


def test_times_are_utc_and_canonical() -> None:
    plus_two = datetime(2026, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    assert format_time(plus_two) == "2026-01-02T03:04:05Z"
    assert parse_time("2026-01-02T03:04:05Z") == plus_two
    with pytest.raises(ValueError, match="canonical"):
        parse_time("2026-01-02T03:04:05.000000Z")
