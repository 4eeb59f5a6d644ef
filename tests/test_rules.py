"""memsync.rules at every edge of docs/api-contract.md §2-§4, with Hypothesis for the byte-counting rules."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memsync import rules
from memsync.errors import RuleViolation
from memsync.rules import Dialect, decode_content

RELATIVE = (Dialect.FORWARD, Dialect.CLOUD)
ALL = tuple(Dialect)

# Characters of 1, 2, 3 and 4 UTF-8 bytes, so byte limits are hit with multi-byte text too.
WIDTH_CHARS = {1: "a", 2: "é", 3: "€", 4: "𝄞"}


def rule_of(call: object, *args: object, **kwargs: object) -> str:
    assert callable(call)
    with pytest.raises(RuleViolation) as info:
        call(*args, **kwargs)
    return info.value.rule


def segment_of_bytes(n: int, width: int) -> str:
    """A segment of exactly n UTF-8 bytes built from characters of ``width`` bytes (plus padding)."""
    char = WIDTH_CHARS[width]
    count, rest = divmod(n, width)
    return char * count + "a" * rest


# --- relative paths (Forward, Cloud) -----------------------------------------------------------


@pytest.mark.parametrize("dialect", RELATIVE)
@pytest.mark.parametrize(
    "path", ["notes/meeting-2026-08-14.md", "config.yaml", "a/b/c", "a b/c d", ".hidden"]
)
def test_seed_examples_of_valid_paths(path: str, dialect: Dialect) -> None:
    assert rules.check_path(path, dialect) == path


@pytest.mark.parametrize("dialect", RELATIVE)
@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("/notes/meeting.md", "absolute"),
        ("a/../b", "dot_segment"),
        ("./a", "dot_segment"),
        ("notes//x.md", "empty_segment"),
        ("notes/", "empty_segment"),
        ("", "empty"),
        ("a\\b", "backslash"),
        ("a\x00b", "nul"),
        (" a/b", "segment_whitespace"),
        ("a/b ", "segment_whitespace"),
        ("a/\tb", "segment_whitespace"),
    ],
)
def test_forbidden_relative_paths(path: str, rule: str, dialect: Dialect) -> None:
    assert rule_of(rules.check_path, path, dialect) == rule


@given(width=st.sampled_from(sorted(WIDTH_CHARS)), extra=st.integers(min_value=0, max_value=3))
def test_segment_of_255_bytes_is_the_limit(width: int, extra: int) -> None:
    segment = segment_of_bytes(255 - extra, width)
    assert len(segment.encode()) == 255 - extra
    rules.check_path(f"dir/{segment}", Dialect.FORWARD)
    over = segment_of_bytes(255, width) + WIDTH_CHARS[width]
    assert len(over.encode()) > 255
    assert rule_of(rules.check_path, f"dir/{over}", Dialect.FORWARD) == "segment_too_long"


def test_segment_limit_counts_bytes_not_characters() -> None:
    # 128 characters, 256 bytes: short in characters, too long in bytes.
    assert rule_of(rules.check_path, "é" * 128, Dialect.CLOUD) == "segment_too_long"
    rules.check_path("é" * 127 + "a", Dialect.CLOUD)


@given(width=st.sampled_from(sorted(WIDTH_CHARS)))
def test_path_of_1024_bytes_is_the_limit(width: int) -> None:
    # 255 + 255 + 255 + 254 bytes, 4 separators and a final "a": exactly 1024 bytes.
    sizes = (255, 255, 255, 254)
    path = "/".join(segment_of_bytes(n, width) for n in sizes) + "/a"
    assert len(path.encode()) == 1024
    rules.check_path(path, Dialect.FORWARD)
    assert rule_of(rules.check_path, path + "b", Dialect.FORWARD) == "too_long"


def test_58_segments_is_the_limit() -> None:
    rules.check_path("/".join(["s"] * 58), Dialect.FORWARD)
    assert rule_of(rules.check_path, "/".join(["s"] * 59), Dialect.FORWARD) == "too_many_segments"


@given(st.text(min_size=1, max_size=40))
def test_any_relative_path_is_accepted_or_refused_with_a_named_rule(path: str) -> None:
    try:
        rules.check_path(path, Dialect.FORWARD)
    except RuleViolation as exc:
        assert exc.field == "path"
        assert exc.rule
        assert str(exc).startswith("path: ")
    else:
        assert not path.startswith("/") and "\\" not in path and "\x00" not in path
        for segment in path.split("/"):
            assert segment not in ("", ".", "..") and segment == segment.strip()


def test_lone_surrogate_path_is_refused() -> None:
    assert rule_of(rules.check_path, "a/\ud800", Dialect.FORWARD) == "utf8"


# --- absolute paths (Anthropic) ----------------------------------------------------------------


@pytest.mark.parametrize("path", ["/notes/a.md", "/a", "/ leading space/x", "/" + "x" * 600])
def test_valid_anthropic_paths(path: str) -> None:
    rules.check_path(path, Dialect.ANTHROPIC)


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("notes/a.md", "relative"),
        ("/", "empty_segment"),
        ("/a//b", "empty_segment"),
        ("/a/", "empty_segment"),
        ("/a/../b", "dot_segment"),
        ("/a/./b", "dot_segment"),
        ("/a\x00b", "control_character"),
        ("/a\x1fb", "control_character"),
        ("/a\u200bb", "control_character"),  # zero-width space: a format character
        ("/a\u2028b", "control_character"),
        ("/a\u2029b", "control_character"),
        ("/e\u0301", "not_nfc"),
    ],
)
def test_forbidden_anthropic_paths(path: str, rule: str) -> None:
    assert rule_of(rules.check_path, path, Dialect.ANTHROPIC) == rule


def test_anthropic_segment_and_byte_limits() -> None:
    rules.check_path("/" + "/".join(["s"] * 20), Dialect.ANTHROPIC)
    assert rule_of(rules.check_path, "/" + "/".join(["s"] * 21), Dialect.ANTHROPIC) == "too_many_segments"
    path = "/" + "€" * 341  # 1 + 1023 bytes
    assert len(path.encode()) == 1024
    rules.check_path(path, Dialect.ANTHROPIC)
    assert rule_of(rules.check_path, path + "a", Dialect.ANTHROPIC) == "too_long"


@given(st.text(min_size=1, max_size=30).filter(lambda s: not s.startswith("/")))
def test_relative_absolute_round_trip(relative: str) -> None:
    assert rules.to_relative(rules.to_absolute(relative)) == relative


# --- content -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", ALL)
@given(width=st.sampled_from(sorted(WIDTH_CHARS)))
def test_content_of_102400_bytes_is_the_limit(dialect: Dialect, width: int) -> None:
    content = segment_of_bytes(102_400, width)
    assert len(content.encode()) == 102_400
    rules.check_content(content, dialect)
    assert rule_of(rules.check_content, content + "a", dialect) == "too_large"


@pytest.mark.parametrize("dialect", ALL)
@pytest.mark.parametrize("code", [*range(0x00, 0x20), 0x7F])
def test_each_control_character(code: int, dialect: Dialect) -> None:
    content = f"before{chr(code)}after"
    if chr(code) in "\n\r\t":
        assert rules.check_content(content, dialect) == content
    else:
        assert rule_of(rules.check_content, content, dialect) == "control_character"


def test_empty_content_depends_on_dialect() -> None:
    assert rule_of(rules.check_content, "", Dialect.FORWARD) == "empty"
    assert rule_of(rules.check_content, "", Dialect.CLOUD) == "empty"
    assert rules.check_content("", Dialect.ANTHROPIC) == ""


def test_decode_content_refuses_invalid_utf8_and_names_the_byte() -> None:
    with pytest.raises(RuleViolation) as info:
        rules.decode_content(b"ok\xff", Dialect.FORWARD)
    assert info.value.rule == "utf8"
    assert "(at byte 3)" in str(info.value)  # counted from 1, as editors count


@given(st.text(max_size=200))
def test_sha256_is_of_utf8_bytes_without_normalisation(text: str) -> None:
    try:
        data = text.encode()
    except UnicodeEncodeError:
        return
    assert rules.sha256_hex(text) == hashlib.sha256(data).hexdigest()


def test_seed_hash_example() -> None:
    # Seed 004's content and hash: the hash is over UTF-8 bytes, not characters.
    content = "# 架构决策\n\n选择微服务架构，原因：团队规模扩大，需要独立部署。"
    assert len(rules.sha256_hex(content)) == 64


# --- metadata and store text -------------------------------------------------------------------


def test_forward_store_metadata_has_15_keys_and_reserves_created_by() -> None:
    rules.check_store_metadata({f"k{i}": "v" for i in range(15)}, Dialect.FORWARD)
    assert (
        rule_of(rules.check_store_metadata, {f"k{i}": "v" for i in range(16)}, Dialect.FORWARD)
        == "too_many_keys"
    )
    assert rule_of(rules.check_store_metadata, {"created_by": "me"}, Dialect.FORWARD) == "reserved_key"
    # Cloud reserves no key and allows 16.
    rules.check_store_metadata({"created_by": "me", **{f"k{i}": "v" for i in range(15)}}, Dialect.CLOUD)


@pytest.mark.parametrize("dialect", RELATIVE)
def test_memory_metadata_limits(dialect: Dialect) -> None:
    rules.check_memory_metadata({f"k{i}": "v" for i in range(16)}, dialect)
    rules.check_memory_metadata({"created_by": "agent"}, dialect)  # not reserved on memories
    assert rule_of(rules.check_memory_metadata, {f"k{i}": "v" for i in range(17)}, dialect) == "too_many_keys"
    assert rule_of(rules.check_memory_metadata, {"": "v"}, dialect) == "key_length"
    assert rule_of(rules.check_memory_metadata, {"k" * 65: "v"}, dialect) == "key_length"
    rules.check_memory_metadata({"k" * 64: "v" * 512}, dialect)
    assert rule_of(rules.check_memory_metadata, {"k": "v" * 513}, dialect) == "value_length"
    assert rule_of(rules.check_memory_metadata, {"k": 1}, dialect) == "value_type"
    assert rule_of(rules.check_memory_metadata, {"k": None}, dialect) == "value_type"
    assert rule_of(rules.check_memory_metadata, ["k"], dialect) == "type"


def test_metadata_value_limit_counts_characters() -> None:
    # docs/api-contract.md §2 gives key and value limits in characters (unlike paths and content).
    rules.check_memory_metadata({"k": "€" * 512}, Dialect.FORWARD)


def test_anthropic_store_metadata_patch_allows_null() -> None:
    assert rules.check_store_metadata({"drop": None}, Dialect.ANTHROPIC, patch=True) == {"drop": None}
    assert rule_of(rules.check_store_metadata, {"drop": None}, Dialect.FORWARD) == "value_type"


def test_store_text_rules() -> None:
    rules.check_store_text("name", "project\nalpha\t1", required=True)
    assert rule_of(rules.check_store_text, "name", "", required=True) == "empty"
    assert rule_of(rules.check_store_text, "name", "a\x07b", required=True) == "control_character"
    rules.check_store_text("description", "", required=False)


def test_violation_message_names_field_and_rule() -> None:
    with pytest.raises(RuleViolation) as info:
        rules.check_memory_metadata({"k": "v" * 600}, Dialect.FORWARD)
    assert info.value.field == "metadata.k"
    assert "at most 512" in str(info.value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("250ms", 0.25), ("90s", 90), ("5m", 300), ("12h", 43200), ("30d", 2592000), ("1w", 604800), ("0s", 0)],
)
def test_durations(text: str, seconds: float) -> None:
    assert rules.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["5", 5, "m", "-1s", "5 parsecs", None, "nans"])
def test_bad_durations_name_the_field_and_the_fix(text: object) -> None:
    with pytest.raises(RuleViolation) as info:
        rules.parse_duration(text, "daemon.interval")
    assert info.value.field == "daemon.interval"
    assert "e.g." in str(info.value)


def test_a_refused_content_names_its_place_counted_from_1_in_plain_words() -> None:
    # The reason reaches a terminal through escape_for_terminal: a backslash in it would show doubled.
    with pytest.raises(RuleViolation) as bad_byte:
        decode_content(b"\xffrest", Dialect.FORWARD)
    assert "(at byte 1)" in str(bad_byte.value)
    with pytest.raises(RuleViolation) as control:
        decode_content(b"ab\x01", Dialect.FORWARD)
    message = str(control.value)
    assert "U+0001 at character 3" in message and "\\" not in message
    assert "only newline, carriage return and tab are allowed" in message
