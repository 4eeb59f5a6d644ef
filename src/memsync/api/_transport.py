"""HTTP for memsync.api: one keep-alive httpx transport, auth, retries with backoff, caps on answers.

Retries (docs/design.md §3): 429, 5xx, 529 and connection errors are retried with exponential backoff and
jitter, or after the server's ``Retry-After-Ms`` / ``Retry-After`` when it gives one (a hint longer
than :attr:`RetryPolicy.max_retry_after` is not waited for: the call fails with the hint attached, so
the caller can reschedule instead of holding a connection). Each call has a budget of attempts and of
seconds. Whether a retried *write* took effect is not decided here: the client settles that from the
final answer and :attr:`Answer.attempts` (see ``_client.py``); a caller that cannot settle from the
answer passes ``before_retry``, which looks for the write's effect before it is sent again.
"""

from __future__ import annotations

import copy
import email.utils
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memsync.api._errors import (
    Failure,
    InvalidResponse,
    RateLimited,
    ServerError,
    TransportError,
    error_for_status,
    one_line,
    translated_transport_errors,
)
from memsync.api._network import (
    Route,
    Trust,
    check_plain_http,
    display_url,
    route_for,
    transport_for,
    trust_for,
)
from memsync.api._wire import Wire

if TYPE_CHECKING:
    # Imported where a request is made: a command that makes none starts without httpx (~20 ms,
    # and its own command line's rich and pygments, ~50 ms more).
    import httpx

log = logging.getLogger("memsync.api")

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
DEFAULT_TIMEOUT_S = 30.0
USER_AGENT = "memsync/0.1"


@dataclass(frozen=True)
class RetryPolicy:
    """How hard one call tries. ``clock``, ``sleep`` and ``random`` are injectable for tests."""

    max_attempts: int = 6
    max_elapsed: float = 60.0
    """Seconds one call may spend, waits included, before its last error is raised."""
    initial_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 30.0
    """The longest ``Retry-After`` waited for; a longer hint fails the call at once."""
    jitter: float = 0.5
    """Share of each backoff delay drawn at random, so that clients failing together spread out."""
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    random: Callable[[], float] = field(default=random.random, repr=False)

    def backoff(self, attempt: int) -> float:
        """The wait after failed attempt number ``attempt`` (1-based) when the server gave no hint."""
        full = min(self.max_delay, self.initial_delay * 2 ** (attempt - 1))
        return full * (1.0 - self.jitter * self.random())

    def longest_wait(self) -> float:
        """The most a call spends waiting between its attempts when the server gives no hint."""
        waits = sum(min(self.max_delay, self.initial_delay * 2**n) for n in range(self.max_attempts - 1))
        return min(self.max_elapsed, waits)


NO_RETRIES = RetryPolicy(max_attempts=1)


@dataclass(frozen=True)
class Answer:
    """A successful answer: its status, its JSON object, its request id, and how many sends it took.

    ``settled`` is what ``before_retry`` found instead, when it found the request's effect already.
    """

    status: int
    data: Mapping[str, Any]
    request_id: str | None
    attempts: int
    settled: object | None = None


@dataclass(frozen=True)
class _Failed:
    error: Failure
    retryable: bool
    retry_after: float | None = None


def retry_after_hint(headers: httpx.Headers, now: Callable[[], float] = time.time) -> float | None:
    """Seconds the server asks to wait: ``Retry-After-Ms``, else ``Retry-After`` (seconds or HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - now())


class Transport:
    """Sends requests for one client. Thread-safe: the fetch pipeline shares it between threads."""

    def __init__(
        self,
        wire: Wire,
        base_url: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_connections: int = 32,
        transport: httpx.BaseTransport | None = None,
        proxy: str | None = None,
        ca_bundle: Path | None = None,
        allow_plain_http: bool = False,
    ) -> None:
        if not token:
            raise ValueError("the API token is empty; config resolves it from token_env or token_file")
        if not all(" " < ch < "\x7f" for ch in token):
            # Said without the token: it may be a secret with a stray newline from a file.
            raise ValueError(
                "the API token contains white space or characters an HTTP header cannot carry;"
                " check token_env / token_file (a trailing newline?)"
            )
        if transport is None:  # an injected transport replaces the network: no token crosses one
            check_plain_http(base_url, allowed=allow_plain_http)
        root = base_url.rstrip("/")
        if not root.endswith(wire.prefix):
            root += wire.prefix
        self.base_url = root
        self.retry = retry or RetryPolicy()
        self.max_body_bytes = max_body_bytes
        self._secret = token
        self._lock = threading.Lock()
        self._requests = 0
        self._retries = 0
        import httpx

        # Requests go straight to httpx's transport (its public API for sending one request), not
        # through httpx.Client: the client's URL merging, cookie jar, auth flow and redirect
        # handling cost ~190 µs of CPU per request, a third of a content fetch's (benchmarks/
        # pull_bench.py), and memsync uses none of them: its URLs are whole, it keeps no cookies,
        # its auth is a header, and it follows no redirect (a redirect is an error answer).
        self._headers = httpx.Headers(
            {"user-agent": USER_AGENT, "accept": "application/json", **wire.auth_headers(token)}
        )
        self._timeout = httpx.Timeout(timeout, connect=min(timeout, 10.0)).as_dict()
        # Chosen once: the client talks to one host, so its route cannot change between requests.
        self.route = Route() if transport is not None else route_for(root, proxy)
        self.trust = Trust() if transport is not None else trust_for(ca_bundle)
        self._transport = transport or transport_for(
            root, self.route, self.trust, max_connections=max_connections
        )
        # A transport made by share() sends over its original's connections; only the original closes them.
        self._owns_connections = True

    def share(self) -> Transport:
        """A transport over the same connection pool and settings, with request counters of its own."""
        twin = copy.copy(self)
        twin._lock = threading.Lock()
        twin._requests = 0
        twin._retries = 0
        twin._owns_connections = False
        return twin

    @property
    def request_count(self) -> int:
        """HTTP requests sent so far, retries included."""
        return self._requests

    @property
    def retry_count(self) -> int:
        return self._retries

    def close(self) -> None:
        if self._owns_connections:
            self._transport.close()

    def __repr__(self) -> str:
        return f"<Transport {display_url(self.base_url)}>"

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        before_retry: Callable[[], object | None] | None = None,
    ) -> Answer:
        """Send ``method path`` until it succeeds or the retry budget is spent; raise the last error.

        ``before_retry`` runs before a request whose previous attempt may have taken effect (a 5xx or
        a lost connection, not a 429) is sent again; if it returns something, the request is not sent
        again and the answer carries it as ``settled``.
        """
        what = f"{method} /{path}"
        policy = self.retry
        started = policy.clock()
        attempt = 0
        while True:
            attempt += 1
            outcome = self._send_once(method, path, params, json_body, headers, what, attempt)
            if isinstance(outcome, Answer):
                return outcome
            failure = outcome.error
            if not outcome.retryable or attempt >= policy.max_attempts:
                raise self._named(failure, attempt, policy.clock() - started)
            hint = outcome.retry_after
            if hint is not None and hint > policy.max_retry_after:
                raise failure
            delay = hint if hint is not None else policy.backoff(attempt)
            if policy.clock() - started + delay > policy.max_elapsed:
                raise self._named(failure, attempt, policy.clock() - started)
            if attempt == 1 and not isinstance(failure, RateLimited):
                self._note_first_failure(failure)
            log.info(
                "retrying %s in %.2fs after attempt %d of %d failed: %s",
                what,
                delay,
                attempt,
                policy.max_attempts,
                failure.message,
            )
            with self._lock:
                self._retries += 1
            policy.sleep(delay)
            if before_retry is not None and not isinstance(failure, RateLimited):
                settled = before_retry()
                if settled is not None:
                    return Answer(status=200, data={}, request_id=None, attempts=attempt, settled=settled)

    def _note_first_failure(self, failure: Failure) -> None:
        """Said at once, not after the minute of backoff a stopped server costs: where the call was
        going, what went wrong, and how long memsync keeps trying. A 429 is left out: it is the
        server pacing a busy client, not a fault. A warning, so that it passes loggers left at their
        default level; ``first_failure`` marks the record for the CLI, which shows these notes even
        where stderr is no terminal."""
        where = display_url(self.base_url)
        if self.route.proxy is not None:
            where += f" {self.route}"
        policy = self.retry
        what = "cannot reach" if isinstance(failure, TransportError) else "an error answer from"
        log.warning(
            "%s %s (%s); memsync tries again up to %d more time(s) for up to %.0fs",
            what,
            where,
            failure.message,
            policy.max_attempts - 1,
            policy.longest_wait(),
            extra={"first_failure": True},
        )

    def _named(self, failure: Failure, attempts: int, seconds: float) -> Failure:
        """A connection that never answered names where it was going, what was tried, and what to
        check; other failures stay as they are (the server answered: its words say enough)."""
        if not isinstance(failure, TransportError):
            return failure
        where = display_url(self.base_url)
        if self.route.proxy is not None:
            where += f" {self.route}"
        if failure.certificate_refused:
            failure.message = (
                f"cannot trust {where} ({failure.message}; trusted: {self.trust.source}): if your"
                " network inspects TLS, set api.ca_bundle (or SSL_CERT_FILE) to the root certificate"
                " it signs with; otherwise check api.base_url: the token goes only to a server whose"
                " certificate can be verified"
            )
        elif failure.proxy_refused:
            failure.message = f"cannot reach {where}: {failure.message}"
        elif failure.retryable:
            failure.message = (
                f"cannot reach {where} ({failure.message}; {attempts}"
                f" attempt(s) over {seconds:.0f}s): check that the server is running and reachable,"
                " api.base_url, and the proxy settings (HTTPS_PROXY, NO_PROXY, api.proxy)"
            )
        else:
            return failure
        failure.args = (failure.message,)
        return failure

    def _send_once(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        json_body: Mapping[str, Any] | None,
        headers: Mapping[str, str] | None,
        what: str,
        attempt: int,
    ) -> Answer | _Failed:
        import httpx

        with self._lock:
            self._requests += 1
        try:
            with translated_transport_errors(what, self._secret):
                request = httpx.Request(
                    method,
                    f"{self.base_url}/{path}",
                    params=params,
                    json=json_body,
                    headers=self._headers if headers is None else {**self._headers, **headers},
                    extensions={"timeout": self._timeout},
                )
                response = self._transport.handle_request(request)
                try:
                    body = self._read_capped(response, what)
                finally:
                    response.close()
        except TransportError as lost:
            lost.attempts = attempt
            return _Failed(lost, retryable=lost.retryable)
        except Failure as refused:
            refused.attempts = attempt
            raise
        # What httpx.Client logged for each request, said once here (never a header: they carry the token).
        log.debug("HTTP %s /%s: %d (attempt %d)", method, path, response.status_code, attempt)
        raw_id = response.headers.get("request-id") or response.headers.get("x-request-id")
        # The request id goes into messages: one safe line, never the token a hostile server echoes.
        request_id = one_line(raw_id, self._secret)[:120] if raw_id is not None else None
        if response.is_success:
            return Answer(
                response.status_code, self._json_object(body, what, request_id), request_id, attempt
            )
        error = self._error(response, body, what, request_id)
        error.attempts = attempt
        hint = retry_after_hint(response.headers)
        if isinstance(error, RateLimited):
            error.retry_after = hint
        retryable = isinstance(error, RateLimited | ServerError)
        # docs/api-contract.md §6: the server marks answers that must not be retried; honour it when it
        # says so.
        if response.headers.get("x-should-retry", "").lower() == "false":
            retryable = False
        return _Failed(error, retryable=retryable, retry_after=hint)

    def _read_capped(self, response: httpx.Response, what: str) -> bytes:
        cap = self.max_body_bytes
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            raise InvalidResponse(
                f"{what}: the response declares {int(declared)} bytes; memsync accepts at most {cap}"
            )
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > cap:
                raise InvalidResponse(f"{what}: the response body exceeds {cap} bytes; refusing it")
        return bytes(body)

    def _json_object(self, body: bytes, what: str, request_id: str | None) -> Mapping[str, Any]:
        if not body.strip():
            return {}
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            raise InvalidResponse(f"{what}: the response is not valid JSON", request_id=request_id) from None
        if not isinstance(data, dict):
            raise InvalidResponse(
                f"{what}: the response is JSON {type(data).__name__}, not an object", request_id=request_id
            )
        return data

    def _error(self, response: httpx.Response, body: bytes, what: str, request_id: str | None) -> Failure:
        error_type: str | None = None
        message = ""
        try:
            data = json.loads(body) if body.strip() else None
        except (ValueError, RecursionError):
            data = None
        if isinstance(data, dict):
            detail = data.get("error")
            if isinstance(detail, dict):
                if isinstance(detail.get("type"), str):
                    error_type = one_line(detail["type"], self._secret)[:80]
                if isinstance(detail.get("message"), str):
                    message = one_line(detail["message"], self._secret)
            if request_id is None and isinstance(data.get("request_id"), str):
                request_id = one_line(data["request_id"], self._secret)[:120]
        elif body.strip():
            message = "(the error body is not the API's JSON error object)"
        return error_for_status(response.status_code, error_type, message, request_id, what=what)
