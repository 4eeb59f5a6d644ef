"""Running the server: open the database, seed it, bind the socket, serve until SIGTERM or SIGINT."""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import platformdirs
import uvicorn

from memsync.errors import EnvironmentProblem, UsageError
from memsync.rules import MAX_ANTHROPIC_MEMORIES, MAX_ANTHROPIC_VERSIONS

from .app import create_app
from .clock import parse_duration
from .faults import TransportExposingH11Protocol
from .qoder import CLOUD_PAGING, CloudPaging
from .seeding import load_seed_file
from .storage import Engine, StoreLimits

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
        if self.started and self._announce:
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


def _uvicorn_config(app: object) -> uvicorn.Config:
    return uvicorn.Config(
        app,  # type: ignore[arg-type]
        http=TransportExposingH11Protocol,
        lifespan="off",
        access_log=False,
        log_level="warning",
        timeout_graceful_shutdown=5,
    )


class BackgroundServer:
    """The reference server in a thread of this process, on a loopback port the kernel picks.

    For embedding (tests, tools) where a process of its own is not the point: the same app and
    HTTP protocol as ``memsync server``, without its signal handling. ``url`` is known once
    :meth:`start` returns; :meth:`stop` (or leaving the ``with`` block) shuts it down and closes
    the database.
    """

    START_DEADLINE_S = 30.0

    def __init__(self, db: Path, tokens: list[str], *, seed_file: Path | None = None) -> None:
        if not tokens:
            raise UsageError("the server needs a token")
        self.db, self.tokens, self.seed_file = db, tokens, seed_file
        self.url = ""
        self._engine: Engine | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    def start(self) -> BackgroundServer:
        self.db.parent.mkdir(parents=True, exist_ok=True)
        self._engine = Engine(self.db)
        if self.seed_file is not None:
            load_seed_file(self._engine, self.seed_file)
        self._socket = bind_socket("127.0.0.1", 0)
        self._server = _Server(_uvicorn_config(create_app(self._engine, tokens=self.tokens)), "")
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="memsync-server", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + self.START_DEADLINE_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise EnvironmentProblem("the reference server did not start in its thread")
            time.sleep(0.005)
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=15)
        if self._socket is not None:
            self._socket.close()
        if self._engine is not None:
            self._engine.close()
        self._server = self._thread = self._socket = self._engine = None

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


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
    anthropic_max_memories: int = MAX_ANTHROPIC_MEMORIES,
    anthropic_max_versions: int = MAX_ANTHROPIC_VERSIONS,
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
    limits = StoreLimits(memories=anthropic_max_memories, versions=anthropic_max_versions)
    engine = Engine(db_path, retention=retention, limits=limits)
    try:
        if seed_file is not None:
            load_seed_file(engine, seed_file)
        app = create_app(
            engine, tokens=tokens, fault_rate=fault_rate, fault_seed=fault_seed, cloud_paging=cloud_paging
        )
        sock = bind_socket(host, port)
        bound_port = sock.getsockname()[1]
        server = _Server(_uvicorn_config(app), f"listening on http://{_url_host(host)}:{bound_port}")
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
