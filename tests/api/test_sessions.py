"""Sessions through the client (docs/api-client.md): ``get_session`` and the version filters a session
view needs, against the real reference server, on the dialects that have sessions."""

from __future__ import annotations

import abc
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memsync.api import Client, NotFound, Operation, Session, SessionStore, Store, open_client
from memsync.errors import UsageError
from memsync.rules import Dialect
from tests.api.peers import FAST_RETRY
from tests.support.server import ServerProcess
from tests.support.sessions import SessionActor


class SessionContract(abc.ABC):
    dialect: Dialect

    @pytest.fixture
    def client(self, server: ServerProcess) -> Iterator[Client]:
        with open_client(self.dialect, server.base_url, server.token, retry=FAST_RETRY) as client:
            yield client

    @pytest.fixture
    def raw(self, server: ServerProcess) -> Iterator[SessionActor]:
        with SessionActor(server, self.dialect) as raw:
            yield raw

    def new_store(self, client: Client, name: str = "", description: str = "made by tests") -> Store:
        return client.create_store(name or f"session-{uuid.uuid4().hex[:8]}", description=description)

    def test_a_session_reads_back_its_stores_in_order(self, client: Client, raw: SessionActor) -> None:
        first = self.new_store(client, "Team Notes", "what the team knows")
        second = self.new_store(client)
        created = raw.create_session(
            {"memory_store_id": second.id, "access": "read_only"},
            {"memory_store_id": first.id, "instructions": "Check here first."},
        )
        session = client.get_session(created["id"])
        assert isinstance(session, Session) and session.id == created["id"]
        assert [s.memory_store_id for s in session.stores] == [second.id, first.id]
        assert all(isinstance(s, SessionStore) for s in session.stores)
        read_only, read_write = session.stores
        assert (read_only.access, read_only.instructions) == ("read_only", None)
        assert (read_write.access, read_write.instructions) == ("read_write", "Check here first.")
        assert (read_write.name, read_write.description) == ("Team Notes", "what the team knows")
        assert session.created_at == datetime.fromisoformat(created["created_at"])
        assert session.created_at.microsecond % 1000 == 0 and session.created_at.tzinfo is not None
        self.check_mounts(session)

    @abc.abstractmethod
    def check_mounts(self, session: Session) -> None:
        """The mount paths of the session the first test makes, as the dialect gives them."""

    def test_an_unknown_session_is_not_found(self, client: Client) -> None:
        with pytest.raises(NotFound, match="sesn_unknown"):
            client.get_session("sesn_unknown")

    def test_versions_filter_on_the_session_that_wrote_them(self, client: Client, raw: SessionActor) -> None:
        store = self.new_store(client)
        session = raw.create_session(store.id)
        other = raw.create_session(store.id)
        client.create_memory(store.id, "by/memsync.md", "not a session")
        raw.write(session["id"], store.id, "by/session.md", "the session")
        raw.write(other["id"], store.id, "by/other.md", "another session")
        written = list(client.iter_versions(store.id, session_id=session["id"]))
        assert [v.path for v in written] == ["by/session.md"]
        actor = written[0].created_by
        assert actor is not None and (actor.type, actor.id) == ("session_actor", session["id"])
        assert {v.path for v in client.iter_versions(store.id)} == {
            "by/memsync.md",
            "by/session.md",
            "by/other.md",
        }
        memory_id = written[0].memory_id
        raw.update(session["id"], store.id, memory_id, "the session again")
        raw.delete(session["id"], store.id, memory_id)
        history = list(client.iter_versions(store.id, session_id=session["id"]))
        assert [v.operation for v in history] == [Operation.DELETED, Operation.UPDATED, Operation.CREATED]
        assert {v.memory_id for v in history} == {memory_id}

    def test_versions_created_up_to_an_instant(self, client: Client) -> None:
        store = self.new_store(client)
        for n in range(3):
            client.create_memory(store.id, f"n/{n}.md", str(n))
        oldest_first = list(reversed(list(client.iter_versions(store.id))))
        middle = oldest_first[1].created_at
        kept = list(client.iter_versions(store.id, created_before=middle))
        assert [v.id for v in kept] == [v.id for v in reversed(oldest_first) if v.created_at <= middle]
        assert oldest_first[1].id in {v.id for v in kept}
        with pytest.raises(UsageError, match="timezone"):
            client.iter_versions(store.id, created_before=middle.replace(tzinfo=None))


class TestCloud(SessionContract):
    dialect = Dialect.CLOUD

    def check_mounts(self, session: Session) -> None:
        # Seed 004 mounts every store flat; the reference gives no mount path unless asked to.
        assert [s.mount_path for s in session.stores] == [None, None]

    def test_a_given_mount_path_is_returned_as_given(self, client: Client, raw: SessionActor) -> None:
        store = self.new_store(client)
        resource = {"memory_store_id": store.id, "mount_path": "/data/x/../y"}
        session = client.get_session(raw.create_session(resource)["id"])
        assert session.stores[0].mount_path == "/data/x/../y"


class TestAnthropic(SessionContract):
    dialect = Dialect.ANTHROPIC

    def check_mounts(self, session: Session) -> None:
        second, first = session.stores
        assert first.mount_path == "/mnt/memory/team-notes"
        assert second.mount_path is not None and second.mount_path.startswith("/mnt/memory/session-")


def test_forward_has_no_sessions(server: ServerProcess) -> None:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        with pytest.raises(UsageError, match="cloud and anthropic"):
            client.get_session("sesn_any")
        with pytest.raises(UsageError, match="forward"):
            client.iter_versions("memstore_any", session_id="sesn_any")


@pytest.mark.parametrize("dialect", [Dialect.CLOUD, Dialect.ANTHROPIC])
def test_created_before_is_exact_to_the_microsecond(
    dialect: Dialect, server_factory: Any, tmp_path: Path
) -> None:
    path = "/n.md" if dialect is Dialect.ANTHROPIC else "n.md"
    history = [
        {"op": "create" if n == 0 else "update", "content": str(n), "at": f"2026-03-01T10:00:00.00{n}Z"}
        for n in range(3)
    ]
    store = {
        "dialect": dialect.value,
        "name": "timed",
        "description": "at chosen times",
        "memories": [{"path": path, "history": history}],
    }
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps({"stores": [store]}), encoding="utf-8")
    seeded = server_factory("--seed", str(seed))
    with open_client(dialect, seeded.base_url, seeded.token) as client:
        (store_id,) = [s.id for s in client.list_stores()]
        start = datetime(2026, 3, 1, 10, 0, 0, tzinfo=UTC)

        def contents_up_to(instant: datetime) -> list[str | None]:
            listed = client.iter_versions(store_id, created_before=instant, full=True)
            return [content for _, content in client.fetch_contents(store_id, listed)]

        assert contents_up_to(start + timedelta(microseconds=1000)) == ["1", "0"]
        assert contents_up_to(start + timedelta(microseconds=1999)) == ["1", "0"]
        assert contents_up_to(start + timedelta(microseconds=999)) == ["0"]
        assert contents_up_to(start - timedelta(microseconds=1)) == []
        assert contents_up_to(start + timedelta(seconds=1)) == ["2", "1", "0"]
