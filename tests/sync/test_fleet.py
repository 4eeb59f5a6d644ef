"""Several stores at once ([fleet] concurrency, --jobs): the same per-store results, commit ids and JSON
order as one store at a time; one store's failure or held lock leaves the others alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from memsync.api import open_client
from memsync.rules import Dialect
from memsync.sync.pull import store_lock
from tests.support.server import ServerProcess

# Every test here runs the memsync CLI as a process.
pytestmark = pytest.mark.e2e

STORES = 6
TOKEN_ENV = "MEMSYNC_FLEET_TEST_TOKEN"


def memsync(config: Path, *args: str, token: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memsync", "--config", str(config), *args],
        capture_output=True,
        text=True,
        env={**os.environ, TOKEN_ENV: token},
        timeout=300,
    )


def entries(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    stores: list[dict[str, Any]] = json.loads(done.stdout)["stores"]
    return stores


@pytest.fixture(scope="module")
def fleet(server: ServerProcess) -> tuple[str, list[str]]:
    """Six stores of a few memories each (one with a history), named ``<prefix>-N``."""
    prefix = f"fleet-{uuid.uuid4().hex[:8]}"
    ids = []
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        for n in range(STORES):
            store = client.create_store(f"{prefix}-{n}", idempotency_key=str(uuid.uuid4()))
            for m in range(n + 1):
                client.create_memory(store.id, f"notes/n{m}.md", f"store {n} memory {m}\n")
            if n == 2:
                memory = client.find_memory(store.id, "notes/n0.md")
                assert memory is not None
                client.update_memory(store.id, memory.id, "edited\n", expected_sha256=memory.content_sha256)
            ids.append(store.id)
    return prefix, ids


def write_config(folder: Path, server: ServerProcess, prefix: str, *, jobs: int, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "memsync.toml"
    config.write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{server.base_url}"\ntoken_env = "{TOKEN_ENV}"\n'
        f'[mirror]\nroot = "mirrors"\n[stores]\ninclude = ["{prefix}-*"]\n'
        f"[fleet]\nconcurrency = {jobs}\n{extra}"
    )
    return config


def comparable(entry: dict[str, Any], *fields: str) -> dict[str, Any]:
    return {name: entry[name] for name in ("id", "ok", "error", *fields)}


def test_pull_sync_verify_and_backup_in_parallel_equal_one_at_a_time(
    fleet: tuple[str, list[str]], server: ServerProcess, tmp_path: Path
) -> None:
    prefix, ids = fleet
    results: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for jobs in (1, 4):
        folder = tmp_path / f"jobs-{jobs}"
        backups = folder / "backups"
        remote = f'[[backup.remotes]]\nurl = "{backups}/{{store_id}}.git"\n'
        config = write_config(folder, server, prefix, jobs=jobs, extra=remote)
        runs: dict[str, list[dict[str, Any]]] = {}
        for command in ("pull", "sync", "verify", "backup"):
            done = memsync(config, command, "--json", token=server.token)
            assert done.returncode == 0, (command, done.stderr)
            runs[command] = entries(done)
        results[jobs] = runs
    one, four = results[1], results[4]
    # The selection's order, whatever order the stores finished in.
    assert sorted(e["id"] for e in one["pull"]) == sorted(ids)
    for command in ("pull", "sync", "verify", "backup"):
        assert [e["id"] for e in four[command]] == [e["id"] for e in one[command]], command
    pulled = ("imported", "requests", "tip", "checkout", "metadata")
    assert [comparable(e, *pulled) for e in four["pull"]] == [comparable(e, *pulled) for e in one["pull"]]
    assert all(e["ok"] and e["imported"] >= 1 for e in four["pull"])
    cycled = ("imported", "requests", "tip", "pushed")
    assert [comparable(e, *cycled) for e in four["sync"]] == [comparable(e, *cycled) for e in one["sync"]]
    assert all(e["requests"] == 1 for e in four["sync"])  # nothing new: one request per store
    checked = ("tip", "commits", "versions", "drift")
    verified = [comparable(e, *checked) for e in four["verify"]]
    assert verified == [comparable(e, *checked) for e in one["verify"]]
    backed = ("imported", "refs_pushed")
    assert [comparable(e, *backed) for e in four["backup"]] == [comparable(e, *backed) for e in one["backup"]]
    assert all(e["refs_pushed"] > 0 for e in four["backup"])


def test_one_failing_store_leaves_the_others_alone_and_exits_1(
    fleet: tuple[str, list[str]], server: ServerProcess, tmp_path: Path
) -> None:
    prefix, ids = fleet
    config = write_config(tmp_path, server, prefix, jobs=4)
    # A folder that is no mirror where one store's mirror belongs: that store cannot be pulled.
    blocker = tmp_path / "mirrors" / ids[2]
    blocker.mkdir(parents=True)
    (blocker / "not-a-mirror.txt").write_text("mine\n")
    done = memsync(config, "pull", "--json", token=server.token)
    assert done.returncode == 1, done.stderr
    by_id = {e["id"]: e for e in entries(done)}
    assert not by_id[ids[2]]["ok"] and "not an empty directory" in by_id[ids[2]]["error"]
    assert all(by_id[i]["ok"] and by_id[i]["tip"] for i in ids if i != ids[2])


def test_the_store_lock_still_excludes_a_concurrent_run_of_one_store(
    fleet: tuple[str, list[str]], server: ServerProcess, tmp_path: Path
) -> None:
    prefix, ids = fleet
    config = write_config(tmp_path, server, prefix, jobs=4)
    root = tmp_path / "mirrors"
    with store_lock(root, ids[1]):
        done = memsync(config, "pull", "--json", "--jobs", "3", token=server.token)
    assert done.returncode == 75, done.stderr
    by_id = {e["id"]: e for e in entries(done)}
    assert not by_id[ids[1]]["ok"] and "another memsync" in by_id[ids[1]]["error"]
    assert not (root / ids[1] / ".git").exists()
    assert all(by_id[i]["ok"] and by_id[i]["imported"] >= 1 for i in ids if i != ids[1])


def test_jobs_out_of_range_is_a_usage_error(
    fleet: tuple[str, list[str]], server: ServerProcess, tmp_path: Path
) -> None:
    prefix, _ = fleet
    config = write_config(tmp_path, server, prefix, jobs=2)
    done = memsync(config, "pull", "--jobs", "0", token=server.token)
    assert done.returncode == 2 and "--jobs" in done.stderr
    config.write_text(config.read_text().replace("concurrency = 2", "concurrency = 0"))
    done = memsync(config, "pull", token=server.token)
    assert done.returncode == 2 and "fleet.concurrency" in done.stderr
