"""A misconfiguration is named, never mistaken for data: each mirror records the dialect and API base
it came from; another dialect stops with both named (exit 2); a new base URL that still lists the
store is followed and noted; a store the API does not list is "not found at <URL>", and a restore is
suggested only when the API is shown to be the mirrors' own. ``--json`` prints one object on every
exit. Driven as a user runs it: the CLI in a subprocess, the real server, git as the oracle."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest

from memsync.api import open_client
from memsync.rules import Dialect
from tests.support.server import ServerProcess
from tests.support.tiers import end_to_end
from tests.test_cli import memsync


def _config(folder: Path, base_url: str, store_ids: list[str], dialect: str = "forward") -> Path:
    config = folder / "memsync.toml"
    included = ", ".join(f'"{s}"' for s in store_ids)
    config.write_text(
        f'[api]\ndialect = "{dialect}"\nbase_url = "{base_url}"\ntoken_env = "MS_TOKEN"\n'
        f'[mirror]\nroot = "mirrors"\n[stores]\ninclude = [{included}]\n'
    )
    return config


@pytest.fixture
@end_to_end
def two_stores(server: ServerProcess, tmp_path: Path) -> tuple[Path, list[str], dict[str, str]]:
    """Two stores pulled into one root."""
    ids = []
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        for n in range(2):
            store = client.create_store(
                f"origin-{uuid.uuid4().hex[:8]}",
                idempotency_key=str(uuid.uuid4()),
                description="made by tests",
            )
            client.create_memory(store.id, f"notes/{n}.md", f"memory {n}\n")
            ids.append(store.id)
    env = {"MS_TOKEN": server.token}
    config = _config(tmp_path, server.base_url, ids)
    done = memsync("--config", str(config), "pull", env=env)
    assert done.returncode == 0, done.stderr
    return config, ids, env


def _git_config(repo: Path, key: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "config", "--get", key], capture_output=True, text=True, check=True
    ).stdout.strip()


def _delete_store(server: ServerProcess, store_id: str) -> None:
    httpx.delete(
        f"{server.base_url}/api/v1/forward/memory_stores/{store_id}",
        headers={"Authorization": f"Bearer {server.token}"},
    ).raise_for_status()


def test_a_mirror_records_its_dialect_and_api_base(
    server: ServerProcess, two_stores: tuple[Path, list[str], dict[str, str]]
) -> None:
    config, ids, _ = two_stores
    repo = config.parent / "mirrors" / ids[0]
    assert _git_config(repo, "memsync.dialect") == "forward"
    assert _git_config(repo, "memsync.apibase") == f"{server.base_url}/api/v1/forward"


@pytest.mark.parametrize("dialect", ["anthropic", "cloud"])
def test_another_dialect_stops_naming_both_and_changes_nothing(
    server: ServerProcess, two_stores: tuple[Path, list[str], dict[str, str]], dialect: str
) -> None:
    config, ids, env = two_stores
    repo = config.parent / "mirrors" / ids[0]
    before = _git_config(repo, "memsync.dialect"), (repo / "notes" / "0.md").read_bytes()
    wrong = _config(config.parent, server.base_url, ids, dialect=dialect)
    for command in (["pull"], ["verify"], ["stores"], ["sync"], ["daemon", "--once"]):
        done = memsync("--config", str(wrong), *command, "--json", env=env)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert f'api.dialect is "{dialect}"' in done.stderr and '"forward" dialect' in done.stderr
        assert "deleted" not in done.stderr and "restore" not in done.stderr
        answer = json.loads(done.stdout)
        assert answer["exit_code"] == 2 and answer["stores"] == [] and "forward" in answer["error"]
    assert (_git_config(repo, "memsync.dialect"), (repo / "notes" / "0.md").read_bytes()) == before


def test_a_new_base_url_that_lists_the_store_is_followed_and_noted(
    server: ServerProcess, two_stores: tuple[Path, list[str], dict[str, str]]
) -> None:
    config, ids, env = two_stores
    # The same server under another host name, as a gateway or a renamed host would be.
    moved = server.base_url.replace("127.0.0.1", "localhost")
    done = memsync("--config", str(_config(config.parent, moved, ids)), "pull", "--json", env=env)
    assert done.returncode == 0, done.stderr
    for entry in json.loads(done.stdout)["stores"]:
        assert entry["ok"] and any("API base moved" in w and moved in w for w in entry["warnings"])
    assert _git_config(config.parent / "mirrors" / ids[0], "memsync.apibase") == f"{moved}/api/v1/forward"
    again = memsync("--config", str(_config(config.parent, moved, ids)), "pull", "--json", env=env)
    assert all(not e["warnings"] for e in json.loads(again.stdout)["stores"])


def test_a_store_not_listed_is_not_found_and_restore_needs_evidence(
    server: ServerProcess, two_stores: tuple[Path, list[str], dict[str, str]]
) -> None:
    config, ids, env = two_stores
    _delete_store(server, ids[0])
    done = memsync("--config", str(config), "pull", "--json", env=env)
    assert done.returncode == 0, done.stderr
    gone = next(e for e in json.loads(done.stdout)["stores"] if e["id"] == ids[0])
    assert gone["deleted_remotely"] is True and gone["not_found_at"] == f"{server.base_url}/api/v1/forward"
    (warning,) = gone["warnings"]
    assert warning.startswith(f"not found at {server.base_url}/api/v1/forward") and "kept" in warning
    text = memsync("--config", str(config), "pull", env=env)
    assert f"{ids[0]}: not listed; mirror kept at" in text.stdout and "deleted remotely" not in text.stdout
    # The other mirrored store is listed: this is the mirrors' API, and the store is gone from it.
    verified = memsync("--config", str(config), "verify", "--json", env=env)
    assert verified.returncode == 5
    entry = next(e for e in json.loads(verified.stdout)["stores"] if e["id"] == ids[0])
    assert "memsync restore" in json.dumps(entry)
    # With neither listed, nothing shows it is their API: a configuration to check, no restore.
    _delete_store(server, ids[1])
    verified = memsync("--config", str(config), "verify", "--json", env=env)
    assert verified.returncode == 2, verified.stdout
    for entry in json.loads(verified.stdout)["stores"]:
        assert "check api.base_url, api.dialect and the token" in entry["error"]
        assert "restore" not in json.dumps(entry)
    assert (config.parent / "mirrors" / ids[0] / "notes" / "0.md").read_text() == "memory 0\n"


@pytest.mark.e2e
def test_json_prints_one_object_when_the_whole_run_fails(tmp_path: Path, server: ServerProcess) -> None:
    config = _config(tmp_path, server.base_url, [])
    refused = memsync("--config", str(config), "pull", "--json", env={"MS_TOKEN": "not-the-token"})
    assert refused.returncode == 3
    answer = json.loads(refused.stdout)
    assert answer["exit_code"] == 3 and answer["stores"] == [] and answer["error"]
    missing = memsync("--config", str(tmp_path / "absent.toml"), "status", "--json")
    assert missing.returncode == 2 and json.loads(missing.stdout)["exit_code"] == 2
