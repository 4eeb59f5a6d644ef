"""The memsync command line as a user runs it: subprocesses, real server, exit codes of docs/design.md §4."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from memsync.api import open_client
from memsync.rules import Dialect
from memsync.sync.locks import held
from tests.support.cli import memsync
from tests.support.server import ServerProcess

# Every test here runs the memsync CLI (or the demo) as a process.
pytestmark = pytest.mark.e2e


@pytest.fixture
def setup(server: ServerProcess, tmp_path: Path) -> tuple[Path, str]:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        store = client.create_store(f"cli-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()))
        client.create_memory(store.id, "notes/a.md", "hello\n")
    config = tmp_path / "memsync.toml"
    config.write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{server.base_url}"\ntoken_env = "MS_TOKEN"\n'
        f'[mirror]\nroot = "mirrors"\n[stores]\ninclude = ["{store.id}"]\n'
    )
    return config, store.id


def test_pull_json_and_config_after_the_subcommand(setup: tuple[Path, str], server: ServerProcess) -> None:
    config, store_id = setup
    done = memsync("pull", "--json", "--config", str(config), env={"MS_TOKEN": server.token})
    assert done.returncode == 0, done.stderr
    (entry,) = json.loads(done.stdout)["stores"]
    assert entry["id"] == store_id and entry["ok"] is True and entry["error"] is None
    assert entry["imported"] == 1 and entry["checkout"] == "updated"
    assert (config.parent / "mirrors" / store_id / "notes" / "a.md").read_text() == "hello\n"
    # MEMSYNC_CONFIG names the file too; a second pull imports nothing.
    again = memsync("pull", env={"MS_TOKEN": server.token, "MEMSYNC_CONFIG": str(config)})
    assert again.returncode == 0 and "imported 0 version(s)" in again.stdout
    assert "checkout updated" not in again.stdout  # nothing moved: the checkout is "unchanged"
    unchanged = memsync("pull", "--json", env={"MS_TOKEN": server.token, "MEMSYNC_CONFIG": str(config)})
    assert json.loads(unchanged.stdout)["stores"][0]["checkout"] == "unchanged"


def test_stores_lists_the_selection(setup: tuple[Path, str], server: ServerProcess) -> None:
    config, store_id = setup
    done = memsync("--config", str(config), "stores", "--json", env={"MS_TOKEN": server.token})
    assert done.returncode == 0, done.stderr
    rows = {row["id"]: row for row in json.loads(done.stdout)["stores"]}
    assert rows[store_id]["selected"] is True
    assert all(not row["selected"] for sid, row in rows.items() if sid != store_id)


def test_exit_codes(setup: tuple[Path, str], server: ServerProcess, tmp_path: Path) -> None:
    config, _store_id = setup
    token = {"MS_TOKEN": server.token}
    unknown = memsync("--config", str(config), "pull", "no-such-store", env=token)
    assert unknown.returncode == 2 and "no store matches no-such-store" in unknown.stderr
    missing = memsync("--config", str(tmp_path / "nope.toml"), "pull", env=token)
    assert missing.returncode == 2 and "no config file" in missing.stderr
    no_token = memsync("--config", str(config), "pull", env={"MS_TOKEN": ""})
    assert no_token.returncode == 2 and "MS_TOKEN is not set" in no_token.stderr
    refused = memsync("--config", str(config), "pull", env={"MS_TOKEN": "wrong-token-value"})
    assert refused.returncode == 3, refused.stderr
    assert "wrong-token-value" not in refused.stderr + refused.stdout
    usage = memsync("pull", "--no-such-flag")
    assert usage.returncode == 2


def test_a_held_lock_exits_75(setup: tuple[Path, str], server: ServerProcess) -> None:
    config, store_id = setup
    lock = config.parent / "mirrors" / ".memsync" / "locks" / f"{store_id}.lock"
    with held(lock, "test"):
        done = memsync("--config", str(config), "pull", "--json", env={"MS_TOKEN": server.token})
    assert done.returncode == 75, done.stderr
    (entry,) = json.loads(done.stdout)["stores"]
    assert "try again" in entry["error"]


def test_a_store_deleted_remotely_keeps_its_mirror(setup: tuple[Path, str], server: ServerProcess) -> None:
    config, store_id = setup
    token = {"MS_TOKEN": server.token}
    assert memsync("--config", str(config), "pull", env=token).returncode == 0
    import httpx

    httpx.delete(
        f"{server.base_url}/api/v1/forward/memory_stores/{store_id}",
        headers={"Authorization": f"Bearer {server.token}"},
    ).raise_for_status()
    done = memsync("--config", str(config), "pull", "--json", env=token)
    assert done.returncode == 0, done.stderr
    (entry,) = json.loads(done.stdout)["stores"]
    assert entry["deleted_remotely"] is True
    assert (config.parent / "mirrors" / store_id / "notes" / "a.md").exists()


def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    done = memsync("demo", "--dir", str(tmp_path / "demo"))
    assert done.returncode == 0, done.stderr
    assert "Imported 14 versions" in done.stdout
    assert "git log" in done.stdout and "memsync pull" in done.stdout
    (mirror,) = (tmp_path / "demo" / "mirrors").glob("memstore_*")
    subprocess.run(["git", "-C", str(mirror), "fsck", "--strict"], check=True, capture_output=True)
    assert (mirror / "people" / "bo.md").read_text().startswith("# Bo\n\nBack from leave")
    assert (tmp_path / "demo" / "memsync.toml").exists()
    assert oct((tmp_path / "demo" / "token").stat().st_mode & 0o777) == "0o600"
    again = memsync("demo", "--dir", str(tmp_path / "demo"))
    assert again.returncode == 2 and "not empty" in again.stderr
