"""Running the server: open the database, seed it, bind the socket, serve until SIGTERM or SIGINT."""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import platformdirs
import uvicorn

from memsync.errors import EnvironmentProblem, UsageError

from .app import create_app
from .clock import parse_duration
from .faults import TransportExposingH11Protocol
from .qoder import CLOUD_PAGING, CloudPaging
from .seeding import load_seed_file
from .storage import Engine

log = logging.getLogger("memsync.server")

DEFAULT_DB_NAME = "memstore.sqlite3"


def default_db_path() -> Path:
    return Path(platformdirs.user_data_dir("memsync", appauthor=False)) / "server" / DEFAULT_DB_NAME


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port); port 0 lets the kernel pick a free one."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"--host {host!r} is not an address this machine can bind: {exc}") from None
    family, kind, proto, _, address = infos[0]
    # The protocol must be IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted sockets only
    # then, and without it every keep-alive answer waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(family, kind, proto or socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise EnvironmentProblem(
            f"cannot listen on {host}:{port}: {exc.strerror}; choose another --port (0 picks a free one)"
        ) from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, announcing itself once it accepts, and exiting 0 on SIGTERM/SIGINT.

    uvicorn re-raises a caught signal after shutting down (so the process dies of it); a test
    fixture stopping the server wants a clean exit instead.
    """

    def __init__(self, config: uvicorn.Config, announce: str) -> None:
        super().__init__(config)
        self._announce = announce

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            print(self._announce, flush=True)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def run(
    *,
    host: str,
    port: int,
    db: Path | None,
    tokens: list[str],
    seed_file: Path | None,
    fault_rate: float,
    fault_seed: int | None,
    version_retention: str | None,
    cloud_paging: CloudPaging = "both",
) -> None:
    """Serve the reference Memory Store until SIGTERM or SIGINT (then return normally).

    Prints exactly one line to stdout, ``listening on http://HOST:PORT``, once it accepts connections.
    """
    retention = None if version_retention is None else parse_duration(version_retention)
    if not tokens:
        raise UsageError("the server needs a token: pass --token TOKEN or set MEMSYNC_SERVER_TOKEN")
    if not 0.0 <= fault_rate <= 1.0:
        raise UsageError(f"--fault-rate {fault_rate} is not a share between 0 and 1")
    if cloud_paging not in CLOUD_PAGING:
        raise UsageError(f"--cloud-paging {cloud_paging!r} is not one of {', '.join(CLOUD_PAGING)}")
    db_path = default_db_path() if db is None else db
    try:
        db_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot create the folder for --db {db_path}: {exc.strerror}") from None
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="memsync server: %(message)s")
    engine = Engine(db_path, retention=retention)
    try:
        if seed_file is not None:
            load_seed_file(engine, seed_file)
        app = create_app(
            engine, tokens=tokens, fault_rate=fault_rate, fault_seed=fault_seed, cloud_paging=cloud_paging
        )
        sock = bind_socket(host, port)
        bound_port = sock.getsockname()[1]
        config = uvicorn.Config(
            app,
            http=TransportExposingH11Protocol,
            lifespan="off",
            access_log=False,
            log_level="warning",
            timeout_graceful_shutdown=5,
        )
        server = _Server(config, f"listening on http://{_url_host(host)}:{bound_port}")
        try:
            server.run(sockets=[sock])
        finally:
            sock.close()
        if fault_rate > 0:
            injector = getattr(app, "app", None)
            snapshot = getattr(injector, "snapshot", None)
            if snapshot is not None:
                log.warning("faults injected: %s", snapshot())
    finally:
        engine.close()
