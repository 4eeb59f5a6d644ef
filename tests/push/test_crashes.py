"""A push killed (SIGKILL) at each of its crash points, then run again: it converges, nothing doubled
or lost. The real CLI against the real server; ``MEMSYNC_CRASH_AT=point:n`` (memsync.crashpoints)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from memsync.api import Client, open_client
from memsync.rules import Dialect
from tests.push.conftest import git
from tests.reliability.crashes import CRASH_POINTS
from tests.support.server import ServerProcess

BASE = "line 1\nline 2\nline 3\n"
POINTS = [
    ("push.store_write", 1),
    ("push.store_write", 4),
    ("push.conflict_recorded", 1),
    ("push.imported", 1),
    ("push.checkout_written", 1),
    ("push.base_moved", 1),
]


def test_every_push_crash_point_is_killed_here() -> None:
    assert {point for point, _ in POINTS} == set(CRASH_POINTS["push"])


def run(config: Path, token: str, *args: str, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MS_TOKEN": token}
    env.pop("MEMSYNC_CRASH_AT", None)
    if crash is not None:
        env["MEMSYNC_CRASH_AT"] = crash
    return subprocess.run(
        [sys.executable, "-m", "memsync", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def contents(client: Client, store_id: str) -> dict[str, str]:
    found = {}
    for memory in client.list_memories(store_id):
        content = client.get_memory(store_id, memory.id).content
        assert content is not None
        found[memory.path] = content
    return found


@pytest.mark.e2e
@pytest.mark.parametrize(("point", "nth"), POINTS, ids=[f"{p}:{n}" for p, n in POINTS])
def test_a_killed_push_converges(server: ServerProcess, tmp_path: Path, point: str, nth: int) -> None:
    client = open_client(Dialect.FORWARD, server.base_url, server.token)
    store = client.create_store(f"crash-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()))
    for path in ("a.md", "b.md", "c.md", "p.md"):
        client.create_memory(store.id, path, BASE.replace("line 1", f"line 1 of {path}"))
    config = tmp_path / "memsync.toml"
    config.write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{server.base_url}"\ntoken_env = "MS_TOKEN"\n'
        f'[mirror]\nroot = "{tmp_path / "mirrors"}"\n[stores]\ninclude = ["{store.id}"]\n'
    )
    assert run(config, server.token, "sync").returncode == 0
    repo = tmp_path / "mirrors" / store.id
    (repo / "a.md").write_text("a, edited\n")
    (repo / "new.md").write_text("created locally\n")
    (repo / "b.md").unlink()
    (repo / "c.md").rename(repo / "d.md")  # Forward: create d.md, then delete c.md
    (repo / "p.md").write_text(BASE.replace("line 2", "line 2 local"))
    memory = client.find_memory(store.id, "p.md")
    assert memory is not None
    client.update_memory(
        store.id, memory.id, BASE.replace("line 2", "line 2 remote"), expected_sha256=memory.content_sha256
    )
    versions = sum(1 for _ in client.iter_versions(store.id))

    killed = run(config, server.token, "push", "--json", crash=f"{point}:{nth}")
    assert killed.returncode == -signal.SIGKILL, (killed.stdout, killed.stderr)

    again = run(config, server.token, "push", "--json")
    assert again.returncode == 4, again.stderr
    (entry,) = json.loads(again.stdout)["stores"]
    assert entry["conflicts"] == [{"path": "p.md"}]
    expected = {
        "a.md": "a, edited\n",
        "new.md": "created locally\n",
        "d.md": BASE.replace("line 1", "line 1 of c.md"),
        "p.md": BASE.replace("line 2", "line 2 remote"),
    }
    assert contents(client, store.id) == expected
    # Five writes in all (update, create, delete, create and delete of the move): none doubled.
    assert sum(1 for _ in client.iter_versions(store.id)) == versions + 5
    git(repo, "fsck", "--strict")
    assert git(repo, "show", "refs/memsync/conflicts/p%2Emd:local") == BASE.replace("line 2", "line 2 local")

    resolved = run(config, server.token, "resolve", str(repo / "p.md"), "--ours")
    assert resolved.returncode == 0, resolved.stderr
    final = run(config, server.token, "sync", "--json")
    assert final.returncode == 0, final.stderr
    assert contents(client, store.id) == {**expected, "p.md": BASE.replace("line 2", "line 2 local")}
    tip = git(repo, "rev-parse", "refs/remotes/memstore/main").strip()
    assert (
        git(repo, "rev-parse", "main").strip() == tip == git(repo, "rev-parse", "refs/memsync/base").strip()
    )
    assert git(repo, "status", "--porcelain") == ""
    client.close()
