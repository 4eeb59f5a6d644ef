"""Runs killed where no seeded crash point is: the lock files git leaves, and ``kill -9`` at an
arbitrary instant of a first pull's checkout, with memsync as PID 1 of its own PID namespace (as in a
container). After each, a plain rerun converges to an uninterrupted pull's result.

The instants are drawn from a seeded generator: ``MEMSYNC_KILL_SEED`` picks another series and
``MEMSYNC_RANDOM_KILLS`` sets how many (CI: 4; a soak: ``MEMSYNC_RANDOM_KILLS=200 pytest
tests/reliability/test_killed_runs.py -k arbitrary``).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import sqlite3
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from memsync.api import open_client
from memsync.rules import Dialect
from memsync.sync.pull import pull_store
from tests.reliability.crashes import CrashCase, assert_converged
from tests.reliability.harness import CRASH_ENV, GitOracle, MemsyncCli, wait_until, write_config
from tests.support.machine import cannot_run_here
from tests.support.server import ServerProcess

# Every test here runs memsync as a process: killed, faulted, or on a full disk.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

# A checkout of 400 files on a tmpfs ended before most kills of the 0-40 ms series (measured);
# one of 1,500 lasts long enough for some to land inside it.
FILES = 1500
KILLS = int(os.environ.get("MEMSYNC_RANDOM_KILLS", "4"))
SEED = int(os.environ.get("MEMSYNC_KILL_SEED", "2026"))


@dataclass
class Store:
    id: str
    tip: str


@pytest.fixture(scope="module")
def store(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Store:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        made = client.create_store(f"kills-{uuid.uuid4().hex[:6]}", idempotency_key=str(uuid.uuid4()))
        for n in range(FILES):
            client.create_memory(made.id, f"notes/{n % 7}/m{n:04d}.md", f"memory {n}\n" * (1 + n % 5))
        report = pull_store(client, made, tmp_path_factory.mktemp("kills-reference"))
        assert report.ok and report.tip is not None, report.error
        return Store(made.id, report.tip)


def _cli(server: ServerProcess, store: Store, tmp_path: Path) -> MemsyncCli:
    config = write_config(tmp_path, dialect="forward", base_url=server.base_url, stores=[store.id])
    return MemsyncCli(config, server.token)


def test_git_lock_files_a_killed_run_left_are_removed_and_a_users_are_not(
    server: ServerProcess, store: Store, tmp_path: Path
) -> None:
    cli = _cli(server, store, tmp_path)
    killed = cli.run("pull", env={CRASH_ENV: str(CrashCase("checkout.tree_written", 1))})
    assert killed.killed, killed.describe()
    repo = tmp_path / "mirrors" / store.id
    # What libgit2 leaves when a kill lands between taking a ref's lock and renaming it over the ref
    # (an instant no seeded point reaches): the lock file, made after the run began.
    main_lock = repo / ".git" / "refs" / "heads" / "main.lock"
    main_lock.write_text("0" * 40 + "\n", encoding="ascii")

    again = cli.run("pull")

    assert again.returncode == 0, again.describe()
    assert not main_lock.exists()
    assert "left by a memsync run that was killed" in again.stderr
    assert_converged({store.id: GitOracle(repo)}, {store.id: store.tip})

    # A lock older than the killed run is a user's git command's: it stays, and the refusal names it.
    shutil.rmtree(tmp_path / "mirrors")
    killed = cli.run("pull", env={CRASH_ENV: str(CrashCase("checkout.tree_written", 1))})
    assert killed.killed, killed.describe()
    main_lock.write_text("0" * 40 + "\n", encoding="ascii")
    old = time.time() - 3600
    os.utime(main_lock, (old, old))
    refused = cli.run("pull")
    assert refused.returncode != 0, refused.describe()
    assert main_lock.exists() and "main.lock" in refused.stdout + refused.stderr


def _unshare_available() -> str | None:
    if os.geteuid() != 0:
        return "a PID namespace needs root"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        return f"unshare --pid fails here: {probe.stderr.strip()}"
    return None


def _checkout_noted(repo: Path) -> bool:
    """Whether the mirror's state database holds a checkout's intent, read as any SQLite reader would
    (which also rolls back the transaction a kill left half written)."""
    path = repo / ".git" / "memsync" / "state.sqlite"
    if not path.exists():
        return False
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=10)) as db:
            return db.execute("SELECT 1 FROM intent WHERE name = 'checkout'").fetchone() is not None
    except sqlite3.Error:
        return False  # not made whole yet


def test_kill_9_at_arbitrary_instants_of_a_checkout_as_pid_1(
    server: ServerProcess, store: Store, tmp_path: Path
) -> None:
    why = _unshare_available()
    if why is not None:
        cannot_run_here(why)
    cli = _cli(server, store, tmp_path)
    as_pid_1 = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"]
    repo = tmp_path / "mirrors" / store.id
    rng = random.Random(SEED)
    landed = 0
    for attempt in range(KILLS):
        shutil.rmtree(tmp_path / "mirrors", ignore_errors=True)
        process = subprocess.Popen(
            as_pid_1 + cli.command("pull"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=cli.environment(),
            cwd=cli.config.parent,
        )
        try:
            wait_until(
                lambda p=process: _checkout_noted(repo) or p.poll() is not None,
                timeout=120,
                what="the checkout to begin",
            )
            # The instant is the subject here: 0 to 40 ms into the checkout, from a seeded series.
            time.sleep(rng.uniform(0, 0.04))
            # SIGKILL to unshare's child: memsync, PID 1 of the namespace (--kill-child ends it too).
            subprocess.run(["pkill", "-KILL", "-P", str(process.pid)], check=False)
            process.kill()
        finally:
            process.wait(timeout=60)
            assert process.stderr is not None
            process.stderr.close()
        if _checkout_noted(repo):
            landed += 1
        rerun = subprocess.run(
            as_pid_1 + cli.command("pull"),
            capture_output=True,
            text=True,
            env=cli.environment(),
            cwd=cli.config.parent,
        )
        assert rerun.returncode == 0, f"attempt {attempt}: {rerun.stdout[-2000:]}\n{rerun.stderr[-2000:]}"
        assert "local change" not in rerun.stdout, rerun.stdout[-2000:]
        assert_converged({store.id: GitOracle(repo)}, {store.id: store.tip})
    assert landed, "no kill landed inside a checkout: the store is too small for this machine"
