"""A gate in front of the real server: it holds chosen requests until the test lets them through.

This is how a test acts *while* memsync is in the middle of a run, without timers: the gate holds,
say, the version listing of ``memsync pull`` (which it sends while holding the store's lock), the test
waits until the gate reports the request held, does its part (edits files, starts a second pull),
then opens the gate. Everything else is passed through to the real server unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType

import httpx

from tests.reliability.loopback import LoopbackServer, Reply, Request

# Longest a request is held when a test forgets to open the gate: the run then fails, never hangs.
HOLD_LIMIT_S = 60.0
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}


class Gate:
    def __init__(self, upstream: str, holds: Callable[[Request], bool], *, times: int = 1) -> None:
        self._upstream = httpx.Client(base_url=upstream, timeout=30)
        self._holds = holds
        self._remaining = times
        self._lock = threading.Lock()
        self.held = threading.Event()
        self.opened = threading.Event()
        self.http = LoopbackServer(self._forward)

    @property
    def base_url(self) -> str:
        return self.http.base_url

    def wait_until_held(self, timeout: float = 60.0) -> None:
        if not self.held.wait(timeout):
            raise AssertionError(f"no request reached the gate within {timeout}s")

    def open(self) -> None:
        self.opened.set()

    def _forward(self, request: Request) -> Reply:
        with self._lock:
            hold = self._remaining > 0 and self._holds(request)
            if hold:
                self._remaining -= 1
        if hold:
            self.held.set()
            if not self.opened.wait(HOLD_LIMIT_S):
                return Reply(503, b'{"error": "the test never opened the gate"}')
        headers = {k: v for k, v in request.headers.items() if k not in _HOP_BY_HOP and k != "host"}
        answer = self._upstream.request(
            request.method, request.path, params=request.query, content=request.body, headers=headers
        )
        kept = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP}
        return Reply(answer.status_code, answer.content, kept)

    def __enter__(self) -> Gate:
        self.http.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.opened.set()
        self.http.stop()
        self._upstream.close()
