"""Peers for the api tests: a quick retry policy, and a transport to the real server that loses answers."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx

from memsync.api import RetryPolicy

# Real servers in tests: retry quickly (the fault injector's Retry-After of 1 s is still honoured).
FAST_RETRY = RetryPolicy(
    initial_delay=0.02, max_delay=0.2, max_attempts=12, max_elapsed=60, max_retry_after=2
)


class LosingTransport(httpx.BaseTransport):
    """The network to the real server, except that it loses chosen requests.

    By default the request reaches the server and takes effect, then the client sees the connection
    drop, exactly like the server's ``drop_after_write`` fault but on the request the test chooses.
    With ``before=True`` the request never reaches the server (a network cut, a killed process).
    """

    def __init__(
        self, lose: Callable[[httpx.Request], bool], times: int = 1, *, before: bool = False
    ) -> None:
        self._inner = httpx.HTTPTransport()
        self._lose = lose
        self._before = before
        self._lock = threading.Lock()
        self.remaining = times
        self.lost: list[str] = []

    def _losing(self, request: httpx.Request) -> bool:
        with self._lock:
            if self.remaining > 0 and self._lose(request):
                self.remaining -= 1
                self.lost.append(f"{request.method} {request.url.path}")
                return True
        return False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self._before and self._losing(request):
            raise httpx.ConnectError("the network is cut", request=request)
        response = self._inner.handle_request(request)
        if not self._before and self._losing(request):
            response.read()
            response.close()
            raise httpx.RemoteProtocolError(
                "Server disconnected without sending a response.", request=request
            )
        return response

    def close(self) -> None:
        self._inner.close()


def writes_to(method: str, suffix: str) -> Callable[[httpx.Request], bool]:
    """A predicate for requests with ``method`` whose path ends with ``suffix``."""

    def matches(request: httpx.Request) -> bool:
        return request.method == method and request.url.path.endswith(suffix)

    return matches
