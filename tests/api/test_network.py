"""Networks as every HTTP tool treats them: a real forward proxy on loopback (``HTTP_PROXY``,
``NO_PROXY``, ``api.proxy``), a TLS front with a certificate made here (``api.ca_bundle``,
``SSL_CERT_FILE``), plain ``http://`` to another host refused, and an unreachable server named.

The API is addressed as ``memstore.test``, a name only the proxy resolves (to the reference server
on loopback): a request that reaches the server without the proxy cannot exist, and one that goes
direct fails to resolve. Loopback addresses never go through a proxy, which is why the name is needed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
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

from memsync.api import NO_RETRIES, BadRequest, RetryPolicy, TransportError, open_client
from memsync.api._network import Route, route_for
from memsync.config import parse_config
from memsync.errors import ConfigError
from memsync.rules import Dialect
from tests.support.ports import free_port
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

    def __init__(self, upstream: int, tls: ssl.SSLContext | None = None) -> None:
        self.upstream = upstream
        self.tls = tls
        self.requests: list[str] = []
        self.credentials: list[str | None] = []
        self.required: str | None = None  # a Proxy-Authorization value; others are answered 407
        self.writes_left: int | None = None  # then writes are answered 403, as a revoked grant is
        super().__init__(("127.0.0.1", 0), _ProxyHandler)

    def get_request(self) -> tuple[socket.socket, object]:
        raw, address = super().get_request()
        if self.tls is None:
            return raw, address
        # An https:// proxy: the client speaks TLS to the proxy itself (a refused handshake is an
        # OSError, which socketserver drops with the connection).
        return self.tls.wrap_socket(raw, server_side=True), address


class _ProxyHandler(BaseHTTPRequestHandler):
    """A forward proxy: absolute-URI requests relayed to the reference server (every host name is
    taken for it), CONNECT tunnelled to it, each counted."""

    server: _Proxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet: the count is the record
        pass

    def _refused(self) -> bool:
        self.server.credentials.append(self.headers.get("proxy-authorization"))
        if self.server.required is None or self.headers.get("proxy-authorization") == self.server.required:
            return False
        self.send_response(407, "Proxy Authentication Required")
        self.send_header("proxy-authenticate", 'Basic realm="test"')
        self.send_header("content-length", "0")
        self.end_headers()
        return True

    def _relay(self) -> None:
        self.server.requests.append(f"{self.command} {self.path}")
        if self._refused():
            return
        target = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else None
        if self.command != "GET" and self.server.writes_left is not None:
            if self.server.writes_left <= 0:
                refusal = b'{"type":"error","error":{"type":"permission_error","message":"writes revoked"}}'
                self.send_response(403)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(refusal)))
                self.end_headers()
                self.wfile.write(refusal)
                return
            self.server.writes_left -= 1
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
        if self._refused():
            return
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
            # Bytes TLS has already decrypted are not seen by select: pass them on now.
            while isinstance(sock, ssl.SSLSocket) and sock.pending():
                data += sock.recv(sock.pending())
            (b if sock is a else a).sendall(data)


@contextlib.contextmanager
def _serving(server: ServerProcess, tls: ssl.SSLContext | None = None) -> Iterator[_Proxy]:
    port = urllib.parse.urlsplit(server.base_url).port
    assert port is not None
    running = _Proxy(port, tls)
    thread = threading.Thread(target=running.serve_forever, daemon=True)
    thread.start()
    try:
        yield running
    finally:
        running.shutdown()
        running.server_close()


@pytest.fixture
def proxy(server: ServerProcess) -> Iterator[_Proxy]:
    with _serving(server) as running:
        yield running


@pytest.fixture(autouse=True)
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*PROXY_ENV, "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("environment", "url", "expected"),
    [
        ({}, "https://api.example.com", Route()),
        ({"HTTPS_PROXY": "http://p:3128"}, "https://api.example.com", Route("http://p:3128", "HTTPS_PROXY")),
        # Lower case wins, as in curl; a value without a scheme is an http:// proxy, as curl reads it.
        (
            {"HTTPS_PROXY": "http://upper:1", "https_proxy": "lower:2"},
            "https://api.example.com",
            Route("http://lower:2", "https_proxy"),
        ),
        ({"HTTPS_PROXY": "http://p:3128"}, "http://api.example.com", Route()),
        ({"ALL_PROXY": "http://p:3128"}, "http://api.example.com", Route("http://p:3128", "ALL_PROXY")),
        ({"all_proxy": "socks5://p:1080"}, "https://a.example", Route("socks5://p:1080", "all_proxy")),
        ({"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "example.com"}, "https://api.example.com", Route()),
        ({"HTTPS_PROXY": "http://p:3128", "no_proxy": ".example.com"}, "https://api.example.com", Route()),
        ({"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "*"}, "https://api.example.com", Route()),
        (
            {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "other.example.com,api.example.org"},
            "https://api.example.com",
            Route("http://p:3128", "HTTPS_PROXY"),
        ),
        (
            {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "api.example.com:8443"},
            "https://api.example.com:8443",
            Route(),
        ),
        # Loopback never goes through a proxy: one elsewhere would reach its own loopback.
        ({"HTTP_PROXY": "http://p:3128"}, "http://127.0.0.1:8765", Route()),
        ({"HTTP_PROXY": "http://p:3128"}, "http://[::1]:8765", Route()),
        ({"HTTP_PROXY": "http://p:3128"}, "http://localhost:8765", Route()),
    ],
)
def test_the_route_is_read_from_the_environment_as_curl_reads_it(
    environment: dict[str, str], url: str, expected: Route, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert route_for(url) == expected


def test_api_proxy_overrides_the_environment_but_not_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://env:3128")
    monkeypatch.setenv("NO_PROXY", "api.example.com")
    assert route_for("https://api.example.com", "http://cfg:3128") == Route("http://cfg:3128", "api.proxy")
    assert route_for("http://127.0.0.1:8765", "http://cfg:3128") == Route()
    # "" goes direct whatever the environment says, as curl --proxy "" does.
    assert route_for("https://api.example.com", "").proxy is None


def test_the_network_settings_are_read_from_the_config(tmp_path: Path) -> None:
    def api(**settings: object) -> dict[str, object]:
        return {
            "api": {"dialect": "forward", "base_url": "https://a.example", "token_env": "T", **settings},
            "mirror": {"root": "mirrors"},
        }

    defaults = parse_config(api()).api
    assert (defaults.proxy, defaults.ca_bundle, defaults.allow_plain_http) == (None, None, False)
    config = parse_config(
        api(proxy="http://p:3128", ca_bundle="certs/root.pem", allow_plain_http=True),
        source=tmp_path / "memsync.toml",
    ).api
    # A relative bundle is the config file's neighbour, as token_file is.
    assert (config.proxy, config.ca_bundle, config.allow_plain_http) == (
        "http://p:3128",
        tmp_path / "certs/root.pem",
        True,
    )
    assert parse_config(api(proxy="")).api.proxy == ""
    with pytest.raises(ConfigError, match=r"api\.proxy.*must be a proxy URL"):
        parse_config(api(proxy="proxy.example.com:3128"))
    with pytest.raises(ConfigError, match=r"api\.allow_plain_http"):
        parse_config(api(allow_plain_http="sometimes"))


def test_a_proxy_that_cannot_be_used_is_named_with_its_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("https_proxy", "ftp://user:secret@p:21")
    with pytest.raises(ConfigError, match=r"the proxy ftp://p:21 \(from https_proxy\) cannot be used") as bad:
        open_client(Dialect.FORWARD, "https://api.example.com", "token")
    assert "secret" not in str(bad.value)
    try:
        import socksio  # noqa: F401
    except ImportError:
        monkeypatch.setenv("https_proxy", "socks5://p:1080")
        with pytest.raises(ConfigError, match=r"from https_proxy\) is a SOCKS proxy.*httpx\[socks\]"):
            open_client(Dialect.FORWARD, "https://api.example.com", "token")


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


def _proxied_config(folder: Path, server: ServerProcess, proxy: _Proxy, api_extra: str = "") -> Path:
    """A config for the server under its proxy-only name, with ``api.proxy`` naming the test's proxy."""
    config = folder / "memsync.toml"
    config.write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{_named(server)}"\ntoken_env = "MS_TOKEN"\n'
        f'proxy = "http://127.0.0.1:{proxy.server_address[1]}"\n{api_extra}[mirror]\nroot = "mirrors"\n'
    )
    return config


@pytest.mark.e2e
def test_api_proxy_in_the_config_is_used_by_every_command(
    server: ServerProcess, proxy: _Proxy, tmp_path: Path, store_id: str
) -> None:
    config = _proxied_config(tmp_path, server, proxy, "allow_plain_http = true\n")
    done = memsync("--config", str(config), "stores", "--json", env={"MS_TOKEN": server.token})
    assert done.returncode == 0, done.stderr
    assert store_id in {row["id"] for row in json.loads(done.stdout)["stores"]} and proxy.requests


@pytest.mark.e2e
def test_plain_http_to_another_host_is_refused_before_any_request(
    server: ServerProcess, proxy: _Proxy, tmp_path: Path, store_id: str
) -> None:
    config = _proxied_config(tmp_path, server, proxy)
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
            f"subjectAltName=DNS:localhost,DNS:{NAME},IP:127.0.0.1",
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
    # Refused at once (the same certificate comes back on every attempt), named with what to set.
    refused = open_client(Dialect.FORWARD, tls_front, server.token)
    with refused, pytest.raises(TransportError) as untrusted:
        list(refused.list_stores())
    message = str(untrusted.value)
    assert message.startswith(f"cannot trust {tls_front}/api/v1/forward (GET /memory_stores:")
    assert "self-signed certificate; trusted: the bundled certifi roots" in message
    assert "set api.ca_bundle (or SSL_CERT_FILE)" in message
    assert untrusted.value.attempts == 1 and untrusted.value.certificate_refused
    with open_client(Dialect.FORWARD, tls_front, server.token, ca_bundle=cert) as client:
        made = client.create_store(f"tls-{uuid.uuid4().hex[:6]}", idempotency_key=str(uuid.uuid4()))
        assert made.id in {store.id for store in client.list_stores()}
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    with open_client(Dialect.FORWARD, tls_front, server.token) as client:
        assert made.id in {store.id for store in client.list_stores()}
    # SSL_CERT_DIR: a folder of certificates named by their subject hash, as `openssl rehash` makes.
    monkeypatch.delenv("SSL_CERT_FILE")
    folder = cert.parent / "roots"
    folder.mkdir(exist_ok=True)
    subject = subprocess.run(
        ["openssl", "x509", "-hash", "-noout", "-in", str(cert)], capture_output=True, text=True, check=True
    )
    (folder / f"{subject.stdout.strip()}.0").write_bytes(cert.read_bytes())
    monkeypatch.setenv("SSL_CERT_DIR", str(folder))
    with open_client(Dialect.FORWARD, tls_front, server.token) as client:
        assert made.id in {store.id for store in client.list_stores()}


def test_certificates_that_cannot_be_read_are_named_with_their_setting(
    server: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    absent = tmp_path / "absent.pem"
    with pytest.raises(ConfigError, match=r"api\.ca_bundle: cannot load certificates from .*absent\.pem"):
        open_client(Dialect.FORWARD, server.base_url, server.token, ca_bundle=absent)
    (tmp_path / "empty.pem").write_text("")
    with pytest.raises(ConfigError, match=r"api\.ca_bundle: cannot load certificates from .*empty\.pem"):
        open_client(Dialect.FORWARD, server.base_url, server.token, ca_bundle=tmp_path / "empty.pem")
    # httpx would let a FileNotFoundError out of every command: named instead.
    monkeypatch.setenv("SSL_CERT_FILE", str(absent))
    with pytest.raises(ConfigError, match=r"SSL_CERT_FILE: cannot load certificates from .*, or unset it"):
        open_client(Dialect.FORWARD, server.base_url, server.token)
    monkeypatch.delenv("SSL_CERT_FILE")
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path / "absent"))
    with pytest.raises(ConfigError, match=r"SSL_CERT_DIR names .*absent, which is not a folder"):
        open_client(Dialect.FORWARD, server.base_url, server.token)


def test_an_unreachable_server_is_named_with_what_was_tried() -> None:
    port = free_port()  # nothing listens there
    policy = RetryPolicy(max_attempts=3, initial_delay=0.0, jitter=0.0)
    client = open_client(Dialect.FORWARD, f"http://127.0.0.1:{port}", "token", retry=policy)
    with client, pytest.raises(TransportError) as lost:
        list(client.list_stores())
    message = str(lost.value)
    assert message.startswith(f"cannot reach http://127.0.0.1:{port}/api/v1/forward (GET /memory_stores:")
    assert "3 attempt(s)" in message and "check that the server is running" in message


def test_https_goes_through_the_proxy_as_a_tunnel_with_its_credentials_never_logged(
    server: ServerProcess,
    proxy: _Proxy,
    tls_front: str,
    certificate: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    store_id: str,
) -> None:
    """The corporate case: HTTPS_PROXY with credentials, CONNECT to the API's name, a private root."""
    cert, _ = certificate
    named = tls_front.replace("localhost", NAME)
    port = proxy.server_address[1]
    monkeypatch.setenv("HTTPS_PROXY", f"http://alice:s3cret@127.0.0.1:{port}")
    with (
        caplog.at_level(logging.INFO, logger="memsync.api"),
        open_client(Dialect.FORWARD, named, server.token, ca_bundle=cert) as client,
    ):
        assert store_id in {store.id for store in client.list_stores()}
        for _ in range(5):
            assert client.get_store(store_id).id == store_id
    # Six requests, one tunnel: the proxied client keeps its pooled connection as the direct one does.
    assert proxy.requests == [f"CONNECT {NAME}:{urllib.parse.urlsplit(named).port}"]
    assert proxy.credentials == ["Basic " + base64.b64encode(b"alice:s3cret").decode()]
    assert f"go through the proxy http://127.0.0.1:{port} (from HTTPS_PROXY)" in caplog.text
    assert "s3cret" not in caplog.text and "alice" not in caplog.text


def test_an_https_proxy_is_verified_with_the_same_roots_as_the_api(
    server: ServerProcess,
    tls_front: str,
    certificate: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    store_id: str,
) -> None:
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    named = tls_front.replace("localhost", NAME)
    with _serving(server, context) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", f"https://localhost:{proxy.server_address[1]}")
        with open_client(Dialect.FORWARD, named, server.token, ca_bundle=cert) as client:
            assert store_id in {store.id for store in client.list_stores()}
        assert proxy.requests == [f"CONNECT {NAME}:{urllib.parse.urlsplit(named).port}"]


def test_a_proxy_that_does_not_answer_is_named_in_the_message(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()  # nothing listens there
    monkeypatch.setenv("https_proxy", f"http://bob:pw@127.0.0.1:{port}")
    client = open_client(Dialect.FORWARD, f"https://{NAME}", "token", retry=NO_RETRIES)
    with client, pytest.raises(TransportError) as lost:
        list(client.list_stores())
    message = str(lost.value)
    assert message.startswith(
        f"cannot reach https://{NAME}/api/v1/forward through the proxy http://127.0.0.1:{port}"
        " (from https_proxy) (GET /memory_stores: ConnectError:"
    )
    assert "bob" not in message and ":pw@" not in message


def test_a_proxy_that_wants_credentials_fails_at_once_saying_where_they_go(
    server: ServerProcess, proxy: _Proxy, tls_front: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy.required = "Basic " + base64.b64encode(b"carol:pw").decode()
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.server_address[1]}")
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.server_address[1]}")
    # CONNECT refused: the proxy's decision, the same on every attempt, so one attempt.
    tunnel = open_client(Dialect.FORWARD, tls_front.replace("localhost", NAME), server.token)
    with tunnel, pytest.raises(TransportError) as refused:
        list(tunnel.list_stores())
    assert refused.value.attempts == 1 and refused.value.proxy_refused
    assert "(from HTTPS_PROXY): GET /memory_stores: the proxy answered 407" in str(refused.value)
    assert "http://user:password@host:port" in str(refused.value)
    # An http:// request the proxy forwards gets its 407 as an answer: the same hint.
    plain = open_client(Dialect.FORWARD, _named(server), server.token, allow_plain_http=True)
    with plain, pytest.raises(BadRequest, match=r"HTTP 407.*http://user:password@host:port"):
        list(plain.list_stores())
    assert len(proxy.requests) == 2
