"""The Anthropic dialect (docs/api-contract.md §4): the official SDK unmodified, and raw HTTP for the
finer rules."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from memsync.server import wire
from tests.server.checks import anthropic_store, expect_error, ok, sha
from tests.support.server import ServerProcess


@pytest.fixture
def sdk(server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(api_key=server.token, base_url=server.base_url, max_retries=0) as client:
        yield client


def test_sdk_scenario(sdk: anthropic.Anthropic) -> None:
    stores = sdk.beta.memory_stores
    store = stores.create(name="sdk scenario", description="for tests", metadata={"team": "a", "drop": "me"})
    assert stores.retrieve(store.id) == store
    store = stores.update(store.id, metadata={"drop": None, "new": "1"}, description="changed")
    assert store.metadata == {"team": "a", "new": "1"} and store.description == "changed"

    memories = stores.memories
    first = memories.create(store.id, path="/notes/a.md", content="one")
    assert first.content is None and first.content_sha256 == sha("one")
    assert memories.retrieve(first.id, memory_store_id=store.id).content == "one"
    precondition: Any = {"type": "content_sha256", "content_sha256": first.content_sha256}
    second = memories.update(first.id, memory_store_id=store.id, content="two", precondition=precondition)
    assert second.memory_version_id != first.memory_version_id
    with pytest.raises(anthropic.ConflictError) as refused:
        memories.update(first.id, memory_store_id=store.id, content="three", precondition=precondition)
    assert refused.value.body["error"]["type"] == "memory_precondition_failed_error"  # type: ignore[index]
    renamed = memories.update(first.id, memory_store_id=store.id, path="/notes/renamed.md")
    assert renamed.id == first.id and renamed.path == "/notes/renamed.md"
    with pytest.raises(anthropic.ConflictError):
        memories.delete(first.id, memory_store_id=store.id, expected_content_sha256=sha("one"))
    for n in range(5):
        memories.create(store.id, path=f"/pages/{n}.md", content=f"page {n}")
    paths = [m.path for m in memories.list(store.id, limit=2)]
    assert paths == sorted(paths, key=lambda p: p.encode()) and len(paths) == 6
    deleted = memories.delete(first.id, memory_store_id=store.id, expected_content_sha256=sha("two"))
    assert deleted.type == "memory_deleted" and deleted.id == first.id

    versions = list(stores.memory_versions.list(store.id, memory_id=first.id, view="full"))
    assert [v.operation for v in versions] == ["deleted", "modified", "modified", "created"]
    assert [v.content for v in versions] == [None, "two", "two", "one"]
    assert versions[0].path == "/notes/renamed.md" and versions[0].content_sha256 is None
    assert all(
        isinstance(v.created_by, anthropic.types.beta.memory_stores.BetaManagedAgentsAPIActor)
        for v in versions
    )
    redacted = stores.memory_versions.redact(versions[-1].id, memory_store_id=store.id)
    assert redacted.redacted_at is not None and redacted.content is None and redacted.path is None
    again = stores.memory_versions.redact(versions[-1].id, memory_store_id=store.id)
    assert again.redacted_at == redacted.redacted_at
    assert stores.memory_versions.retrieve(versions[1].id, memory_store_id=store.id).content == "two"

    live = next(iter(memories.list(store.id, path_prefix="/pages/")))
    assert isinstance(live, anthropic.types.beta.memory_stores.BetaManagedAgentsMemory)
    with pytest.raises(anthropic.ConflictError):
        stores.memory_versions.redact(live.memory_version_id, memory_store_id=store.id)

    archived = stores.archive(store.id)
    assert archived.archived_at is not None
    assert stores.archive(store.id) == archived
    assert store.id not in [s.id for s in stores.list()]
    assert store.id in [s.id for s in stores.list(include_archived=True)]
    with pytest.raises(anthropic.ConflictError):
        memories.create(store.id, path="/late.md", content="x")
    stores.memory_versions.redact(versions[1].id, memory_store_id=store.id)
    assert stores.delete(store.id).type == "memory_store_deleted"
    with pytest.raises(anthropic.NotFoundError):
        stores.retrieve(store.id)


def test_both_token_forms_and_any_version_headers(server: ServerProcess) -> None:
    url = server.base_url + "/v1/memory_stores"
    for headers in (
        {"x-api-key": server.token},
        {"Authorization": f"Bearer {server.token}"},
        {"x-api-key": server.token, "anthropic-version": "1999-01-01", "anthropic-beta": "nonsense-2099"},
    ):
        ok(httpx.get(url, headers=headers, params={"beta": "true"}))
    expect_error(httpx.get(url, headers={"x-api-key": "wrong"}), 401, "authentication_error")
    expect_error(httpx.get(url), 401, "authentication_error")


def _create(client: httpx.Client, sid: str, path: str, content: str = "c") -> httpx.Response:
    return client.post(f"/memory_stores/{sid}/memories", json={"path": path, "content": content})


def test_paths_rules_and_conflicts(anthropic_http: httpx.Client) -> None:
    sid = anthropic_store(anthropic_http)["id"]
    for path in (
        "relative.md",
        "/a//b",
        "/a/../b",
        "/" + "/".join("s" * 21),
        unicodedata.normalize("NFD", "/café"),
        "/line\u2028sep",
        "/zero\u200bwidth",
        "/" + "x" * 1024,
    ):
        expect_error(_create(anthropic_http, sid, path), 400, "invalid_request_error", "path")
    empty = ok(_create(anthropic_http, sid, "/dir/empty.md", ""))
    assert empty["content_size_bytes"] == 0 and empty["content_sha256"] == sha("")
    ok(_create(anthropic_http, sid, "/" + "/".join("s" * 20)))
    ok(_create(anthropic_http, sid, "/ spaced /x"))
    ok(_create(anthropic_http, sid, "/" + "s" * 300))  # Forward's 255-byte segment limit does not apply
    expect_error(_create(anthropic_http, sid, "/dir/empty.md"), 409, "memory_path_conflict_error")
    expect_error(_create(anthropic_http, sid, "/dir"), 409, "memory_path_conflict_error")
    expect_error(_create(anthropic_http, sid, "/dir/empty.md/below"), 409, "memory_path_conflict_error")
    other = ok(_create(anthropic_http, sid, "/other.md"))
    move = anthropic_http.post(f"/memory_stores/{sid}/memories/{other['id']}", json={"path": "/dir"})
    expect_error(move, 409, "memory_path_conflict_error")
    # A memory may move below its own old path: it no longer occupies it.
    moved = ok(
        anthropic_http.post(f"/memory_stores/{sid}/memories/{other['id']}", json={"path": "/other.md/x"})
    )
    assert moved["path"] == "/other.md/x"
    # The SDK types content as Optional: null creates an empty memory, as "" does.
    null = ok(anthropic_http.post(f"/memory_stores/{sid}/memories", json={"path": "/n", "content": None}))
    assert null["content_sha256"] == sha("")


def test_path_order_depth_and_prefixes(anthropic_http: httpx.Client) -> None:
    sid = anthropic_store(anthropic_http)["id"]
    for path in ("/b", "/a/y/z", "/a/x", "/a-b/x", "/a/y/w", "/é"):
        ok(_create(anthropic_http, sid, path))
    url = f"/memory_stores/{sid}/memories"
    everything = ok(anthropic_http.get(url))
    wire.AnthropicMemoryList.model_validate(everything)
    assert [m["path"] for m in everything["data"]] == ["/a-b/x", "/a/x", "/a/y/w", "/a/y/z", "/b", "/é"]
    assert all(m["content"] is None for m in everything["data"]) and everything["next_page"] is None
    top = ok(anthropic_http.get(url, params={"depth": 1}))["data"]
    assert [(i["type"], i["path"]) for i in top] == [
        ("memory_prefix", "/a-b/"),
        ("memory_prefix", "/a/"),
        ("memory", "/b"),
        ("memory", "/é"),
    ]
    below_a = ok(anthropic_http.get(url, params={"depth": 1, "path_prefix": "/a/"}))["data"]
    assert [(i["type"], i["path"]) for i in below_a] == [("memory", "/a/x"), ("memory_prefix", "/a/y/")]
    assert [m["path"] for m in ok(anthropic_http.get(url, params={"path_prefix": "/a/"}))["data"]] == [
        "/a/x",
        "/a/y/w",
        "/a/y/z",
    ]
    for params in ({"depth": 1}, {"depth": 0}, {"depth": 1, "path_prefix": "/a/"}):
        walked: list[tuple[str, str]] = []
        page: str | None = None
        while True:
            answer = ok(
                anthropic_http.get(url, params={**params, "limit": 1, **({"page": page} if page else {})})
            )
            walked += [(i["type"], i["path"]) for i in answer["data"]]
            page = answer["next_page"]
            if page is None:
                break
        single = ok(anthropic_http.get(url, params=params))["data"]
        assert walked == [(i["type"], i["path"]) for i in single]
    expect_error(anthropic_http.get(url, params={"path_prefix": "/a"}), 400, None, "path_prefix")
    expect_error(anthropic_http.get(url, params={"depth": 2}), 400, None, "depth")
    expect_error(anthropic_http.get(url, params={"page": "garbage!"}), 400, None, "page")
    expect_error(anthropic_http.get(url, params={"limit": 101}), 400, None, "limit")
    expect_error(anthropic_http.get(url, params={"view": "everything"}), 400, None, "view")


def test_full_view_caps_pages_at_20(anthropic_http: httpx.Client) -> None:
    sid = anthropic_store(anthropic_http)["id"]
    for n in range(23):
        ok(_create(anthropic_http, sid, f"/m{n:02d}", f"content {n}"))
    memories = ok(anthropic_http.get(f"/memory_stores/{sid}/memories", params={"view": "full", "limit": 100}))
    assert len(memories["data"]) == 20 and memories["next_page"]
    assert memories["data"][0]["content"] == "content 0"
    versions = ok(
        anthropic_http.get(f"/memory_stores/{sid}/memory_versions", params={"view": "full", "limit": 50})
    )
    wire.AnthropicVersionList.model_validate(versions)
    assert len(versions["data"]) == 20 and versions["data"][0]["content"] == "content 22"
    rest = ok(
        anthropic_http.get(
            f"/memory_stores/{sid}/memory_versions", params={"view": "full", "page": versions["next_page"]}
        )
    )
    assert [v["content"] for v in rest["data"]] == ["content 2", "content 1", "content 0"]
    assert rest["next_page"] is None
    basic = ok(anthropic_http.get(f"/memory_stores/{sid}/memory_versions", params={"limit": 100}))
    assert len(basic["data"]) == 23 and all(v["content"] is None for v in basic["data"])


def test_precondition_settles_when_the_state_already_matches(anthropic_http: httpx.Client) -> None:
    sid = anthropic_store(anthropic_http)["id"]
    memory = ok(_create(anthropic_http, sid, "/p.md", "current"))
    url = f"/memory_stores/{sid}/memories/{memory['id']}"
    stale = {"type": "content_sha256", "content_sha256": sha("old")}
    same = ok(anthropic_http.post(url, json={"content": "current", "precondition": stale}))
    assert same["memory_version_id"] == memory["memory_version_id"]
    ok(anthropic_http.post(url, json={"path": "/p.md", "precondition": stale}))
    expect_error(
        anthropic_http.post(url, json={"content": "different", "precondition": stale}),
        409,
        "memory_precondition_failed_error",
    )
    expect_error(
        anthropic_http.post(
            url, json={"content": "x", "precondition": {"type": "content_sha256", "content_sha256": "NOPE"}}
        ),
        400,
        "invalid_request_error",
        "precondition.content_sha256",
    )
    expect_error(
        anthropic_http.post(
            url, json={"content": "x", "precondition": {"type": "etag", "content_sha256": sha("x")}}
        ),
        400,
        "invalid_request_error",
        "precondition.type",
    )
    full = ok(anthropic_http.post(url, params={"view": "full"}, json={"content": "next"}))
    assert full["content"] == "next"
    expect_error(
        anthropic_http.delete(url, params={"expected_content_sha256": "bad"}),
        400,
        None,
        "expected_content_sha256",
    )
    assert len(ok(anthropic_http.get(f"/memory_stores/{sid}/memory_versions"))["data"]) == 2


def test_version_objects_and_filters(anthropic_http: httpx.Client) -> None:
    sid = anthropic_store(anthropic_http)["id"]
    memory = ok(_create(anthropic_http, sid, "/f.md", "one"))
    mid = memory["id"]
    ok(anthropic_http.post(f"/memory_stores/{sid}/memories/{mid}", json={"content": "two"}))
    ok(_create(anthropic_http, sid, "/g.md", "other"))
    ok(anthropic_http.delete(f"/memory_stores/{sid}/memories/{mid}"))
    url = f"/memory_stores/{sid}/memory_versions"
    history = ok(anthropic_http.get(url, params={"memory_id": mid}))["data"]
    assert [v["operation"] for v in history] == ["deleted", "modified", "created"]
    tombstone = history[0]
    assert tombstone["path"] == "/f.md"
    assert (tombstone["content"], tombstone["content_size_bytes"], tombstone["content_sha256"]) == (
        None,
        None,
        None,
    )
    assert [
        v["memory_id"] for v in ok(anthropic_http.get(url, params={"operation": "created"}))["data"]
    ] != []
    modified = ok(anthropic_http.get(url, params={"operation": "modified"}))["data"]
    assert [v["id"] for v in modified] == [history[1]["id"]]
    expect_error(anthropic_http.get(url, params={"operation": "updated"}), 400, None, "operation")
    key_id = history[0]["created_by"]["api_key_id"]
    assert len(ok(anthropic_http.get(url, params={"api_key_id": key_id}))["data"]) == 4
    assert ok(anthropic_http.get(url, params={"session_id": "sesn_none"}))["data"] == []
    second = history[1]["created_at"]
    assert [
        v["id"]
        for v in ok(anthropic_http.get(url, params={"created_at[lte]": second, "memory_id": mid}))["data"]
    ] == [
        history[1]["id"],
        history[2]["id"],
    ]
    assert history[0]["id"] in [
        v["id"] for v in ok(anthropic_http.get(url, params={"created_at[gte]": second}))["data"]
    ]
    expect_error(
        anthropic_http.get(url, params={"created_at[gte]": "yesterday"}), 400, None, "created_at[gte]"
    )
    full = ok(anthropic_http.get(f"{url}/{history[1]['id']}"))
    wire.AnthropicVersion.model_validate(full)
    assert full["content"] == "two"
    assert ok(anthropic_http.get(f"{url}/{history[1]['id']}", params={"view": "basic"}))["content"] is None
    redacted = ok(anthropic_http.post(f"{url}/{history[2]['id']}/redact"))
    assert [redacted[k] for k in ("path", "content", "content_size_bytes", "content_sha256")] == [None] * 4
    assert (
        redacted["redacted_by"]["type"] == "api_actor" and redacted["created_by"] == history[2]["created_by"]
    )
    expect_error(anthropic_http.get(f"{url}/memver_nope"), 404, "not_found_error")


def test_store_rules_and_archived_store(anthropic_http: httpx.Client) -> None:
    expect_error(anthropic_http.post("/memory_stores", json={"name": "n" * 256}), 400, None, "name")
    expect_error(anthropic_http.post("/memory_stores", json={"name": ""}), 400, None, "name")
    expect_error(
        anthropic_http.post("/memory_stores", json={"name": "n", "description": "d" * 1025}),
        400,
        None,
        "description",
    )
    store = anthropic_store(anthropic_http, metadata={f"k{i}": "v" for i in range(16)})
    wire.AnthropicStore.model_validate(store)
    assert "status" not in store and store["archived_at"] is None
    sid = store["id"]
    expect_error(
        anthropic_http.post(f"/memory_stores/{sid}", json={"metadata": {"one_more": "v"}}),
        400,
        None,
        "metadata",
    )
    ok(anthropic_http.post(f"/memory_stores/{sid}", json={"metadata": {"k0": None, "one_more": "v"}}))
    memory = ok(_create(anthropic_http, sid, "/keep.md", "kept"))
    ok(anthropic_http.post(f"/memory_stores/{sid}/memories/{memory['id']}", json={"content": "kept 2"}))
    first_version = ok(anthropic_http.get(f"/memory_stores/{sid}/memory_versions"))["data"][-1]["id"]
    archived = ok(anthropic_http.post(f"/memory_stores/{sid}/archive"))
    assert ok(anthropic_http.post(f"/memory_stores/{sid}/archive")) == archived
    for response in (
        _create(anthropic_http, sid, "/new.md"),
        anthropic_http.post(f"/memory_stores/{sid}/memories/{memory['id']}", json={"content": "changed"}),
        anthropic_http.delete(f"/memory_stores/{sid}/memories/{memory['id']}"),
        anthropic_http.post(f"/memory_stores/{sid}", json={"name": "renamed"}),
    ):
        expect_error(response, 409, "conflict_error")
    assert ok(anthropic_http.get(f"/memory_stores/{sid}/memories/{memory['id']}"))["content"] == "kept 2"
    ok(anthropic_http.post(f"/memory_stores/{sid}/memory_versions/{first_version}/redact"))
    assert ok(anthropic_http.delete(f"/memory_stores/{sid}")) == {"id": sid, "type": "memory_store_deleted"}
