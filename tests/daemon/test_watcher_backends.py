"""``daemon.watcher`` end to end: a real ``memsync daemon`` per backend takes a save to the store, says
which backend runs in its log and in ``/metrics``; where inotify cannot start (the instance limit
reached: a real fault, the limit set to 0 in the daemon's own user namespace), ``auto`` falls back to
polling with a warning, not a ``NOT WATCHING`` error."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from memsync.api import Client
from tests.daemon.test_fleet import Running, all_idle, daemons, make_stores, start
from tests.support.machine import cannot_run_here
from tests.support.ports import free_port
from tests.support.server import ServerProcess
from tests.support.waiting import wait_for

# Every test here runs the daemon as a process (one in a user namespace of its own).
pytestmark = pytest.mark.e2e

__all__ = ["daemons"]  # the fixture, shared with test_fleet


def _save_reaches_the_store(running: Running, client: Client, root: Path, store_id: str) -> None:
    wait_for(lambda: all_idle(running, root, [store_id]), what="the first cycle", timeout=60)
    (root / store_id / "notes" / "n0.md").write_text("saved in an editor\n", encoding="utf-8")

    def arrived() -> bool:
        listed = client.find_memory(store_id, "notes/n0.md")
        assert listed is not None
        return client.get_memory(store_id, listed.id).content == "saved in an editor\n"

    wait_for(arrived, what="the save to reach the store", timeout=30)


@pytest.mark.parametrize("backend", ["watchdog", "poll"])
def test_each_backend_takes_a_save_to_the_store_and_names_itself(
    backend: str, tmp_path: Path, server: ServerProcess, client: Client, daemons: list[Running]
) -> None:
    prefix, (store_id,) = make_stores(client, 1)
    port = free_port()
    running = start(
        tmp_path,
        server,
        prefix,
        daemons,
        extra=f'watcher = "{backend}"\npoll_interval = "0.2s"\n[daemon.http]\nlisten = "127.0.0.1:{port}"',
    )
    _save_reaches_the_store(running, client, tmp_path / "mirrors", store_id)
    assert running.logged(f"watching the checkouts with {backend}")
    assert not running.logged("NOT WATCHING")
    metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    assert f'memsync_watcher_backend{{backend="{backend}"}} 1.0' in metrics


# The kernel's inotify instance limit, made 0 for the daemon alone: a new user namespace has its own
# (fs.inotify.max_user_instances is the initial namespace's; changing it would fault every other
# process watching files on the machine, a test running beside this one included).
NO_INOTIFY = (
    "unshare",
    "--user",
    "--map-root-user",
    "sh",
    "-c",
    'echo 0 > /proc/sys/user/max_inotify_instances && exec "$0" "$@"',
)


def _user_namespaces() -> str | None:
    """Why a daemon cannot run with its own inotify limit here, or None."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run([*NO_INOTIFY, "true"], capture_output=True, text=True, check=False)
    return None if probe.returncode == 0 else f"no user namespace with its own limits: {probe.stderr.strip()}"


def test_auto_falls_back_to_polling_where_inotify_cannot_start(
    tmp_path: Path, server: ServerProcess, client: Client, daemons: list[Running]
) -> None:
    why = _user_namespaces()
    if why is not None:
        cannot_run_here(why)
    prefix, (store_id,) = make_stores(client, 1)
    running = start(tmp_path, server, prefix, daemons, extra='poll_interval = "0.2s"', wrapper=NO_INOTIFY)
    wait_for(lambda: running.logged("watching the checkouts with"), what="the watcher to start", timeout=60)
    assert running.logged("the inotify watcher cannot run")
    assert running.logged("watching the checkouts with poll")
    assert not running.logged("NOT WATCHING")
    _save_reaches_the_store(running, client, tmp_path / "mirrors", store_id)
