"""daemon.http.listen: loopback only, validated with the config; the endpoint on IPv4 and IPv6."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from memsync.config import parse_config
from memsync.daemon._http import HttpEndpoint
from memsync.errors import ConfigError


def _with_listen(listen: str) -> object:
    return parse_config(
        {
            "api": {"dialect": "forward", "base_url": "http://127.0.0.1:1", "token_env": "T"},
            "mirror": {"root": "/tmp/m"},
            "daemon": {"http": {"listen": listen}},
        }
    )


@pytest.mark.parametrize("listen", ["127.0.0.1:9465", "127.0.0.2:0", "[::1]:9465", "localhost:9465"])
def test_loopback_addresses_are_accepted(listen: str) -> None:
    _with_listen(listen)


@pytest.mark.parametrize(
    ("listen", "why"),
    [
        ("0.0.0.0:9465", "not a loopback address"),
        ("192.168.1.4:9465", "not a loopback address"),
        ("[::]:9465", "not a loopback address"),
        ("metrics.example:9465", "not a loopback address"),
        ("127.0.0.1", "not host:port"),
        ("127.0.0.1:99999", "not host:port"),
    ],
)
def test_anything_else_is_a_config_error_naming_the_key(listen: str, why: str) -> None:
    with pytest.raises(ConfigError) as info:
        _with_listen(listen)
    assert "daemon.http.listen" in str(info.value) and why in str(info.value)


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.parametrize("listen", ["127.0.0.1:0", "[::1]:0"])
def test_the_endpoint_answers_get_and_head(listen: str) -> None:
    if listen.startswith("[") and not _ipv6_loopback():
        pytest.skip("no IPv6 loopback on this machine")
    endpoint = HttpEndpoint(listen, lambda: (200, {"status": "ok"}), lambda: b"m 1\n", "text/plain")
    endpoint.start()
    try:
        base = f"http://{endpoint.address}"
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as answer:
            assert answer.read() == b'{"status": "ok"}\n'
        head = urllib.request.Request(f"{base}/metrics", method="HEAD")
        with urllib.request.urlopen(head, timeout=5) as answer:
            assert answer.headers["Content-Length"] == "4" and answer.read() == b""
    finally:
        endpoint.stop()


def test_a_port_in_use_is_a_config_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=r"daemon\.http\.listen: cannot listen on"):
            HttpEndpoint(f"127.0.0.1:{port}", lambda: (200, {}), lambda: b"", "text/plain")
