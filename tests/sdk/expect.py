"""Assertions shared by the SDK contract tests: errors as the SDK raises them, and answer shapes."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import pytest
from qca import APIStatusError, BadRequestError, ConflictError

T = TypeVar("T")

_ID_TAIL = r"[0-9a-z]+"
HEX64 = re.compile(r"^[0-9a-f]{64}$")


def sha(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def message(error: Any) -> str:
    """The server's own message (api.md §5 envelope), not the SDK's "Error code: ..." prefix."""
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
    with a 400 naming it (None). api.md §6: never accepted and silently dropped."""
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


def same(answer: Any, other: Any) -> bool:
    """Two answers carry the same object (SDK models also hold each response's request id)."""
    return bool(answer.to_dict() == other.to_dict())


def not_written(call: Callable[[], object]) -> APIStatusError:
    """The call is refused as invalid (400) or as a conflict (409); the caller checks nothing changed."""
    with pytest.raises((BadRequestError, ConflictError)) as raised:
        call()
    message(raised.value)
    return raised.value
