"""Route adapter of the Anthropic Managed Agents dialect (docs/api-contract.md §4), as the SDK calls it.

Routes, parameters and answer shapes follow ``anthropic`` 2.14.0 (``client.beta.memory_stores``,
``.memories``, ``.memory_versions``). Pagination is ``page``/``next_page`` with opaque tokens; memories
list in UTF-8 byte order of their paths, stores and versions newest first. Writes record an
``api_actor`` naming the key (by a hash of the token, never the token itself).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request

from memsync.rules import ANTHROPIC_AGENTS_BETA, ANTHROPIC_MEMORY_BETA, Dialect

from .clock import format_ms, format_optional_ms
from .envelope import JsonAnswer, error_responses
from .parameters import (
    ANTHROPIC_HEADERS,
    CreatedRange,
    RequestGuard,
    VersionFilters,
    View,
    actor_of,
    created_range,
    id_cursor,
    optional_sha256_param,
    page_size,
    sha256_param,
    version_filters,
)
from .problems import InvalidRequest
from .sessions import add_session_routes
from .storage import Engine, MemoryRow, Page, PrefixEntry, StoreRow, VersionRow, decode_cursor, encode_cursor
from .wire import (
    SHA256_HEX,
    AnthropicDeletedMemory,
    AnthropicDeletedStore,
    AnthropicMemory,
    AnthropicMemoryCreate,
    AnthropicMemoryList,
    AnthropicMemoryUpdate,
    AnthropicStore,
    AnthropicStoreCreate,
    AnthropicStoreList,
    AnthropicStoreUpdate,
    AnthropicVersion,
    AnthropicVersionList,
)

DIALECT = Dialect.ANTHROPIC
MAX_NAME_CHARS = 255
MAX_DESCRIPTION_CHARS = 1024

WIRE_OPERATION = {"created": "created", "updated": "modified", "deleted": "deleted"}
STORED_OPERATION = {wire: stored for stored, wire in WIRE_OPERATION.items()}


def render_store(store: StoreRow) -> dict[str, Any]:
    return {
        "id": store.id,
        "type": "memory_store",
        "name": store.name,
        "description": store.description,
        "metadata": store.metadata,
        "created_at": format_ms(store.created_at),
        "updated_at": format_ms(store.updated_at),
        "archived_at": format_optional_ms(store.archived_at),
    }


def render_memory(memory: MemoryRow, *, full: bool) -> dict[str, Any]:
    return {
        "id": memory.id,
        "type": "memory",
        "memory_store_id": memory.store_id,
        "path": memory.path,
        "content": memory.content if full else None,
        "content_size_bytes": memory.content_size_bytes,
        "content_sha256": memory.content_sha256,
        "memory_version_id": memory.head_version_id,
        "created_at": format_ms(memory.created_at),
        "updated_at": format_ms(memory.updated_at),
    }


def render_version(version: VersionRow, *, full: bool) -> dict[str, Any]:
    redacted = version.redacted_at is not None
    # A tombstone keeps its path; a redacted version keeps nothing but who, when and what kind.
    no_content = redacted or version.operation == "deleted"
    return {
        "id": version.id,
        "type": "memory_version",
        "memory_store_id": version.store_id,
        "memory_id": version.memory_id,
        "operation": WIRE_OPERATION[version.operation],
        "path": None if redacted else version.path,
        "content": version.content if full and not no_content else None,
        "content_size_bytes": None if no_content else version.content_size_bytes,
        "content_sha256": None if no_content else version.content_sha256,
        "created_at": format_ms(version.created_at),
        "created_by": None if version.created_by is None else version.created_by.as_wire(),
        "redacted_at": format_optional_ms(version.redacted_at),
        "redacted_by": None if version.redacted_by is None else version.redacted_by.as_wire(),
    }


def _id_page(result: Page[Any], data: list[dict[str, Any]]) -> dict[str, Any]:
    """A newest-first listing's answer: its ``next_page`` continues after the last item it holds."""
    next_page = encode_cursor("id", data[-1]["id"]) if result.has_more and data else None
    return {"data": data, "next_page": next_page}


def _check_store_text(name: str | None, description: str | None) -> None:
    if name is not None and not 1 <= len(name) <= MAX_NAME_CHARS:
        raise InvalidRequest("name", f"must be 1..{MAX_NAME_CHARS} characters; it is {len(name)}")
    if description is not None and len(description) > MAX_DESCRIPTION_CHARS:
        raise InvalidRequest(
            "description", f"must be at most {MAX_DESCRIPTION_CHARS} characters; it is {len(description)}"
        )


Limit = Query(20, ge=1, le=100, description="Page size, 1..100 (with view=full at most 20 are returned).")
IdPageToken = Query(
    None, description="The `next_page` of the previous page.", json_schema_extra={"pattern": r"^id:[\s\S]+$"}
)
PathPageToken = Query(
    None,
    description="The `next_page` of the previous page.",
    json_schema_extra={"pattern": r"^(memory|prefix):[\s\S]+$"},
)
# Some SDK versions append ?beta=true to every call (docs/api-contract.md §4): accepted on every route,
# whatever it is.
_GUARD = RequestGuard(ANTHROPIC_HEADERS, also_accepted=frozenset({"beta"}))


async def _one_memory_beta(request: Request) -> None:
    """A memory endpoint refuses a request naming both of its betas, as upstream does (§4)."""
    named = {part.strip() for value in request.headers.getlist("anthropic-beta") for part in value.split(",")}
    if {ANTHROPIC_MEMORY_BETA, ANTHROPIC_AGENTS_BETA} <= named:
        raise InvalidRequest(
            "anthropic-beta",
            f"names both {ANTHROPIC_AGENTS_BETA} and {ANTHROPIC_MEMORY_BETA}; a memory endpoint takes one"
            f" of them: send {ANTHROPIC_MEMORY_BETA} alone",
        )


def build_router(engine: Engine) -> APIRouter:
    router = APIRouter(tags=["anthropic"], dependencies=[Depends(_GUARD)])
    # The memory endpoints refuse both betas at once; the sessions endpoints need their own beta.
    memory = APIRouter(dependencies=[Depends(_one_memory_beta)])
    op = "anthropic_"

    # Stores -----------------------------------------------------------------------------------

    @memory.post(
        "/memory_stores",
        response_model=AnthropicStore,
        responses=error_responses(400),
        operation_id=op + "create_memory_store",
        summary="Create a memory store",
    )
    async def create_store(body: AnthropicStoreCreate) -> JsonAnswer:
        _check_store_text(body.name, body.description)
        store, _ = engine.create_store(
            DIALECT, name=body.name, description=body.description or "", metadata=body.metadata
        )
        return JsonAnswer(render_store(store))

    @memory.get(
        "/memory_stores",
        response_model=AnthropicStoreList,
        responses=error_responses(400),
        operation_id=op + "list_memory_stores",
        summary="List memory stores, newest first",
    )
    async def list_stores(
        limit: int = Limit,
        page: str | None = IdPageToken,
        include_archived: bool = Query(False, description="Include archived stores."),
        created: CreatedRange = Depends(created_range),
    ) -> JsonAnswer:
        result = engine.list_stores(
            DIALECT,
            limit=limit,
            after_id=id_cursor(page),
            include_archived=include_archived,
            created_gte=created.gte,
            created_lte=created.lte,
        )
        return JsonAnswer(_id_page(result, [render_store(s) for s in result.items]))

    @memory.get(
        "/memory_stores/{memory_store_id}",
        response_model=AnthropicStore,
        responses=error_responses(404),
        operation_id=op + "retrieve_memory_store",
        summary="Retrieve a memory store",
    )
    async def retrieve_store(memory_store_id: str) -> JsonAnswer:
        return JsonAnswer(render_store(engine.get_store(DIALECT, memory_store_id)))

    @memory.post(
        "/memory_stores/{memory_store_id}",
        response_model=AnthropicStore,
        responses=error_responses(400, 404, 409),
        operation_id=op + "update_memory_store",
        summary="Update a memory store (metadata is a patch: null removes a key)",
    )
    async def update_store(memory_store_id: str, body: AnthropicStoreUpdate) -> JsonAnswer:
        _check_store_text(body.name, body.description)
        store = engine.update_store(
            DIALECT,
            memory_store_id,
            name=body.name,
            description=body.description,
            metadata=body.metadata,
            metadata_is_patch=True,
        )
        return JsonAnswer(render_store(store))

    @memory.delete(
        "/memory_stores/{memory_store_id}",
        response_model=AnthropicDeletedStore,
        responses=error_responses(404),
        operation_id=op + "delete_memory_store",
        summary="Delete a memory store with its memories and versions",
    )
    async def delete_store(memory_store_id: str) -> JsonAnswer:
        engine.delete_store(DIALECT, memory_store_id)
        return JsonAnswer({"id": memory_store_id, "type": "memory_store_deleted"})

    @memory.post(
        "/memory_stores/{memory_store_id}/archive",
        response_model=AnthropicStore,
        responses=error_responses(404),
        operation_id=op + "archive_memory_store",
        summary="Archive a memory store (archiving an archived store returns it unchanged)",
    )
    async def archive_store(memory_store_id: str) -> JsonAnswer:
        return JsonAnswer(render_store(engine.archive_store(DIALECT, memory_store_id)))

    # Memories ---------------------------------------------------------------------------------

    @memory.post(
        "/memory_stores/{memory_store_id}/memories",
        response_model=AnthropicMemory,
        responses=error_responses(400, 404, 409),
        operation_id=op + "create_memory",
        summary="Create a memory",
    )
    async def create_memory(
        request: Request,
        memory_store_id: str,
        body: AnthropicMemoryCreate,
        view: View = Query("basic", description="full includes content"),
    ) -> JsonAnswer:
        content = "" if body.content is None else body.content
        memory = engine.create_memory(
            DIALECT, memory_store_id, path=body.path, content=content, actor=actor_of(request)
        )
        return JsonAnswer(render_memory(memory, full=view == "full"))

    @memory.get(
        "/memory_stores/{memory_store_id}/memories",
        response_model=AnthropicMemoryList,
        responses=error_responses(400, 404),
        operation_id=op + "list_memories",
        summary="List memories in path order (depth=1 rolls deeper paths into memory_prefix items)",
    )
    async def list_memories(
        memory_store_id: str,
        limit: int = Limit,
        page: str | None = PathPageToken,
        path_prefix: str | None = Query(
            None,
            description="Starts and ends with `/`; matches whole segments.",
            json_schema_extra={"pattern": r"^/(?:[\s\S]*/)?$"},
        ),
        depth: int = Query(
            0, ge=0, le=1, description="0: every memory below the prefix; 1: direct children only."
        ),
        view: View = Query("basic", description="full includes content (at most 20 per page)"),
    ) -> JsonAnswer:
        prefix = "/" if path_prefix is None else path_prefix
        if not prefix.startswith("/") or not prefix.endswith("/"):
            raise InvalidRequest("path_prefix", "must start and end with '/', e.g. /notes/")
        full = view == "full"
        items, cursor = engine.list_memories_by_path(
            DIALECT,
            memory_store_id,
            limit=page_size(limit, view),
            prefix=prefix,
            depth=depth,
            cursor=None if page is None else decode_cursor(page, ("memory", "prefix")),
        )
        data = [
            {"type": "memory_prefix", "path": item.path}
            if isinstance(item, PrefixEntry)
            else render_memory(item, full=full)
            for item in items
        ]
        return JsonAnswer({"data": data, "next_page": None if cursor is None else encode_cursor(*cursor)})

    @memory.get(
        "/memory_stores/{memory_store_id}/memories/{memory_id}",
        response_model=AnthropicMemory,
        responses=error_responses(400, 404),
        operation_id=op + "retrieve_memory",
        summary="Retrieve a memory",
    )
    async def retrieve_memory(
        memory_store_id: str, memory_id: str, view: View = Query("full", description="basic omits content")
    ) -> JsonAnswer:
        memory = engine.get_memory(DIALECT, memory_store_id, memory_id)
        return JsonAnswer(render_memory(memory, full=view == "full"))

    @memory.post(
        "/memory_stores/{memory_store_id}/memories/{memory_id}",
        response_model=AnthropicMemory,
        responses=error_responses(400, 404, 409),
        operation_id=op + "update_memory",
        summary="Update a memory's content and/or path (a rename keeps the id), with a precondition",
    )
    async def update_memory(
        request: Request,
        memory_store_id: str,
        memory_id: str,
        body: AnthropicMemoryUpdate,
        view: View = Query("basic", description="full includes content"),
    ) -> JsonAnswer:
        expected = None
        if body.precondition is not None:
            expected = sha256_param("precondition.content_sha256", body.precondition.content_sha256)
        memory = engine.update_memory(
            DIALECT,
            memory_store_id,
            memory_id,
            content=body.content,
            path=body.path,
            expected_sha256=expected,
            actor=actor_of(request),
        )
        return JsonAnswer(render_memory(memory, full=view == "full"))

    @memory.delete(
        "/memory_stores/{memory_store_id}/memories/{memory_id}",
        response_model=AnthropicDeletedMemory,
        responses=error_responses(400, 404, 409),
        operation_id=op + "delete_memory",
        summary="Delete a memory (optionally only if its content_sha256 is as expected)",
    )
    async def delete_memory(
        request: Request,
        memory_store_id: str,
        memory_id: str,
        expected_content_sha256: str | None = Query(
            None, description="Delete only if the hash matches.", json_schema_extra={"pattern": SHA256_HEX}
        ),
    ) -> JsonAnswer:
        expected = optional_sha256_param("expected_content_sha256", expected_content_sha256)
        engine.delete_memory(
            DIALECT, memory_store_id, memory_id, expected_sha256=expected, actor=actor_of(request)
        )
        return JsonAnswer({"id": memory_id, "type": "memory_deleted"})

    # Versions ---------------------------------------------------------------------------------

    @memory.get(
        "/memory_stores/{memory_store_id}/memory_versions",
        response_model=AnthropicVersionList,
        responses=error_responses(400, 404),
        operation_id=op + "list_memory_versions",
        summary="List versions, newest first (view=full: with content, at most 20 per page)",
    )
    async def list_versions(
        memory_store_id: str,
        limit: int = Limit,
        page: str | None = IdPageToken,
        filters: VersionFilters = Depends(version_filters),
        operation: Literal["created", "modified", "deleted"] | None = Query(None),
        view: View = Query("basic", description="full includes content (at most 20 per page)"),
    ) -> JsonAnswer:
        full = view == "full"
        result = engine.list_versions(
            DIALECT,
            memory_store_id,
            limit=page_size(limit, view),
            after_id=id_cursor(page),
            memory_id=filters.memory_id,
            operation=None if operation is None else STORED_OPERATION[operation],
            created_gte=filters.created.gte,
            created_lte=filters.created.lte,
            actors=filters.actors,
        )
        return JsonAnswer(_id_page(result, [render_version(v, full=full) for v in result.items]))

    @memory.get(
        "/memory_stores/{memory_store_id}/memory_versions/{memory_version_id}",
        response_model=AnthropicVersion,
        responses=error_responses(400, 404),
        operation_id=op + "retrieve_memory_version",
        summary="Retrieve a version",
    )
    async def retrieve_version(
        memory_store_id: str,
        memory_version_id: str,
        view: View = Query("full", description="basic omits content"),
    ) -> JsonAnswer:
        version = engine.get_version(DIALECT, memory_store_id, memory_version_id)
        return JsonAnswer(render_version(version, full=view == "full"))

    @memory.post(
        "/memory_stores/{memory_store_id}/memory_versions/{memory_version_id}/redact",
        response_model=AnthropicVersion,
        responses=error_responses(404, 409),
        operation_id=op + "redact_memory_version",
        summary="Redact a version (not the current one of a live memory); repeating it is harmless",
    )
    async def redact_version(request: Request, memory_store_id: str, memory_version_id: str) -> JsonAnswer:
        version = engine.redact_version(DIALECT, memory_store_id, memory_version_id, actor=actor_of(request))
        return JsonAnswer(render_version(version, full=True))

    router.include_router(memory)
    add_session_routes(router, engine, DIALECT, op)
    return router
