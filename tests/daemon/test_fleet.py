"""A daemon whose cost does not grow with the stores: its threads (the same over 3 stores as over 30),
no watcher with ``daemon.watch = false``, and the inotify budget checked at start. Real ``memsync
daemon`` processes, counted through /proc."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from memsync.api import Client
from memsync.daemon._watcher import CheckoutWatcher, checkout_folders
from memsync.sync.pull import pull_store
from tests.support.server import ServerProcess
from tests.support.tiers import end_to_end
from tests.support.waiting import wait_for

TOKEN_ENV = "MEMSYNC_DAEMON_FLEET_TOKEN"


@dataclass
class Running:
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def logged(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))

    def threads(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/task"))

    def inotify_instances(self) -> int:
        fds = Path(f"/proc/{self.process.pid}/fd")
        count = 0
        for fd in fds.iterdir():
            try:
                count += os.readlink(fd) == "anon_inode:inotify"
            except OSError:
                continue
        return count


@pytest.fixture
@end_to_end
def daemons(server: ServerProcess) -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for running in started:
        if running.process.poll() is None:
            running.process.terminate()
            try:
                running.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                running.process.kill()
                running.process.wait()


def make_stores(client: Client, count: int) -> tuple[str, list[str]]:
    prefix = f"dfleet-{uuid.uuid4().hex[:8]}"
    ids = []
    for n in range(count):
        store = client.create_store(f"{prefix}-{n}", idempotency_key=str(uuid.uuid4()))
        client.create_memory(store.id, f"notes/n{n}.md", f"memory of store {n}\n")
        ids.append(store.id)
    return prefix, ids


def start(
    folder: Path,
    server: ServerProcess,
    prefix: str,
    daemons: list[Running],
    *,
    extra: str = "",
    wrapper: Sequence[str] = (),
) -> Running:
    """A ``memsync daemon`` on the stores named ``prefix-*``; ``wrapper`` runs before it (and must exec
    it, so that the process is the daemon)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "memsync.toml"
    config.write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{server.base_url}"\ntoken_env = "{TOKEN_ENV}"\n'
        f'[mirror]\nroot = "mirrors"\n[stores]\ninclude = ["{prefix}-*"]\n'
        f'[daemon]\ninterval = "1h"\njitter = "0s"\nshutdown_deadline = "10s"\n{extra}\n'
        '[fleet]\nconcurrency = 4\n[log]\nlevel = "info"\n'
    )
    process = subprocess.Popen(
        [*wrapper, sys.executable, "-m", "memsync", "--config", str(config), "daemon"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, TOKEN_ENV: server.token, "PYTHONUNBUFFERED": "1"},
    )
    running = Running(process)

    def pump() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            running.lines.append(line)

    threading.Thread(target=pump, daemon=True).start()
    daemons.append(running)
    return running


def all_idle(running: Running, root: Path, ids: list[str]) -> bool:
    """Every store's first cycle is done and none is running (the thread count is at rest)."""
    assert running.process.poll() is None, "".join(running.lines)
    for store_id in ids:
        try:
            state = json.loads((root / store_id / ".git" / "memsync" / "daemon-state.json").read_text())
        except (OSError, ValueError):
            return False
        if state["daemon"]["pid"] != running.process.pid or state["last_cycle"] is None:
            return False
        if state["status"] != "idle":
            return False
    return True


def test_the_daemons_threads_do_not_grow_with_its_stores(
    client: Client, server: ServerProcess, tmp_path: Path, daemons: list[Running]
) -> None:
    counts = {}
    for count in (3, 30):
        prefix, ids = make_stores(client, count)
        folder = tmp_path / f"stores-{count}"
        running = start(folder, server, prefix, daemons)
        idle = lambda r=running, f=folder, i=ids: all_idle(r, f / "mirrors", i)  # noqa: E731
        wait_for(idle, 120, f"{count} stores idle")
        # Each checkout (watched once its first cycle made it) is watched by the one inotify instance.
        wait_for(lambda r=running: r.logged("daemon started"), what="the start line")
        counts[count] = running.threads()
        assert running.inotify_instances() == 1
        running.process.terminate()
        assert running.process.wait(timeout=30) == 0
    # main, the scheduler, 4 cycle workers, the inotify reader and the settling thread.
    assert counts[3] == counts[30] == 8, counts


def test_watch_false_starts_no_watcher(
    client: Client, server: ServerProcess, tmp_path: Path, daemons: list[Running]
) -> None:
    prefix, ids = make_stores(client, 2)
    running = start(tmp_path, server, prefix, daemons, extra="watch = false")
    wait_for(lambda: all_idle(running, tmp_path / "mirrors", ids), 60, "the stores idle")
    assert running.logged("daemon.watch = false")
    assert running.logged("watching 0 checkout(s)")
    assert running.inotify_instances() == 0
    assert running.threads() == 6  # main, the scheduler, 4 cycle workers


def test_checkouts_that_need_more_watches_than_the_budget_are_not_watched_and_the_log_says_why(
    client: Client, server: ServerProcess, tmp_path: Path, daemons: list[Running]
) -> None:
    prefix, ids = make_stores(client, 3)
    root = tmp_path / "mirrors"
    for store in client.list_stores():
        if store.id in ids:
            assert pull_store(client, store, root).ok
    needed = sum(sum(1 for _ in checkout_folders(root / store_id)) for store_id in ids)
    assert needed == 6  # the checkout and its notes/ folder, per store; never .git
    running = start(tmp_path, server, prefix, daemons, extra="max_watches = 5")
    wait_for(lambda: all_idle(running, root, ids), 60, "the stores idle")
    assert running.logged("NOT WATCHING: the checkouts need 6 inotify watches")
    assert running.logged("sysctl fs.inotify.max_user_watches=")
    assert running.logged("/etc/sysctl.d/")
    assert running.logged("daemon.max_watches is 5")
    assert running.inotify_instances() == 0
    # Polling still works: the cycles ran, and the daemon is up.
    assert running.logged("watching 0 checkout(s)")


def test_watches_running_out_while_the_daemon_runs_end_all_watching(
    client: Client, server: ServerProcess, tmp_path: Path, daemons: list[Running]
) -> None:
    # No checkout yet: the start finds nothing to count; the first cycles make 6 folders for 3 watches.
    prefix, ids = make_stores(client, 3)
    running = start(tmp_path, server, prefix, daemons, extra="max_watches = 3")
    wait_for(lambda: all_idle(running, tmp_path / "mirrors", ids), 60, "the stores idle")
    wait_for(lambda: running.logged("NOT WATCHING any more"), what="the watching to end")
    assert running.logged("daemon.max_watches is 3")
    wait_for(lambda: running.inotify_instances() == 0, what="the inotify instance to close")
    wait_for(lambda: running.threads() == 6, what="the watcher's threads to end")


def test_the_watcher_watches_folders_not_git_and_follows_folders_made_and_moved(
    client: Client, tmp_path: Path
) -> None:
    _, (store_id,) = make_stores(client, 1)
    store = next(s for s in client.list_stores() if s.id == store_id)
    root = tmp_path / "mirrors"
    assert pull_store(client, store, root).ok
    checkout = root / store_id
    seen: list[list[str]] = []
    arrived = threading.Condition()

    def on_change(_: str, paths: list[str]) -> None:
        with arrived:
            seen.append(paths)
            arrived.notify_all()

    def reported(path: str) -> bool:
        with arrived:
            return any(path in paths for paths in seen)

    watcher = CheckoutWatcher(on_change, lambda _: False, quiet=0.05, max_wait=1.0)
    watcher.start()
    try:
        assert watcher.watch(store_id, checkout)
        assert watcher.watch_count == 2  # the checkout and notes/, not .git's folders
        (checkout / "deep" / "er").mkdir(parents=True)
        (checkout / "deep" / "er" / "new.md").write_text("made in a new folder\n")
        wait_for(lambda: reported("deep/er/new.md"), what="the file in the new folder")
        assert watcher.watch_count == 4
        os.rename(checkout / "deep", checkout / "moved")
        wait_for(lambda: reported("moved/er/new.md"), what="the moved folder's file")
        (checkout / "moved" / "er" / "new.md").write_text("edited after the move\n")
        seen.clear()
        wait_for(lambda: reported("moved/er/new.md"), what="an edit in the moved folder")
        assert watcher.watch_count == 4
        # A budget too small for a checkout: not watched at all.
        small = CheckoutWatcher(on_change, lambda _: False, quiet=0.05, max_wait=1.0, max_watches=1)
        small.start()
        try:
            assert not small.watch(store_id, checkout)
            assert not small.watching(store_id) and small.watch_count == 0
        finally:
            small.stop()
    finally:
        watcher.stop()
