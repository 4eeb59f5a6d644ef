"""The Forward dialect (docs/api-contract.md §2, seeds 000 and 003) over real HTTP against the reference
server."""

from __future__ import annotations

import uuid

import httpx
import pytest

from memsync.server import wire
from tests.server.checks import expect_error, forward_store, ok, sha
from tests.support.server import ServerProcess


def test_store_create_answers_the_seed_000_object(forward: httpx.Client) -> None:
    store = forward_store(forward, description="Alpha", metadata={"team": "backend"})
    wire.ForwardStore.model_validate(store)
    assert store["id"].startswith("memstore_")
    assert store["status"] == "active" and store["archived_at"] is None
    assert store["metadata"] == {"team": "backend", "created_by": "forward"}
    assert (store["entry_count"], store["total_size"]) == (0, 0)
    assert store["system_managed"] is False and store["identity_id"] is None
    assert store["binding_info"] == {"identity_template_count": 0}
    assert store["created_at"].endswith("Z")
    assert ok(forward.get(f"/memory_stores/{store['id']}")) == store


def test_idempotency_key_is_required_and_replays(forward: httpx.Client) -> None:
    expect_error(
        forward.post("/memory_stores", json={"name": "x"}), 400, "invalid_request_error", "Idempotency-Key"
    )
    key = {"Idempotency-Key": uuid.uuid4().hex}
    first = ok(forward.post("/memory_stores", json={"name": "idem", "metadata": {"a": "1"}}, headers=key))
    again = ok(forward.post("/memory_stores", json={"name": "idem", "metadata": {"a": "1"}}, headers=key))
    assert again == first
    expect_error(forward.post("/memory_stores", json={"name": "other"}, headers=key), 409, "conflict_error")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "name"),
        ({"name": ""}, "name"),
        ({"name": "a\x01b"}, "name"),
        ({"name": 5}, "name"),
        ({"name": "x", "description": "bad\x07"}, "description"),
        ({"name": "x", "metadata": {"created_by": "me"}}, "metadata.created_by"),
        ({"name": "x", "metadata": {f"k{i}": "v" for i in range(16)}}, "metadata"),
        ({"name": "x", "metadata": {"k": "v" * 513}}, "metadata.k"),
        ({"name": "x", "metadata": {"k" * 65: "v"}}, "metadata." + "k" * 65),
        ({"name": "x", "metadata": {"k": None}}, "metadata.k"),
    ],
)
def test_store_validation_names_the_field(forward: httpx.Client, body: dict[str, object], field: str) -> None:
    response = forward.post("/memory_stores", json=body, headers={"Idempotency-Key": uuid.uuid4().hex})
    expect_error(response, 400, "invalid_request_error", field)


def test_store_list_pages_both_ways_and_filters(forward: httpx.Client, server: ServerProcess) -> None:
    made = [forward_store(forward)["id"] for _ in range(5)]
    page = ok(forward.get("/memory_stores", params={"limit": 2}))
    wire.ForwardStoreList.model_validate(page)
    assert [s["id"] for s in page["data"]] == made[::-1][:2]
    assert page["first_id"] == made[4] and page["last_id"] == made[3] and page["has_more"]
    older = ok(forward.get("/memory_stores", params={"limit": 2, "after_id": page["last_id"]}))
    assert [s["id"] for s in older["data"]] == [made[2], made[1]]
    newer = ok(forward.get("/memory_stores", params={"limit": 2, "before_id": older["first_id"]}))
    assert [s["id"] for s in newer["data"]] == [made[4], made[3]]
    assert newer["has_more"] is False
    assert ok(forward.get("/memory_stores", params={"system_managed": "true", "limit": 100}))["data"] == [
        s for s in ok(forward.get("/memory_stores", params={"limit": 100}))["data"] if s["system_managed"]
    ]
    user_made = ok(forward.get("/memory_stores", params={"system_managed": "false", "limit": 5}))["data"]
    assert all(not s["system_managed"] for s in user_made)
    both = {"after_id": made[1], "before_id": made[3]}
    expect_error(forward.get("/memory_stores", params=both), 400, "invalid_request_error")
    for bad in ("0", "101", "x"):
        expect_error(
            forward.get("/memory_stores", params={"limit": bad}), 400, "invalid_request_error", "limit"
        )
    expect_error(
        forward.get("/memory_stores", params={"system_managed": "maybe"}), 400, None, "system_managed"
    )


def test_empty_list_envelope(forward: httpx.Client) -> None:
    store = forward_store(forward)
    assert ok(forward.get(f"/memory_stores/{store['id']}/memories")) == {
        "data": [],
        "first_id": None,
        "last_id": None,
        "has_more": False,
    }


def test_store_update_replaces_metadata(forward: httpx.Client) -> None:
    store = forward_store(forward, metadata={"a": "1", "b": "2"})
    updated = ok(
        forward.post(f"/memory_stores/{store['id']}", json={"name": "renamed", "metadata": {"c": "3"}})
    )
    assert updated["name"] == "renamed"
    assert updated["metadata"] == {"c": "3", "created_by": "forward"}
    expect_error(
        forward.post(f"/memory_stores/{store['id']}", json={"metadata": {"c": None}}), 400, None, "metadata.c"
    )
    expect_error(forward.post(f"/memory_stores/{store['id']}", json={"name": ""}), 400, None, "name")
    expect_error(forward.post("/memory_stores/memstore_nope", json={"name": "x"}), 404, "not_found_error")


def test_memory_lifecycle_keeps_counts_and_versions(forward: httpx.Client) -> None:
    store = forward_store(forward)
    sid = store["id"]
    created = ok(
        forward.post(f"/memory_stores/{sid}/memories", json={"path": "notes/a.md", "content": "héllo"})
    )
    wire.ForwardMemory.model_validate(created)
    assert created["content"] == "héllo" and created["content_sha256"] == sha("héllo")
    assert created["content_size_bytes"] == 6 and created["metadata"] == {}
    mid = created["id"]
    got = ok(forward.get(f"/memory_stores/{sid}/memories/{mid}"))
    assert got == created
    updated = ok(
        forward.post(
            f"/memory_stores/{sid}/memories/{mid}",
            json={"content": "v2", "content_sha256": created["content_sha256"], "metadata": {"o": "x"}},
        )
    )
    assert updated["content"] == "v2" and updated["metadata"] == {"o": "x"} and updated["id"] == mid
    s = ok(forward.get(f"/memory_stores/{sid}"))
    assert (s["entry_count"], s["total_size"]) == (1, 2)
    stale = forward.post(
        f"/memory_stores/{sid}/memories/{mid}",
        json={"content": "v3", "content_sha256": created["content_sha256"]},
    )
    expect_error(stale, 409, "conflict_error")
    # A no-op update is a 200 and writes no version.
    same = ok(forward.post(f"/memory_stores/{sid}/memories/{mid}", json={"content": "v2"}))
    assert same["content_sha256"] == sha("v2")
    versions = ok(forward.get(f"/memory_stores/{sid}/memory_versions", params={"memory_id": mid}))
    wire.ForwardVersionList.model_validate(versions)
    assert [v["operation"] for v in versions["data"]] == ["updated", "created"]
    assert all("content" not in v for v in versions["data"])
    deleted = ok(forward.delete(f"/memory_stores/{sid}/memories/{mid}"))
    assert deleted == {"id": mid, "type": "memory_deleted", "deleted": True}
    expect_error(forward.get(f"/memory_stores/{sid}/memories/{mid}"), 404, "not_found_error")
    expect_error(forward.delete(f"/memory_stores/{sid}/memories/{mid}"), 404, "not_found_error")
    history = ok(forward.get(f"/memory_stores/{sid}/memory_versions", params={"memory_id": mid}))["data"]
    assert [v["operation"] for v in history] == ["deleted", "updated", "created"]
    tombstone = ok(forward.get(f"/memory_stores/{sid}/memory_versions/{history[0]['id']}"))
    wire.ForwardVersion.model_validate(tombstone)
    assert tombstone["content"] is None and tombstone["path"] == "notes/a.md"
    assert (tombstone["content_sha256"], tombstone["content_size_bytes"]) == (sha("v2"), 2)
    s = ok(forward.get(f"/memory_stores/{sid}"))
    assert (s["entry_count"], s["total_size"]) == (0, 0)
    # The path is free again, for a new memory with a new id.
    again = ok(forward.post(f"/memory_stores/{sid}/memories", json={"path": "notes/a.md", "content": "new"}))
    assert again["id"] != mid


def test_memory_rules(forward: httpx.Client) -> None:
    sid = forward_store(forward)["id"]
    url = f"/memory_stores/{sid}/memories"
    ok(forward.post(url, json={"path": "a", "content": "file a"}))
    ok(forward.post(url, json={"path": "a/b", "content": "beside a"}))
    expect_error(forward.post(url, json={"path": "a", "content": "dup"}), 409, "conflict_error")
    for path in ("/abs", "a//b", "a/../b", "a/./b", " a", "a\\b", "x" * 256, "/".join("s" * 59)):
        expect_error(
            forward.post(url, json={"path": path, "content": "c"}), 400, "invalid_request_error", "path"
        )
    for content in ("", "bell\x07", "x" * 102_401):
        expect_error(forward.post(url, json={"path": "c", "content": content}), 400, None, "content")
    ok(forward.post(url, json={"path": "max", "content": "é" * 51_200}))
    expect_error(
        forward.post(url, json={"path": "c", "content": "c", "metadata": {"k": 1}}), 400, None, "metadata.k"
    )
    ok(forward.post(url, json={"path": "meta", "content": "c", "metadata": {"created_by": "me"}}))
    mid = ok(forward.post(url, json={"path": "p", "content": "c"}))["id"]
    expect_error(forward.post(f"{url}/{mid}", json={"content": ""}), 400, None, "content")
    expect_error(forward.post(f"{url}/{mid}", json={"content": "x", "path": "q"}), 400, None, "path")
    expect_error(forward.post(f"{url}/{mid}", json={"path": "p"}), 400, None, "content")
    expect_error(forward.post(f"{url}/mem_nope", json={"content": "x"}), 404, "not_found_error")
    expect_error(
        forward.post("/memory_stores/memstore_nope/memories", json={"path": "a", "content": "c"}), 404
    )


def test_a_megabyte_of_content_is_a_400_naming_content_not_a_413(forward: httpx.Client) -> None:
    sid = forward_store(forward)["id"]
    response = forward.post(
        f"/memory_stores/{sid}/memories", json={"path": "big", "content": "x" * (1 << 20)}
    )
    expect_error(response, 400, "invalid_request_error", "content")


def test_memory_list_hides_content_and_filters_by_plain_prefix(forward: httpx.Client) -> None:
    sid = forward_store(forward)["id"]
    made = [
        ok(forward.post(f"/memory_stores/{sid}/memories", json={"path": p, "content": p}))["id"]
        for p in ("a/b.md", "a/bc.md", "a/c.md", "b.md")
    ]
    listed = ok(forward.get(f"/memory_stores/{sid}/memories"))
    wire.ForwardMemoryList.model_validate(listed)
    assert [m["id"] for m in listed["data"]] == made[::-1]
    assert all("content" not in m for m in listed["data"])
    prefixed = ok(forward.get(f"/memory_stores/{sid}/memories", params={"path_prefix": "a/b"}))["data"]
    assert sorted(m["path"] for m in prefixed) == ["a/b.md", "a/bc.md"]


def test_redaction_keeps_size_and_hash_and_refuses_a_second_time(forward: httpx.Client) -> None:
    sid = forward_store(forward)["id"]
    mid = ok(forward.post(f"/memory_stores/{sid}/memories", json={"path": "s.md", "content": "secret"}))["id"]
    ok(forward.post(f"/memory_stores/{sid}/memories/{mid}", json={"content": "public"}))
    old, head = None, None
    for version in ok(forward.get(f"/memory_stores/{sid}/memory_versions"))["data"]:
        if version["operation"] == "created":
            old = version
        else:
            head = version
    assert old is not None and head is not None
    redacted = ok(forward.post(f"/memory_stores/{sid}/memory_versions/{old['id']}/redact"))
    wire.ForwardVersion.model_validate(redacted)
    assert redacted["content"] is None and redacted["redacted"] is True and redacted["redacted_at"]
    assert (redacted["content_sha256"], redacted["content_size_bytes"]) == (sha("secret"), 6)
    assert ok(forward.get(f"/memory_stores/{sid}/memory_versions/{old['id']}")) == redacted
    expect_error(
        forward.post(f"/memory_stores/{sid}/memory_versions/{old['id']}/redact"), 409, "conflict_error"
    )
    # On Forward the head version of a live memory may be redacted; the memory stays readable.
    ok(forward.post(f"/memory_stores/{sid}/memory_versions/{head['id']}/redact"))
    assert ok(forward.get(f"/memory_stores/{sid}/memories/{mid}"))["content"] == "public"
    assert ok(forward.get(f"/memory_stores/{sid}/memory_versions/{head['id']}"))["content"] is None
    expect_error(forward.post(f"/memory_stores/{sid}/memory_versions/memver_nope/redact"), 404)


def test_archived_store_reads_and_redacts_but_refuses_writes(forward: httpx.Client) -> None:
    sid = forward_store(forward)["id"]
    mid = ok(forward.post(f"/memory_stores/{sid}/memories", json={"path": "k.md", "content": "keep"}))["id"]
    vid = ok(forward.get(f"/memory_stores/{sid}/memory_versions"))["data"][0]["id"]
    archived = ok(forward.post(f"/memory_stores/{sid}/archive"))
    assert archived["status"] == "archived" and archived["archived_at"]
    expect_error(forward.post(f"/memory_stores/{sid}/archive"), 409, "conflict_error")
    assert ok(forward.get(f"/memory_stores/{sid}/memories/{mid}"))["content"] == "keep"
    assert ok(forward.get(f"/memory_stores/{sid}/memory_versions/{vid}"))["content"] == "keep"
    writes = [
        forward.post(f"/memory_stores/{sid}/memories", json={"path": "n.md", "content": "x"}),
        forward.post(f"/memory_stores/{sid}/memories/{mid}", json={"content": "changed"}),
        forward.delete(f"/memory_stores/{sid}/memories/{mid}"),
        forward.post(f"/memory_stores/{sid}", json={"name": "new name"}),
        forward.delete(f"/memory_stores/{sid}"),
    ]
    for response in writes:
        expect_error(response, 409, "conflict_error")
    ok(forward.post(f"/memory_stores/{sid}/memory_versions/{vid}/redact"))
    assert ok(forward.get(f"/memory_stores/{sid}/memories/{mid}"))["content"] == "keep"


def test_store_delete_removes_everything(forward: httpx.Client) -> None:
    sid = forward_store(forward)["id"]
    ok(forward.post(f"/memory_stores/{sid}/memories", json={"path": "a", "content": "x"}))
    assert ok(forward.delete(f"/memory_stores/{sid}")) == {
        "id": sid,
        "type": "memory_store_deleted",
        "deleted": True,
    }
    expect_error(forward.get(f"/memory_stores/{sid}"), 404, "not_found_error")
    expect_error(forward.get(f"/memory_stores/{sid}/memory_versions"), 404, "not_found_error")
    expect_error(forward.delete(f"/memory_stores/{sid}"), 404, "not_found_error")


def test_mounts_block_archive_and_delete_and_are_capped(forward: httpx.Client) -> None:
    identity, template = f"idn_{uuid.uuid4().hex[:12]}", f"tmpl_{uuid.uuid4().hex[:12]}"
    base = f"/identities/{identity}/templates/{template}/memory_stores"
    stores = [forward_store(forward)["id"] for _ in range(11)]
    mount = ok(forward.post(base, json={"memory_store_id": stores[0]}))
    wire.Mount.model_validate(mount)
    assert mount["access"] == "read_only" and mount["system_managed"] is False
    assert (mount["identity_id"], mount["template_id"], mount["status"]) == (identity, template, "active")
    expect_error(forward.post(base, json={"memory_store_id": stores[0]}), 409, "conflict_error")
    assert ok(forward.get(f"/memory_stores/{stores[0]}"))["binding_info"]["identity_template_count"] == 1
    expect_error(forward.post(f"/memory_stores/{stores[0]}/archive"), 409, "conflict_error")
    expect_error(forward.delete(f"/memory_stores/{stores[0]}"), 409, "conflict_error")
    for sid in stores[1:10]:
        ok(forward.post(base, json={"memory_store_id": sid}))
    expect_error(forward.post(base, json={"memory_store_id": stores[10]}), 409, "conflict_error")
    listed = ok(forward.get(base))
    wire.MountList.model_validate(listed)
    assert [m["memory_store_id"] for m in listed["data"]] == stores[:10] and listed["has_more"] is False
    unmounted = ok(forward.delete(f"{base}/{stores[0]}"))
    assert unmounted == {"id": stores[0], "type": "memory_store_binding_deleted", "deleted": True}
    expect_error(forward.delete(f"{base}/{stores[0]}"), 404, "not_found_error")
    ok(forward.post(base, json={"memory_store_id": stores[10]}))
    ok(forward.post(f"/memory_stores/{stores[0]}/archive"))
    expect_error(forward.post(base, json={"memory_store_id": stores[0]}), 409, "conflict_error")
    expect_error(forward.post(base, json={"memory_store_id": "memstore_nope"}), 404, "not_found_error")
    expect_error(forward.post(base, json={}), 400, "invalid_request_error", "memory_store_id")


def test_auth_errors_and_request_ids(server: ServerProcess, forward: httpx.Client) -> None:
    url = server.base_url + "/api/v1/forward/memory_stores"
    expect_error(httpx.get(url), 401, "authentication_error")
    expect_error(httpx.get(url, headers={"Authorization": "Bearer wrong"}), 401, "authentication_error")
    # Forward takes the Bearer form only.
    expect_error(httpx.get(url, headers={"x-api-key": server.token}), 401, "authentication_error")
    first, second = forward.get("/memory_stores"), forward.get("/memory_stores")
    assert first.headers["request-id"] != second.headers["request-id"]
    expect_error(forward.get("/no_such_route"), 404, "not_found_error")
    expect_error(forward.put("/memory_stores"), 405)
    options = forward.request("OPTIONS", "/memory_stores/memstore_x")
    expect_error(options, 405)
    assert options.headers["allow"] == "DELETE, GET, POST"
    not_json = forward.post(
        "/memory_stores", content=b"{", headers={"Idempotency-Key": "k", "Content-Type": "application/json"}
    )
    expect_error(not_json, 400, "invalid_request_error", "body")
    assert server.token not in first.text


def test_create_with_mount_is_one_step(forward: httpx.Client) -> None:
    """qca's ``memory_stores.create(mount=...)``: the store is created and mounted in one call, or,
    if the mount is refused, not created at all."""
    identity, template = f"idn_{uuid.uuid4().hex[:12]}", f"tmpl_{uuid.uuid4().hex[:12]}"
    base = f"/identities/{identity}/templates/{template}/memory_stores"
    mount = {"identity_id": identity, "template_id": template}
    key = {"Idempotency-Key": uuid.uuid4().hex}
    store = ok(forward.post("/memory_stores", json={"name": "mounted", "mount": mount}, headers=key))
    wire.ForwardStore.model_validate(store)
    assert store["binding_info"] == {"identity_template_count": 1}
    # A replay is the same store, not a second mount.
    again = ok(forward.post("/memory_stores", json={"name": "mounted", "mount": mount}, headers=key))
    assert again["id"] == store["id"]
    read_only = ok(
        forward.post(
            "/memory_stores",
            json={"name": "explicit", "mount": {**mount, "access": "read_only"}},
            headers={"Idempotency-Key": uuid.uuid4().hex},
        )
    )
    listed = ok(forward.get(base))["data"]
    assert [(m["memory_store_id"], m["access"]) for m in listed] == [
        (store["id"], "read_only"),
        (read_only["id"], "read_only"),
    ]

    def refused_create(name: str, bad_mount: object, status: int, field: str | None) -> None:
        retry_key = {"Idempotency-Key": uuid.uuid4().hex}
        body = {"name": name, "mount": bad_mount}
        expect_error(forward.post("/memory_stores", json=body, headers=retry_key), status, None, field)
        names = {s["name"] for s in ok(forward.get("/memory_stores", params={"limit": 100}))["data"]}
        assert name not in names, "a refused mount leaves no store behind"
        # The key was not used up either: the same key with a good mount creates the store.
        made = ok(forward.post("/memory_stores", json={"name": name}, headers=retry_key))
        assert made["binding_info"] == {"identity_template_count": 0}

    refused_create("writable", {**mount, "access": "read_write"}, 400, "mount.access")
    refused_create("no template", {"identity_id": identity}, 400, "mount.template_id")
    refused_create("empty identity", {**mount, "identity_id": ""}, 400, "mount.identity_id")
    refused_create("unknown key", {**mount, "slot": 1}, 400, "mount.slot")
    refused_create("not an object", "idn/tmpl", 400, "mount")
    for n in range(8):
        ok(
            forward.post(
                "/memory_stores",
                json={"name": f"fill {n}", "mount": mount},
                headers={"Idempotency-Key": uuid.uuid4().hex},
            )
        )
    assert len(ok(forward.get(base))["data"]) == 10
    refused_create("one too many", mount, 409, None)
    assert len(ok(forward.get(base))["data"]) == 10


def test_forward_delete_takes_no_precondition(forward: httpx.Client) -> None:
    """docs/api-contract.md §2: qca's Forward delete sends no expected_content_sha256, and the server
    refuses one rather than deleting regardless of it."""
    sid = forward_store(forward)["id"]
    mid = ok(forward.post(f"/memory_stores/{sid}/memories", json={"path": "p", "content": "c"}))["id"]
    url = f"/memory_stores/{sid}/memories/{mid}"
    for expected in (sha("c"), sha("other")):
        expect_error(
            forward.delete(url, params={"expected_content_sha256": expected}),
            400,
            "invalid_request_error",
            "expected_content_sha256",
        )
    assert ok(forward.get(url))["content"] == "c"
    assert ok(forward.delete(url))["deleted"] is True
