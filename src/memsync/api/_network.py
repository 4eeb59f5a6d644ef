"""How requests reach the API: directly or through a proxy, with which certificates, and never with
the token in cleartext across a network.

httpx's ``Client`` reads ``HTTPS_PROXY`` and friends, but memsync sends through an
``httpx.HTTPTransport`` directly (memsync.api._transport says why), which reads none of them. A client
talks to one host, so the route is chosen once, when the client is made: the proxy the environment
(``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, ``NO_PROXY``, in either case, as curl reads them; on
macOS and Windows the system's settings too, through :func:`urllib.request.getproxies`) or
``api.proxy`` names for that host, or none. One transport, one pool: the fast path is the same with a
proxy as without. Loopback never goes through a proxy: a proxy elsewhere would reach its own.

Certificates, also chosen once: ``api.ca_bundle`` (a corporate TLS inspection's root), else
``SSL_CERT_FILE``, else ``SSL_CERT_DIR``, else certifi's bundle (:func:`trust_for`). The route and the
certificates each keep the setting that chose them, so that a failure can name it: users rarely
remember which variable sent them through a proxy.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from memsync.errors import ConfigError

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("memsync.api")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine: ``localhost`` (and ``*.localhost``), 127/8, ``::1``."""
    name = host.strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_plain_http(base_url: str, *, allowed: bool) -> None:
    """Refuse a plain ``http://`` base URL on another machine unless the config allows it by name."""
    parts = urlsplit(base_url)
    if parts.scheme != "http" or is_loopback(parts.hostname or "") or allowed:
        return
    raise ConfigError(
        f"api.base_url is {display_url(base_url)}: plain http:// to another machine would send"
        " the API token across the network in cleartext, where anyone on the way can read and reuse"
        " it. Use https://, or, on a network you trust, set api.allow_plain_http = true"
    )


@dataclass(frozen=True)
class Route:
    """How a client's requests leave this machine: direct (``proxy`` None) or through ``proxy``, which
    ``source`` named (``api.proxy``, the environment variable, or the system's settings). Messages say
    the source, because a proxy nobody remembers setting is the usual reason a server "is down"."""

    proxy: str | None = None
    source: str | None = None

    def __str__(self) -> str:
        if self.proxy is None:
            return "direct"
        return f"through the proxy {display_url(self.proxy)} (from {self.source})"


def route_for(base_url: str, configured: str | None = None) -> Route:
    """The route requests to ``base_url`` take: ``configured`` (api.proxy; "" for none), else the
    environment's proxy for its scheme unless NO_PROXY names its host, else direct. Loopback is
    always direct."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if is_loopback(host):
        return Route()
    if configured is not None:
        return Route(configured or None, "api.proxy")
    import urllib.request

    proxies = urllib.request.getproxies()
    if not proxies:
        return Route()
    if urllib.request.proxy_bypass(f"{host}:{parts.port}" if parts.port else host):
        return Route()
    for key in (parts.scheme, "all"):
        value = proxies.get(key)
        if value:
            # curl and httpx.Client read "proxy.corp:3128" as an http:// proxy; httpx's transport
            # refuses a URL without a scheme, so it is added here.
            url = value if "://" in value else f"http://{value}"
            return Route(url, _environment_source(key))
    return Route()


def _environment_source(key: str) -> str:
    """The variable urllib took the proxy for ``key`` from (it prefers the lower-case one)."""
    for name in (f"{key}_proxy", f"{key.upper()}_PROXY"):
        if os.environ.get(name):
            return name
    return "the system's proxy settings"


def display_url(url: str) -> str:
    """``url`` with any ``user:password@`` removed: what a log line or a message may show."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


@dataclass(frozen=True)
class Trust:
    """The certificates a client trusts, and the setting that chose them (a refused certificate's
    message names it). ``context`` None is httpx's default, certifi's bundle."""

    context: ssl.SSLContext | None = None
    source: str = "the bundled certifi roots"


def trust_for(ca_bundle: Path | None) -> Trust:
    """``api.ca_bundle``, else ``SSL_CERT_FILE``, else ``SSL_CERT_DIR``, else certifi's: httpx's order,
    with ``api.ca_bundle`` first. The context is made here rather than by httpx so that a file that
    cannot be read is a ConfigError naming its setting (httpx lets the FileNotFoundError out), and so
    that an https:// proxy is verified with the same roots as the API (httpx gives it certifi's)."""
    if ca_bundle is not None:
        return Trust(_load_roots("api.ca_bundle", ca_bundle), f"api.ca_bundle {ca_bundle}")
    file = os.environ.get("SSL_CERT_FILE")
    if file:
        return Trust(_load_roots("SSL_CERT_FILE", Path(file)), f"SSL_CERT_FILE {file}")
    folder = os.environ.get("SSL_CERT_DIR")
    if folder:
        if not os.path.isdir(folder):
            # OpenSSL reads the folder lazily: a wrong name would only show as every certificate refused.
            raise ConfigError(
                f"SSL_CERT_DIR names {folder}, which is not a folder; name the folder of hashed"
                " certificates (openssl rehash), or unset it"
            )
        return Trust(ssl.create_default_context(capath=folder), f"SSL_CERT_DIR {folder}")
    return Trust()


def _load_roots(setting: str, path: Path) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=str(path))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"{setting}: cannot load certificates from {path}: {exc}; name a readable PEM file (for a"
            " network that inspects TLS, the certificate of the CA it signs with)"
            + ("" if setting == "api.ca_bundle" else ", or unset it")
        ) from None


def transport_for(
    base_url: str,
    route: Route,
    trust: Trust,
    *,
    max_connections: int,
) -> httpx.HTTPTransport:
    """The one transport a client sends through: its pool, its route, its certificates."""
    import httpx

    if route.proxy is not None:
        log.info("requests to %s go %s", urlsplit(base_url).hostname, route)
    try:
        proxy: httpx.Proxy | None = None
        if route.proxy is not None:
            # Only a TLS proxy takes a context of its own (httpcore refuses one for http://).
            tls = route.proxy.startswith("https://")
            proxy = httpx.Proxy(route.proxy, ssl_context=trust.context if tls else None)
        # The same pool either way: a proxied client keeps the direct one's connections and limits.
        return httpx.HTTPTransport(
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            verify=True if trust.context is None else trust.context,
            proxy=proxy,
        )
    except ValueError as exc:  # a proxy URL httpx cannot use (an unknown scheme)
        raise ConfigError(
            f"the proxy {display_url(route.proxy or '')} (from {route.source}) cannot be used: {exc}"
        ) from None
    except ImportError:  # socks5:// needs httpx's optional SOCKS support
        raise ConfigError(
            f"the proxy {display_url(route.proxy or '')} (from {route.source}) is a SOCKS proxy, which"
            " needs the socksio package: pip install 'httpx[socks]', or name an http:// proxy"
        ) from None
