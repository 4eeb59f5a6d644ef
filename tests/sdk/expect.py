"""Assertions shared by the SDK contract tests: errors as the SDK raises them, and answer shapes
(what Forward and Cloud answers have in common; each test module checks its dialect's own fields)."""

from __future__ import annotations

import hashlib
import itertools
import re
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import pytest
from qca import APIStatusError, BadRequestError, ConflictError

T = TypeVar("T")

_ID_TAIL = r"[0-9a-z]+"
HEX64 = re.compile(r"^[0-9a-f]{64}$")
# A version's operation as Forward and Cloud name it (seeds 000 and 002), in answers to the SDKs too.
OPERATIONS = {"created", "updated", "deleted"}

_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}-{uuid.uuid4().hex[:8]}"


def ids(items: Any) -> list[str]:
    return [item.id for item in items]


def sha(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def message(error: Any) -> str:
    """The server's own message (docs/api-contract.md §5 envelope), not the SDK's "Error code: ..." prefix."""
    assert isinstance(error.body, dict), error.body
    text = error.body["error"]["message"]
    assert isinstance(text, str) and text
    return text


def names_any(text: str, names: tuple[str, ...]) -> bool:
    lowered = text.lower()
    return any(name.lower() in lowered for name in names)


def refused(call: Callable[[], object], *names: str) -> BadRequestError:
    """The call is a 400 ``invalid_request_error`` whose message names one of ``names``."""
    with pytest.raises(BadRequestError) as raised:
        call()
    error = raised.value
    assert error.status_code == 400
    assert error.type == "invalid_request_error", error.body
    assert names_any(message(error), names), f"{message(error)!r} names none of {names}"
    return error


def conflict(call: Callable[[], object]) -> ConflictError:
    """The call is a 409, raised as the SDK's ConflictError, and the server says not to retry it."""
    with pytest.raises(ConflictError) as raised:
        call()
    error = raised.value
    assert error.status_code == 409
    assert error.response.headers.get("x-should-retry") == "false"
    message(error)
    return error


def works_or_refused(call: Callable[[], T], *names: str) -> T | None:
    """A parameter the server implements (the answer, for the caller to check its effect) or refuses
    with a 400 naming it (None). docs/api-contract.md §6: never accepted and silently dropped."""
    try:
        return call()
    except BadRequestError as error:
        assert error.type == "invalid_request_error", error.body
        assert names_any(message(error), names), f"{message(error)!r} names none of {names}"
        return None


def check_id(value: object, prefix: str) -> None:
    assert isinstance(value, str) and re.fullmatch(prefix + "_" + _ID_TAIL, value), value


def check_time(value: object) -> None:
    assert isinstance(value, datetime), value
    assert value.utcoffset() == timedelta(0), value


def check_hash(value: object, content: str | None = None) -> None:
    assert isinstance(value, str) and HEX64.match(value), value
    if content is not None:
        assert value == sha(content)


def check_store_fields(store: Any) -> None:
    """The fields a Forward and a Cloud store share."""
    check_id(store.id, "memstore")
    assert store.type == "memory_store"
    assert isinstance(store.name, str) and store.name
    assert isinstance(store.description, str)
    assert store.status in ("active", "archived")
    assert isinstance(store.entry_count, int) and isinstance(store.total_size, int)
    assert isinstance(store.metadata, dict)
    check_time(store.created_at)
    check_time(store.updated_at)
    if store.status == "active":
        assert store.archived_at is None
    else:
        check_time(store.archived_at)


def check_memory_fields(memory: Any, content: str | None) -> None:
    """The fields a Forward and a Cloud memory share; ``content``, if given, is what it holds."""
    check_id(memory.id, "mem")
    assert memory.type == "memory"
    check_id(memory.memory_store_id, "memstore")
    assert isinstance(memory.path, str) and not memory.path.startswith("/")
    check_hash(memory.content_sha256, content)
    assert isinstance(memory.content_size_bytes, int)
    if content is not None:
        assert memory.content_size_bytes == len(content.encode("utf-8"))
    check_time(memory.created_at)
    check_time(memory.updated_at)


def check_version_fields(version: Any, *, listed: bool) -> None:
    """The fields a Forward and a Cloud version share; sizes and hashes stay on tombstones and
    redacted versions (docs/api-contract.md §2, §6). List items carry no content key."""
    check_id(version.id, "memver")
    assert version.type == "memory_version"
    check_id(version.memory_store_id, "memstore")
    check_id(version.memory_id, "mem")
    assert isinstance(version.path, str)
    assert version.operation in OPERATIONS
    assert isinstance(version.content_size_bytes, int)
    check_hash(version.content_sha256)
    check_time(version.created_at)
    if listed:
        assert "content" not in version.to_dict(), "list items carry no content key"


def same(answer: Any, other: Any) -> bool:
    """Two answers carry the same object (SDK models also hold each response's request id)."""
    return bool(answer.to_dict() == other.to_dict())


def not_written(call: Callable[[], object]) -> APIStatusError:
    """The call is refused as invalid (400) or as a conflict (409); the caller checks nothing changed."""
    with pytest.raises((BadRequestError, ConflictError)) as raised:
        call()
    message(raised.value)
    return raised.value
