"""A real git smart-HTTP server for tests: ``git http-backend`` behind HTTP Basic auth, on 127.0.0.1.

It records every request line and header it receives, so a test can check that a password only
ever travels in the ``Authorization`` header of the requests that need it.
"""

from __future__ import annotations

import base64
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class SmartHttp:
    root: Path
    user: str
    password: str
    base_url: str = ""
    requests: list[str] = field(default_factory=list)  # "METHOD path" + headers, as received
    refused: int = 0


def _handler(state: SmartHttp) -> type[BaseHTTPRequestHandler]:
    expected = "Basic " + base64.b64encode(f"{state.user}:{state.password}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet
            return

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks: list[bytes] = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        self.rfile.readline()
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _serve(self) -> None:
            state.requests.append(f"{self.command} {self.path}\n{self.headers}")
            body = self._body()
            if self.headers.get("Authorization") != expected:
                state.refused += 1
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="backups"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            path, _, query = self.path.partition("?")
            env = {
                "GIT_PROJECT_ROOT": str(state.root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "REQUEST_METHOD": self.command,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "REMOTE_USER": state.user,
                "REMOTE_ADDR": "127.0.0.1",
                "PATH": "/usr/bin:/bin",
            }
            done = subprocess.run(
                ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
            )
            head, _, payload = done.stdout.partition(b"\r\n\r\n")
            status = 200
            headers = []
            for line in head.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(": ")
                if name.lower() == "status":
                    status = int(value.split()[0])
                elif name:
                    headers.append((name, value))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler


@contextmanager
def smart_http(root: Path, user: str, password: str) -> Iterator[SmartHttp]:
    """Serve the bare repositories under ``root`` at ``http://127.0.0.1:PORT/<name>.git``."""
    state = SmartHttp(root=root, user=user, password=password)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
