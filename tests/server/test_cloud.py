"""The Cloud dialect (api.md §3, seeds 002 and 004) over real HTTP against the reference server."""

from __future__ import annotations

import httpx

from memsync.server import wire
from tests.server.checks import cloud_store, expect_error, forward_store, ok, sha


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
    first = ok(cloud.post("/memory_stores", json={"name": "keyed"}, headers=key), 201)
    assert ok(cloud.post("/memory_stores", json={"name": "keyed"}, headers=key), 201) == first
    expect_error(cloud.post("/memory_stores", json={"name": "other"}, headers=key), 409, "conflict_error")


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
