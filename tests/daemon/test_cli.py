"""``memsync daemon`` as a subprocess against the real reference server: --once exit codes, one
daemon per mirror root, SIGTERM/SIGINT, and a remote write reaching the checkout."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from memsync.api import Client, Store
from memsync.daemon import read_state
from memsync.sync.pull import store_lock
from tests.support.server import ServerProcess
from tests.support.waiting import wait_for

# Every test here runs the daemon as a process and signals it.
pytestmark = pytest.mark.e2e

TOKEN_ENV = "MEMSYNC_DAEMON_TEST_TOKEN"
DEFAULT_LOG = 'level = "info"'


def write_config(
    tmp_path: Path, server: ServerProcess, store: Store, *, extra: str = "", log: str = ""
) -> Path:
    config = tmp_path / "memsync.toml"
    config.write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{server.base_url}"\ntoken_env = "{TOKEN_ENV}"\n'
        f'[mirror]\nroot = "mirrors"\n[stores]\ninclude = ["{store.id}"]\n'
        f'[daemon]\ninterval = "500ms"\njitter = "0s"\nshutdown_deadline = "10s"\n{extra}\n'
        f"[log]\n{log or DEFAULT_LOG}\n"
    )
    return config


def run(config: Path, *args: str, token: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memsync", "--config", str(config), "daemon", *args],
        capture_output=True,
        text=True,
        env={**os.environ, TOKEN_ENV: token},
        timeout=60,
    )


@dataclass
class DaemonProcess:
    """A running ``memsync daemon`` whose stderr is collected line by line."""

    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    pump: threading.Thread | None = None

    @classmethod
    def start(cls, config: Path, token: str) -> DaemonProcess:
        process = subprocess.Popen(
            [sys.executable, "-m", "memsync", "--config", str(config), "daemon"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, TOKEN_ENV: token, "PYTHONUNBUFFERED": "1"},
        )
        daemon = cls(process)
        daemon.pump = threading.Thread(target=daemon._pump, daemon=True)
        daemon.pump.start()
        wait_for(lambda: daemon.logged("daemon started") or daemon.exited(), what="the daemon to start")
        assert process.poll() is None, daemon.log()
        return daemon

    def _pump(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    def logged(self, text: str) -> str | None:
        return next((line for line in list(self.lines) if text in line), None)

    def exited(self) -> bool:
        return self.process.poll() is not None

    def log(self) -> str:
        return "".join(self.lines)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise


@pytest.fixture
def store(client: Client) -> Store:
    made = client.create_store(f"cli-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()))
    client.create_memory(made.id, "notes/a.md", "one\n")
    return made


@pytest.fixture
def daemons() -> Iterator[list[DaemonProcess]]:
    started: list[DaemonProcess] = []
    yield started
    for daemon in started:
        if not daemon.exited():
            daemon.process.kill()
            daemon.process.wait()
        # The pump ends at the pipe's end of file; then the pipe can be closed.
        if daemon.pump is not None:
            daemon.pump.join(timeout=10)
        if daemon.process.stderr is not None:
            daemon.process.stderr.close()


# --- --once ---------------------------------------------------------------------------------------


def test_once_pulls_every_store_and_exits_0_with_json_logs_free_of_the_token(
    tmp_path: Path, server: ServerProcess, store: Store
) -> None:
    config = write_config(tmp_path, server, store, log='format = "json"\nlevel = "debug"')
    result = run(config, "--once", "--json", token=server.token)
    assert result.returncode == 0, result.stderr
    entry = json.loads(result.stdout)["stores"][0]
    assert entry["id"] == store.id and entry["ok"] and entry["imported"] == 1
    assert (tmp_path / "mirrors" / store.id / "notes" / "a.md").read_text() == "one\n"
    logs = [json.loads(line) for line in result.stderr.splitlines()]
    assert any(
        e["logger"] == "memsync.api" and e["message"].startswith("HTTP ") for e in logs
    )  # every request is logged at debug...
    assert server.token not in result.stderr  # ...and the token never is
    state = read_state(tmp_path / "mirrors" / store.id)
    assert state is not None and state.status == "stopped" and state.last_cycle is not None
    assert state.last_cycle.triggers == ["once"] and state.last_success is not None


def test_once_exits_75_when_the_store_lock_is_held(
    tmp_path: Path, server: ServerProcess, store: Store
) -> None:
    config = write_config(tmp_path, server, store)
    with store_lock(tmp_path / "mirrors", store.id):
        result = run(config, "--once", token=server.token)
    assert result.returncode == 75, result.stderr
    assert "try again" in result.stdout


def test_once_exits_1_when_a_store_fails(tmp_path: Path, server: ServerProcess, store: Store) -> None:
    config = write_config(tmp_path, server, store)
    # Something that is not a mirror where the store's mirror belongs: memsync refuses to touch it.
    squatter = tmp_path / "mirrors" / store.id
    squatter.mkdir(parents=True)
    (squatter / "precious.txt").write_text("not a mirror\n")
    result = run(config, "--once", "--json", token=server.token)
    assert result.returncode == 1, result.stderr
    entry = json.loads(result.stdout)["stores"][0]
    assert not entry["ok"] and "not an empty directory" in entry["error"]


def test_once_exits_4_when_a_conflict_waits_for_the_user(
    tmp_path: Path, server: ServerProcess, client: Client, store: Store
) -> None:
    config = write_config(tmp_path, server, store)
    assert run(config, "--once", token=server.token).returncode == 0
    (tmp_path / "mirrors" / store.id / "notes" / "a.md").write_text("changed here\n")
    memory = client.find_memory(store.id, "notes/a.md")
    assert memory is not None
    client.update_memory(store.id, memory.id, "changed there\n", expected_sha256=memory.content_sha256)
    result = run(config, "--once", "--json", token=server.token)
    assert result.returncode == 4, result.stdout + result.stderr
    entry = json.loads(result.stdout)["stores"][0]
    assert entry["conflicts"] == [{"path": "notes/a.md"}]
    state = read_state(tmp_path / "mirrors" / store.id)
    assert state is not None and state.open_conflicts == ["notes/a.md"]


def test_once_exits_3_when_the_token_is_refused(tmp_path: Path, server: ServerProcess, store: Store) -> None:
    config = write_config(tmp_path, server, store)
    result = run(config, "--once", token="refused-token-123456")
    assert result.returncode == 3, result.stderr
    assert "refused-token-123456" not in result.stderr + result.stdout


def test_a_non_loopback_listen_address_is_a_config_error(
    tmp_path: Path, server: ServerProcess, store: Store
) -> None:
    config = write_config(tmp_path, server, store, extra='[daemon.http]\nlisten = "0.0.0.0:9465"')
    result = run(config, "--once", token=server.token)
    assert result.returncode == 2
    assert "daemon.http.listen" in result.stderr and "loopback" in result.stderr


# --- the long-running daemon ----------------------------------------------------------------------


def test_a_remote_write_reaches_the_checkout_and_a_second_daemon_exits_75(
    tmp_path: Path, server: ServerProcess, client: Client, store: Store, daemons: list[DaemonProcess]
) -> None:
    config = write_config(tmp_path, server, store, extra='[daemon.http]\nlisten = "127.0.0.1:0"')
    daemon = DaemonProcess.start(config, server.token)
    daemons.append(daemon)
    checkout = tmp_path / "mirrors" / store.id
    wait_for(lambda: (checkout / "notes" / "a.md").exists(), what="the first cycle's checkout")

    client.create_memory(store.id, "remote/b.md", "written remotely\n")
    written = checkout / "remote" / "b.md"
    # The checkout creates the file, then fills it: wait for its content, not for its name.
    wait_for(
        lambda: written.exists() and written.read_text() == "written remotely\n",
        what="the remote write in the checkout",
    )
    assert written.read_text() == "written remotely\n"

    serving = daemon.logged("serving /healthz")
    assert serving is not None
    address = re.search(r"http://(\S+)", serving).group(1)  # type: ignore[union-attr]
    with urllib.request.urlopen(f"http://{address}/healthz", timeout=5) as answer:
        assert answer.status == 200

    def metrics() -> str:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as answer:
            return str(answer.read().decode())

    # The file is on disk a moment before the cycle that wrote it has ended and been counted.
    imported = f'memsync_versions_imported_total{{store="{store.id}"}} 2.0'
    wait_for(lambda: imported in metrics(), what="the imports in /metrics")

    second = run(config, token=server.token)
    assert second.returncode == 75
    assert "another memsync daemon is already running" in second.stderr

    assert daemon.stop() == 0, daemon.log()
    state = read_state(checkout)
    assert state is not None and state.status == "stopped" and state.daemon_pid == daemon.process.pid
    assert server.token not in daemon.log()


def test_a_save_requests_a_cycle_that_pushes_it(
    tmp_path: Path, server: ServerProcess, client: Client, store: Store, daemons: list[DaemonProcess]
) -> None:
    config = write_config(tmp_path, server, store)
    # A long interval: after the start cycle only the watcher can start one.
    config.write_text(config.read_text().replace('interval = "500ms"', 'interval = "1h"'))
    daemon = DaemonProcess.start(config, server.token)
    daemons.append(daemon)
    checkout = tmp_path / "mirrors" / store.id
    wait_for(lambda: getattr(read_state(checkout), "last_success", None), what="the start cycle")

    (checkout / "notes" / "a.md").write_text("edited locally\n")
    wait_for(lambda: daemon.logged(f"local change in {store.id}: notes/a.md"), what="the save to be noticed")

    def on_server() -> bool:
        memory = client.find_memory(store.id, "notes/a.md")
        return memory is not None and client.get_memory(store.id, memory.id).content == "edited locally\n"

    wait_for(on_server, what="the save to reach the server")
    state = wait_for(
        lambda: read_state(checkout) if "watch" in _triggers(checkout) else None, what="the state"
    )
    assert state.last_cycle is not None and state.last_cycle.pushed == 1
    assert daemon.stop() == 0, daemon.log()


def _triggers(checkout: Path) -> list[str]:
    state = read_state(checkout)
    return state.last_cycle.triggers if state is not None and state.last_cycle is not None else []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_lets_the_cycle_in_flight_finish_and_exits_0_within_the_deadline(
    tmp_path: Path,
    server: ServerProcess,
    client: Client,
    store: Store,
    daemons: list[DaemonProcess],
    sig: int,
) -> None:
    # Enough versions that the first import is likely still running when the signal lands.
    for i in range(40):
        client.create_memory(store.id, f"bulk/{i:02}.md", f"memory {i}\n")
    config = write_config(tmp_path, server, store, extra="")
    config.write_text(config.read_text().replace('shutdown_deadline = "10s"', 'shutdown_deadline = "5s"'))
    daemon = DaemonProcess.start(config, server.token)
    daemons.append(daemon)
    started = time.monotonic()
    assert daemon.stop(sig, timeout=60) == 0, daemon.log()
    # The deadline, plus generous room for the interpreter's exit on 2 shared, busy cores.
    assert time.monotonic() - started < 5 + 10, daemon.log()
    assert daemon.logged(f"{signal.Signals(sig).name} received")
    assert daemon.logged("daemon stopped")
    # Whatever the cycle in flight did, it finished cleanly: the mirror is sound and resumes.
    result = run(config, "--once", token=server.token)
    assert result.returncode == 0, result.stdout + result.stderr + daemon.log()
    assert len(list((tmp_path / "mirrors" / store.id / "bulk").iterdir())) == 40


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--json"], "--json goes with --once"), (["--max-failures", "0"], "--max-failures")],
)
def test_usage_errors_exit_2(
    tmp_path: Path, server: ServerProcess, store: Store, args: list[str], message: str
) -> None:
    result = run(write_config(tmp_path, server, store), *args, token=server.token)
    assert result.returncode == 2
    assert message in result.stderr
