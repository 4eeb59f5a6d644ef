"""An Anthropic store holds at most 2,000 memories (docs/api-contract.md §4), the real default of the
reference server: ``memsync push`` refuses a push past it before any write, ``sync`` withholds the
creates and names them in ``status`` while the other changes go, and deletes that make room run
first."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from memsync.api import open_client
from memsync.rules import MAX_ANTHROPIC_MEMORIES, Dialect
from tests.push.test_cli import memsync, stores_of
from tests.support.server import ServerProcess

Factory = Callable[..., ServerProcess]
HELD = MAX_ANTHROPIC_MEMORIES - 1


def _seeded(server_factory: Factory, tmp_path: Path) -> ServerProcess:
    memories = [{"path": f"/m/{n:04d}.md", "content": f"memory {n}\n"} for n in range(HELD)]
    seed = tmp_path / "seed.json"
    seed.write_text(
        json.dumps({"stores": [{"dialect": "anthropic", "name": "nearly full", "memories": memories}]})
    )
    return server_factory("--seed", str(seed))


def _remote(server: ServerProcess, store_id: str) -> dict[str, str]:
    with open_client(Dialect.ANTHROPIC, server.base_url, server.token) as client:
        return {m.path: m.content_sha256 for m in client.list_memories(store_id)}


def test_push_refuses_sync_withholds_and_deletes_make_room(server_factory: Factory, tmp_path: Path) -> None:
    server = _seeded(server_factory, tmp_path)
    config = tmp_path / "memsync.toml"
    config.write_text(
        f'[api]\ndialect = "anthropic"\nbase_url = "{server.base_url}"\ntoken_env = "MS_TOKEN"\n'
        f'[mirror]\nroot = "{tmp_path / "mirrors"}"\n'
    )
    first = memsync("sync", "--json", config=config, token=server.token)
    assert first.returncode == 0, first.stderr
    (store,) = stores_of(first)
    store_id = store["id"]
    repo = tmp_path / "mirrors" / store_id
    before = _remote(server, store_id)
    assert len(before) == HELD

    (repo / "m" / "0000.md").write_text("memory 0, edited\n")
    (repo / "new").mkdir()
    for name in ("a.md", "b.md"):
        (repo / "new" / name).write_text(f"new {name}\n")

    pushed = memsync("push", "--json", config=config, token=server.token)
    assert pushed.returncode == 1, pushed.stdout + pushed.stderr
    (entry,) = stores_of(pushed)
    assert entry["ok"] is False
    for said in (
        "nothing was pushed",
        "holds 1999 memories",
        "create 2, leaving 2001",
        "2,000",
        "delete at least 1",
    ):
        assert said in entry["error"], entry["error"]
    assert _remote(server, store_id) == before, "a refused push wrote nothing, the edit neither"

    status = memsync("status", "--json", config=config, token=server.token)
    assert status.returncode == 4, status.stderr
    (waiting,) = json.loads(status.stdout)["stores"]
    assert [w["path"] for w in waiting["withheld"]] == ["new/a.md", "new/b.md"]
    assert "2,000" in waiting["withheld"][0]["reason"]

    synced = memsync("sync", "--json", config=config, token=server.token)
    assert synced.returncode == 4, synced.stdout + synced.stderr
    (cycle,) = stores_of(synced)
    assert cycle["ok"] is True
    assert [w["path"] for w in cycle["withheld"]] == ["new/a.md", "new/b.md"]
    after = _remote(server, store_id)
    assert len(after) == HELD and after["m/0000.md"] != before["m/0000.md"], "the edit went"

    # Deleting one makes room for both, if the delete runs first: the store is then full, exactly.
    (repo / "m" / "0001.md").unlink()
    done = memsync("sync", "--json", config=config, token=server.token)
    assert done.returncode == 0, done.stdout + done.stderr
    final = _remote(server, store_id)
    assert len(final) == MAX_ANTHROPIC_MEMORIES
    assert {"new/a.md", "new/b.md"} <= set(final) and "m/0001.md" not in final
