"""A newcomer's first runs, as the README leads them: the token's default variable, an API that lists
no store, a server that does not answer, and the demo run from inside a git checkout."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsync.api import open_client
from memsync.rules import Dialect
from tests.support.cli import memsync
from tests.support.ports import free_port
from tests.support.server import ServerProcess

# Every test here runs the memsync CLI, the demo or the daemon as a process.
pytestmark = pytest.mark.e2e


@pytest.fixture
def lone_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server of its own, holding one Forward store and nothing else."""
    with ServerProcess(db=tmp_path / "server.sqlite3", in_process=True) as server:
        with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
            store = client.create_store("notes", idempotency_key=str(uuid.uuid4()))
            client.create_memory(store.id, "a.md", "hello\n")
        yield server


def config_for(folder: Path, base_url: str, dialect: str) -> Path:
    """The README's config: no token_env, no token_file (MEMSYNC_TOKEN is the default)."""
    config = folder / f"{dialect}.toml"
    config.write_text(
        f'[api]\ndialect = "{dialect}"\nbase_url = "{base_url}"\n[mirror]\nroot = "mirrors-{dialect}"\n'
    )
    return config


def test_an_api_that_lists_no_store_is_named_with_its_dialect_and_token_source(
    lone_server: ServerProcess, tmp_path: Path
) -> None:
    token = {"MEMSYNC_TOKEN": lone_server.token}
    wrong = config_for(tmp_path, lone_server.base_url, "cloud")
    for command in (["stores"], ["pull"], ["stores", "--json"], ["pull", "--json"]):
        done = memsync("--config", str(wrong), *command, env=token)
        assert done.returncode == 0, done.stderr
        assert done.stderr.count("lists no store") == 1, done.stderr
        assert f"{lone_server.base_url}/api/v1/cloud" in done.stderr
        assert "'cloud' dialect" in done.stderr and "environment variable MEMSYNC_TOKEN" in done.stderr
        assert "api.dialect" in done.stderr
        assert lone_server.token not in done.stderr
        if "--json" in command:
            assert json.loads(done.stdout) == {"stores": []}
    # The right dialect lists the store, and no note is printed.
    right = config_for(tmp_path, lone_server.base_url, "forward")
    listed = memsync("--config", str(right), "stores", env=token)
    assert listed.returncode == 0 and "notes" in listed.stdout
    assert "lists no store" not in listed.stderr
    # Without MEMSYNC_TOKEN the default source is named.
    bare = {k: v for k, v in os.environ.items() if k != "MEMSYNC_TOKEN"}
    missing = subprocess.run(
        [sys.executable, "-m", "memsync", "--config", str(right), "stores"],
        capture_output=True,
        text=True,
        env=bare,
        timeout=120,
    )
    assert missing.returncode == 2 and "MEMSYNC_TOKEN is not set" in missing.stderr


@pytest.mark.parametrize("as_json", [False, True])
def test_a_server_that_does_not_answer_is_said_at_once_off_a_terminal(tmp_path: Path, as_json: bool) -> None:
    # stderr is a pipe here, as under cron, CI or an agent: the first failed attempt is said while
    # memsync still tries (about 15 s of backoff follow), with the URL and how long it keeps trying.
    url = f"http://127.0.0.1:{free_port()}"
    config = config_for(tmp_path, url, "forward")
    secret = f"tok-{uuid.uuid4().hex}"
    flags = ["--json"] if as_json else []
    args = [sys.executable, "-m", "memsync", "--config", str(config), "pull", *flags]
    process = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MEMSYNC_TOKEN": secret},
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    try:
        first = lines.get(timeout=60)
        still_trying = process.poll() is None
    finally:
        process.kill()
        process.communicate(timeout=30)
    assert first.startswith(f"memsync: cannot reach {url}/api/v1/forward ("), first
    assert "tries again up to 5 more time(s) for up to 16s" in first, first
    assert still_trying, "the note came only when memsync gave up"
    assert secret not in first


def test_the_demo_run_from_a_git_checkout_leaves_nothing_in_it(tmp_path: Path) -> None:
    # As from the project's own clone: the demo's files go to memsync's data folder, not the cwd.
    checkout = tmp_path / "clone"
    checkout.mkdir()
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    data = tmp_path / "data"
    env = {"XDG_DATA_HOME": str(data)}
    done = memsync("demo", env=env, cwd=checkout)
    assert done.returncode == 0, done.stderr
    status = subprocess.run(
        ["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert status.stdout == "" and list(checkout.iterdir()) == [checkout / ".git"]
    demo = data / "memsync" / "demo"
    (mirror,) = (demo / "mirrors").glob("memstore_*")
    assert str(mirror) in done.stdout and f"MEMSYNC_CONFIG={demo / 'memsync.toml'}" in done.stdout
    again = memsync("demo", env=env, cwd=checkout)
    assert again.returncode == 2 and str(demo) in again.stderr and "--dir" in again.stderr


def test_the_daemon_logs_the_first_failed_attempt_in_its_own_format(tmp_path: Path) -> None:
    # The daemon owns its log (JSON lines here): the note comes as one of its records, not as a
    # second, plain line beside it.
    url = f"http://127.0.0.1:{free_port()}"
    config = config_for(tmp_path, url, "forward")
    config.write_text(config.read_text() + '[log]\nformat = "json"\n')
    secret = f"tok-{uuid.uuid4().hex}"
    done = memsync("--config", str(config), "daemon", "--once", env={"MEMSYNC_TOKEN": secret})
    assert done.returncode != 0
    *logged, last = done.stderr.splitlines()
    assert last.startswith("memsync: error: cannot reach")  # the command's own last word
    records = [json.loads(line) for line in logged]
    notes = [r for r in records if r["logger"] == "memsync.api" and "tries again" in r["message"]]
    assert len(notes) == 1 and notes[0]["level"] == "warning" and url in notes[0]["message"]
    assert secret not in done.stderr
