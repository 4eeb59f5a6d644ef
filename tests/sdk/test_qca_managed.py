"""Qoder Cloud (docs/api-contract.md §3) through the official SDK, unmodified: every memory-store call of
``qca.managed.Managed`` and every parameter it exposes, against the reference server.

The SDK is shaped like Anthropic's (``view``, ``depth``, actor filters, ``precondition``), the server
like seed 002. Where docs/api-contract.md fixes a behaviour (``page``/``next_page`` paging, the delete
precondition, ``operation=modified`` as ``updated``, ``memory_version_id``, ``created_by`` and
``redacted_by``), the tests require it. For the other parameters the SDK offers, docs/api-contract.md
§6 allows two answers: the server implements the parameter (the test checks its effect) or refuses it
with a 400 naming it; accepting it and ignoring it fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from qca import NotFoundError
from qca.managed import Managed
from qca.managed.types import (
    DeletedMemory,
    DeletedMemoryStore,
    Memory,
    MemoryListItemUnion,
    MemoryStore,
    MemoryVersion,
)
from qca.managed.types.actor_union import ActorUnion

from tests.sdk.expect import (
    check_id,
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
    works_or_refused,
)
from tests.sdk.seed import ACTORS_STORE, SERVICE_ACCOUNT_ID, SESSION_ID, USER_ID

MISSING_STORE = "memstore_" + "0" * 20


def new_store(managed: Managed, **fields: Any) -> MemoryStore:
    fields.setdefault("name", unique("cloud"))
    fields.setdefault("description", "made by the SDK tests")
    return managed.memory_stores.create(**fields)


def check_store(store: object) -> MemoryStore:
    assert isinstance(store, MemoryStore)
    check_store_fields(store)
    fields = store.to_dict()
    assert not {"system_managed", "identity_id", "binding_info"} & set(fields), "Forward-only fields"
    return store


def check_memory(memory: object, *, content: str | None = None, listed: bool = False) -> Any:
    assert isinstance(memory, MemoryListItemUnion if listed else Memory)
    check_memory_fields(memory, content)
    check_id(memory.memory_version_id, "memver")
    if listed:
        assert memory.content is None and "content" not in memory.to_dict(), "list items carry no content"
    else:
        assert isinstance(memory.metadata, dict)
        if content is not None:
            assert memory.content == content
    return memory


def check_actor(actor: object, kind: str, **ids: str) -> ActorUnion:
    assert isinstance(actor, ActorUnion) and actor.type == kind, actor
    for field, value in ids.items():
        assert getattr(actor, field) == value, actor
    return actor


def check_version(version: object, *, listed: bool = False) -> MemoryVersion:
    assert isinstance(version, MemoryVersion)
    check_version_fields(version, listed=listed)
    assert version.created_by is None or isinstance(version.created_by, ActorUnion)
    if version.redacted_at is None:
        assert version.redacted_by is None
    else:
        check_time(version.redacted_at)
        assert version.content is None
    return version


def api_actor_key(managed: Managed) -> str:
    """The api_key_id the server records for this client's token (read back from a version)."""
    store = new_store(managed)
    memory = managed.memory_stores.memories.create(store.id, path="whoami.md", content="me")
    (version,) = managed.memory_stores.memory_versions.list(store.id, memory_id=memory.id)
    actor = check_actor(version.created_by, "api_actor")
    assert isinstance(actor.api_key_id, str) and actor.api_key_id
    return actor.api_key_id


# --- stores -----------------------------------------------------------------------------------


def test_store_create_retrieve_update(managed: Managed) -> None:
    stores = managed.memory_stores
    store = check_store(new_store(managed, description="for tests", metadata={"created_by": "me"}))
    assert store.status == "active" and store.description == "for tests"
    assert store.metadata == {"created_by": "me"}, "Cloud reserves no metadata key"
    assert (store.entry_count, store.total_size) == (0, 0)
    assert same(stores.retrieve(store.id), store)
    updated = check_store(stores.update(store.id, name="renamed", description="changed", metadata={"b": "2"}))
    assert (updated.name, updated.description, updated.metadata) == ("renamed", "changed", {"b": "2"})
    assert stores.update(store.id, description="again").name == "renamed"
    assert stores.retrieve(store.id).description == "again"
    refused(lambda: stores.update(store.id, name=""), "name")
    refused(lambda: stores.create(name="", description="d"), "name")
    # Cloud requires a description and keeps names trimmed, at most 64 characters (§3).
    refused(lambda: stores.create(name="undescribed"), "description")
    refused(lambda: stores.create(name="x" * 65, description="d"), "name")
    assert stores.create(name=" trimmed ", description="d").name == "trimmed"
    with pytest.raises(NotFoundError):
        stores.retrieve(MISSING_STORE)


def test_archive_and_delete_store(managed: Managed) -> None:
    stores, memories = managed.memory_stores, managed.memory_stores.memories
    store = new_store(managed)
    memory = memories.create(store.id, path="kept.md", content="kept")
    archived = check_store(stores.archive(store.id))
    assert archived.status == "archived" and archived.archived_at is not None
    conflict(lambda: stores.archive(store.id))
    conflict(lambda: memories.create(store.id, path="late.md", content="late"))
    conflict(lambda: memories.update(memory.id, memory_store_id=store.id, content="late"))
    conflict(lambda: stores.delete(store.id))
    assert memories.retrieve(memory.id, memory_store_id=store.id).content == "kept"

    doomed = new_store(managed)
    memories.create(doomed.id, path="gone.md", content="gone")
    deleted = stores.delete(doomed.id)
    assert isinstance(deleted, DeletedMemoryStore) and (deleted.id, deleted.type) == (
        doomed.id,
        "memory_store_deleted",
    )
    with pytest.raises(NotFoundError):
        stores.retrieve(doomed.id)


def test_store_list_pages_by_next_page(managed: Managed) -> None:
    """The SDK pages Cloud lists with ``page`` and the answer's ``next_page`` (docs/api-contract.md §3):
    iterating must reach every store, not stop after the first page."""
    stores = managed.memory_stores
    made = [new_store(managed).id for _ in range(3)]
    listed = ids(stores.list(limit=2))
    assert len(listed) == len(set(listed)) and set(made) <= set(listed)
    assert listed == sorted(listed, reverse=True), "newest first"
    assert [i for i in listed if i in made] == made[::-1]
    first = stores.list(limit=2)
    assert ids(first.data) == listed[:2] and first.has_more is True and isinstance(first.next_page, str)
    second = stores.list(limit=2, page=first.next_page)
    assert ids(second.data) == listed[2:4]
    pages = list(stores.list(limit=2).iter_pages())
    assert pages[-1].next_page is None and all(p.next_page for p in pages[:-1])
    for store in stores.list(limit=100).data:
        check_store(store)
    refused(lambda: stores.list(page="not-a-page-token"), "page")
    refused(lambda: stores.list(limit=0), "limit")


def test_store_list_name_filter(managed: Managed) -> None:
    """``name`` plausibly matches the store name exactly; a unique name finds exactly its store."""
    name = unique("named")
    store = new_store(managed, name=name)
    new_store(managed, name=name + "-sibling")
    found = works_or_refused(lambda: list(managed.memory_stores.list(name=name)), "name")
    if found is not None:
        assert ids(found) == [store.id]


def test_store_list_created_at_filters(managed: Managed) -> None:
    """``created_at[gte]``/``[lte]`` bound the store's ``created_at`` inclusively (as on Anthropic)."""
    stores = managed.memory_stores
    seeded = next(s for s in stores.list(limit=100) if s.name == ACTORS_STORE)
    assert seeded.created_at == datetime(2025, 1, 1, tzinfo=seeded.created_at.tzinfo)
    store = new_store(managed)
    newer = works_or_refused(lambda: ids(stores.list(created_at_gte=store.created_at)), "created_at")
    if newer is not None:
        assert store.id in newer and seeded.id not in newer
    older = works_or_refused(lambda: ids(stores.list(created_at_lte=seeded.created_at)), "created_at")
    if older is not None:
        assert seeded.id in older and store.id not in older


def test_store_list_include_archived(managed: Managed) -> None:
    stores = managed.memory_stores
    archived = stores.archive(new_store(managed).id)
    active = new_store(managed)
    without = works_or_refused(lambda: ids(stores.list(include_archived=False)), "include_archived")
    if without is not None:
        assert active.id in without and archived.id not in without
    with_archived = works_or_refused(lambda: ids(stores.list(include_archived=True)), "include_archived")
    if with_archived is not None:
        assert {active.id, archived.id} <= set(with_archived)


# --- memories ---------------------------------------------------------------------------------


def test_memory_lifecycle_and_preconditions(managed: Managed) -> None:
    stores, memories = managed.memory_stores, managed.memory_stores.memories
    versions = stores.memory_versions
    store = new_store(managed)
    created = check_memory(
        memories.create(store.id, path="notes/a.md", content="one", metadata={"owner": "me"}), content="one"
    )
    assert created.metadata == {"owner": "me"} and created.path == "notes/a.md"
    (head,) = versions.list(store.id, memory_id=created.id)
    assert created.memory_version_id == head.id, "memory_version_id is the head version"
    assert same(memories.retrieve(created.id, memory_store_id=store.id), created)
    conflict(lambda: memories.create(store.id, path="notes/a.md", content="again"))

    second = check_memory(
        memories.update(created.id, memory_store_id=store.id, content="two", content_sha256=sha("one")),
        content="two",
    )
    assert second.memory_version_id != created.memory_version_id
    assert second.memory_version_id == next(iter(versions.list(store.id, memory_id=created.id))).id
    precondition: Any = {"type": "content_sha256", "content_sha256": sha("two")}
    third = memories.update(created.id, memory_store_id=store.id, content="three", precondition=precondition)
    check_memory(third, content="three")
    for stale in (
        lambda: memories.update(created.id, memory_store_id=store.id, content="x", content_sha256=sha("one")),
        lambda: memories.update(created.id, memory_store_id=store.id, content="x", precondition=precondition),
    ):
        conflict(stale)
    assert memories.retrieve(created.id, memory_store_id=store.id).content == "three"

    renamed_meta = memories.update(created.id, memory_store_id=store.id, content="four", metadata={"k": "v"})
    assert renamed_meta.metadata == {"k": "v"}, "metadata replaces the whole map"
    same_path = memories.update(created.id, memory_store_id=store.id, content="five", path="notes/a.md")
    assert same_path.path == "notes/a.md" and same_path.content == "five"
    # A move is delete + create on Forward and Cloud (docs/api-contract.md §2), so another path is refused.
    refused(
        lambda: memories.update(created.id, memory_store_id=store.id, content="x", path="moved.md"), "path"
    )
    refused(lambda: memories.create(store.id, path="/absolute.md", content="x"), "path")
    refused(lambda: memories.create(store.id, path="empty.md", content=""), "content")
    counted = stores.retrieve(store.id)
    assert (counted.entry_count, counted.total_size) == (1, len(b"five"))


def test_memory_update_without_content(managed: Managed) -> None:
    """The SDK makes ``content`` optional on update (a metadata-only update). docs/api-contract.md §2
    requires it; a server that takes the update keeps the content and changes the metadata alone."""
    memories = managed.memory_stores.memories
    store = new_store(managed)
    memory = memories.create(store.id, path="meta.md", content="body", metadata={"a": "1"})
    updated = works_or_refused(
        lambda: memories.update(memory.id, memory_store_id=store.id, metadata={"b": "2"}), "content"
    )
    current = memories.retrieve(memory.id, memory_store_id=store.id)
    if updated is None:
        assert current.metadata == {"a": "1"}
    else:
        assert updated.metadata == {"b": "2"} == current.metadata
        assert current.content == "body" and current.content_sha256 == sha("body")


def test_memory_delete_with_expected_hash(managed: Managed) -> None:
    """docs/api-contract.md §3: delete takes ``expected_content_sha256``; a mismatch is a 409 and nothing is
    deleted. A value that is no SHA-256 digest cannot match: a 409, or a 400 naming it, and nothing
    deleted either way."""
    memories, versions = managed.memory_stores.memories, managed.memory_stores.memory_versions
    store = new_store(managed)
    kept = memories.create(store.id, path="kept.md", content="kept")
    conflict(lambda: memories.delete(kept.id, memory_store_id=store.id, expected_content_sha256=sha("other")))
    assert memories.retrieve(kept.id, memory_store_id=store.id).content == "kept"
    assert [v.operation for v in versions.list(store.id, memory_id=kept.id)] == ["created"]
    malformed = not_written(
        lambda: memories.delete(kept.id, memory_store_id=store.id, expected_content_sha256="nope")
    )
    assert malformed.status_code == 409 or names_any(message(malformed), ("expected_content_sha256",))
    assert memories.retrieve(kept.id, memory_store_id=store.id).content == "kept"
    deleted = memories.delete(kept.id, memory_store_id=store.id, expected_content_sha256=sha("kept"))
    assert isinstance(deleted, DeletedMemory) and (deleted.id, deleted.type) == (kept.id, "memory_deleted")
    with pytest.raises(NotFoundError):
        memories.retrieve(kept.id, memory_store_id=store.id)
    plain = memories.create(store.id, path="kept.md", content="again")
    assert plain.id != kept.id
    assert memories.delete(plain.id, memory_store_id=store.id).id == plain.id
    with pytest.raises(NotFoundError):
        memories.delete(plain.id, memory_store_id=store.id)


def test_memory_list_pages_and_prefix(managed: Managed) -> None:
    memories = managed.memory_stores.memories
    store = new_store(managed)
    paths = ["docs/a.md", "docs/b.md", "docs/sub/c.md", "docsx/d.md", "other.md"]
    made = [memories.create(store.id, path=p, content=f"content of {p}").id for p in paths]

    listed = list(memories.list(store.id, limit=2))  # three pages, followed through next_page
    assert ids(listed) == made[::-1], "newest first"
    for item, path in zip(listed, paths[::-1], strict=True):
        check_memory(item, content=f"content of {path}", listed=True)
    first = memories.list(store.id, limit=2)
    assert first.has_more is True and isinstance(first.next_page, str)
    second = memories.list(store.id, limit=2, page=first.next_page)
    assert ids(second.data) == made[2:0:-1]

    assert [m.path for m in memories.list(store.id, path_prefix="docs")] == paths[3::-1]
    assert [m.path for m in memories.list(store.id, path_prefix="docs/", limit=1)] == paths[2::-1]
    assert list(memories.list(store.id, path_prefix="nothing/")) == []
    refused(lambda: memories.list(store.id, limit=101), "limit")
    refused(lambda: memories.list(store.id, page="not-a-page-token"), "page")
    with pytest.raises(NotFoundError):
        memories.list(MISSING_STORE)


def test_memory_view(managed: Managed) -> None:
    """``view=basic`` leaves ``content`` out, ``view=full`` puts it in, on every call that takes it
    (the SDK's Anthropic meaning)."""
    memories = managed.memory_stores.memories
    store = new_store(managed)
    basic = works_or_refused(
        lambda: memories.create(store.id, path="b.md", content="b", view="basic"), "view"
    )
    if basic is not None:
        assert basic.content is None and basic.content_sha256 == sha("b")
    full = works_or_refused(lambda: memories.create(store.id, path="f.md", content="f", view="full"), "view")
    if full is not None:
        assert full.content == "f"
    memory = memories.create(store.id, path="m.md", content="m")
    got = works_or_refused(
        lambda: memories.retrieve(memory.id, memory_store_id=store.id, view="basic"), "view"
    )
    if got is not None:
        assert got.content is None and got.content_sha256 == sha("m")
    got = works_or_refused(
        lambda: memories.retrieve(memory.id, memory_store_id=store.id, view="full"), "view"
    )
    if got is not None:
        assert got.content == "m"
    updated = works_or_refused(
        lambda: memories.update(memory.id, memory_store_id=store.id, content="n", view="basic"), "view"
    )
    if updated is not None:
        assert updated.content is None and updated.content_sha256 == sha("n")
    listed = works_or_refused(lambda: list(memories.list(store.id, view="full")), "view")
    if listed is not None:
        contents = {m.path: m.content for m in listed}
        assert contents["m.md"] in ("m", "n") and all(contents.values())
    listed = works_or_refused(lambda: list(memories.list(store.id, view="basic")), "view")
    if listed is not None:
        assert all(m.content is None for m in listed)
    refused(lambda: memories.retrieve(memory.id, memory_store_id=store.id, view="everything"), "view")


def test_memory_list_depth(managed: Managed) -> None:
    """``depth=1`` lists direct children and rolls deeper paths up into ``memory_prefix`` items
    (docs/api-contract.md §4's meaning, in Cloud's relative spelling: ``dir/``)."""
    memories = managed.memory_stores.memories
    store = new_store(managed)
    for path in ("top.md", "dir/a.md", "dir/sub/b.md"):
        memories.create(store.id, path=path, content=path)
    top = works_or_refused(lambda: list(memories.list(store.id, depth=1)), "depth")
    if top is not None:
        assert {(i.type, i.path) for i in top} == {("memory", "top.md"), ("memory_prefix", "dir/")}
    below = works_or_refused(lambda: list(memories.list(store.id, depth=1, path_prefix="dir/")), "depth")
    if below is not None:
        assert {(i.type, i.path) for i in below} == {("memory", "dir/a.md"), ("memory_prefix", "dir/sub/")}


# --- versions ---------------------------------------------------------------------------------


def test_versions_list_retrieve_redact(managed: Managed) -> None:
    memories, versions = managed.memory_stores.memories, managed.memory_stores.memory_versions
    store = new_store(managed)
    memory = memories.create(store.id, path="history.md", content="v1")
    memories.update(memory.id, memory_store_id=store.id, content="v2", content_sha256=sha("v1"))
    memories.update(memory.id, memory_store_id=store.id, content="v3")
    memories.delete(memory.id, memory_store_id=store.id, expected_content_sha256=sha("v3"))
    other = memories.create(store.id, path="other.md", content="other")

    everything = list(versions.list(store.id, limit=2))  # three pages
    assert len(everything) == 5 and ids(everything) == sorted(ids(everything), reverse=True)
    for version in everything:
        check_version(version, listed=True)
    keys = {check_actor(v.created_by, "api_actor").api_key_id for v in everything}
    assert len(keys) == 1 and all(keys), "every write records the same api_actor"
    history = list(versions.list(store.id, memory_id=memory.id, limit=3))
    assert [v.operation for v in history] == ["deleted", "updated", "updated", "created"]
    assert ids(history) == ids(everything[1:]) and {v.path for v in history} == {"history.md"}
    assert [v.content_sha256 for v in history] == [sha("v3"), sha("v3"), sha("v2"), sha("v1")]

    first = versions.list(store.id, limit=2)
    assert first.has_more is True and isinstance(first.next_page, str)
    assert ids(versions.list(store.id, limit=2, page=first.next_page).data) == ids(everything[2:4])
    refused(lambda: versions.list(store.id, page="not-a-page-token"), "page")
    refused(lambda: versions.list(store.id, limit=101), "limit")

    created = history[-1]
    full = check_version(versions.retrieve(created.id, memory_store_id=store.id))
    assert (full.content, full.operation, full.redacted_at, full.redacted_by) == ("v1", "created", None, None)
    assert versions.retrieve(history[0].id, memory_store_id=store.id).content is None, "a tombstone"
    redacted = check_version(versions.redact(created.id, memory_store_id=store.id))
    assert redacted.content is None and redacted.redacted_at is not None
    assert redacted.redacted is True  # seed 002's field, beyond the SDK model
    check_actor(redacted.redacted_by, "api_actor", api_key_id=next(iter(keys)))
    assert (redacted.content_sha256, redacted.content_size_bytes, redacted.path) == (
        sha("v1"),
        2,
        "history.md",
    )
    assert same(versions.retrieve(created.id, memory_store_id=store.id), redacted)
    conflict(lambda: versions.redact(created.id, memory_store_id=store.id))
    assert versions.retrieve(history[1].id, memory_store_id=store.id).content == "v3"
    (head,) = versions.list(store.id, memory_id=other.id)
    assert versions.redact(head.id, memory_store_id=store.id).content is None
    assert memories.retrieve(other.id, memory_store_id=store.id).content == "other"
    with pytest.raises(NotFoundError):
        versions.retrieve("memver_" + "0" * 20, memory_store_id=store.id)


def test_versions_operation_filter(managed: Managed) -> None:
    """Cloud names an update ``updated`` (seed 002); the SDK's ``modified`` is taken as the same."""
    memories, versions = managed.memory_stores.memories, managed.memory_stores.memory_versions
    store = new_store(managed)
    memory = memories.create(store.id, path="a.md", content="1")
    memories.update(memory.id, memory_store_id=store.id, content="2")
    memories.update(memory.id, memory_store_id=store.id, content="3")
    memories.delete(memory.id, memory_store_id=store.id)
    memories.create(store.id, path="b.md", content="b")
    updated = ids(versions.list(store.id, operation="updated", limit=1))
    assert len(updated) == 2
    assert ids(versions.list(store.id, operation="modified", limit=1)) == updated
    assert [v.operation for v in versions.list(store.id, operation="modified")] == ["updated", "updated"]
    assert [v.path for v in versions.list(store.id, operation="created")] == ["b.md", "a.md"]
    assert [v.operation for v in versions.list(store.id, operation="deleted", memory_id=memory.id)] == [
        "deleted"
    ]
    refused(lambda: versions.list(store.id, operation="renamed"), "operation")


def test_version_view(managed: Managed) -> None:
    memories, versions = managed.memory_stores.memories, managed.memory_stores.memory_versions
    store = new_store(managed)
    memory = memories.create(store.id, path="a.md", content="one")
    memories.update(memory.id, memory_store_id=store.id, content="two")
    listed = works_or_refused(lambda: list(versions.list(store.id, view="full")), "view")
    if listed is not None:
        assert [v.content for v in listed] == ["two", "one"]
    listed = works_or_refused(lambda: list(versions.list(store.id, view="basic")), "view")
    if listed is not None:
        assert [v.content for v in listed] == [None, None]
    head = next(iter(versions.list(store.id)))
    got = works_or_refused(lambda: versions.retrieve(head.id, memory_store_id=store.id, view="basic"), "view")
    if got is not None:
        assert got.content is None and got.content_sha256 == sha("two")
    got = works_or_refused(lambda: versions.retrieve(head.id, memory_store_id=store.id, view="full"), "view")
    if got is not None:
        assert got.content == "two"


def seeded_store(managed: Managed) -> MemoryStore:
    return next(s for s in managed.memory_stores.list(limit=100) if s.name == ACTORS_STORE)


def test_versions_record_their_actors(managed: Managed) -> None:
    """Versions written by a session, a service account and a user (seeded) carry those actors in
    ``created_by``; the redacted one carries the redacting user in ``redacted_by``."""
    store = seeded_store(managed)
    history = list(managed.memory_stores.memory_versions.list(store.id))
    assert [v.operation for v in history] == ["updated", "updated", "created"]
    for version in history:
        check_version(version, listed=True)
    check_actor(history[0].created_by, "user_actor", user_id=USER_ID)
    check_actor(history[1].created_by, "service_account_actor", service_account_id=SERVICE_ACCOUNT_ID)
    check_actor(history[2].created_by, "session_actor", session_id=SESSION_ID)
    check_actor(history[1].redacted_by, "user_actor", user_id=USER_ID)
    assert history[1].redacted_at == datetime(2025, 1, 2, tzinfo=history[1].created_at.tzinfo)
    assert (history[0].redacted_at, history[0].redacted_by, history[2].redacted_by) == (None, None, None)
    redacted = managed.memory_stores.memory_versions.retrieve(history[1].id, memory_store_id=store.id)
    assert redacted.content is None and redacted.content_sha256 == sha("by a service account")


def test_versions_actor_filters(managed: Managed) -> None:
    """``session_id``, ``service_account_id`` and ``api_key_id`` keep the versions their actor wrote."""
    versions = managed.memory_stores.memory_versions
    store = seeded_store(managed)
    history = ids(versions.list(store.id))
    cases: list[tuple[str, dict[str, Any], list[str]]] = [
        ("session_id", {"session_id": SESSION_ID}, history[2:]),
        ("session_id", {"session_id": "sesn_nobody"}, []),
        ("service_account_id", {"service_account_id": SERVICE_ACCOUNT_ID}, history[1:2]),
        ("service_account_id", {"service_account_id": "sa_nobody"}, []),
    ]
    for name, params, expected in cases:
        found = works_or_refused(lambda params=params: ids(versions.list(store.id, **params)), name)
        if found is not None:
            assert found == expected, params
    key = api_actor_key(managed)
    mine = new_store(managed)
    managed.memory_stores.memories.create(mine.id, path="a.md", content="a")
    for store_id, expected_count in ((mine.id, 1), (store.id, 0)):
        found = works_or_refused(lambda s=store_id: ids(versions.list(s, api_key_id=key)), "api_key_id")
        if found is not None:
            assert len(found) == expected_count


def test_versions_created_at_filters(managed: Managed) -> None:
    """``created_at[gte]``/``[lte]`` bound a version's ``created_at`` inclusively."""
    versions = managed.memory_stores.memory_versions
    store = seeded_store(managed)
    history = list(versions.list(store.id))
    middle = history[1].created_at
    assert middle is not None and history[0].created_at - middle == timedelta(hours=1)
    cases = [
        ({"created_at_gte": middle}, ids(history[:2])),
        ({"created_at_lte": middle}, ids(history[1:])),
        ({"created_at_gte": middle, "created_at_lte": middle}, ids(history[1:2])),
    ]
    for params, expected in cases:
        found = works_or_refused(lambda params=params: ids(versions.list(store.id, **params)), "created_at")
        if found is not None:
            assert found == expected, params


# --- headers and what the server does not know ------------------------------------------------


@dataclass
class Scene:
    """Objects for each memory-store call of the Cloud client, and those calls, taking extra keywords."""

    store: MemoryStore
    doomed: MemoryStore
    memory: Memory
    gone: Memory
    old: MemoryVersion
    calls: list[tuple[str, Callable[..., object]]]


def every_call(managed: Managed) -> Scene:
    stores, memories = managed.memory_stores, managed.memory_stores.memories
    versions = stores.memory_versions
    store, doomed = new_store(managed), new_store(managed)
    memory = memories.create(store.id, path="a.md", content="a")
    gone = memories.create(store.id, path="gone.md", content="gone")
    old = next(iter(versions.list(store.id, memory_id=memory.id)))
    memories.update(memory.id, memory_store_id=store.id, content="b")
    calls: list[tuple[str, Callable[..., object]]] = [
        ("memory_stores.create", lambda **kw: stores.create(name=unique("hdr"), description="d", **kw)),
        ("memory_stores.retrieve", lambda **kw: stores.retrieve(store.id, **kw)),
        ("memory_stores.update", lambda **kw: stores.update(store.id, description="d", **kw)),
        ("memory_stores.list", lambda **kw: stores.list(**kw)),
        ("memories.create", lambda **kw: memories.create(store.id, path=unique("p"), content="c", **kw)),
        ("memories.retrieve", lambda **kw: memories.retrieve(memory.id, memory_store_id=store.id, **kw)),
        (
            "memories.update",
            lambda **kw: memories.update(memory.id, memory_store_id=store.id, content="c", **kw),
        ),
        ("memories.list", lambda **kw: memories.list(store.id, **kw)),
        ("memories.delete", lambda **kw: memories.delete(gone.id, memory_store_id=store.id, **kw)),
        ("memory_versions.list", lambda **kw: versions.list(store.id, **kw)),
        ("memory_versions.retrieve", lambda **kw: versions.retrieve(old.id, memory_store_id=store.id, **kw)),
        ("memory_versions.redact", lambda **kw: versions.redact(old.id, memory_store_id=store.id, **kw)),
        ("memory_stores.archive", lambda **kw: stores.archive(store.id, **kw)),
        ("memory_stores.delete", lambda **kw: stores.delete(doomed.id, **kw)),
    ]
    return Scene(store, doomed, memory, gone, old, calls)


def test_workspace_id_is_refused(managed: Managed) -> None:
    """``workspace_id`` (header ``qoder-workspace-id``) picks a workspace. The reference server has
    one and does not model workspaces, so it refuses the header on every call, naming it, rather
    than answering from a workspace the caller did not ask for. Nothing is written."""
    stores, memories = managed.memory_stores, managed.memory_stores.memories
    scene = every_call(managed)
    store_count = len(list(stores.list(limit=100)))
    for _, call in scene.calls:
        refused(lambda call=call: call(workspace_id="wrkspc_other"), "qoder-workspace-id", "workspace_id")
    assert len(list(stores.list(limit=100))) == store_count
    store = stores.retrieve(scene.store.id)
    assert (store.status, store.description, store.entry_count) == ("active", "made by the SDK tests", 2)
    assert sorted(m.path for m in memories.list(store.id)) == ["a.md", "gone.md"]
    assert memories.retrieve(scene.memory.id, memory_store_id=store.id).content == "b"
    assert stores.memory_versions.retrieve(scene.old.id, memory_store_id=store.id).content == "a"
    assert stores.retrieve(scene.doomed.id).id == scene.doomed.id


def test_betas(managed: Managed) -> None:
    """``betas`` (header ``x-qoder-beta``) opts into preview features. For a beta name the server
    either refuses it, naming it, or serves the call as without it; an empty list opts into
    nothing, so reads answer as without it (or the header is refused, naming it)."""
    calls = every_call(managed).calls
    reads = {"memory_stores.retrieve", "memories.retrieve", "memory_versions.retrieve"}
    for name, call in calls:
        answer = works_or_refused(
            lambda call=call: call(betas=["memory-preview-2099-01-01"]), "x-qoder-beta", "betas"
        )
        if answer is not None and name in reads:
            assert same(answer, call()), name
    for name, call in calls:
        if name in reads:
            answer = works_or_refused(lambda call=call: call(betas=[]), "x-qoder-beta", "betas")
            if answer is not None:
                assert same(answer, call()), name


def test_unknown_parameters_fields_and_headers_are_refused(managed: Managed) -> None:
    """docs/api-contract.md §6: a parameter, field or header the server does not know is a 400 naming it."""
    stores, memories = managed.memory_stores, managed.memory_stores.memories
    store = new_store(managed)
    memory = memories.create(store.id, path="a.md", content="a")
    refused(lambda: memories.list(store.id, extra_query={"frobnicate": "1"}), "frobnicate")
    refused(lambda: stores.list(extra_query={"system_managed": "true"}), "system_managed")
    refused(
        lambda: memories.create(store.id, path="b.md", content="b", extra_body={"frobnicate": 1}),
        "frobnicate",
    )
    refused(
        lambda: memories.update(
            memory.id, memory_store_id=store.id, content="b", extra_body={"frobnicate": 1}
        ),
        "frobnicate",
    )
    refused(lambda: stores.create(name=unique("x"), extra_body={"mount": {"identity_id": "i"}}), "mount")
    refused(
        lambda: stores.retrieve(store.id, extra_headers={"X-Qoder-Frobnicate": "1"}), "x-qoder-frobnicate"
    )
    assert memories.retrieve(memory.id, memory_store_id=store.id, timeout=5.0).content == "a", (
        "nothing written"
    )
    assert [m.path for m in memories.list(store.id)] == ["a.md"], "only the one memory"
