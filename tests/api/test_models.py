"""Normalisation: whatever a dialect calls a field or however it spells a path, memsync sees one model."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memsync.api import InvalidResponse, Operation, StoreStatus
from memsync.api._wire import Wire
from memsync.errors import RuleViolation
from memsync.rules import Dialect
from tests.api.wire_objects import forward_version, sha

FORWARD = Wire(Dialect.FORWARD)
CLOUD = Wire(Dialect.CLOUD)
ANTHROPIC = Wire(Dialect.ANTHROPIC)

# Seed 000, verbatim.
SEED_STORE = {
    "id": "memstore_00mc7mukn7lkxr454tjd",
    "type": "memory_store",
    "name": "project-alpha-memory",
    "description": "Alpha 项目的 Agent 知识库",
    "status": "active",
    "entry_count": 12,
    "total_size": 4096,
    "metadata": {"team": "backend", "created_by": "forward"},
    "system_managed": False,
    "identity_id": None,
    "created_at": "2026-08-14T10:00:00Z",
    "updated_at": "2026-08-14T10:00:00Z",
    "archived_at": None,
    "binding_info": {"identity_template_count": 1},
}
SEED_CONTENT = "# 架构决策\n\n选择微服务架构。"


def test_forward_seed_objects() -> None:
    store = FORWARD.store(SEED_STORE)
    assert store.status is StoreStatus.ACTIVE and not store.archived
    assert store.mount_count == 1 and store.metadata["team"] == "backend"
    assert store.created_at == datetime(2026, 8, 14, 10, tzinfo=UTC)
    version = FORWARD.version(
        forward_version("memver_1", SEED_CONTENT, operation="updated", with_content=True)
    )
    assert version.operation is Operation.UPDATED and version.content == SEED_CONTENT
    assert version.store_id == "memstore_1" and version.path == "notes/a.md"


def test_cloud_field_name_variants() -> None:
    # Seed 004's memory: store_id and size instead of memory_store_id and content_size_bytes.
    memory = CLOUD.memory(
        {
            "content": SEED_CONTENT,
            "content_sha256": sha(SEED_CONTENT),
            "created_at": "2026-05-18T08:00:00Z",
            "id": "mem_019e5cdb9c3f71c3b6505eba937a40b5",
            "metadata": {},
            "path": "decisions/arch-choice.md",
            "size": 45,
            "store_id": "memstore_019e5cdb9c3f71c3b6505eba937a40b4",
            "type": "memory",
            "updated_at": "2026-05-18T09:30:00Z",
            "version": 2,
        }
    )
    assert memory is not None
    assert memory.store_id == "memstore_019e5cdb9c3f71c3b6505eba937a40b4"
    assert memory.content_size_bytes == 45 and memory.version == 2
    version = CLOUD.version(
        {
            "id": "memver_9",
            "store_id": "memstore_1",
            "entry_id": "mem_1",
            "entry_path": "a/b.md",
            "action": "deleted",
            "size": 3,
            "content_sha256": sha("abc"),
            "redacted": False,
            "created_at": "2026-05-18T08:00:00+08:00",
        }
    )
    assert (version.memory_id, version.path, version.operation) == ("mem_1", "a/b.md", Operation.DELETED)
    assert version.created_at == datetime(2026, 5, 18, 0, tzinfo=UTC)
    assert version.content_size_bytes == 3
    # Seed 004's store leaves archived_at out; status may be deleted in listings.
    assert CLOUD.store({**SEED_STORE, "status": "deleted"}).status is StoreStatus.DELETED


def anthropic_version(**fields: Any) -> dict[str, Any]:
    data = {
        "id": "memver_a1",
        "type": "memory_version",
        "memory_store_id": "memstore_1",
        "memory_id": "mem_1",
        "path": "/notes/a.md",
        "operation": "modified",
        "content": None,
        "content_sha256": sha("hello"),
        "content_size_bytes": 5,
        "created_at": "2026-08-14T10:00:00.123456Z",
        "created_by": {"type": "session_actor", "session_id": "sesn_1"},
        "redacted_at": None,
        "redacted_by": None,
    }
    data.update(fields)
    return data


def test_anthropic_paths_operations_and_actors() -> None:
    version = ANTHROPIC.version(anthropic_version())
    assert version.path == "notes/a.md"
    assert version.operation is Operation.UPDATED
    assert version.created_by is not None
    assert (version.created_by.type, version.created_by.id) == ("session_actor", "sesn_1")
    assert version.created_at.microsecond == 123456 and version.created_at.tzinfo is UTC
    user = ANTHROPIC.version(
        anthropic_version(created_by={"type": "user_actor", "user_id": "u1", "name": "Ann"})
    )
    assert user.created_by is not None and (user.created_by.id, user.created_by.name) == ("u1", "Ann")


def test_anthropic_redacted_version_is_normalised() -> None:
    version = ANTHROPIC.version(
        anthropic_version(
            path=None,
            content_sha256=None,
            content_size_bytes=None,
            redacted_at="2026-08-15T00:00:00Z",
            redacted_by={"type": "api_actor", "api_key_id": "apikey_1"},
        )
    )
    assert version.redacted and version.path is None and version.content_sha256 is None
    assert version.redacted_by is not None and version.redacted_by.id == "apikey_1"
    assert not version.has_content


def test_anthropic_store_and_memory() -> None:
    store = ANTHROPIC.store(
        {
            "id": "memstore_1",
            "type": "memory_store",
            "name": "n",
            "description": "",
            "metadata": {},
            "created_at": "2026-08-14T10:00:00Z",
            "updated_at": "2026-08-14T10:00:00Z",
            "archived_at": "2026-08-15T10:00:00Z",
        }
    )
    assert store.archived
    memory = ANTHROPIC.memory(
        {
            "id": "mem_1",
            "type": "memory",
            "memory_store_id": "memstore_1",
            "memory_version_id": "memver_7",
            "path": "/a/b.md",
            "content": None,
            "content_sha256": sha("x"),
            "content_size_bytes": 1,
            "created_at": "2026-08-14T10:00:00Z",
            "updated_at": "2026-08-14T10:00:00Z",
        }
    )
    assert memory is not None
    assert (memory.path, memory.head_version_id, memory.metadata) == ("a/b.md", "memver_7", None)
    assert ANTHROPIC.memory({"type": "memory_prefix", "path": "/a/"}) is None


def test_tombstone_and_redacted_content_is_never_kept() -> None:
    tomb = FORWARD.version(forward_version("memver_2", "gone", operation="deleted", with_content=True))
    assert tomb.content is None and not tomb.has_content
    redacted = FORWARD.version(
        forward_version(
            "memver_3", "secret", with_content=True, redacted=True, redacted_at="2026-08-14T11:00:00Z"
        )
    )
    assert redacted.redacted and redacted.content is None


@pytest.mark.parametrize(
    ("wire", "path"),
    [
        (FORWARD, "../x"),
        (FORWARD, "/etc/passwd"),
        (FORWARD, "a//b"),
        (FORWARD, "a\\b"),
        (FORWARD, "a/\x00"),
        (CLOUD, "notes/./a.md"),
        (ANTHROPIC, "notes/a.md"),
        (ANTHROPIC, "/notes/../../etc/passwd"),
        (ANTHROPIC, "/a\u2028b"),
    ],
)
def test_paths_that_break_the_dialect_rules_are_refused(wire: Wire, path: str) -> None:
    # A version keeps its place in the listing (a pull stops just before it) but never its path.
    version = wire.version(forward_version("memver_1", path=path, with_content=True))
    assert version.path is None
    assert version.path_problem is not None and "path rules" in version.path_problem
    assert version.content is None and not version.has_content
    # A memory at such a path is refused outright.
    with pytest.raises(InvalidResponse, match="path rules"):
        wire.memory({**forward_version("memver_1", path=path), "id": "mem_1", "type": "memory"})


def test_a_git_segment_is_a_legal_path_and_left_to_the_mirror_to_encode() -> None:
    # rules.py allows it on every dialect, and docs/design.md §2 promises it maps losslessly.
    assert FORWARD.version(forward_version("memver_1", path=".git/config")).path == ".git/config"
    assert ANTHROPIC.version(anthropic_version(path="/.git/config")).path == ".git/config"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("id", "memver_1/../../x", "not a plausible id"),
        ("id", "memver_1\nMemory-Id: forged", "not a plausible id"),
        ("memory_id", 7, "not a plausible id"),
        ("content_size_bytes", "5", "content_size_bytes"),
        ("content_size_bytes", True, "content_size_bytes"),
        ("content_sha256", "ABC", "content_sha256"),
        ("created_at", "2026-08-14T10:00:00", "no UTC offset"),
        ("created_at", 1723629600, "created_at"),
        ("operation", "renamed", "unknown operation"),
        ("redacted", "no", "not a boolean"),
    ],
)
def test_wrong_types_are_refused(field: str, value: object, message: str) -> None:
    with pytest.raises(InvalidResponse, match=message):
        FORWARD.version(forward_version("memver_1", **{field: value}))


def test_paths_out_per_dialect() -> None:
    assert ANTHROPIC.path_out("notes/a.md") == "/notes/a.md"
    assert FORWARD.path_out("notes/a.md") == "notes/a.md"
    with pytest.raises(RuleViolation):
        ANTHROPIC.path_out("/notes/a.md")
    with pytest.raises(RuleViolation):
        FORWARD.path_out("notes/../a.md")


# Segments as Anthropic allows them: no '/', no control or format characters, not '.' or '..'.
_segment = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Zl", "Zp"), blacklist_characters="/"),
    min_size=1,
    max_size=12,
).filter(lambda s: s not in (".", ".."))


@given(st.lists(_segment, min_size=1, max_size=6))
def test_anthropic_paths_map_both_ways(segments: list[str]) -> None:
    relative = "/".join(segments)
    try:
        wire_path = ANTHROPIC.path_out(relative)
    except RuleViolation:
        return  # not NFC, or too long: refused before sending, and never accepted from the API either
    assert wire_path == "/" + relative
    assert ANTHROPIC.path_in(wire_path, "a memory") == relative


def _session(*resources: object, **fields: object) -> dict[str, Any]:
    return {
        "id": "sesn_1",
        "type": "session",
        "created_at": "2026-08-14T10:00:00.123456Z",
        "resources": list(resources),
        **fields,
    }


def test_a_session_keeps_its_memory_stores_in_order() -> None:
    file = {"type": "file", "file_id": "file_1", "mount_path": "/mnt/session/uploads/a.txt"}
    second = {
        "type": "memory_store",
        "memory_store_id": "memstore_2",
        "access": "read_only",
        "mount_path": "/mnt/memory/b",
    }
    first = {
        "type": "memory_store",
        "memory_store_id": "memstore_1",
        "name": "a",
        "description": "",
        "instructions": "go",
    }
    session = ANTHROPIC.session(_session(second, file, first))
    assert session.created_at == datetime(2026, 8, 14, 10, 0, 0, 123456, tzinfo=UTC)
    assert [(s.memory_store_id, s.access, s.mount_path) for s in session.stores] == [
        ("memstore_2", "read_only", "/mnt/memory/b"),
        ("memstore_1", "read_write", None),  # access left out: the documented default
    ]
    assert (session.stores[1].name, session.stores[1].description, session.stores[1].instructions) == (
        "a",
        "",
        "go",
    )
    assert CLOUD.session(_session(resources=None)).stores == []


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (_session(id="../x"), "not a plausible id"),
        (_session(resources={"type": "memory_store"}), "'resources' is not an array"),
        (_session("memstore_1"), "resource 0 that is not an object"),
        (
            _session({"type": "memory_store", "memory_store_id": "memstore_1", "access": "write"}),
            "unknown access",
        ),
        (_session({"type": "memory_store", "memory_store_id": None}), "memory store id"),
        (_session({"type": "memory_store", "memory_store_id": "memstore_1", "mount_path": 7}), "mount_path"),
        (_session(created_at="2026-08-14T10:00:00"), "no UTC offset"),
    ],
)
def test_a_malformed_session_is_refused(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidResponse, match=message):
        CLOUD.session(raw)
