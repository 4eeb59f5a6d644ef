"""Route adapters of the two Qoder dialects: Forward (api.md §2, seeds 000/003) and Cloud (§3, 002/004).

The dialects share endpoints and rules; Cloud differs in answer shapes (an integer ``version`` on
memories, no ``system_managed``/``binding_info`` on stores, ``redacted_at`` only on a redacted
version), in 201 for creates, in a ``PUT`` update with ``{content, version}``, in versions also at
``/versions``, and in having no mounts and no ``Idempotency-Key`` requirement. Field names are those
of seed 002 (``memory_store_id``, ``content_size_bytes``, ``memory_id``, ``path``, ``operation``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import APIRouter, Body, Header, Query
from pydantic import BaseModel

from memsync.rules import Dialect

from .clock import format_ms, format_optional_ms
from .envelope import JsonAnswer, error_responses
from .problems import InvalidRequest
from .storage import Engine, MemoryRow, MountRow, Page, StoreRow, VersionRow
from .wire import (
    CloudMemory,
    CloudMemoryList,
    CloudMemoryPut,
    CloudStore,
    CloudStoreList,
    CloudVersion,
    CloudVersionList,
    Deleted,
    ForwardMemory,
    ForwardMemoryList,
    ForwardStore,
    ForwardStoreCreate,
    ForwardStoreList,
    ForwardStoreUpdate,
    ForwardVersion,
    ForwardVersionList,
    MemoryCreate,
    MemoryUpdate,
    Mount,
    MountCreate,
    MountList,
    StoreCreate,
    StoreUpdate,
)

MAX_IDEMPOTENCY_KEY_CHARS = 255


# --- rendering ---------------------------------------------------------------------------------


def render_store(store: StoreRow, dialect: Dialect) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "id": store.id,
        "type": "memory_store",
        "name": store.name,
        "description": store.description,
        "status": "archived" if store.archived_at is not None else "active",
        "entry_count": store.entry_count,
        "total_size": store.total_size,
        "metadata": store.metadata,
    }
    if dialect is Dialect.FORWARD:
        answer["system_managed"] = store.system_managed
        answer["identity_id"] = store.identity_id
    answer["created_at"] = format_ms(store.created_at)
    answer["updated_at"] = format_ms(store.updated_at)
    answer["archived_at"] = format_optional_ms(store.archived_at)
    if dialect is Dialect.FORWARD:
        answer["binding_info"] = {"identity_template_count": store.mount_count}
    return answer


def render_memory(memory: MemoryRow, dialect: Dialect, *, with_content: bool) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "id": memory.id,
        "type": "memory",
        "memory_store_id": memory.store_id,
        "path": memory.path,
    }
    if with_content:
        answer["content"] = memory.content
    answer["content_size_bytes"] = memory.content_size_bytes
    answer["content_sha256"] = memory.content_sha256
    if dialect is Dialect.CLOUD:
        answer["version"] = memory.version
    answer["metadata"] = memory.metadata
    answer["created_at"] = format_ms(memory.created_at)
    answer["updated_at"] = format_ms(memory.updated_at)
    return answer


def render_version(version: VersionRow, dialect: Dialect, *, with_content: bool) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "id": version.id,
        "type": "memory_version",
        "memory_store_id": version.store_id,
        "memory_id": version.memory_id,
        "path": version.path,
    }
    if with_content:
        answer["content"] = version.content
    answer["content_size_bytes"] = version.content_size_bytes
    answer["content_sha256"] = version.content_sha256
    answer["operation"] = version.operation
    answer["redacted"] = version.redacted_at is not None
    if dialect is Dialect.FORWARD or version.redacted_at is not None:
        answer["redacted_at"] = format_optional_ms(version.redacted_at)
    answer["created_at"] = format_ms(version.created_at)
    return answer


def render_mount(mount: MountRow) -> dict[str, Any]:
    return {
        "memory_store_id": mount.store.id,
        "identity_id": mount.identity_id,
        "template_id": mount.template_id,
        "access": "read_write" if mount.system_managed else "read_only",
        "system_managed": mount.system_managed,
        "name": mount.store.name,
        "status": "archived" if mount.store.archived_at is not None else "active",
        "entry_count": mount.store.entry_count,
        "created_at": format_ms(mount.created_at),
    }


def id_page(page: Page[Any], data: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": page.has_more,
    }


# --- routes ------------------------------------------------------------------------------------

Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])


def _body_model(model: type[BaseModel]) -> Callable[[Endpoint], Endpoint]:
    """Give one endpoint function the request model of its dialect (Forward reserves more)."""

    def bind(endpoint: Endpoint) -> Endpoint:
        endpoint.__annotations__["body"] = model
        return endpoint

    return bind


Limit = Query(20, ge=1, le=100, description="Page size, 1..100.")
AfterId = Query(
    None, min_length=1, description="Return the page after (older than) this id. Excludes before_id."
)
BeforeId = Query(
    None, min_length=1, description="Return the page before (newer than) this id. Excludes after_id."
)


def build_router(engine: Engine, dialect: Dialect) -> APIRouter:
    """The routes of ``dialect`` (Forward or Cloud), to be mounted at its base path."""
    if dialect is Dialect.ANTHROPIC:
        raise ValueError("the Anthropic dialect has its own adapter")
    cloud = dialect is Dialect.CLOUD
    tag = dialect.value
    router = APIRouter(tags=[tag])
    created = 201 if cloud else 200
    StoreModel = CloudStore if cloud else ForwardStore
    MemoryModel = CloudMemory if cloud else ForwardMemory
    VersionModel = CloudVersion if cloud else ForwardVersion
    op = f"{tag}_"

    # Stores -----------------------------------------------------------------------------------

    idempotency_header = Header(
        None if cloud else ...,
        alias="Idempotency-Key",
        min_length=1,
        max_length=MAX_IDEMPOTENCY_KEY_CHARS,
        description="The same key and body return the same store; another body with it is a 409."
        + ("" if cloud else " Required."),
    )

    @router.post(
        "/memory_stores",
        response_model=StoreModel,
        status_code=created,
        responses=error_responses(400, 409),
        operation_id=op + "create_memory_store",
        summary="Create a memory store",
    )
    @_body_model(StoreCreate if cloud else ForwardStoreCreate)
    async def create_store(
        body: StoreCreate,
        idempotency_key: str | None = idempotency_header,
    ) -> JsonAnswer:
        if idempotency_key is None and not cloud:
            raise InvalidRequest(
                "Idempotency-Key", "header is required on store creation; send a unique key per new store"
            )
        fingerprint = hashlib.sha256(
            json.dumps(body.model_dump(), sort_keys=True, ensure_ascii=False).encode("utf-8")
        ).hexdigest()
        store, _ = engine.create_store(
            dialect,
            name=body.name,
            description=body.description,
            metadata=body.metadata,
            idempotency_key=idempotency_key,
            fingerprint=fingerprint,
        )
        # A replay answers like the original create (Forward 200, Cloud 201).
        return JsonAnswer(render_store(store, dialect), status_code=created)

    system_managed_query = Query(
        None, description="true: only system default stores; false: only user-created ones; absent: all."
    )

    @router.get(
        "/memory_stores",
        response_model=CloudStoreList if cloud else ForwardStoreList,
        responses=error_responses(400),
        operation_id=op + "list_memory_stores",
        summary="List memory stores, newest first",
    )
    async def list_stores(
        limit: int = Limit,
        after_id: str | None = AfterId,
        before_id: str | None = BeforeId,
        system_managed: bool | None = system_managed_query,
    ) -> JsonAnswer:
        page = engine.list_stores(
            dialect,
            limit=limit,
            after_id=after_id,
            before_id=before_id,
            system_managed=None if cloud else system_managed,
        )
        return JsonAnswer(id_page(page, [render_store(s, dialect) for s in page.items]))

    @router.get(
        "/memory_stores/{memory_store_id}",
        response_model=StoreModel,
        responses=error_responses(404),
        operation_id=op + "get_memory_store",
        summary="Get a memory store",
    )
    async def get_store(memory_store_id: str) -> JsonAnswer:
        return JsonAnswer(render_store(engine.get_store(dialect, memory_store_id), dialect))

    @router.post(
        "/memory_stores/{memory_store_id}",
        response_model=StoreModel,
        responses=error_responses(400, 404, 409),
        operation_id=op + "update_memory_store",
        summary="Update a memory store (metadata replaces the whole map)",
    )
    @_body_model(StoreUpdate if cloud else ForwardStoreUpdate)
    async def update_store(memory_store_id: str, body: StoreUpdate) -> JsonAnswer:
        store = engine.update_store(
            dialect, memory_store_id, name=body.name, description=body.description, metadata=body.metadata
        )
        return JsonAnswer(render_store(store, dialect))

    @router.post(
        "/memory_stores/{memory_store_id}/archive",
        response_model=StoreModel,
        responses=error_responses(404, 409),
        operation_id=op + "archive_memory_store",
        summary="Archive a memory store (409 if archived already, or mounted)",
    )
    async def archive_store(memory_store_id: str) -> JsonAnswer:
        return JsonAnswer(render_store(engine.archive_store(dialect, memory_store_id), dialect))

    @router.delete(
        "/memory_stores/{memory_store_id}",
        response_model=Deleted,
        responses=error_responses(404, 409),
        operation_id=op + "delete_memory_store",
        summary="Delete a memory store with its memories and versions (409 if archived or mounted)",
    )
    async def delete_store(memory_store_id: str) -> JsonAnswer:
        engine.delete_store(dialect, memory_store_id)
        return JsonAnswer({"id": memory_store_id, "type": "memory_store_deleted", "deleted": True})

    # Memories ---------------------------------------------------------------------------------

    @router.post(
        "/memory_stores/{memory_store_id}/memories",
        response_model=MemoryModel,
        status_code=created,
        responses=error_responses(400, 404, 409),
        operation_id=op + "create_memory",
        summary="Create a memory (409 if an active memory has the path, or the store is archived)",
    )
    async def create_memory(memory_store_id: str, body: MemoryCreate) -> JsonAnswer:
        memory = engine.create_memory(
            dialect, memory_store_id, path=body.path, content=body.content, metadata=body.metadata
        )
        return JsonAnswer(render_memory(memory, dialect, with_content=True), status_code=created)

    @router.get(
        "/memory_stores/{memory_store_id}/memories",
        response_model=CloudMemoryList if cloud else ForwardMemoryList,
        responses=error_responses(400, 404),
        operation_id=op + "list_memories",
        summary="List memories, newest first, without content",
    )
    async def list_memories(
        memory_store_id: str,
        limit: int = Limit,
        after_id: str | None = AfterId,
        before_id: str | None = BeforeId,
        path_prefix: str | None = Query(None, description="A plain string prefix: `a/b` matches `a/bc.md`."),
    ) -> JsonAnswer:
        page = engine.list_memories(
            dialect,
            memory_store_id,
            limit=limit,
            after_id=after_id,
            before_id=before_id,
            path_prefix=path_prefix,
        )
        data = [render_memory(m, dialect, with_content=False) for m in page.items]
        return JsonAnswer(id_page(page, data))

    @router.get(
        "/memory_stores/{memory_store_id}/memories/{memory_id}",
        response_model=MemoryModel,
        responses=error_responses(404),
        operation_id=op + "get_memory",
        summary="Get a memory with its content",
    )
    async def get_memory(memory_store_id: str, memory_id: str) -> JsonAnswer:
        memory = engine.get_memory(dialect, memory_store_id, memory_id)
        return JsonAnswer(render_memory(memory, dialect, with_content=True))

    @router.post(
        "/memory_stores/{memory_store_id}/memories/{memory_id}",
        response_model=MemoryModel,
        responses=error_responses(400, 404, 409),
        operation_id=op + "update_memory",
        summary="Update a memory's content (content_sha256 is an optional precondition)",
    )
    async def update_memory(memory_store_id: str, memory_id: str, body: MemoryUpdate) -> JsonAnswer:
        memory = engine.update_memory(
            dialect,
            memory_store_id,
            memory_id,
            content=body.content,
            path=body.path,
            metadata=body.metadata,
            expected_sha256=body.content_sha256,
        )
        return JsonAnswer(render_memory(memory, dialect, with_content=True))

    if cloud:

        @router.put(
            "/memory_stores/{memory_store_id}/memories/{memory_id}",
            response_model=CloudMemory,
            responses=error_responses(400, 404, 409),
            operation_id=op + "replace_memory",
            summary="Update a memory's content with the current integer version (stale: 409)",
        )
        async def put_memory(memory_store_id: str, memory_id: str, body: CloudMemoryPut) -> JsonAnswer:
            memory = engine.update_memory(
                dialect, memory_store_id, memory_id, content=body.content, expected_version=body.version
            )
            return JsonAnswer(render_memory(memory, dialect, with_content=True))

    @router.delete(
        "/memory_stores/{memory_store_id}/memories/{memory_id}",
        response_model=Deleted,
        responses=error_responses(404, 409),
        operation_id=op + "delete_memory",
        summary="Delete a memory (writes a tombstone version)",
    )
    async def delete_memory(memory_store_id: str, memory_id: str) -> JsonAnswer:
        engine.delete_memory(dialect, memory_store_id, memory_id)
        return JsonAnswer({"id": memory_id, "type": "memory_deleted", "deleted": True})

    # Versions ---------------------------------------------------------------------------------

    version_collections = ["memory_versions", "versions"] if cloud else ["memory_versions"]
    for collection in version_collections:
        suffix = "" if collection == "memory_versions" else "_alias"
        _add_version_routes(router, engine, dialect, collection, op, suffix, VersionModel)

    if not cloud:
        _add_mount_routes(router, engine, op)
    return router


def _add_version_routes(
    router: APIRouter,
    engine: Engine,
    dialect: Dialect,
    collection: str,
    op: str,
    suffix: str,
    version_model: type[ForwardVersion] | type[CloudVersion],
) -> None:
    list_model = CloudVersionList if dialect is Dialect.CLOUD else ForwardVersionList

    @router.get(
        f"/memory_stores/{{memory_store_id}}/{collection}",
        response_model=list_model,
        responses=error_responses(400, 404),
        operation_id=f"{op}list_memory_versions{suffix}",
        summary="List versions, newest first, without content",
    )
    async def list_versions(
        memory_store_id: str,
        limit: int = Limit,
        after_id: str | None = AfterId,
        before_id: str | None = BeforeId,
        memory_id: str | None = Query(
            None, description="Only this memory's history (works after its delete)."
        ),
    ) -> JsonAnswer:
        page = engine.list_versions(
            dialect, memory_store_id, limit=limit, after_id=after_id, before_id=before_id, memory_id=memory_id
        )
        data = [render_version(v, dialect, with_content=False) for v in page.items]
        return JsonAnswer(id_page(page, data))

    @router.get(
        f"/memory_stores/{{memory_store_id}}/{collection}/{{memory_version_id}}",
        response_model=version_model,
        responses=error_responses(404),
        operation_id=f"{op}get_memory_version{suffix}",
        summary="Get a version with its content (null if redacted or a tombstone)",
    )
    async def get_version(memory_store_id: str, memory_version_id: str) -> JsonAnswer:
        version = engine.get_version(dialect, memory_store_id, memory_version_id)
        return JsonAnswer(render_version(version, dialect, with_content=True))

    @router.post(
        f"/memory_stores/{{memory_store_id}}/{collection}/{{memory_version_id}}/redact",
        response_model=version_model,
        responses=error_responses(404, 409),
        operation_id=f"{op}redact_memory_version{suffix}",
        summary="Redact a version's content for good (size and hash stay; a second redaction is a 409)",
    )
    async def redact_version(memory_store_id: str, memory_version_id: str) -> JsonAnswer:
        version = engine.redact_version(dialect, memory_store_id, memory_version_id)
        return JsonAnswer(render_version(version, dialect, with_content=True))


def _add_mount_routes(router: APIRouter, engine: Engine, op: str) -> None:
    base = "/identities/{identity_id}/templates/{template_id}/memory_stores"

    @router.post(
        base,
        response_model=Mount,
        responses=error_responses(400, 404, 409),
        operation_id=op + "mount_memory_store",
        summary="Mount a store read-only for an (identity, template); at most 10 explicit mounts",
    )
    async def mount(identity_id: str, template_id: str, body: MountCreate = Body()) -> JsonAnswer:
        return JsonAnswer(render_mount(engine.mount(identity_id, template_id, body.memory_store_id)))

    @router.get(
        base,
        response_model=MountList,
        responses=error_responses(),
        operation_id=op + "list_mounted_memory_stores",
        summary="The stores mounted for an (identity, template): the default first, then by mount time",
    )
    async def list_mounts(identity_id: str, template_id: str) -> JsonAnswer:
        mounts = engine.list_mounts(identity_id, template_id)
        return JsonAnswer({"data": [render_mount(m) for m in mounts], "has_more": False})

    @router.delete(
        base + "/{memory_store_id}",
        response_model=Deleted,
        responses=error_responses(404, 409),
        operation_id=op + "unmount_memory_store",
        summary="Unmount a store from an (identity, template)",
    )
    async def unmount(identity_id: str, template_id: str, memory_store_id: str) -> JsonAnswer:
        engine.unmount(identity_id, template_id, memory_store_id)
        return JsonAnswer({"id": memory_store_id, "type": "memory_store_binding_deleted", "deleted": True})
