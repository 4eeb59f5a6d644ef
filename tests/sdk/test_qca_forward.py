"""Qoder Forward (docs/api-contract.md §2) through the official SDK, unmodified: every memory-store call of
``qca.forward.Forward`` and every parameter it exposes, against the reference server."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from qca import NotFoundError
from qca.forward import Forward
from qca.forward.types import (
    DeletedMemory,
    DeletedMemoryStore,
    DeletedMemoryStoreMount,
    IdentityMemoryStoreListResponse,
    Memory,
    MemoryStore,
    MemoryStoreMount,
    MemoryVersion,
)

from tests.sdk.expect import (
    check_memory_fields,
    check_store_fields,
    check_time,
    check_version_fields,
    conflict,
    ids,
    message,
    names_any,
    not_written,
    refused,
    same,
    sha,
    unique,
)
from tests.sdk.seed import DEFAULT_IDENTITY, DEFAULT_STORE, DEFAULT_TEMPLATE, EARLY_MOUNTED_STORE


def new_store(forward: Forward, **fields: Any) -> MemoryStore:
    fields.setdefault("name", unique("fwd"))
    return forward.memory_stores.create(idempotency_key=uuid.uuid4().hex, **fields)


def check_store(store: object) -> MemoryStore:
    """A store as seed 000 describes it, parsed into the SDK's model."""
    assert isinstance(store, MemoryStore)
    check_store_fields(store)
    assert store.metadata.get("created_by") == "forward"
    assert isinstance(store.system_managed, bool)
    assert store.identity_id is None if not store.system_managed else isinstance(store.identity_id, str)
    assert isinstance(store.binding_info, dict)
    assert isinstance(store.binding_info["identity_template_count"], int)
    return store


def check_memory(memory: object, *, content: str | None = None, listed: bool = False) -> Memory:
    assert isinstance(memory, Memory)
    check_memory_fields(memory, content)
    assert isinstance(memory.metadata, dict)
    if listed:
        assert "content" not in memory.to_dict(), "list items carry no content key"
    elif content is not None:
        assert memory.content == content
    return memory


def check_version(version: object, *, listed: bool = False) -> MemoryVersion:
    assert isinstance(version, MemoryVersion)
    check_version_fields(version, listed=listed)
    assert isinstance(version.redacted, bool)
    if version.redacted:
        check_time(version.redacted_at)
    else:
        assert version.redacted_at is None
    return version


# --- stores -----------------------------------------------------------------------------------


def test_store_create_retrieve_update(forward: Forward) -> None:
    stores = forward.memory_stores
    store = check_store(new_store(forward, description="for tests", metadata={"team": "a"}))
    assert store.description == "for tests" and store.status == "active"
    assert store.metadata == {"team": "a", "created_by": "forward"}
    assert (store.entry_count, store.total_size, store.system_managed) == (0, 0, False)
    assert store.binding_info == {"identity_template_count": 0}
    assert same(stores.retrieve(store.id), store)

    updated = check_store(stores.update(store.id, name="renamed", description="changed", metadata={"b": "2"}))
    assert (updated.name, updated.description) == ("renamed", "changed")
    assert updated.metadata == {"b": "2", "created_by": "forward"}, "metadata replaces the whole map"
    assert updated.updated_at >= store.updated_at
    only_name = stores.update(store.id, name="renamed again")
    assert only_name.description == "changed" and only_name.metadata == updated.metadata
    refused(lambda: stores.update(store.id, metadata={"created_by": "me"}), "created_by")
    refused(lambda: stores.update(store.id, metadata={"gone": None}), "metadata")
    refused(lambda: stores.update(store.id, name=""), "name")
    assert same(stores.retrieve(store.id, timeout=5.0), only_name)


def test_store_create_needs_and_honours_the_idempotency_key(forward: Forward) -> None:
    stores = forward.memory_stores
    key, name = uuid.uuid4().hex, unique("idem")
    first = stores.create(name=name, idempotency_key=key, metadata={"k": "v"})
    again = stores.create(name=name, idempotency_key=key, metadata={"k": "v"})
    assert again.id == first.id and same(again, first)
    conflict(lambda: stores.create(name=name + "-other", idempotency_key=key))
    # The SDK leaves out a None header: the request then lacks the required key.
    refused(lambda: stores.create(name=unique("nokey"), idempotency_key=None), "Idempotency-Key")
    refused(lambda: stores.create(name="", idempotency_key=uuid.uuid4().hex), "name")


def test_store_create_with_mount(forward: Forward) -> None:
    """``mount=`` mounts the new store on an (identity, template) in the same call. Seed 000: an
    explicit mount is always read_only (only the system default store is read_write), so
    ``access: read_only`` is accepted and ``read_write`` is refused, naming ``access``, with no store
    made. A replay of the create (same key, same body) is the same store, not a second mount."""
    stores, mounts = forward.memory_stores, forward.identities.memory_stores
    identity, template = unique("idn"), unique("tmpl")
    key, name = uuid.uuid4().hex, unique("mounted")
    mount: Any = {"identity_id": identity, "template_id": template}
    first = check_store(stores.create(name=name, idempotency_key=key, mount=mount))
    assert first.binding_info == {"identity_template_count": 1}
    assert stores.create(name=name, idempotency_key=key, mount=mount).id == first.id
    explicit: Any = {**mount, "access": "read_only"}
    second = check_store(new_store(forward, mount=explicit))
    assert second.binding_info == {"identity_template_count": 1}

    listing = mounts.list(template, identity_id=identity)
    assert [m.memory_store_id for m in listing.data or []] == [first.id, second.id]
    assert all(m.access == "read_only" and m.system_managed is False for m in listing.data or [])

    refused_name = unique("read-write")
    writable: Any = {**mount, "access": "read_write"}
    refused(lambda: new_store(forward, name=refused_name, mount=writable), "access")
    assert refused_name not in [s.name for s in stores.list(limit=100)]
    assert len(mounts.list(template, identity_id=identity).data or []) == 2
    refused(lambda: new_store(forward, mount={"identity_id": identity}), "template_id")


def test_store_list_pages_newest_first(forward: Forward) -> None:
    stores = forward.memory_stores
    made = [new_store(forward).id for _ in range(3)]
    listed = ids(stores.list(limit=2))  # the SDK follows after_id=last_id while has_more
    assert len(listed) == len(set(listed)) and set(made) <= set(listed)
    assert listed == sorted(listed, reverse=True), "newest first: id descending"
    assert [i for i in listed if i in made] == made[::-1]

    pages = list(stores.list(limit=2).iter_pages())
    assert len(pages) >= 2 and [i for p in pages for i in ids(p.data)] == listed
    assert all(p.has_more for p in pages[:-1]) and pages[-1].has_more is False
    first = pages[0]
    assert first.first_id == first.data[0].id and first.last_id == first.data[-1].id
    second = stores.list(limit=2, after_id=first.last_id)
    assert ids(second.data) == listed[2:4]
    back = stores.list(limit=2, before_id=second.first_id)
    assert ids(back.data) == listed[:2] and back.has_more is False
    for store in stores.list(limit=100).data:
        check_store(store)

    refused(lambda: stores.list(after_id=listed[0], before_id=listed[1]), "after_id", "before_id")
    refused(lambda: stores.list(limit=0), "limit")
    refused(lambda: stores.list(limit=101), "limit")


def test_store_list_filters_on_system_managed(forward: Forward) -> None:
    mine = new_store(forward)
    managed = list(forward.memory_stores.list(system_managed=True))
    assert managed and all(s.system_managed is True for s in managed)
    default = next(s for s in managed if s.name == DEFAULT_STORE)
    check_store(default)
    assert default.identity_id == DEFAULT_IDENTITY and default.metadata == {"created_by": "forward"}
    user_made = ids(forward.memory_stores.list(system_managed=False))
    assert mine.id in user_made and default.id not in user_made
    everything = ids(forward.memory_stores.list())
    assert {mine.id, default.id} <= set(everything)


def test_archive_and_delete_store(forward: Forward) -> None:
    stores, memories = forward.memory_stores, forward.memory_stores.memories
    store = new_store(forward)
    memory = memories.create(store.id, path="kept.md", content="kept")
    archived = check_store(stores.archive(store.id))
    assert archived.status == "archived" and archived.archived_at is not None
    conflict(lambda: stores.archive(store.id))
    conflict(lambda: stores.update(store.id, name="late"))
    conflict(lambda: memories.create(store.id, path="late.md", content="late"))
    conflict(lambda: memories.update(memory.id, memory_store_id=store.id, content="late"))
    conflict(lambda: memories.delete(memory.id, memory_store_id=store.id))
    # Reads and redaction still work on an archived store (docs/api-contract.md §2).
    assert memories.retrieve(memory.id, memory_store_id=store.id).content == "kept"
    (version,) = stores.memory_versions.list(store.id)
    assert stores.memory_versions.redact(version.id, memory_store_id=store.id).redacted is True
    # docs/api-contract.md §6: deleting an archived Forward store is a 409.
    conflict(lambda: stores.delete(store.id))
    assert stores.retrieve(store.id).status == "archived"

    doomed = new_store(forward)
    gone_memory = memories.create(doomed.id, path="gone.md", content="gone")
    deleted = stores.delete(doomed.id)
    assert isinstance(deleted, DeletedMemoryStore)
    assert deleted.to_dict() == {"id": doomed.id, "type": "memory_store_deleted", "deleted": True}
    with pytest.raises(NotFoundError):
        stores.retrieve(doomed.id)
    with pytest.raises(NotFoundError):
        memories.retrieve(gone_memory.id, memory_store_id=doomed.id)
    with pytest.raises(NotFoundError):
        stores.delete(doomed.id)


# --- memories ---------------------------------------------------------------------------------


def test_memory_lifecycle_and_preconditions(forward: Forward) -> None:
    stores, memories = forward.memory_stores, forward.memory_stores.memories
    store = new_store(forward)
    created = check_memory(
        memories.create(store.id, path="notes/a.md", content="one", metadata={"owner": "me"}), content="one"
    )
    assert created.memory_store_id == store.id and created.path == "notes/a.md"
    assert created.metadata == {"owner": "me"}
    assert same(memories.retrieve(created.id, memory_store_id=store.id), created)
    conflict(lambda: memories.create(store.id, path="notes/a.md", content="again"))

    second = check_memory(
        memories.update(created.id, memory_store_id=store.id, content="two", content_sha256=sha("one")),
        content="two",
    )
    assert second.id == created.id and second.metadata == {"owner": "me"}
    stale = conflict(
        lambda: memories.update(
            created.id, memory_store_id=store.id, content="three", content_sha256=sha("one")
        )
    )
    assert stale.type == "conflict_error"
    assert memories.retrieve(created.id, memory_store_id=store.id).content == "two"
    third = check_memory(
        memories.update(created.id, memory_store_id=store.id, content="three", metadata={"k": "v"}),
        content="three",
    )
    assert third.metadata == {"k": "v"}, "metadata replaces the whole map"
    malformed = not_written(
        lambda: memories.update(
            created.id, memory_store_id=store.id, content="x", content_sha256="not-a-hash"
        )
    )
    assert malformed.status_code == 409 or names_any(message(malformed), ("content_sha256",))
    assert memories.retrieve(created.id, memory_store_id=store.id).content == "three"
    refused(lambda: memories.create(store.id, path="/absolute.md", content="x"), "path")
    refused(lambda: memories.create(store.id, path="empty.md", content=""), "content")
    refused(
        lambda: memories.create(store.id, path="meta.md", content="x", metadata={"k": "v" * 513}), "metadata"
    )
    counted = stores.retrieve(store.id)
    assert (counted.entry_count, counted.total_size) == (1, len(b"three"))

    deleted = memories.delete(created.id, memory_store_id=store.id)
    assert isinstance(deleted, DeletedMemory)
    assert deleted.to_dict() == {"id": created.id, "type": "memory_deleted", "deleted": True}
    with pytest.raises(NotFoundError):
        memories.retrieve(created.id, memory_store_id=store.id)
    with pytest.raises(NotFoundError):
        memories.update(created.id, memory_store_id=store.id, content="zombie")
    reborn = check_memory(memories.create(store.id, path="notes/a.md", content="new"), content="new")
    assert reborn.id != created.id, "a path freed by a delete is reused with a new id"


def test_memory_list_pages_and_prefix(forward: Forward) -> None:
    memories = forward.memory_stores.memories
    store = new_store(forward)
    paths = ["docs/a.md", "docs/b.md", "docs/sub/c.md", "docsx/d.md", "other.md"]
    made = [memories.create(store.id, path=p, content=f"content of {p}").id for p in paths]

    listed = list(memories.list(store.id, limit=2))  # 3 pages, followed by the SDK
    assert ids(listed) == made[::-1], "newest first"
    for item, path in zip(listed, paths[::-1], strict=True):
        check_memory(item, content=f"content of {path}", listed=True)

    first = memories.list(store.id, limit=2)
    assert first.has_more is True and (first.first_id, first.last_id) == (made[4], made[3])
    second = memories.list(store.id, limit=2, after_id=first.last_id)
    assert ids(second.data) == made[2:0:-1] and second.has_more is True
    back = memories.list(store.id, limit=2, before_id=second.first_id)
    assert ids(back.data) == ids(first.data) and back.has_more is False
    # Walking towards newer items: the SDK follows before_id=first_id.
    newer = ids(memories.list(store.id, limit=1, before_id=made[0]))
    assert sorted(newer) == sorted(made[1:])

    # path_prefix is a plain string prefix: "docs" also matches "docsx/d.md".
    assert [m.path for m in memories.list(store.id, path_prefix="docs")] == paths[3::-1]
    assert [m.path for m in memories.list(store.id, path_prefix="docs/", limit=1)] == paths[2::-1]
    assert [m.path for m in memories.list(store.id, path_prefix="docs/sub/c")] == ["docs/sub/c.md"]
    assert list(memories.list(store.id, path_prefix="nothing/")) == []
    refused(lambda: memories.list(store.id, limit=101), "limit")
    refused(lambda: memories.list(store.id, after_id=made[0], before_id=made[1]), "after_id", "before_id")
    with pytest.raises(NotFoundError):
        memories.list("memstore_" + "0" * 20)


# --- versions ---------------------------------------------------------------------------------


def test_versions_list_retrieve_redact(forward: Forward) -> None:
    memories, versions = forward.memory_stores.memories, forward.memory_stores.memory_versions
    store = new_store(forward)
    memory = memories.create(store.id, path="history.md", content="v1")
    memories.update(memory.id, memory_store_id=store.id, content="v2")
    memories.update(memory.id, memory_store_id=store.id, content="v3")
    memories.delete(memory.id, memory_store_id=store.id)
    other = memories.create(store.id, path="other.md", content="other")

    everything = list(versions.list(store.id, limit=2))
    assert len(everything) == 5 and ids(everything) == sorted(ids(everything), reverse=True)
    for version in everything:
        check_version(version, listed=True)
        assert version.memory_store_id == store.id
    history = list(versions.list(store.id, memory_id=memory.id, limit=3))  # works after the delete
    assert [v.operation for v in history] == ["deleted", "updated", "updated", "created"]
    assert ids(history) == ids(everything[1:])
    assert {v.path for v in history} == {"history.md"}
    assert [v.content_sha256 for v in history] == [sha("v3"), sha("v3"), sha("v2"), sha("v1")]
    assert [v.content_size_bytes for v in history] == [2, 2, 2, 2]

    first = versions.list(store.id, limit=2)
    assert first.has_more is True and first.last_id == everything[1].id
    second = versions.list(store.id, limit=2, after_id=first.last_id)
    assert ids(second.data) == ids(everything[2:4])
    assert ids(versions.list(store.id, limit=2, before_id=second.first_id).data) == ids(everything[:2])
    refused(lambda: versions.list(store.id, limit=0), "limit")

    created = history[-1]
    full = check_version(versions.retrieve(created.id, memory_store_id=store.id))
    assert (full.content, full.operation, full.redacted) == ("v1", "created", False)
    tombstone = versions.retrieve(history[0].id, memory_store_id=store.id)
    assert tombstone.content is None and tombstone.operation == "deleted"

    redacted = check_version(versions.redact(created.id, memory_store_id=store.id))
    assert redacted.content is None and redacted.redacted is True and redacted.redacted_at is not None
    assert (redacted.content_sha256, redacted.content_size_bytes) == (sha("v1"), 2), "size and hash stay"
    assert same(versions.retrieve(created.id, memory_store_id=store.id), redacted)
    conflict(lambda: versions.redact(created.id, memory_store_id=store.id))
    assert versions.retrieve(history[1].id, memory_store_id=store.id).content == "v3", "others untouched"

    # Forward allows redacting a live memory's head version; its current content stays readable.
    (head,) = versions.list(store.id, memory_id=other.id)
    assert versions.redact(head.id, memory_store_id=store.id).content is None
    assert memories.retrieve(other.id, memory_store_id=store.id).content == "other"
    with pytest.raises(NotFoundError):
        versions.retrieve("memver_" + "0" * 20, memory_store_id=store.id)


# --- mounts -----------------------------------------------------------------------------------


def check_mount(mount: object, store: MemoryStore, identity: str, template: str) -> MemoryStoreMount:
    assert isinstance(mount, MemoryStoreMount)
    assert (mount.memory_store_id, mount.identity_id, mount.template_id) == (store.id, identity, template)
    assert (mount.name, mount.status) == (store.name, "active")
    assert isinstance(mount.entry_count, int)
    check_time(mount.created_at)
    return mount


def test_mounts_default_first_then_by_mount_time(forward: Forward) -> None:
    """The pair's default store (seeded, system-managed) lists first even though another store was
    mounted on the pair before it existed; explicit mounts follow by mount time, not by store id.
    A system-managed mount cannot be removed (409), as docs/server.md decides."""
    stores, mounts = forward.memory_stores, forward.identities.memory_stores
    identity, template = DEFAULT_IDENTITY, DEFAULT_TEMPLATE
    default = next(s for s in stores.list(system_managed=True) if s.name == DEFAULT_STORE)
    early = next(s for s in stores.list(system_managed=False) if s.name == EARLY_MOUNTED_STORE)
    older, newer = new_store(forward), new_store(forward)
    mounted_newer = check_mount(
        mounts.mount(template, identity_id=identity, memory_store_id=newer.id), newer, identity, template
    )
    assert (mounted_newer.access, mounted_newer.system_managed) == ("read_only", False)
    check_mount(
        mounts.mount(template, identity_id=identity, memory_store_id=older.id), older, identity, template
    )

    listing = mounts.list(template, identity_id=identity)
    assert isinstance(listing, IdentityMemoryStoreListResponse) and listing.has_more is False
    data = listing.data or []
    assert [m.memory_store_id for m in data] == [default.id, early.id, newer.id, older.id]
    assert [(m.access, m.system_managed) for m in data] == [("read_write", True)] + [("read_only", False)] * 3
    assert [m.created_at for m in data[1:]] == sorted(m.created_at for m in data[1:])

    assert stores.retrieve(older.id).binding_info == {"identity_template_count": 1}
    conflict(lambda: mounts.mount(template, identity_id=identity, memory_store_id=older.id))
    conflict(lambda: stores.archive(older.id))
    conflict(lambda: stores.delete(older.id))
    conflict(lambda: mounts.detach(default.id, template_id=template, identity_id=identity))

    detached = mounts.detach(older.id, template_id=template, identity_id=identity)
    assert isinstance(detached, DeletedMemoryStoreMount)
    assert detached.to_dict() == {"id": older.id, "type": "memory_store_binding_deleted", "deleted": True}
    with pytest.raises(NotFoundError):
        mounts.detach(older.id, template_id=template, identity_id=identity)
    assert stores.retrieve(older.id).binding_info == {"identity_template_count": 0}
    assert stores.archive(older.id).status == "archived"
    conflict(lambda: mounts.mount(template, identity_id=identity, memory_store_id=older.id))
    after = [m.memory_store_id for m in mounts.list(template, identity_id=identity).data or []]
    assert after == [default.id, early.id, newer.id]
    mounts.detach(newer.id, template_id=template, identity_id=identity)
    assert stores.delete(newer.id).deleted is True
    with pytest.raises(NotFoundError):
        mounts.mount(template, identity_id=identity, memory_store_id="memstore_" + "0" * 20)


def test_at_most_ten_explicit_mounts(forward: Forward) -> None:
    """An eleventh explicit mount of a pair is a 409; so is a create with ``mount=`` on a full pair,
    which then makes no store (the create and its mount are one step)."""
    stores, mounts = forward.memory_stores, forward.identities.memory_stores
    identity, template = unique("idn"), unique("tmpl")
    for _ in range(10):
        mounts.mount(template, identity_id=identity, memory_store_id=new_store(forward).id)
    assert len(mounts.list(template, identity_id=identity).data or []) == 10
    spare = new_store(forward)
    conflict(lambda: mounts.mount(template, identity_id=identity, memory_store_id=spare.id))
    name = unique("overflow")
    conflict(lambda: new_store(forward, name=name, mount={"identity_id": identity, "template_id": template}))
    assert name not in [s.name for s in stores.list(limit=100)]


# --- what the server does not know ------------------------------------------------------------


def test_unknown_parameters_fields_and_headers_are_refused(forward: Forward) -> None:
    """docs/api-contract.md §6: a parameter, field or header the server does not know is a 400 naming
    it, never silently dropped. Cloud and Anthropic spellings are unknown to Forward."""
    stores, memories = forward.memory_stores, forward.memory_stores.memories
    store = new_store(forward)
    memory = memories.create(store.id, path="a.md", content="a")
    refused(lambda: memories.list(store.id, extra_query={"frobnicate": "1"}), "frobnicate")
    refused(lambda: memories.list(store.id, extra_query={"view": "full"}), "view")
    refused(lambda: stores.list(extra_query={"include_archived": "true"}), "include_archived")
    refused(
        lambda: memories.create(store.id, path="b.md", content="b", extra_body={"frobnicate": 1}),
        "frobnicate",
    )
    precondition = {"precondition": {"type": "content_sha256", "content_sha256": sha("a")}}
    refused(
        lambda: memories.update(memory.id, memory_store_id=store.id, content="b", extra_body=precondition),
        "precondition",
    )
    refused(
        lambda: memories.update(memory.id, memory_store_id=store.id, content="b", extra_body={"version": 1}),
        "version",
    )
    refused(
        lambda: memories.delete(
            memory.id, memory_store_id=store.id, extra_query={"expected_content_sha256": sha("a")}
        ),
        "expected_content_sha256",
    )
    refused(
        lambda: stores.retrieve(store.id, extra_headers={"X-Qoder-Frobnicate": "1"}), "x-qoder-frobnicate"
    )
    assert memories.retrieve(memory.id, memory_store_id=store.id).content == "a", "nothing was written"
