"""Sessions with memory stores attached, through the official SDKs, unmodified: ``anthropic``'s
``client.beta.sessions`` (2.14) and ``qca.managed``'s ``sessions`` (qca-sdk 0.11), against the reference
server (docs/api-contract.md §3, §4, §6). A session's writes are made with the reference-only header of
docs/server.md, passed as the SDKs pass any extra header."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from anthropic.types.beta import BetaManagedAgentsSession
from anthropic.types.beta.memory_stores import BetaManagedAgentsSessionActor
from anthropic.types.beta.sessions import BetaManagedAgentsMemoryStoreResource
from qca import NotFoundError
from qca.managed import Managed
from qca.managed.types import Session

from tests.sdk.expect import check_time, conflict, ids, refused, same, unique
from tests.support.server import ServerProcess

SESSION_HEADER = "x-memsync-reference-session"


@pytest.fixture
def claude(qoder_server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        api_key=qoder_server.token, base_url=qoder_server.base_url, max_retries=0, timeout=10.0
    ) as client:
        yield client


def test_anthropic_sessions(claude: anthropic.Anthropic) -> None:
    stores = claude.beta.memory_stores
    prefs = stores.create(name="User Preferences", description="likes")
    notes = stores.create(name=unique("notes"))
    resources: Any = [
        {"type": "memory_store", "memory_store_id": prefs.id, "instructions": "Check before answering."},
        {"type": "memory_store", "memory_store_id": notes.id, "access": "read_only"},
    ]
    session = claude.beta.sessions.create(agent="agent_1", environment_id="env_1", resources=resources)
    assert isinstance(session, BetaManagedAgentsSession) and session.id.startswith("sesn_")
    first, second = session.resources
    assert isinstance(first, BetaManagedAgentsMemoryStoreResource)
    assert isinstance(second, BetaManagedAgentsMemoryStoreResource)
    assert (first.memory_store_id, first.access, first.instructions) == (
        prefs.id,
        "read_write",
        resources[0]["instructions"],
    )
    assert (first.name, first.description, first.mount_path) == (
        "User Preferences",
        "likes",
        "/mnt/memory/user-preferences",
    )
    assert (second.access, second.mount_path) == ("read_only", f"/mnt/memory/{notes.name}")
    assert claude.beta.sessions.retrieve(session.id) == session
    assert session.created_at.microsecond % 1000 == 0 and session.created_at.tzinfo is not None

    as_session = {SESSION_HEADER: session.id}
    written = stores.memories.create(prefs.id, path="/likes.md", content="tea", extra_headers=as_session)
    stores.memories.create(prefs.id, path="/other.md", content="by the key")
    mine = list(stores.memory_versions.list(prefs.id, session_id=session.id))
    assert [v.memory_id for v in mine] == [written.id]
    assert isinstance(mine[0].created_by, BetaManagedAgentsSessionActor)
    assert mine[0].created_by.session_id == session.id

    with pytest.raises(anthropic.NotFoundError):
        claude.beta.sessions.retrieve("sesn_unknown")
    nine: Any = [
        {"type": "memory_store", "memory_store_id": stores.create(name=unique("s")).id} for _ in range(9)
    ]
    with pytest.raises(anthropic.BadRequestError):
        claude.beta.sessions.create(agent="a", environment_id="e", resources=nine)
    stores.archive(notes.id)
    with pytest.raises(anthropic.ConflictError):
        claude.beta.sessions.create(agent="a", environment_id="e", resources=resources)
    missing: Any = [{"type": "memory_store", "memory_store_id": "memstore_missing"}]
    with pytest.raises(anthropic.NotFoundError):
        claude.beta.sessions.create(agent="a", environment_id="e", resources=missing)


def test_cloud_sessions(managed: Managed) -> None:
    stores = managed.memory_stores
    first = stores.create(name=unique("cloud"), description="the first")
    second = stores.create(name=unique("cloud"), description="the second")
    assert first.id is not None and second.id is not None
    resources: Any = [
        {"type": "memory_store", "memory_store_id": first.id, "instructions": "Read me."},
        {"type": "memory_store", "memory_store_id": second.id, "access": "read_only"},
    ]
    session = managed.sessions.create(agent="agent_1", environment_id="env_1", resources=resources)
    assert isinstance(session, Session) and session.id is not None
    check_time(session.created_at)
    assert session.resources is not None
    assert [(r.type, r.memory_store_id, r.access, r.instructions) for r in session.resources] == [
        ("memory_store", first.id, "read_write", "Read me."),
        ("memory_store", second.id, "read_only", None),
    ]
    assert [(r.name, r.description, r.mount_path) for r in session.resources] == [
        (first.name, "the first", None),
        (second.name, "the second", None),
    ]
    assert same(managed.sessions.retrieve(session.id), session)

    # Seed 004's generation attaches by id, read_write.
    seeded = managed.sessions.create(
        agent="agent_xxx", environment_id="env_1", extra_body={"memory_store_ids": [first.id]}
    )
    assert seeded.resources is not None and [(r.memory_store_id, r.access) for r in seeded.resources] == [
        (first.id, "read_write")
    ]

    as_session = {SESSION_HEADER: session.id}
    written = stores.memories.create(
        first.id, path="notes/s.md", content="by the session", extra_headers=as_session
    )
    stores.memories.create(first.id, path="notes/k.md", content="by the key")
    mine = list(stores.memory_versions.list(first.id, session_id=session.id))
    assert [v.memory_id for v in mine] == [written.id]
    assert mine[0].created_by is not None
    assert (mine[0].created_by.type, mine[0].created_by.session_id) == ("session_actor", session.id)
    read_only = second.id
    refused(
        lambda: stores.memories.create(read_only, path="x.md", content="x", extra_headers=as_session),
        SESSION_HEADER,
    )
    assert ids(stores.memory_versions.list(second.id)) == []

    with pytest.raises(NotFoundError):
        managed.sessions.retrieve("sesn_unknown")
    stores.archive(second.id)
    conflict(lambda: managed.sessions.create(agent="a", environment_id="e", resources=resources))
