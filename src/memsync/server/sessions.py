"""Sessions of the Cloud and Anthropic dialects: memory stores attached when a session is created.

A session here runs no agent: it records which stores were attached, with what access and instructions,
the stores' names and descriptions at that moment, their mount paths, and its own ``created_at`` (to the
millisecond). That is what a client needs to show what a session saw (docs/api-contract.md §3-§4, §6).

- Anthropic ``POST /v1/sessions`` (beta ``managed-agents-2026-04-01``, ``anthropic`` 2.14's
  ``client.beta.sessions``): ``resources`` of type ``memory_store``; each store gets a mount path
  under ``/mnt/memory/`` derived from its name by :func:`~.storage.derive_mount_paths`.
- Cloud ``POST /api/v1/cloud/sessions``: seed 004's ``memory_store_ids`` or the Qoder SDK's
  ``resources`` (``qca.managed``). Seed 004 mounts every store flat at ``/data/.qoder/awareness/``,
  so a store's ``mount_path`` is null unless the request gives one, which is returned as given.

Writes made "by a session" use the reference-only header of docs/server.md (:data:`~.storage.SESSION_HEADER`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from memsync.rules import ANTHROPIC_AGENTS_BETA, Dialect

from .clock import format_ms
from .envelope import JsonAnswer, error_responses
from .problems import InvalidRequest
from .storage import Engine, SessionRow, SessionStoreRequest
from .wire import AnthropicSessionCreate, CloudSessionCreate, MemoryStoreResource, Session


def render_session(session: SessionRow) -> dict[str, Any]:
    created = format_ms(session.created_at)
    return {
        "id": session.id,
        "type": "session",
        "agent": {"type": "agent", "id": session.agent, "version": session.agent_version},
        "environment_id": session.environment_id,
        "title": session.title,
        "metadata": session.metadata,
        "resources": [
            {
                "type": "memory_store",
                "memory_store_id": store.store_id,
                "access": store.access,
                "instructions": store.instructions,
                "name": store.name,
                "description": store.description,
                "mount_path": store.mount_path,
            }
            for store in session.stores
        ],
        "status": "idle",
        "vault_ids": [],
        "archived_at": None,
        "created_at": created,
        "updated_at": created,
    }


def _store_request(resource: MemoryStoreResource) -> SessionStoreRequest:
    return SessionStoreRequest(
        store_id=resource.memory_store_id,
        access=resource.access or "read_write",
        instructions=resource.instructions,
        mount_path=getattr(resource, "mount_path", None),
    )


def _agent(body: AnthropicSessionCreate | CloudSessionCreate) -> tuple[str, int | None]:
    if isinstance(body.agent, str):
        return body.agent, None
    return body.agent.id, body.agent.version


SESSIONS_BETA = ANTHROPIC_AGENTS_BETA


async def require_sessions_beta(request: Request) -> None:
    """Anthropic's sessions endpoints are in beta: a request without the beta is refused, as upstream."""
    betas = {part.strip() for part in request.headers.get("anthropic-beta", "").split(",")}
    if SESSIONS_BETA not in betas:
        raise InvalidRequest("anthropic-beta", f"the sessions endpoints need the beta {SESSIONS_BETA}")


def add_session_routes(router: APIRouter, engine: Engine, dialect: Dialect, op: str) -> None:
    """``POST /sessions`` and ``GET /sessions/{session_id}`` for ``dialect`` (Cloud or Anthropic)."""
    anthropic = dialect is Dialect.ANTHROPIC
    summary = "Create a session with memory stores attached (at most 8)"
    beta = [Depends(require_sessions_beta)] if anthropic else []

    if anthropic:

        @router.post(
            "/sessions",
            response_model=Session,
            responses=error_responses(400, 404, 409),
            operation_id=op + "create_session",
            summary=summary + "; each gets a mount path under /mnt/memory/ derived from its name",
            dependencies=beta,
        )
        async def create_anthropic_session(body: AnthropicSessionCreate) -> JsonAnswer:
            agent, version = _agent(body)
            session = engine.create_session(
                dialect,
                agent=agent,
                agent_version=version,
                stores=[_store_request(r) for r in body.resources],
                environment_id=body.environment_id,
                title=body.title,
                metadata=body.metadata,
                derive_mounts=True,
            )
            return JsonAnswer(render_session(session))

    else:

        @router.post(
            "/sessions",
            response_model=Session,
            status_code=201,
            responses=error_responses(400, 404, 409),
            operation_id=op + "create_session",
            summary=summary + " by memory_store_ids (seed 004) or resources (the Qoder SDK)",
        )
        async def create_cloud_session(body: CloudSessionCreate) -> JsonAnswer:
            if body.memory_store_ids is not None and body.resources is not None:
                raise InvalidRequest(
                    "memory_store_ids", "and resources are two ways to attach stores; send one of them"
                )
            if body.memory_store_ids is not None:
                stores = [SessionStoreRequest(store_id=s) for s in body.memory_store_ids]
            else:
                stores = [_store_request(r) for r in body.resources or []]
            agent, version = _agent(body)
            session = engine.create_session(
                dialect,
                agent=agent,
                agent_version=version,
                stores=stores,
                environment_id=body.environment_id,
                title=body.title,
                metadata=body.metadata,
            )
            return JsonAnswer(render_session(session), status_code=201)

    @router.get(
        "/sessions/{session_id}",
        response_model=Session,
        responses=error_responses(400, 404) if anthropic else error_responses(404),
        operation_id=op + "retrieve_session",
        dependencies=beta,
        summary="Retrieve a session: its memory stores as attached, and its created_at",
    )
    async def retrieve_session(session_id: str) -> JsonAnswer:
        return JsonAnswer(render_session(engine.get_session(dialect, session_id)))
