"""Networks as every HTTP tool treats them: a real forward proxy on loopback (``HTTP_PROXY``,
``NO_PROXY``, ``api.proxy``), a TLS front with a certificate made here (``api.ca_bundle``,
``SSL_CERT_FILE``), plain ``http://`` to another host refused, and an unreachable server named.

The API is addressed as ``memstore.test``, a name only the proxy resolves (to the reference server
on loopback): a request that reaches the server without the proxy cannot exist, and one that goes
direct fails to resolve. Loopback addresses never go through a proxy, which is why the name is needed.
"""

from __future__ import annotations

import json
import select
import socket
import socketserver
import ssl
import subprocess
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import pytest

from memsync.api import NO_RETRIES, RetryPolicy, TransportError, open_client
from memsync.errors import ConfigError
from memsync.rules import Dialect
from tests.support.server import ServerProcess
from tests.test_cli import memsync

NAME = "memstore.test"
PROXY_ENV = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
)


class _Proxy(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.requests: list[str] = []
        super().__init__(("127.0.0.1", 0), _ProxyHandler)


class _ProxyHandler(BaseHTTPRequestHandler):
    """A forward proxy: absolute-URI requests relayed to the reference server (every host name is
    taken for it), CONNECT tunnelled to it, each counted."""

    server: _Proxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet: the count is the record
        pass

    def _relay(self) -> None:
        self.server.requests.append(f"{self.command} {self.path}")
        target = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "proxy-connection")}
        path = target.path + (f"?{target.query}" if target.query else "")
        upstream = f"http://127.0.0.1:{self.server.upstream}{path}"
        # trust_env off: the proxy settings under test are the proxy's own environment too.
        answer = httpx.request(self.command, upstream, headers=headers, content=body, trust_env=False)
        self.send_response(answer.status_code)
        for key, value in answer.headers.items():
            if key.lower() not in ("transfer-encoding", "connection", "content-length", "content-encoding"):
                self.send_header(key, value)
        self.send_header("content-length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _relay

    def do_CONNECT(self) -> None:
        self.server.requests.append(f"CONNECT {self.path}")
        _, _, port = self.path.rpartition(":")
        with socket.create_connection(("127.0.0.1", int(port))) as upstream:
            self.send_response(200, "Connection established")
            self.end_headers()
            _pipe(self.connection, upstream)
        self.close_connection = True


def _pipe(a: socket.socket, b: socket.socket) -> None:
    while True:
        readable, _, _ = select.select([a, b], [], [], 30)
        if not readable:
            return
        for sock in readable:
            data = sock.recv(65536)
            if not data:
                return
            (b if sock is a else a).sendall(data)


@pytest.fixture
def proxy(server: ServerProcess) -> Iterator[_Proxy]:
    port = urllib.parse.urlsplit(server.base_url).port
    assert port is not None
    running = _Proxy(port)
    thread = threading.Thread(target=running.serve_forever, daemon=True)
    thread.start()
    yield running
    running.shutdown()
    running.server_close()


@pytest.fixture(autouse=True)
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*PROXY_ENV, "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def store_id(server: ServerProcess) -> str:
    """A store to see through every route (the session's server may hold no other yet)."""
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        return client.create_store(f"net-{uuid.uuid4().hex[:6]}", idempotency_key=str(uuid.uuid4())).id


def _named(server: ServerProcess) -> str:
    return server.base_url.replace("127.0.0.1", NAME)


def test_requests_go_through_the_proxy_the_environment_names(
    server: ServerProcess, proxy: _Proxy, monkeypatch: pytest.MonkeyPatch, store_id: str
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.server_address[1]}")
    with open_client(Dialect.FORWARD, _named(server), server.token, allow_plain_http=True) as client:
        assert store_id in {store.id for store in client.list_stores()}
    assert proxy.requests and all(f"http://{NAME}:" in r for r in proxy.requests)
    # Lower case, as curl reads it too, and NO_PROXY naming the host sends it direct (and so fails:
    # only the proxy knows the name).
    monkeypatch.delenv("HTTP_PROXY")
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{proxy.server_address[1]}")
    monkeypatch.setenv("NO_PROXY", "example.org,.test")
    before = len(proxy.requests)
    with (
        open_client(
            Dialect.FORWARD, _named(server), server.token, allow_plain_http=True, retry=NO_RETRIES
        ) as client,
        pytest.raises(TransportError, match=f"cannot reach http://{NAME}"),
    ):
        list(client.list_stores())
    assert len(proxy.requests) == before


def test_api_proxy_in_the_config_is_used_by_every_command(
    server: ServerProcess, proxy: _Proxy, tmp_path: Path, store_id: str
) -> None:
    config = tmp_path / "memsync.toml"
    config.write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{_named(server)}"\ntoken_env = "MS_TOKEN"\n'
        f'proxy = "http://127.0.0.1:{proxy.server_address[1]}"\nallow_plain_http = true\n'
        '[mirror]\nroot = "mirrors"\n'
    )
    done = memsync("--config", str(config), "stores", "--json", env={"MS_TOKEN": server.token})
    assert done.returncode == 0, done.stderr
    assert store_id in {row["id"] for row in json.loads(done.stdout)["stores"]} and proxy.requests


def test_plain_http_to_another_host_is_refused_before_any_request(
    server: ServerProcess, proxy: _Proxy, tmp_path: Path, store_id: str
) -> None:
    config = tmp_path / "memsync.toml"
    config.write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{_named(server)}"\ntoken_env = "MS_TOKEN"\n'
        f'proxy = "http://127.0.0.1:{proxy.server_address[1]}"\n[mirror]\nroot = "mirrors"\n'
    )
    done = memsync("--config", str(config), "pull", "--json", env={"MS_TOKEN": server.token})
    assert done.returncode == 2
    assert "cleartext" in done.stderr and "api.allow_plain_http = true" in done.stderr
    assert json.loads(done.stdout)["exit_code"] == 2
    assert proxy.requests == []
    # Loopback is this machine: plain http there needs no setting (the demo, the tests).
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        assert store_id in {store.id for store in client.list_stores()}


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    made = subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"openssl cannot make a certificate here: {made.stderr.strip()}")
    return cert, key


@pytest.fixture
def tls_front(server: ServerProcess, certificate: tuple[Path, Path]) -> Iterator[str]:
    """``https://localhost:PORT``: TLS ended here with the test's certificate, relayed to the server."""
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    upstream = urllib.parse.urlsplit(server.base_url).port
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(raw: socket.socket) -> None:
        try:
            with (
                context.wrap_socket(raw, server_side=True) as tls,
                socket.create_connection(("127.0.0.1", upstream)) as plain,
            ):
                _pipe(tls, plain)
        except (OSError, ssl.SSLError):
            pass  # a client that refused the certificate hangs up mid-handshake

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=serve, args=(raw,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"https://localhost:{listener.getsockname()[1]}"
    stop.set()
    thread.join(timeout=5)
    listener.close()


def test_a_private_ca_is_trusted_through_ca_bundle_or_ssl_cert_file(
    server: ServerProcess, tls_front: str, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, _ = certificate
    refused = open_client(Dialect.FORWARD, tls_front, server.token, retry=NO_RETRIES)
    with refused, pytest.raises(TransportError, match=r"(?i)certificate verify failed"):
        list(refused.list_stores())
    with open_client(Dialect.FORWARD, tls_front, server.token, ca_bundle=cert) as client:
        made = client.create_store(f"tls-{uuid.uuid4().hex[:6]}", idempotency_key=str(uuid.uuid4()))
        assert made.id in {store.id for store in client.list_stores()}
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    with open_client(Dialect.FORWARD, tls_front, server.token) as client:
        assert made.id in {store.id for store in client.list_stores()}


def test_a_ca_bundle_that_cannot_be_read_is_named(server: ServerProcess, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"api\.ca_bundle: cannot load certificates from"):
        open_client(Dialect.FORWARD, server.base_url, server.token, ca_bundle=tmp_path / "absent.pem")


def test_an_unreachable_server_is_named_with_what_was_tried() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again when the block ends: nothing listens there
    policy = RetryPolicy(max_attempts=3, initial_delay=0.0, jitter=0.0)
    client = open_client(Dialect.FORWARD, f"http://127.0.0.1:{port}", "token", retry=policy)
    with client, pytest.raises(TransportError) as lost:
        list(client.list_stores())
    message = str(lost.value)
    assert message.startswith(f"cannot reach http://127.0.0.1:{port}/api/v1/forward (GET /memory_stores:")
    assert "3 attempt(s)" in message and "check that the server is running" in message
