"""Version retention (docs/api-contract.md §6): old versions disappear, the head version of a live memory
never does."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memsync.errors import UsageError
from memsync.rules import Dialect
from memsync.server import Engine
from memsync.server.clock import parse_duration
from memsync.server.problems import NotFound
from tests.server.checks import expect_error, ok
from tests.server.conftest import dialect_client
from tests.support.server import ServerProcess

Factory = Callable[..., ServerProcess]


def _ago(days: float) -> str:
    return (datetime.now(UTC) - timedelta(days=days)).isoformat()


def test_old_versions_vanish_over_http_but_live_heads_stay(server_factory: Factory, tmp_path: Path) -> None:
    seed = {
        "stores": [
            {
                "dialect": dialect,
                "name": f"retained-{dialect}",
                "description": "kept for a while",
                "created_at": _ago(50),
                "memories": [
                    {
                        "path": f"{root}old.md",
                        "history": [
                            {"op": "create", "content": "v1", "at": _ago(40)},
                            {"op": "update", "content": "v2", "at": _ago(35)},
                        ],
                    },
                    {
                        "path": f"{root}gone.md",
                        "history": [
                            {"op": "create", "content": "g", "at": _ago(40)},
                            {"op": "delete", "at": _ago(39)},
                        ],
                    },
                    {
                        "path": f"{root}fresh.md",
                        "history": [
                            {"op": "create", "content": "f1", "at": _ago(40)},
                            {"op": "update", "content": "f2", "at": _ago(1)},
                        ],
                    },
                ],
            }
            for dialect, root in (("forward", ""), ("anthropic", "/"))
        ]
    }
    seed_file = tmp_path / "retention-seed.json"
    seed_file.write_text(json.dumps(seed))
    db = tmp_path / "retention.sqlite3"
    plain = server_factory("--seed", str(seed_file), db=db)
    with dialect_client(plain, "/api/v1/forward") as client:
        sid = ok(client.get("/memory_stores"))["data"][0]["id"]
        everything = ok(client.get(f"/memory_stores/{sid}/memory_versions"))["data"]
    assert len(everything) == 6, "without retention every version is kept"
    plain.stop()

    server = server_factory("--seed", str(seed_file), "--version-retention", "30d", db=db)
    with dialect_client(server, "/api/v1/forward") as client:
        kept = ok(client.get(f"/memory_stores/{sid}/memory_versions"))["data"]
        assert sorted((v["path"], v["operation"]) for v in kept) == [
            ("fresh.md", "updated"),
            ("old.md", "updated"),
        ]
        hidden = {v["id"] for v in everything} - {v["id"] for v in kept}
        for version_id in hidden:
            expect_error(
                client.get(f"/memory_stores/{sid}/memory_versions/{version_id}"), 404, "not_found_error"
            )
        gone = next(v for v in everything if v["path"] == "gone.md")
        history = ok(
            client.get(f"/memory_stores/{sid}/memory_versions", params={"memory_id": gone["memory_id"]})
        )
        assert history["data"] == []
        memories = {m["path"] for m in ok(client.get(f"/memory_stores/{sid}/memories"))["data"]}
        assert memories == {"old.md", "fresh.md"}
    with dialect_client(server, "/v1", api_key=True) as client:
        store = ok(client.get("/memory_stores"))["data"][0]
        versions = ok(client.get(f"/memory_stores/{store['id']}/memory_versions", params={"view": "full"}))
        assert sorted(v["content"] for v in versions["data"]) == ["f2", "v2"]


class _Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_retention_follows_the_engine_clock(tmp_path: Path) -> None:
    clock = _Clock()
    engine = Engine(tmp_path / "clocked.sqlite3", clock=clock, retention=parse_duration("90s"))
    try:
        store, _ = engine.create_store(Dialect.CLOUD, name="clocked", description="on a test clock")
        memory = engine.create_memory(Dialect.CLOUD, store.id, path="a", content="one")
        first = memory.head_version_id
        clock.now += timedelta(seconds=60)
        second = engine.update_memory(Dialect.CLOUD, store.id, memory.id, content="two").head_version_id
        clock.now += timedelta(seconds=60)
        listed = [v.id for v in engine.list_versions(Dialect.CLOUD, store.id, limit=10).items]
        assert listed == [second], "the first version is 120 s old; the head stays although 60 s old"
        with pytest.raises(NotFound):
            engine.get_version(Dialect.CLOUD, store.id, first)
        clock.now += timedelta(seconds=3600)
        assert engine.get_version(Dialect.CLOUD, store.id, second).content == "two"
        third = engine.update_memory(Dialect.CLOUD, store.id, memory.id, content="three").head_version_id
        listed = [v.id for v in engine.list_versions(Dialect.CLOUD, store.id, limit=10).items]
        assert listed == [third], "once superseded, the old head is past retention too"
        engine.delete_memory(Dialect.CLOUD, store.id, memory.id)
        clock.now += timedelta(seconds=91)
        assert engine.list_versions(Dialect.CLOUD, store.id, limit=10).items == []
    finally:
        engine.close()


@pytest.mark.parametrize("text", ["30", "0s", "-1d", "soon", "1y"])
def test_a_bad_retention_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="--version-retention"):
        parse_duration(text)
