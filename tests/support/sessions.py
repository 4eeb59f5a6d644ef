"""Acting as an agent session against the real reference server: create a session with memory stores
attached, and write in its name with the server's reference-only header (docs/server.md). memsync itself
only reads sessions; tests use this to make what it reads."""

from __future__ import annotations

from types import TracebackType
from typing import Any

import httpx

from memsync.rules import Dialect
from tests.support.server import ServerProcess

SESSION_HEADER = "x-memsync-reference-session"
SESSIONS_BETA = "managed-agents-2026-04-01"


class SessionActor:
    """Plain HTTP to the Cloud or Anthropic dialect of ``server``; paths are given relative, as memsync's."""

    def __init__(self, server: ServerProcess, dialect: Dialect) -> None:
        if dialect is Dialect.FORWARD:
            raise ValueError(
                "Forward has no sessions: a Forward session sees its (identity, template)'s mounts"
            )
        self.dialect = dialect
        if dialect is Dialect.ANTHROPIC:
            headers = {"x-api-key": server.token, "anthropic-beta": SESSIONS_BETA}
            base = "/v1"
        else:
            headers = {"Authorization": f"Bearer {server.token}"}
            base = "/api/v1/cloud"
        self.http = httpx.Client(base_url=server.base_url + base, headers=headers, timeout=10.0)

    def __enter__(self) -> SessionActor:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.http.close()

    def create_session(self, *stores: str | dict[str, Any]) -> dict[str, Any]:
        """A session attaching ``stores`` in order: store ids (read_write), or whole resource objects
        (``{"memory_store_id", "access", "instructions"}``, and on Cloud ``mount_path``)."""
        resources = [
            {"type": "memory_store", **({"memory_store_id": s} if isinstance(s, str) else s)} for s in stores
        ]
        body = {"agent": "agent_tests", "environment_id": "env_tests", "resources": resources}
        answer = self.http.post("/sessions", json=body)
        assert answer.status_code in (200, 201), answer.text
        session: dict[str, Any] = answer.json()
        return session

    def _wire_path(self, path: str) -> str:
        return "/" + path if self.dialect is Dialect.ANTHROPIC else path

    def write(self, session_id: str, store_id: str, path: str, content: str) -> dict[str, Any]:
        """Create a memory at ``path`` in the name of ``session_id``; the new memory as answered."""
        answer = self.http.post(
            f"/memory_stores/{store_id}/memories",
            json={"path": self._wire_path(path), "content": content},
            headers={SESSION_HEADER: session_id},
        )
        assert answer.status_code in (200, 201), answer.text
        memory: dict[str, Any] = answer.json()
        return memory

    def update(self, session_id: str, store_id: str, memory_id: str, content: str) -> dict[str, Any]:
        """Replace a memory's content in the name of ``session_id`` (unconditionally)."""
        answer = self.http.post(
            f"/memory_stores/{store_id}/memories/{memory_id}",
            json={"content": content},
            headers={SESSION_HEADER: session_id},
        )
        assert answer.status_code == 200, answer.text
        memory: dict[str, Any] = answer.json()
        return memory

    def delete(self, session_id: str, store_id: str, memory_id: str) -> None:
        answer = self.http.delete(
            f"/memory_stores/{store_id}/memories/{memory_id}", headers={SESSION_HEADER: session_id}
        )
        assert answer.status_code in (200, 204), answer.text
