"""Sessions through the client (docs/api-client.md): ``get_session`` and the version filters a session
view needs, against the real reference server, on the dialects that have sessions."""

from __future__ import annotations

import abc
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from memsync.api import Client, NotFound, Session, SessionStore, Store, open_client
from memsync.errors import UsageError
from memsync.rules import Dialect
from tests.api.peers import FAST_RETRY
from tests.support.server import ServerProcess

SESSION_HEADER = "x-memsync-reference-session"  # the reference server's own (docs/server.md)
SESSIONS_BETA = "managed-agents-2026-04-01"


class Raw:
    """Plain HTTP to one dialect of the server: what a session (not memsync) does."""

    def __init__(self, server: ServerProcess, dialect: Dialect) -> None:
        self.dialect = dialect
        if dialect is Dialect.ANTHROPIC:
            headers = {"x-api-key": server.token, "anthropic-beta": SESSIONS_BETA}
            base = "/v1"
        else:
            headers = {"Authorization": f"Bearer {server.token}"}
            base = "/api/v1/cloud"
        self.http = httpx.Client(base_url=server.base_url + base, headers=headers, timeout=10.0)

    def create_session(self, resources: list[dict[str, Any]]) -> dict[str, Any]:
        body = {"agent": "agent_tests", "environment_id": "env_tests", "resources": resources}
        answer = self.http.post("/sessions", json=body)
        assert answer.status_code in (200, 201), answer.text
        data: dict[str, Any] = answer.json()
        return data

    def write_as(self, session_id: str, store_id: str, path: str, content: str) -> dict[str, Any]:
        wire_path = "/" + path if self.dialect is Dialect.ANTHROPIC else path
        answer = self.http.post(
            f"/memory_stores/{store_id}/memories",
            json={"path": wire_path, "content": content},
            headers={SESSION_HEADER: session_id},
        )
        assert answer.status_code in (200, 201), answer.text
        data: dict[str, Any] = answer.json()
        return data


class SessionContract(abc.ABC):
    dialect: Dialect

    @pytest.fixture
    def client(self, server: ServerProcess) -> Iterator[Client]:
        with open_client(self.dialect, server.base_url, server.token, retry=FAST_RETRY) as client:
            yield client

    @pytest.fixture
    def raw(self, server: ServerProcess) -> Iterator[Raw]:
        raw = Raw(server, self.dialect)
        with raw.http:
            yield raw

    def new_store(self, client: Client, name: str = "", description: str = "") -> Store:
        return client.create_store(name or f"session-{uuid.uuid4().hex[:8]}", description=description)

    def test_a_session_reads_back_its_stores_in_order(self, client: Client, raw: Raw) -> None:
        first = self.new_store(client, "Team Notes", "what the team knows")
        second = self.new_store(client)
        created = raw.create_session(
            [
                {"type": "memory_store", "memory_store_id": second.id, "access": "read_only"},
                {"type": "memory_store", "memory_store_id": first.id, "instructions": "Check here first."},
            ]
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

    def test_versions_filter_on_the_session_that_wrote_them(self, client: Client, raw: Raw) -> None:
        store = self.new_store(client)
        session = raw.create_session([{"type": "memory_store", "memory_store_id": store.id}])
        other = raw.create_session([{"type": "memory_store", "memory_store_id": store.id}])
        client.create_memory(store.id, "by/memsync.md", "not a session")
        raw.write_as(session["id"], store.id, "by/session.md", "the session")
        raw.write_as(other["id"], store.id, "by/other.md", "another session")
        written = list(client.iter_versions(store.id, session_id=session["id"]))
        assert [v.path for v in written] == ["by/session.md"]
        actor = written[0].created_by
        assert actor is not None and (actor.type, actor.id) == ("session_actor", session["id"])
        assert {v.path for v in client.iter_versions(store.id)} == {
            "by/memsync.md",
            "by/session.md",
            "by/other.md",
        }

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

    def test_a_given_mount_path_is_returned_as_given(self, client: Client, raw: Raw) -> None:
        store = self.new_store(client)
        resource = {"type": "memory_store", "memory_store_id": store.id, "mount_path": "/data/x/../y"}
        session = client.get_session(raw.create_session([resource])["id"])
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
