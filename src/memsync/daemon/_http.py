"""The optional loopback HTTP endpoint: ``/healthz`` and Prometheus ``/metrics``.

A stdlib ``ThreadingHTTPServer`` rather than prometheus-client's own server, because that one serves
only metrics and ``/healthz`` must answer from the daemon's state. Off unless ``[daemon.http] listen``
is set; the config only accepts loopback addresses.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memsync.errors import ConfigError

log = logging.getLogger("memsync.daemon.http")

Health = Callable[[], tuple[int, dict[str, Any]]]


def parse_listen(listen: str) -> tuple[str, int]:
    """``"127.0.0.1:9465"`` or ``"[::1]:9465"`` as (host, port)."""
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


class _Ipv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class HttpEndpoint:
    """Serves ``health()`` at ``/healthz`` and ``metrics()`` at ``/metrics`` on its own thread."""

    def __init__(self, listen: str, health: Health, metrics: Callable[[], bytes], content_type: str) -> None:
        host, port = parse_listen(listen)
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "memsync"

            def do_GET(self) -> None:
                endpoint._answer(self, head=False)

            def do_HEAD(self) -> None:
                endpoint._answer(self, head=True)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("http: " + format, *args)

        self._health = health
        self._metrics = metrics
        self._content_type = content_type
        server_class = _Ipv6Server if ":" in host else ThreadingHTTPServer
        try:
            self._server = server_class((host, port), Handler)
        except OSError as exc:
            raise ConfigError(f"daemon.http.listen: cannot listen on {listen}: {exc.strerror}") from None
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="memsync-http", daemon=True)

    @property
    def address(self) -> str:
        address = self._server.server_address
        host = address[0].decode() if isinstance(address[0], bytes) else str(address[0])
        return f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"

    def start(self) -> None:
        self._thread.start()
        log.info("serving /healthz and /metrics on http://%s", self.address)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()

    def _answer(self, request: BaseHTTPRequestHandler, *, head: bool) -> None:
        path = request.path.split("?", 1)[0]
        if path == "/healthz":
            status, document = self._health()
            body = (json.dumps(document, ensure_ascii=False) + "\n").encode("utf-8")
            content_type = "application/json"
        elif path == "/metrics":
            status, body, content_type = 200, self._metrics(), self._content_type
        else:
            status, body, content_type = 404, b"not found: try /healthz or /metrics\n", "text/plain"
        request.send_response(status)
        request.send_header("Content-Type", content_type)
        request.send_header("Content-Length", str(len(body)))
        request.send_header("Cache-Control", "no-store")
        request.end_headers()
        if not head:
            request.wfile.write(body)
