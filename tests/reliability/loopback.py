"""A real HTTP/1.1 server on 127.0.0.1 (port 0) in a thread, answering with a Python function.

It stands in for a Memory Store API that misbehaves (``standin.py``) and carries the gate proxy that
holds chosen requests of a real server until a test lets them go (``gate.py``). It speaks plain
sockets through ``http.server``, so it can do what a well-behaved framework will not: close the
connection without an answer, stream a body with no declared length, or answer with broken JSON.
"""

from __future__ import annotations

import http.server
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, urlsplit

CHUNK = 64 * 1024


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: bytes


@dataclass
class Reply:
    """An answer. ``body`` as an iterable of chunks is sent chunked (no length declared);
    ``drop`` closes the connection without answering at all."""

    status: int = 200
    body: bytes | Iterable[bytes] = b""
    headers: Mapping[str, str] = field(default_factory=lambda: {"content-type": "application/json"})
    drop: bool = False


Handler = Callable[[Request], Reply]


class _RequestHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the tests read what they need from ``LoopbackServer.requests``."""

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        request = Request(
            method=self.command,
            path=parts.path,
            query=dict(parse_qsl(parts.query, keep_blank_values=True)),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
        )
        owner = self.server.owner
        with owner.lock:
            owner.requests.append(request)
        try:
            reply = owner.handle(request)
        except Exception:  # a broken handler is a broken test: record it, answer 599
            owner.errors.append(traceback.format_exc())
            reply = Reply(599, b'{"error": "the test handler failed"}')
        if reply.drop:
            self.close_connection = True
            return
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if isinstance(reply.body, bytes):
            self.send_header("content-length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
            return
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            for chunk in reply.body:
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            # The client hung up mid-body: what a size cap does; nothing to answer any more.
            self.close_connection = True

    do_GET = _serve
    do_POST = _serve
    do_PUT = _serve
    do_DELETE = _serve


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    owner: LoopbackServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client hanging up mid-answer is what the size-cap trials expect, not an error to print.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class LoopbackServer:
    """Serve ``handle`` on 127.0.0.1 until :meth:`stop` (or the end of a ``with`` block)."""

    def __init__(self, handle: Handler) -> None:
        self.handle = handle
        self.lock = threading.Lock()
        self.requests: list[Request] = []
        self.errors: list[str] = []
        self._server = _Server(("127.0.0.1", 0), _RequestHandler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> LoopbackServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
