"""The Cloud dialect (docs/api-contract.md §3, seeds 002 and 004) over real HTTP against the reference
server."""

from __future__ import annotations

import httpx
import qca.managed.types as qca_types

from memsync.server import wire
from tests.server.checks import cloud_store, expect_error, forward_store, ok, sha
from tests.support.server import ServerProcess


def test_store_has_the_seed_002_shape_and_needs_no_idempotency_key(cloud: httpx.Client) -> None:
    store = cloud_store(cloud, description="Alpha")
    wire.CloudStore.model_validate(store)
    assert set(store) == {
        "id",
        "type",
        "name",
        "description",
        "status",
        "entry_count",
        "total_size",
        "metadata",
        "archived_at",
        "created_at",
        "updated_at",
    }
    assert store["metadata"] == {} and store["archived_at"] is None
    # Cloud reserves no metadata key.
    assert cloud_store(cloud, metadata={"created_by": "me"})["metadata"] == {"created_by": "me"}
    listed = ok(cloud.get("/memory_stores", params={"limit": 100}))
    wire.CloudStoreList.model_validate(listed)
    # An Idempotency-Key is optional on Cloud, and honoured when sent: a replay answers 201 too.
    key = {"Idempotency-Key": "cloud-key-" + store["id"]}
    first = ok(cloud.post("/memory_stores", json={"name": "keyed", "description": "d"}, headers=key), 201)
    assert (
        ok(cloud.post("/memory_stores", json={"name": "keyed", "description": "d"}, headers=key), 201)
        == first
    )
    expect_error(
        cloud.post("/memory_stores", json={"name": "other", "description": "d"}, headers=key),
        409,
        "conflict_error",
    )


def test_memory_carries_an_integer_version_and_put_checks_it(cloud: httpx.Client) -> None:
    sid = cloud_store(cloud)["id"]
    created = ok(cloud.post(f"/memory_stores/{sid}/memories", json={"path": "d/a.md", "content": "one"}), 201)
    wire.CloudMemory.model_validate(created)
    assert created["version"] == 1 and created["memory_store_id"] == sid
    assert created["content_size_bytes"] == 3
    mid = created["id"]
    url = f"/memory_stores/{sid}/memories/{mid}"
    two = ok(cloud.put(url, json={"content": "two", "version": 1}))
    assert (two["version"], two["content"]) == (2, "two")
    expect_error(cloud.put(url, json={"content": "three", "version": 1}), 409, "conflict_error")
    expect_error(cloud.put(url, json={"content": "three"}), 400, "invalid_request_error", "version")
    expect_error(cloud.put(url, json={"content": "three", "version": "2"}), 400, None, "version")
    # The newer Forward-style update with a hash precondition works too.
    three = ok(cloud.post(url, json={"content": "three", "content_sha256": sha("two")}))
    assert three["version"] == 3
    expect_error(
        cloud.post(url, json={"content": "four", "content_sha256": sha("two")}), 409, "conflict_error"
    )
    # A no-op update keeps the version.
    assert ok(cloud.put(url, json={"content": "three", "version": 3}))["version"] == 3
    got = ok(cloud.get(url))
    assert got["version"] == 3 and got["content"] == "three"
    listed = ok(cloud.get(f"/memory_stores/{sid}/memories"))
    wire.CloudMemoryList.model_validate(listed)
    assert listed["data"][0]["version"] == 3 and "content" not in listed["data"][0]


def test_versions_live_at_both_paths_and_redaction_conflicts_once(cloud: httpx.Client) -> None:
    sid = cloud_store(cloud)["id"]
    mid = ok(cloud.post(f"/memory_stores/{sid}/memories", json={"path": "s", "content": "secret"}), 201)["id"]
    ok(cloud.put(f"/memory_stores/{sid}/memories/{mid}", json={"content": "clean", "version": 1}))
    via_versions = ok(cloud.get(f"/memory_stores/{sid}/versions"))
    via_memory_versions = ok(cloud.get(f"/memory_stores/{sid}/memory_versions"))
    assert via_versions == via_memory_versions
    wire.CloudVersionList.model_validate(via_versions)
    first = via_versions["data"][-1]
    assert first["operation"] == "created" and "redacted_at" not in first and first["redacted"] is False
    version = ok(cloud.get(f"/memory_stores/{sid}/versions/{first['id']}"))
    wire.CloudVersion.model_validate(version)
    assert version["content"] == "secret"
    redacted = ok(cloud.post(f"/memory_stores/{sid}/versions/{first['id']}/redact"))
    assert redacted["redacted"] is True and redacted["redacted_at"] and redacted["content"] is None
    assert (redacted["content_sha256"], redacted["content_size_bytes"]) == (sha("secret"), 6)
    expect_error(
        cloud.post(f"/memory_stores/{sid}/memory_versions/{first['id']}/redact"), 409, "conflict_error"
    )


def test_conflicts_and_archive(cloud: httpx.Client) -> None:
    sid = cloud_store(cloud)["id"]
    ok(cloud.post(f"/memory_stores/{sid}/memories", json={"path": "a", "content": "x"}), 201)
    ok(cloud.post(f"/memory_stores/{sid}/memories", json={"path": "a/b", "content": "x"}), 201)
    expect_error(cloud.post(f"/memory_stores/{sid}/memories", json={"path": "a", "content": "y"}), 409)
    expect_error(
        cloud.post(f"/memory_stores/{sid}/memories", json={"path": "e", "content": ""}), 400, None, "content"
    )
    archived = ok(cloud.post(f"/memory_stores/{sid}/archive"))
    assert archived["status"] == "archived"
    expect_error(cloud.post(f"/memory_stores/{sid}/memories", json={"path": "n", "content": "y"}), 409)
    expect_error(cloud.delete(f"/memory_stores/{sid}"), 409, "conflict_error")
    other = cloud_store(cloud)["id"]
    assert ok(cloud.delete(f"/memory_stores/{other}")) == {
        "id": other,
        "type": "memory_store_deleted",
        "deleted": True,
    }


def test_dialects_do_not_see_each_others_stores(cloud: httpx.Client, forward: httpx.Client) -> None:
    forward_id = forward_store(forward)["id"]
    cloud_id = cloud_store(cloud)["id"]
    expect_error(cloud.get(f"/memory_stores/{forward_id}"), 404, "not_found_error")
    expect_error(forward.get(f"/memory_stores/{cloud_id}"), 404, "not_found_error")
    listed = {s["id"] for s in ok(cloud.get("/memory_stores", params={"limit": 100}))["data"]}
    assert cloud_id in listed and forward_id not in listed
    expect_error(cloud.get("/identities/i/templates/t/memory_stores"), 404, "not_found_error")


def test_delete_honours_expected_content_sha256(cloud: httpx.Client) -> None:
    sid = cloud_store(cloud)["id"]
    mid = ok(cloud.post(f"/memory_stores/{sid}/memories", json={"path": "p.md", "content": "kept"}), 201)[
        "id"
    ]
    url = f"/memory_stores/{sid}/memories/{mid}"
    history = ok(cloud.get(f"/memory_stores/{sid}/versions", params={"memory_id": mid}))
    expect_error(cloud.delete(url, params={"expected_content_sha256": sha("other")}), 409, "conflict_error")
    # Nothing was deleted and no tombstone was written.
    assert ok(cloud.get(url))["content"] == "kept"
    assert ok(cloud.get(f"/memory_stores/{sid}/versions", params={"memory_id": mid})) == history
    expect_error(
        cloud.delete(url, params={"expected_content_sha256": "XYZ"}),
        400,
        "invalid_request_error",
        "expected_content_sha256",
    )
    deleted = ok(cloud.delete(url, params={"expected_content_sha256": sha("kept")}))
    assert deleted == {"id": mid, "type": "memory_deleted", "deleted": True}
    expect_error(cloud.get(url), 404, "not_found_error")


def test_answers_carry_the_sdk_names_beside_seed_002s(cloud: httpx.Client, server: ServerProcess) -> None:
    """qca.managed's models name the head version ``memory_version_id`` and a version's writer
    ``created_by``; seed 002's ``version`` and ``operation: updated`` stay."""
    sid = cloud_store(cloud)["id"]
    created = ok(cloud.post(f"/memory_stores/{sid}/memories", json={"path": "n.md", "content": "1"}), 201)
    mid = created["id"]
    updated = ok(cloud.put(f"/memory_stores/{sid}/memories/{mid}", json={"content": "2", "version": 1}))
    versions = ok(cloud.get(f"/memory_stores/{sid}/versions"))["data"]
    assert [v["operation"] for v in versions] == ["updated", "created"]
    assert (created["memory_version_id"], updated["memory_version_id"]) == (
        versions[1]["id"],
        versions[0]["id"],
    )
    assert (
        ok(cloud.get(f"/memory_stores/{sid}/memories"))["data"][0]["memory_version_id"] == versions[0]["id"]
    )
    writer = versions[0]["created_by"]
    assert writer["type"] == "api_actor" and server.token not in writer["api_key_id"]
    assert all(v["created_by"] == writer and v["redacted_by"] is None for v in versions)
    listed = f"/memory_stores/{sid}/versions"
    assert ok(cloud.get(listed, params={"api_key_id": writer["api_key_id"]}))["data"] == versions
    for actor_filter in ("api_key_id", "session_id", "service_account_id"):
        assert ok(cloud.get(listed, params={actor_filter: "someone_else"}))["data"] == []
    redacted = ok(cloud.post(f"/memory_stores/{sid}/versions/{versions[1]['id']}/redact"))
    assert redacted["redacted_by"] == writer and redacted["redacted"] is True
    # The SDK's "modified" filters what seed 002 calls "updated".
    for spelling in ("modified", "updated"):
        found = ok(cloud.get(f"/memory_stores/{sid}/versions", params={"operation": spelling}))["data"]
        assert [v["id"] for v in found] == [versions[0]["id"]]
    expect_error(
        cloud.get(f"/memory_stores/{sid}/versions", params={"operation": "renamed"}), 400, None, "operation"
    )


def test_answers_fill_every_field_of_the_cloud_sdk_models(cloud: httpx.Client) -> None:
    sid = cloud_store(cloud, description="d")["id"]
    memory = ok(cloud.post(f"/memory_stores/{sid}/memories", json={"path": "f.md", "content": "x"}), 201)
    version = ok(cloud.get(f"/memory_stores/{sid}/versions/{memory['memory_version_id']}"))
    for model, answer in (
        (qca_types.MemoryStore, ok(cloud.get(f"/memory_stores/{sid}"))),
        (qca_types.Memory, memory),
        (qca_types.MemoryVersion, version),
    ):
        # Every field the SDK model knows is in the answer (redaction fields: null until redacted).
        missing = set(model.model_fields) - set(answer) - {"redacted_at"}
        assert not missing, (model.__name__, missing)
        parsed = model.model_validate(answer)
        assert parsed.id == answer["id"]


def test_view_depth_and_list_filters(cloud: httpx.Client) -> None:
    sid = cloud_store(cloud)["id"]
    memories = f"/memory_stores/{sid}/memories"
    basic = ok(cloud.post(memories, params={"view": "basic"}, json={"path": "top.md", "content": "t"}), 201)
    assert "content" not in basic
    for path in ("dir/a.md", "dir/sub/b.md", "dir2/c.md"):
        ok(cloud.post(memories, json={"path": path, "content": path}), 201)
    got = ok(cloud.get(f"{memories}/{basic['id']}", params={"view": "basic"}))
    assert "content" not in got and ok(cloud.get(f"{memories}/{basic['id']}"))["content"] == "t"
    full = ok(cloud.get(memories, params={"view": "full", "limit": 100}))
    assert {m["path"]: m["content"] for m in full["data"]}["dir2/c.md"] == "dir2/c.md"
    version = ok(cloud.get(f"/memory_stores/{sid}/versions", params={"view": "full", "limit": 1}))["data"][0]
    assert version["content"] == "dir2/c.md"
    expect_error(cloud.get(memories, params={"view": "everything"}), 400, None, "view")

    # depth=1: direct children in path order, deeper paths rolled up into memory_prefix items.
    top = ok(cloud.get(memories, params={"depth": 1}))
    wire.CloudMemoryList.model_validate(top)
    assert [(m["type"], m["path"]) for m in top["data"]] == [
        ("memory_prefix", "dir/"),
        ("memory_prefix", "dir2/"),
        ("memory", "top.md"),
    ]
    first = ok(cloud.get(memories, params={"depth": 1, "limit": 2}))
    rest = ok(cloud.get(memories, params={"depth": 1, "limit": 2, "page": first["next_page"]}))
    assert first["data"] + rest["data"] == top["data"] and rest["next_page"] is None
    below = ok(cloud.get(memories, params={"depth": 1, "path_prefix": "dir/"}))
    assert [(m["type"], m["path"]) for m in below["data"]] == [
        ("memory", "dir/a.md"),
        ("memory_prefix", "dir/sub/"),
    ]
    expect_error(cloud.get(memories, params={"depth": 1, "path_prefix": "dir"}), 400, None, "path_prefix")
    expect_error(cloud.get(memories, params={"depth": 2}), 400, None, "depth")
    expect_error(cloud.get(memories, params={"depth": 1, "after_id": basic["id"]}), 400, None, "after_id")

    # Store listing: include_archived=false hides archived stores; created_at ranges; no name filter.
    archived = cloud_store(cloud)
    ok(cloud.post(f"/memory_stores/{archived['id']}/archive"))
    since = {"created_at[gte]": archived["created_at"]}
    assert [s["id"] for s in ok(cloud.get("/memory_stores", params=since))["data"]] == [archived["id"]]
    assert ok(cloud.get("/memory_stores", params={**since, "include_archived": "false"}))["data"] == []
    until = {"created_at[lte]": archived["created_at"], "limit": 100}
    assert archived["id"] in {s["id"] for s in ok(cloud.get("/memory_stores", params=until))["data"]}
    expect_error(
        cloud.get("/memory_stores", params={"created_at[gte]": "yesterday"}), 400, None, "created_at[gte]"
    )
    expect_error(cloud.get("/memory_stores", params={"name": archived["name"]}), 400, None, "name")


def test_post_update_may_leave_content_out(cloud: httpx.Client) -> None:
    """The Cloud SDK's update makes content optional: metadata alone writes no version."""
    sid = cloud_store(cloud)["id"]
    mid = ok(cloud.post(f"/memory_stores/{sid}/memories", json={"path": "m.md", "content": "c"}), 201)["id"]
    url = f"/memory_stores/{sid}/memories/{mid}"
    changed = ok(cloud.post(url, json={"metadata": {"k": "v"}, "content": None}))
    assert (changed["content"], changed["metadata"], changed["version"]) == ("c", {"k": "v"}, 1)
    expect_error(cloud.post(url, json={"path": "moved.md"}), 400, None, "path")
