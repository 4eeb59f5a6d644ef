"""Upstream's published limits (docs/api-contract.md §3, §4): an Anthropic store's memories and
versions, the betas of a memory endpoint, a Cloud store's description and name."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from memsync.rules import (
    ANTHROPIC_AGENTS_BETA,
    ANTHROPIC_MEMORY_BETA,
    MAX_ANTHROPIC_MEMORIES,
    MAX_CLOUD_STORE_NAME_CHARS,
    Dialect,
)
from memsync.server import Engine
from memsync.server.problems import Conflict
from memsync.server.storage import StoreLimits
from tests.server.checks import anthropic_store, expect_error, forward_store, ok, sha
from tests.server.conftest import dialect_client
from tests.support.server import ServerProcess

Factory = Callable[..., ServerProcess]


def _memory(client: httpx.Client, store_id: str, path: str, content: str = "x") -> httpx.Response:
    return client.post(f"/memory_stores/{store_id}/memories", json={"path": path, "content": content})


def test_the_2001st_anthropic_memory_is_refused_at_the_default_limit(
    server_factory: Factory, tmp_path: Path
) -> None:
    seed = {
        "stores": [
            {
                "dialect": "anthropic",
                "name": "full",
                "memories": [
                    {"path": f"/m/{n:04d}.md", "content": str(n)} for n in range(MAX_ANTHROPIC_MEMORIES)
                ],
            }
        ]
    }
    seed_file = tmp_path / "full.json"
    seed_file.write_text(json.dumps(seed), encoding="utf-8")
    proc = server_factory("--seed", str(seed_file))
    with dialect_client(proc, "/v1", api_key=True) as client:
        store = ok(client.get("/memory_stores"))["data"][0]
        body = expect_error(_memory(client, store["id"], "/m/one-more.md"), 409, "conflict_error")
        assert f"already holds {MAX_ANTHROPIC_MEMORIES} memories" in body["error"]["message"]
        # Changing a memory of a full store is still a version like any other.
        first = "/m/0000.md"
        listed = ok(
            client.get(f"/memory_stores/{store['id']}/memories", params={"path_prefix": "/m/", "limit": 1})
        )
        assert listed["data"][0]["path"] == first
        memory_id = listed["data"][0]["id"]
        ok(client.post(f"/memory_stores/{store['id']}/memories/{memory_id}", json={"content": "changed"}))
        # Deleting one makes room for one.
        ok(client.delete(f"/memory_stores/{store['id']}/memories/{memory_id}"))
        ok(_memory(client, store["id"], "/m/one-more.md"))
        expect_error(_memory(client, store["id"], "/m/two-more.md"), 409, "conflict_error")


def test_lowered_limits_refuse_the_next_memory_and_the_next_version_on_anthropic_only(
    server_factory: Factory,
) -> None:
    proc = server_factory("--anthropic-max-memories", "2", "--anthropic-max-versions", "5")
    with dialect_client(proc, "/v1", api_key=True) as client:
        store_id = anthropic_store(client)["id"]
        a = ok(_memory(client, store_id, "/a.md"))  # version 1
        ok(_memory(client, store_id, "/b.md"))  # version 2
        refused = expect_error(_memory(client, store_id, "/c.md"), 409, "conflict_error")
        assert (
            "already holds 2 memories" in refused["error"]["message"] and "(2)" in refused["error"]["message"]
        )
        for content in ("two", "three"):  # versions 3 and 4
            a = ok(client.post(f"/memory_stores/{store_id}/memories/{a['id']}", json={"content": content}))
        ok(client.delete(f"/memory_stores/{store_id}/memories/{a['id']}"))  # version 5, the last
        versions = ok(client.get(f"/memory_stores/{store_id}/memory_versions", params={"limit": 100}))
        assert len(versions["data"]) == 5
        # One memory left, so the memory limit has room; the version limit has none.
        full = expect_error(_memory(client, store_id, "/c.md"), 409, "conflict_error")
        assert "already holds 5 versions" in full["error"]["message"]
        b = ok(client.get(f"/memory_stores/{store_id}/memories", params={"view": "full"}))["data"][0]
        expect_error(
            client.post(f"/memory_stores/{store_id}/memories/{b['id']}", json={"content": "new"}), 409
        )
        expect_error(client.delete(f"/memory_stores/{store_id}/memories/{b['id']}"), 409)
        # A no-op update writes no version, so it is no write past the limit.
        same = {
            "content": b["content"],
            "precondition": {"type": "content_sha256", "content_sha256": sha("x")},
        }
        ok(client.post(f"/memory_stores/{store_id}/memories/{b['id']}", json=same))
        assert len(ok(client.get(f"/memory_stores/{store_id}/memory_versions"))["data"]) == 5
    # The same flags leave the Qoder dialects unlimited.
    with dialect_client(proc, "/api/v1/forward") as forward:
        store_id = forward_store(forward)["id"]
        for n in range(4):
            ok(_memory(forward, store_id, f"f{n}.md", "x"))
        assert len(ok(forward.get(f"/memory_stores/{store_id}/memory_versions"))["data"]) == 4


@pytest.mark.parametrize("beta", [ANTHROPIC_MEMORY_BETA, ANTHROPIC_AGENTS_BETA])
def test_one_beta_is_accepted_and_both_are_refused(anthropic_http: httpx.Client, beta: str) -> None:
    store = anthropic_store(anthropic_http, description="betas")
    ok(anthropic_http.get(f"/memory_stores/{store['id']}", headers={"anthropic-beta": beta}))
    both = f"{beta},{ANTHROPIC_MEMORY_BETA if beta == ANTHROPIC_AGENTS_BETA else ANTHROPIC_AGENTS_BETA}"
    for headers in (
        {"anthropic-beta": both},
        [("anthropic-beta", ANTHROPIC_AGENTS_BETA), ("anthropic-beta", ANTHROPIC_MEMORY_BETA)],
    ):
        body = expect_error(
            anthropic_http.get(f"/memory_stores/{store['id']}/memories", headers=headers),
            400,
            "invalid_request_error",
            "anthropic-beta",
        )
        assert ANTHROPIC_AGENTS_BETA in body["error"]["message"]
    expect_error(
        anthropic_http.post("/memory_stores", json={"name": "n"}, headers={"anthropic-beta": both}), 400
    )


def test_a_cloud_store_needs_a_description_and_a_short_trimmed_name(
    cloud: httpx.Client, forward: httpx.Client, anthropic_http: httpx.Client
) -> None:
    for body in (
        {"name": "no description"},
        {"name": "blank", "description": " \n"},
        {"name": "null", "description": None},
    ):
        refused = expect_error(
            cloud.post("/memory_stores", json=body), 400, "invalid_request_error", "description"
        )
        assert "Field 'description' is required" in refused["error"]["message"]
    longest = "n" * MAX_CLOUD_STORE_NAME_CHARS
    store = ok(cloud.post("/memory_stores", json={"name": f"  {longest}\t", "description": "d"}), 201)
    assert store["name"] == longest
    too_long = longest + "x"
    expect_error(cloud.post("/memory_stores", json={"name": too_long, "description": "d"}), 400, None, "name")
    expect_error(cloud.post(f"/memory_stores/{store['id']}", json={"name": too_long}), 400, None, "name")
    renamed = ok(cloud.post(f"/memory_stores/{store['id']}", json={"name": " short "}))
    assert renamed["name"] == "short"
    # The other dialects keep their own rules.
    assert forward_store(forward, name=too_long)["description"] == ""
    assert anthropic_store(anthropic_http, name=too_long)["name"] == too_long


def test_versions_are_counted_in_a_database_made_before_the_counts_were_kept(tmp_path: Path) -> None:
    db = tmp_path / "older.sqlite3"
    engine = Engine(db)
    store, _ = engine.create_store(Dialect.ANTHROPIC, name="older")
    memory = engine.create_memory(Dialect.ANTHROPIC, store.id, path="/a.md", content="1")
    engine.update_memory(Dialect.ANTHROPIC, store.id, memory.id, content="2")
    engine.close()
    with sqlite3.connect(db) as older:  # as a server that kept no counts left it
        older.execute("DROP TABLE version_counts")
        older.execute("DELETE FROM meta WHERE key = 'version_counts'")
    engine = Engine(db, limits=StoreLimits(versions=3))
    try:
        engine.update_memory(Dialect.ANTHROPIC, store.id, memory.id, content="3")
        with pytest.raises(Conflict, match="already holds 3 versions"):
            engine.update_memory(Dialect.ANTHROPIC, store.id, memory.id, content="4")
        # Deleting the store forgets its count with it.
        engine.delete_store(Dialect.ANTHROPIC, store.id)
        again, _ = engine.create_store(Dialect.ANTHROPIC, name="again")
        engine.create_memory(Dialect.ANTHROPIC, again.id, path="/a.md", content="1")
    finally:
        engine.close()
