"""Pure validation of memory paths, contents and metadata, per dialect (docs/api-contract.md §2-§4).

Shared by the reference server (which answers 400 naming ``field``) and the client side (which
refuses to push a file that the store would refuse). Sizes are counted in bytes of UTF-8, never in
characters. Every check raises :class:`memsync.errors.RuleViolation` whose ``field`` names the value
and whose ``rule`` is a stable identifier of the rule broken (tests and the server use it).
"""

from __future__ import annotations

import enum
import hashlib
import re
import unicodedata
from collections.abc import Mapping

from memsync.errors import RuleViolation


class Dialect(enum.StrEnum):
    FORWARD = "forward"
    CLOUD = "cloud"
    ANTHROPIC = "anthropic"


MAX_PATH_BYTES = 1024
MAX_SEGMENTS_RELATIVE = 58
MAX_SEGMENTS_ANTHROPIC = 20
MAX_SEGMENT_BYTES = 255
MAX_CONTENT_BYTES = 102_400
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512
MAX_STORE_METADATA_KEYS_FORWARD = 15  # upstream allows 16; Forward injects created_by into one
MAX_METADATA_KEYS = 16
RESERVED_STORE_METADATA_KEY = "created_by"

# Upstream's published limits (docs/api-contract.md §3, §4), held here so the server enforces the
# numbers the client plans against.
MAX_CLOUD_STORE_NAME_CHARS = 64
MAX_ANTHROPIC_MEMORIES = 2_000
MAX_ANTHROPIC_VERSIONS = 250_000
# A memory endpoint answers 400 to a request naming both betas.
ANTHROPIC_MEMORY_BETA = "agent-memory-2026-07-22"
ANTHROPIC_AGENTS_BETA = "managed-agents-2026-04-01"

# Control characters allowed in content and store text: newline, carriage return, tab. The rest of
# U+0000-U+001F and U+007F are found with one regular-expression scan: a loop over the characters of
# 100 KiB in Python took 27 ms, on every write and every content a client checks.
_ALLOWED_CONTROLS = frozenset("\n\r\t")
_FORBIDDEN_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def sha256_hex(content: str) -> str:
    """The ``content_sha256`` of ``content``: lowercase hex SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def utf8_len(text: str, field: str) -> int:
    """Length of ``text`` in UTF-8 bytes; a lone surrogate cannot be encoded and is refused."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise RuleViolation(
            field, "utf8", f"is not valid UTF-8 text (character {exc.start} is a lone surrogate)"
        ) from None


def _first_forbidden_control(text: str) -> int | None:
    """The offset of the first control character other than \\n, \\r and \\t, or None."""
    found = _FORBIDDEN_CONTROL.search(text)
    return None if found is None else found.start()


# --- paths -------------------------------------------------------------------------------------


def check_path(path: object, dialect: Dialect) -> str:
    """Validate a memory path as ``dialect`` spells it (relative, or absolute on Anthropic)."""
    if not isinstance(path, str):
        raise RuleViolation("path", "type", "must be a string")
    if dialect is Dialect.ANTHROPIC:
        _check_absolute_path(path)
    else:
        _check_relative_path(path)
    return path


def _check_relative_path(path: str) -> None:
    if path == "":
        raise RuleViolation("path", "empty", "must not be empty")
    if path.startswith("/"):
        raise RuleViolation("path", "absolute", "must be relative (no leading '/'), e.g. notes/a.md")
    if "\x00" in path:
        raise RuleViolation("path", "nul", "must not contain a NUL character")
    if "\\" in path:
        raise RuleViolation("path", "backslash", "must not contain '\\'; separate segments with '/'")
    size = utf8_len(path, "path")
    if size > MAX_PATH_BYTES:
        raise RuleViolation("path", "too_long", f"is {size} bytes of UTF-8; at most {MAX_PATH_BYTES}")
    segments = path.split("/")
    if len(segments) > MAX_SEGMENTS_RELATIVE:
        raise RuleViolation(
            "path", "too_many_segments", f"has {len(segments)} segments; at most {MAX_SEGMENTS_RELATIVE}"
        )
    for index, segment in enumerate(segments, start=1):
        _check_segment_common(segment, index)
        seg_size = len(segment.encode("utf-8"))
        if seg_size > MAX_SEGMENT_BYTES:
            raise RuleViolation(
                "path",
                "segment_too_long",
                f"segment {index} is {seg_size} bytes of UTF-8; each segment at most {MAX_SEGMENT_BYTES}",
            )
        if segment != segment.strip():
            raise RuleViolation(
                "path", "segment_whitespace", f"segment {index} has leading or trailing white space"
            )


def _check_segment_common(segment: str, index: int) -> None:
    if segment == "":
        raise RuleViolation("path", "empty_segment", f"segment {index} is empty ('//' or a trailing '/')")
    if segment in (".", ".."):
        raise RuleViolation(
            "path", "dot_segment", f"segment {index} is {segment!r}; '.' and '..' are not allowed"
        )


def _check_absolute_path(path: str) -> None:
    if not path.startswith("/"):
        raise RuleViolation("path", "relative", "must be absolute (start with '/'), e.g. /notes/a.md")
    size = utf8_len(path, "path")
    if size > MAX_PATH_BYTES:
        raise RuleViolation("path", "too_long", f"is {size} bytes of UTF-8; at most {MAX_PATH_BYTES}")
    for offset, ch in enumerate(path):
        category = unicodedata.category(ch)
        if category in ("Cc", "Cf") or ch in "\u2028\u2029":
            raise RuleViolation(
                "path", "control_character", f"contains U+{ord(ch):04X} at character {offset}"
            )
    if not unicodedata.is_normalized("NFC", path):
        raise RuleViolation("path", "not_nfc", "must be in Unicode normalisation form NFC")
    segments = path[1:].split("/")
    if len(segments) > MAX_SEGMENTS_ANTHROPIC:
        raise RuleViolation(
            "path", "too_many_segments", f"has {len(segments)} segments; at most {MAX_SEGMENTS_ANTHROPIC}"
        )
    for index, segment in enumerate(segments, start=1):
        _check_segment_common(segment, index)


def to_absolute(relative: str) -> str:
    """The Anthropic spelling of a canonical relative path."""
    return "/" + relative


def to_relative(absolute: str) -> str:
    """The canonical relative spelling of an Anthropic absolute path."""
    if not absolute.startswith("/"):
        raise RuleViolation("path", "relative", "must be absolute (start with '/'), e.g. /notes/a.md")
    return absolute[1:]


# --- content -----------------------------------------------------------------------------------


def check_content(content: object, dialect: Dialect) -> str:
    """Validate a memory's content: UTF-8 text of at most 102,400 bytes without control characters."""
    if not isinstance(content, str):
        raise RuleViolation("content", "type", "must be a string of UTF-8 text")
    size = utf8_len(content, "content")
    if size > MAX_CONTENT_BYTES:
        raise RuleViolation(
            "content", "too_large", f"is {size} bytes of UTF-8; at most {MAX_CONTENT_BYTES} (100 KiB)"
        )
    if size == 0 and dialect is not Dialect.ANTHROPIC:
        raise RuleViolation("content", "empty", f"must not be empty on the {dialect.value} dialect")
    offset = _first_forbidden_control(content)
    if offset is not None:
        raise RuleViolation(
            "content",
            "control_character",
            # Counted from 1, as editors count; the allowed ones named in words, which no terminal
            # escaping of the message can double.
            f"contains control character U+{ord(content[offset]):04X} at character {offset + 1};"
            " only newline, carriage return and tab are allowed",
        )
    return content


def decode_content(data: bytes, dialect: Dialect) -> str:
    """Decode a file's bytes as memory content, or say why it cannot be one."""
    if len(data) > MAX_CONTENT_BYTES:
        raise RuleViolation(
            "content", "too_large", f"is {len(data)} bytes; at most {MAX_CONTENT_BYTES} (100 KiB)"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RuleViolation("content", "utf8", f"is not valid UTF-8 (at byte {exc.start + 1})") from None
    return check_content(text, dialect)


# --- stores and metadata -----------------------------------------------------------------------


def check_store_text(field: str, value: object, *, required: bool) -> str:
    """A store's ``name`` or ``description``: text without control characters but \\n, \\r, \\t."""
    if not isinstance(value, str):
        raise RuleViolation(field, "type", "must be a string")
    if required and value.strip() == "":
        raise RuleViolation(field, "empty", "must not be empty")
    utf8_len(value, field)
    offset = _first_forbidden_control(value)
    if offset is not None:
        raise RuleViolation(
            field,
            "control_character",
            f"contains control character U+{ord(value[offset]):04X} at character {offset}",
        )
    return value


def max_memories(dialect: Dialect) -> int | None:
    """The most live memories a store of ``dialect`` holds (None: no published limit)."""
    return MAX_ANTHROPIC_MEMORIES if dialect is Dialect.ANTHROPIC else None


def check_store_name(name: object, dialect: Dialect) -> str:
    """A store's name as the dialect keeps it: Cloud trims it and allows at most 64 characters."""
    name = check_store_text("name", name, required=True)
    if dialect is not Dialect.CLOUD:
        return name
    name = name.strip()
    if len(name) > MAX_CLOUD_STORE_NAME_CHARS:
        raise RuleViolation(
            "name",
            "too_long",
            f"is {len(name)} characters; a Cloud store's name is at most {MAX_CLOUD_STORE_NAME_CHARS}",
        )
    return name


def check_new_store(name: object, description: object, dialect: Dialect) -> tuple[str, str]:
    """A new store's name and description as the dialect keeps them (Cloud requires a description)."""
    checked = check_store_name(name, dialect)
    text = check_store_text("description", description, required=False)
    if dialect is Dialect.CLOUD and text.strip() == "":
        raise RuleViolation(
            "description", "required", "Field 'description' is required; say what the store holds"
        )
    return checked, text


def check_store_metadata(metadata: object, dialect: Dialect, *, patch: bool = False) -> dict[str, str | None]:
    """Store metadata as a caller sends it. ``patch`` allows ``None`` values (Anthropic deletes keys)."""
    limit = MAX_STORE_METADATA_KEYS_FORWARD if dialect is Dialect.FORWARD else MAX_METADATA_KEYS
    reserved = (RESERVED_STORE_METADATA_KEY,) if dialect is Dialect.FORWARD else ()
    return _check_metadata("metadata", metadata, limit, reserved, allow_null=patch)


def check_memory_metadata(metadata: object, dialect: Dialect) -> dict[str, str | None]:
    if dialect is Dialect.ANTHROPIC:
        raise RuleViolation("metadata", "unsupported", "memories have no metadata on the anthropic dialect")
    return _check_metadata("metadata", metadata, MAX_METADATA_KEYS, (), allow_null=False)


def _check_metadata(
    field: str, metadata: object, max_keys: int, reserved: tuple[str, ...], *, allow_null: bool
) -> dict[str, str | None]:
    if not isinstance(metadata, Mapping):
        raise RuleViolation(field, "type", "must be an object of string keys and string values")
    if len(metadata) > max_keys:
        raise RuleViolation(field, "too_many_keys", f"has {len(metadata)} keys; at most {max_keys}")
    checked: dict[str, str | None] = {}
    for key, value in metadata.items():
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_METADATA_KEY_CHARS:
            raise RuleViolation(
                f"{field}.{key}", "key_length", f"keys must be 1..{MAX_METADATA_KEY_CHARS} characters"
            )
        if key in reserved:
            raise RuleViolation(
                f"{field}.{key}", "reserved_key", f"{key!r} is reserved: the server sets it; leave it out"
            )
        if value is None and allow_null:
            checked[key] = None
            continue
        if not isinstance(value, str):
            raise RuleViolation(f"{field}.{key}", "value_type", "values must be strings")
        if len(value) > MAX_METADATA_VALUE_CHARS:
            raise RuleViolation(
                f"{field}.{key}",
                "value_length",
                f"value is {len(value)} characters; at most {MAX_METADATA_VALUE_CHARS}",
            )
        utf8_len(value, f"{field}.{key}")
        checked[key] = value
    return checked


# --- durations ---------------------------------------------------------------------------------

_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: object, field: str = "duration") -> float:
    """Seconds in a duration written with its unit: "250ms", "90s", "5m", "12h", "30d"."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        raise RuleViolation(field, "unit", f'{text!r} has no unit; write it with one, e.g. "{text}s"')
    if not isinstance(text, str):
        raise RuleViolation(
            field, "type", 'must be a duration with a unit, e.g. "250ms", "30s", "5m", "12h", "30d"'
        )
    raw = text.strip()
    for unit in sorted(_DURATION_UNITS, key=len, reverse=True):
        if raw.endswith(unit):
            number = raw[: -len(unit)].strip()
            try:
                value = float(number)
            except ValueError:
                break
            if value < 0 or value != value:
                break
            return value * _DURATION_UNITS[unit]
    raise RuleViolation(
        field,
        "format",
        f'{text!r} is not a duration; write a number and a unit (ms, s, m, h, d, w), e.g. "5m"',
    )
