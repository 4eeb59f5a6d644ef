"""Transport behaviour the real server cannot be made to show on demand: exact retry timing with an
injected clock, hostile bodies (malformed, endless, 10 MB), and the token's secrecy."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from memsync.api import (
    AuthenticationError,
    BadRequest,
    Client,
    Conflict,
    InvalidResponse,
    NotFound,
    RateLimited,
    RetryPolicy,
    ServerError,
    TransportError,
    open_client,
)
from memsync.rules import Dialect
from tests.api.wire_objects import Handler, error_response, json_response

TOKEN = "tok-SECRET-7f3a9c"
STORE = {"id": "memstore_1", "name": "n", "created_at": "2026-08-14T10:00:00Z"}


class FakeClock:
    """Time that moves only when the client sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def policy(self, **overrides: float) -> RetryPolicy:
        return RetryPolicy(clock=self.clock, sleep=self.sleep, random=lambda: 0.0, **overrides)


def scripted(*answers: httpx.Response | Exception) -> tuple[Handler, list[httpx.Request]]:
    """A handler giving ``answers`` in turn (an exception is raised as a transport failure)."""
    queue = list(answers)
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return handle, seen


def client_for(
    handler: Handler, clock: FakeClock | None = None, dialect: Dialect = Dialect.FORWARD, **options: object
) -> Client:
    retry = (clock or FakeClock()).policy()
    return open_client(
        dialect,
        "http://memstore.test",
        TOKEN,
        transport=httpx.MockTransport(handler),
        retry=options.pop("retry", retry),
        **options,
    )


def test_server_errors_are_retried_with_exponential_backoff() -> None:
    clock = FakeClock()
    handler, _ = scripted(
        error_response(500, "api_error"), error_response(529, "overloaded_error"), json_response(STORE)
    )
    with client_for(handler, clock) as client:
        assert client.get_store("memstore_1").id == "memstore_1"
        assert client.request_count == 3 and client.retry_count == 2
    assert clock.sleeps == [0.5, 1.0]


def test_jitter_shortens_backoff_by_up_to_its_share() -> None:
    policy = RetryPolicy(random=lambda: 1.0, jitter=0.5, initial_delay=1.0, max_delay=4.0)
    assert [policy.backoff(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 2.0]


def test_connection_errors_are_retried() -> None:
    clock = FakeClock()
    handler, seen = scripted(
        httpx.ConnectError("refused"), httpx.RemoteProtocolError("dropped"), json_response(STORE)
    )
    with client_for(handler, clock) as client:
        assert client.get_store("memstore_1").name == "n"
    assert len(seen) == 3


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "2"}, 2.0),
        ({"Retry-After": "0.25"}, 0.25),
        ({"Retry-After-Ms": "1500", "Retry-After": "9"}, 1.5),
    ],
)
def test_retry_after_is_honoured(headers: dict[str, str], expected: float) -> None:
    clock = FakeClock()
    handler, _ = scripted(error_response(429, "rate_limit_error", **headers), json_response(STORE))
    with client_for(handler, clock) as client:
        client.get_store("memstore_1")
    assert clock.sleeps == [expected]


def test_retry_after_as_an_http_date() -> None:
    clock = FakeClock()
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    handler, _ = scripted(error_response(503, "api_error", **{"Retry-After": when}), json_response(STORE))
    with client_for(handler, clock) as client:
        client.get_store("memstore_1")
    assert len(clock.sleeps) == 1 and 25 <= clock.sleeps[0] <= 30


def test_a_retry_after_beyond_the_cap_fails_at_once_with_the_hint() -> None:
    clock = FakeClock()
    handler, seen = scripted(error_response(429, "rate_limit_error", **{"Retry-After": "3600"}))
    with (
        client_for(handler, clock, retry=clock.policy(max_retry_after=60)) as client,
        pytest.raises(RateLimited) as caught,
    ):
        client.get_store("memstore_1")
    assert caught.value.retry_after == 3600 and caught.value.attempts == 1
    assert clock.sleeps == [] and len(seen) == 1


def test_the_attempt_budget() -> None:
    clock = FakeClock()
    handler, seen = scripted(*[error_response(503, "api_error", "down")] * 5)
    with (
        client_for(handler, clock, retry=clock.policy(max_attempts=3)) as client,
        pytest.raises(ServerError) as caught,
    ):
        client.get_store("memstore_1")
    assert len(seen) == 3 and caught.value.attempts == 3
    assert caught.value.status == 503 and caught.value.error_type == "api_error"
    assert caught.value.request_id == "req_1" and "down" in caught.value.message


def test_the_time_budget() -> None:
    clock = FakeClock()
    handler, seen = scripted(*[error_response(500, "api_error")] * 10)
    with (
        client_for(handler, clock, retry=clock.policy(max_elapsed=2.0)) as client,
        pytest.raises(ServerError),
    ):
        client.get_store("memstore_1")
    # Waits of 0.5 and 1.0 fit in 2 s; the next (2.0) would not.
    assert clock.sleeps == [0.5, 1.0] and len(seen) == 3


@pytest.mark.parametrize(
    ("status", "error_type", "cls"),
    [
        (400, "invalid_request_error", BadRequest),
        (401, "authentication_error", AuthenticationError),
        (403, "permission_error", AuthenticationError),
        (404, "not_found_error", NotFound),
        (409, "conflict_error", Conflict),
        (413, "request_too_large", BadRequest),
    ],
)
def test_client_errors_are_not_retried(status: int, error_type: str, cls: type[Exception]) -> None:
    handler, seen = scripted(error_response(status, error_type, "no"), json_response(STORE))
    with client_for(handler) as client, pytest.raises(cls):
        client.get_store("memstore_1")
    assert len(seen) == 1


def test_a_server_saying_do_not_retry_is_obeyed() -> None:
    handler, seen = scripted(
        error_response(500, "api_error", **{"x-should-retry": "false"}), json_response(STORE)
    )
    with client_for(handler) as client, pytest.raises(ServerError):
        client.get_store("memstore_1")
    assert len(seen) == 1


def test_an_error_body_that_is_not_json_still_maps_by_status() -> None:
    handler, _ = scripted(httpx.Response(502, content=b"<html>bad gateway</html>"), json_response(STORE))
    with client_for(handler) as client:
        assert client.get_store("memstore_1").id == "memstore_1"


@pytest.mark.parametrize(
    "body",
    [b"{not json", b"[1, 2]", b'"text"', b"[" * 100_000],
)
def test_malformed_json_is_an_invalid_response(body: bytes) -> None:
    handler, seen = scripted(httpx.Response(200, content=body))
    with client_for(handler) as client, pytest.raises(InvalidResponse):
        client.get_store("memstore_1")
    assert len(seen) == 1


def test_a_body_over_the_cap_is_refused_by_its_declared_length() -> None:
    ten_mb = b'{"pad": "' + b"x" * (10 * 1024 * 1024) + b'"}'
    handler, _ = scripted(httpx.Response(200, content=ten_mb))
    with client_for(handler) as client, pytest.raises(InvalidResponse, match="8388608"):
        client.get_store("memstore_1")


def test_an_endless_body_is_refused_without_reading_it_all() -> None:
    produced = 0

    def endless() -> Iterator[bytes]:
        nonlocal produced
        while True:
            produced += 1
            yield b"x" * 65536

    handler, _ = scripted(httpx.Response(200, content=endless()))
    with (
        client_for(handler, max_body_bytes=1024 * 1024) as client,
        pytest.raises(InvalidResponse, match="exceeds"),
    ):
        client.get_store("memstore_1")
    assert produced <= 1024 * 1024 // 65536 + 1


@pytest.mark.parametrize("dialect", list(Dialect))
def test_auth_headers_per_dialect(dialect: Dialect) -> None:
    handler, seen = scripted(json_response(STORE))
    with client_for(handler, dialect=dialect) as client:
        client.get_store("memstore_1")
    headers = seen[0].headers
    if dialect is Dialect.ANTHROPIC:
        assert seen[0].url.path == "/v1/memory_stores/memstore_1"
        assert headers["x-api-key"] == TOKEN and "authorization" not in headers
        assert headers["anthropic-version"] == "2023-06-01"
        assert headers["anthropic-beta"] == "agent-memory-2026-07-22"
    else:
        assert seen[0].url.path == f"/api/v1/{dialect.value}/memory_stores/memstore_1"
        assert headers["authorization"] == f"Bearer {TOKEN}" and "x-api-key" not in headers


def test_a_base_url_with_the_prefix_already_is_not_doubled() -> None:
    handler, seen = scripted(json_response(STORE))
    transport = httpx.MockTransport(handler)
    with open_client(Dialect.CLOUD, "http://h/api/v1/cloud/", TOKEN, transport=transport) as client:
        client.get_store("memstore_1")
    assert str(seen[0].url) == "http://h/api/v1/cloud/memory_stores/memstore_1"


def test_ids_are_escaped_in_urls() -> None:
    handler, seen = scripted(json_response(STORE))
    with client_for(handler) as client:
        client.get_store("memstore_1")
        with pytest.raises(IndexError):
            client.get_store("../../admin?x=1")
    assert seen[-1].url.raw_path == b"/api/v1/forward/memory_stores/..%2F..%2Fadmin%3Fx%3D1"


def test_the_token_is_never_shown(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    echo = f"bad key {TOKEN} (Authorization: Bearer {TOKEN})"
    handler, _ = scripted(
        error_response(500, "api_error", echo),
        httpx.ConnectError(f"refused for {TOKEN}"),
        error_response(401, "authentication_error", echo),
        httpx.ReadTimeout("slow"),
        httpx.ReadTimeout("slow"),
        httpx.ReadTimeout("slow"),
    )
    errors: list[Exception] = []
    with client_for(handler, retry=FakeClock().policy(max_attempts=3)) as client:
        assert TOKEN not in repr(client) and TOKEN not in str(vars(client))
        for _ in range(2):
            try:
                client.get_store("memstore_1")
            except Exception as exc:
                errors.append(exc)
    assert [type(e) for e in errors] == [AuthenticationError, TransportError]
    for exc in errors:
        assert TOKEN not in str(exc) and TOKEN not in repr(exc) and TOKEN not in repr(exc.args)
        assert (exc.__cause__ is None and exc.__suppress_context__) or exc.__context__ is None
    assert "[token]" in str(errors[0])
    assert TOKEN not in caplog.text
    assert "retrying GET /memory_stores/memstore_1" in caplog.text


@pytest.mark.parametrize("token", ["", "tok\n", "tok en", "tök"])
def test_a_token_no_header_can_carry_is_refused_without_showing_it(token: str) -> None:
    with pytest.raises(ValueError, match="token") as caught:
        open_client(Dialect.FORWARD, "http://h", token)
    assert not token or token not in str(caught.value)
