"""Route adapters of the Qoder dialects (docs/api-contract.md): Forward (§2, seeds 000/003), Cloud (§3).

The dialects share endpoints and rules; Cloud differs in answer shapes (an integer ``version`` on
memories, no ``system_managed``/``binding_info`` on stores, ``redacted_at`` only on a redacted
version), in 201 for creates, in a ``PUT`` update with ``{content, version}``, in versions also at
``/versions``, and in having no mounts and no ``Idempotency-Key`` requirement. Field names are those
of seed 002 (``memory_store_id``, ``content_size_bytes``, ``memory_id``, ``path``, ``operation``).

Cloud also takes what the official Cloud SDK (``qca.managed``, qca-sdk 0.11.0) sends, which follows
the Anthropic API: ``page``/``next_page`` paging, ``view``, ``depth``, creation-time ranges, version
filters and a delete precondition. Its answers add the SDK models' names beside seed 002's
(``memory_version_id`` on memories, ``created_by``/``redacted_by`` on versions), and its version
filter takes the SDK's ``modified`` for seed 002's ``updated``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from fastapi import APIRouter, Body, Depends, Header, Query, Request
from pydantic import BaseModel

from memsync.rules import Dialect

from .clock import format_ms, format_optional_ms
from .envelope import JsonAnswer, error_responses
from .parameters import (
    QODER_HEADERS,
    CreatedRange,
    RequestGuard,
    VersionFilters,
    View,
    actor_of,
    created_range,
    id_cursor,
    optional_sha256_param,
    page_size,
    version_filters,
)
from .problems import InvalidRequest
from .sessions import add_session_routes
from .storage import (
    Engine,
    MemoryRow,
    MountRow,
    Page,
    PrefixEntry,
    StoreRow,
    VersionRow,
    decode_cursor,
    encode_cursor,
)
from .wire import (
    SHA256_HEX,
    CloudMemory,
    CloudMemoryIdList,
    CloudMemoryList,
    CloudMemoryNextPageList,
    CloudMemoryPut,
    CloudMemoryUpdate,
    CloudStore,
    CloudStoreIdList,
    CloudStoreList,
    CloudStoreNextPageList,
    CloudVersion,
    CloudVersionIdList,
    CloudVersionList,
    CloudVersionNextPageList,
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

# "both": Cloud listings page by next_page and by after_id/before_id (first_id/last_id). "next-page":
# only by next_page, as a service variant whose clients must follow next_page; "after-id": only by
# the ids, as the seeds' generation of Cloud does (no next_page). Clients must survive all three.
CloudPaging = Literal["both", "next-page", "after-id"]
CLOUD_PAGING: tuple[CloudPaging, ...] = ("both", "next-page", "after-id")


def _list_model(
    paging: CloudPaging, both: type[BaseModel], tokens: type[BaseModel], ids: type[BaseModel]
) -> Any:
    """The documented answer of a Cloud listing under ``paging``."""
    return {"both": both, "next-page": tokens, "after-id": ids}[paging]


# The Cloud SDK filters versions with Anthropic's "modified"; seed 002 names the operation "updated".
CloudOperation = Literal["created", "updated", "modified", "deleted"]


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
        answer["memory_version_id"] = memory.head_version_id
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
    if dialect is Dialect.CLOUD:
        answer["created_by"] = None if version.created_by is None else version.created_by.as_wire()
        answer["redacted_by"] = None if version.redacted_by is None else version.redacted_by.as_wire()
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


def cloud_page(
    data: list[dict[str, Any]],
    *,
    has_more: bool,
    next_page: str | None,
    paging: CloudPaging,
    ids: list[str] | None = None,
) -> dict[str, Any]:
    """A Cloud listing: ``next_page`` (null on the last page) beside ``has_more``, and unless the
    server pages by next_page only, the ``first_id``/``last_id`` of the items (``ids``)."""
    answer: dict[str, Any] = {"data": data}
    if paging != "next-page":
        ids = [item["id"] for item in data] if ids is None else ids
        answer["first_id"] = ids[0] if ids else None
        answer["last_id"] = ids[-1] if ids else None
    answer["has_more"] = has_more
    if paging != "after-id":
        answer["next_page"] = next_page
    return answer


def cloud_id_page(page: Page[Any], data: list[dict[str, Any]], paging: CloudPaging) -> dict[str, Any]:
    # The token is the after_id cursor in the page-token form Anthropic's listings use, so the same
    # position always gives the same token, and page=<next_page> equals after_id=<last_id>.
    next_page = encode_cursor("id", data[-1]["id"]) if page.more_after and data else None
    return cloud_page(data, has_more=page.has_more, next_page=next_page, paging=paging)


def cloud_cursor(
    paging: CloudPaging, page: str | None, after_id: str | None, before_id: str | None
) -> tuple[str | None, str | None]:
    """The (after_id, before_id) a Cloud listing asks for; at most one of the three may be sent."""
    if paging == "after-id" and page is not None:
        raise InvalidRequest(
            "page",
            "this server pages Cloud listings by after_id only (--cloud-paging after-id);"
            " send after_id=<the last_id of the previous page>",
        )
    if paging == "next-page":
        for name, value in (("after_id", after_id), ("before_id", before_id)):
            if value is not None:
                raise InvalidRequest(
                    name,
                    "this server pages Cloud listings by next_page only (--cloud-paging next-page);"
                    " send page=<the next_page of the previous page>",
                )
    cursors = (("page", page), ("after_id", after_id), ("before_id", before_id))
    sent = [name for name, value in cursors if value is not None]
    if len(sent) > 1:
        raise InvalidRequest(sent[0], f"{' and '.join(sent)} are mutually exclusive; send one")
    return (id_cursor(page) if page is not None else after_id), before_id


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
# With --cloud-paging next-page the id cursors are still read, to be refused with a reason; with
# after-id, the page token is.
HiddenAfterId = Query(None, include_in_schema=False)
HiddenBeforeId = Query(None, include_in_schema=False)
HiddenPage = Query(None, include_in_schema=False)
IdPageToken = Query(
    None,
    description="The `next_page` of the previous page (the same as after_id=<its last_id>).",
    json_schema_extra={"pattern": r"^id:[\s\S]+$"},
)
MemoryPageToken = Query(
    None,
    description="The `next_page` of the previous page (depth=1 pages have their own tokens).",
    json_schema_extra={"pattern": r"^(id|memory|prefix):[\s\S]+$"},
)
FullView = Query("full", description="basic leaves content out")
BasicView = Query("basic", description="full includes content (at most 20 items per page)")


def _with_content(view: View) -> bool:
    return view == "full"


def build_router(engine: Engine, dialect: Dialect, *, cloud_paging: CloudPaging = "both") -> APIRouter:
    """The routes of ``dialect`` (Forward or Cloud), to be mounted at its base path."""
    if dialect is Dialect.ANTHROPIC:
        raise ValueError("the Anthropic dialect has its own adapter")
    if cloud_paging not in CLOUD_PAGING:
        raise ValueError(f"cloud_paging must be one of {', '.join(CLOUD_PAGING)}, not {cloud_paging!r}")
    cloud = dialect is Dialect.CLOUD
    tag = dialect.value
    router = APIRouter(tags=[tag], dependencies=[Depends(RequestGuard(QODER_HEADERS))])
    created = 201 if cloud else 200
    StoreModel = CloudStore if cloud else ForwardStore
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
        summary="Create a memory store" + ("" if cloud else " (and mount it, with `mount`)"),
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
        mount = body.mount if isinstance(body, ForwardStoreCreate) else None
        if mount is not None and mount.access != "read_only":
            raise InvalidRequest(
                "mount.access",
                "an explicit mount is always read_only (seed 000: only the system default store is"
                " read_write); send read_only or leave access out",
            )
        request = body.model_dump()
        if request.get("mount", False) is None:
            # Left out, so that creates recorded before `mount` existed replay with the same key.
            del request["mount"]
        fingerprint = hashlib.sha256(
            json.dumps(request, sort_keys=True, ensure_ascii=False).encode("utf-8")
        ).hexdigest()
        # The create and its mount are one transaction: a refused mount leaves no store behind.
        with engine.transaction():
            store, replayed = engine.create_store(
                dialect,
                name=body.name,
                description=body.description or "",
                metadata=body.metadata,
                idempotency_key=idempotency_key,
                fingerprint=fingerprint,
            )
            if mount is not None and not replayed:
                engine.mount(mount.identity_id, mount.template_id, store.id)
                store = engine.get_store(dialect, store.id)
        # A replay answers like the original create (Forward 200, Cloud 201).
        return JsonAnswer(render_store(store, dialect), status_code=created)

    if cloud:

        @router.get(
            "/memory_stores",
            response_model=_list_model(
                cloud_paging, CloudStoreList, CloudStoreNextPageList, CloudStoreIdList
            ),
            responses=error_responses(400),
            operation_id=op + "list_memory_stores",
            summary="List memory stores, newest first",
        )
        async def list_cloud_stores(
            limit: int = Limit,
            page: str | None = HiddenPage if cloud_paging == "after-id" else IdPageToken,
            after_id: str | None = HiddenAfterId if cloud_paging == "next-page" else AfterId,
            before_id: str | None = HiddenBeforeId if cloud_paging == "next-page" else BeforeId,
            include_archived: bool | None = Query(
                None, description="false: active stores only; absent or true: archived ones too."
            ),
            created: CreatedRange = Depends(created_range),
            name: str | None = Query(None, include_in_schema=False),
        ) -> JsonAnswer:
            if name is not None:
                raise InvalidRequest(
                    "name",
                    "filtering stores by name is not implemented by the reference server; leave it out",
                )
            after, before = cloud_cursor(cloud_paging, page, after_id, before_id)
            result = engine.list_stores(
                dialect,
                limit=limit,
                after_id=after,
                before_id=before,
                include_archived=include_archived is not False,
                created_gte=created.gte,
                created_lte=created.lte,
            )
            data = [render_store(s, dialect) for s in result.items]
            return JsonAnswer(cloud_id_page(result, data, cloud_paging))

    else:

        @router.get(
            "/memory_stores",
            response_model=ForwardStoreList,
            responses=error_responses(400),
            operation_id=op + "list_memory_stores",
            summary="List memory stores, newest first",
        )
        async def list_forward_stores(
            limit: int = Limit,
            after_id: str | None = AfterId,
            before_id: str | None = BeforeId,
            system_managed: bool | None = Query(
                None,
                description="true: only system default stores; false: only user-created ones; absent: all.",
            ),
        ) -> JsonAnswer:
            result = engine.list_stores(
                dialect, limit=limit, after_id=after_id, before_id=before_id, system_managed=system_managed
            )
            return JsonAnswer(id_page(result, [render_store(s, dialect) for s in result.items]))

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

    if cloud:
        _add_cloud_memory_routes(router, engine, cloud_paging)
    else:
        _add_forward_memory_routes(router, engine)

    # Versions ---------------------------------------------------------------------------------

    version_collections = ["memory_versions", "versions"] if cloud else ["memory_versions"]
    for collection in version_collections:
        suffix = "" if collection == "memory_versions" else "_alias"
        if cloud:
            _add_cloud_version_list(router, engine, collection, suffix, cloud_paging)
        else:
            _add_forward_version_list(router, engine)
        _add_version_routes(router, engine, dialect, collection, op, suffix)

    if cloud:
        add_session_routes(router, engine, dialect, op)
    else:
        _add_mount_routes(router, engine, op)
    return router


def _create_memory(
    engine: Engine, dialect: Dialect, request: Request, store_id: str, body: MemoryCreate
) -> MemoryRow:
    """A memory create as Forward and Cloud both take it (they differ only in how they answer)."""
    return engine.create_memory(
        dialect,
        store_id,
        path=body.path,
        content=body.content,
        metadata=body.metadata,
        actor=actor_of(request),
    )


def _update_memory(
    engine: Engine,
    dialect: Dialect,
    request: Request,
    store_id: str,
    memory_id: str,
    body: MemoryUpdate | CloudMemoryUpdate,
) -> MemoryRow:
    """A memory update as Forward and Cloud both take it (Cloud may leave content out to keep it)."""
    return engine.update_memory(
        dialect,
        store_id,
        memory_id,
        content=body.content,
        path=body.path,
        metadata=body.metadata,
        expected_sha256=body.content_sha256,
        actor=actor_of(request),
    )


def _add_forward_memory_routes(router: APIRouter, engine: Engine) -> None:
    dialect, op = Dialect.FORWARD, "forward_"

    @router.post(
        "/memory_stores/{memory_store_id}/memories",
        response_model=ForwardMemory,
        responses=error_responses(400, 404, 409),
        operation_id=op + "create_memory",
        summary="Create a memory (409 if an active memory has the path, or the store is archived)",
    )
    async def create_memory(request: Request, memory_store_id: str, body: MemoryCreate) -> JsonAnswer:
        memory = _create_memory(engine, dialect, request, memory_store_id, body)
        return JsonAnswer(render_memory(memory, dialect, with_content=True))

    @router.get(
        "/memory_stores/{memory_store_id}/memories",
        response_model=ForwardMemoryList,
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
        response_model=ForwardMemory,
        responses=error_responses(404),
        operation_id=op + "get_memory",
        summary="Get a memory with its content",
    )
    async def get_memory(memory_store_id: str, memory_id: str) -> JsonAnswer:
        memory = engine.get_memory(dialect, memory_store_id, memory_id)
        return JsonAnswer(render_memory(memory, dialect, with_content=True))

    @router.post(
        "/memory_stores/{memory_store_id}/memories/{memory_id}",
        response_model=ForwardMemory,
        responses=error_responses(400, 404, 409),
        operation_id=op + "update_memory",
        summary="Update a memory's content (content_sha256 is an optional precondition)",
    )
    async def update_memory(
        request: Request, memory_store_id: str, memory_id: str, body: MemoryUpdate
    ) -> JsonAnswer:
        memory = _update_memory(engine, dialect, request, memory_store_id, memory_id, body)
        return JsonAnswer(render_memory(memory, dialect, with_content=True))

    @router.delete(
        "/memory_stores/{memory_store_id}/memories/{memory_id}",
        response_model=Deleted,
        responses=error_responses(404, 409),
        operation_id=op + "delete_memory",
        summary="Delete a memory (writes a tombstone version; Forward takes no precondition)",
    )
    async def delete_memory(request: Request, memory_store_id: str, memory_id: str) -> JsonAnswer:
        engine.delete_memory(dialect, memory_store_id, memory_id, actor=actor_of(request))
        return JsonAnswer({"id": memory_id, "type": "memory_deleted", "deleted": True})


def _add_cloud_memory_routes(router: APIRouter, engine: Engine, paging: CloudPaging) -> None:
    dialect, op = Dialect.CLOUD, "cloud_"

    @router.post(
        "/memory_stores/{memory_store_id}/memories",
        response_model=CloudMemory,
        status_code=201,
        responses=error_responses(400, 404, 409),
        operation_id=op + "create_memory",
        summary="Create a memory (409 if an active memory has the path, or the store is archived)",
    )
    async def create_memory(
        request: Request, memory_store_id: str, body: MemoryCreate, view: View = FullView
    ) -> JsonAnswer:
        memory = _create_memory(engine, dialect, request, memory_store_id, body)
        return JsonAnswer(render_memory(memory, dialect, with_content=_with_content(view)), status_code=201)

    @router.get(
        "/memory_stores/{memory_store_id}/memories",
        response_model=_list_model(paging, CloudMemoryList, CloudMemoryNextPageList, CloudMemoryIdList),
        responses=error_responses(400, 404),
        operation_id=op + "list_memories",
        summary="List memories newest first (depth=1: direct children in path order, directories rolled up)",
    )
    async def list_memories(
        memory_store_id: str,
        limit: int = Limit,
        page: str | None = HiddenPage if paging == "after-id" else MemoryPageToken,
        after_id: str | None = HiddenAfterId if paging == "next-page" else AfterId,
        before_id: str | None = HiddenBeforeId if paging == "next-page" else BeforeId,
        path_prefix: str | None = Query(None, description="A plain string prefix: `a/b` matches `a/bc.md`."),
        depth: int = Query(
            0,
            ge=0,
            le=1,
            description="0: every memory below the prefix, newest first; 1: direct children only, in"
            " path order, deeper paths rolled up into memory_prefix items (the prefix must be empty"
            " or end with `/`).",
        ),
        view: View = BasicView,
    ) -> JsonAnswer:
        full = _with_content(view)
        if depth == 1:
            return JsonAnswer(
                _list_by_directory(
                    engine, memory_store_id, paging, limit, page, after_id, before_id, path_prefix, view
                )
            )
        after, before = cloud_cursor(paging, page, after_id, before_id)
        result = engine.list_memories(
            dialect,
            memory_store_id,
            limit=page_size(limit, view),
            after_id=after,
            before_id=before,
            path_prefix=path_prefix,
        )
        data = [render_memory(m, dialect, with_content=full) for m in result.items]
        return JsonAnswer(cloud_id_page(result, data, paging))

    @router.get(
        "/memory_stores/{memory_store_id}/memories/{memory_id}",
        response_model=CloudMemory,
        responses=error_responses(400, 404),
        operation_id=op + "get_memory",
        summary="Get a memory with its content",
    )
    async def get_memory(memory_store_id: str, memory_id: str, view: View = FullView) -> JsonAnswer:
        memory = engine.get_memory(dialect, memory_store_id, memory_id)
        return JsonAnswer(render_memory(memory, dialect, with_content=_with_content(view)))

    @router.post(
        "/memory_stores/{memory_store_id}/memories/{memory_id}",
        response_model=CloudMemory,
        responses=error_responses(400, 404, 409),
        operation_id=op + "update_memory",
        summary="Update a memory (content_sha256 is an optional precondition; content may be left out)",
    )
    async def update_memory(
        request: Request, memory_store_id: str, memory_id: str, body: CloudMemoryUpdate, view: View = FullView
    ) -> JsonAnswer:
        memory = _update_memory(engine, dialect, request, memory_store_id, memory_id, body)
        return JsonAnswer(render_memory(memory, dialect, with_content=_with_content(view)))

    @router.put(
        "/memory_stores/{memory_store_id}/memories/{memory_id}",
        response_model=CloudMemory,
        responses=error_responses(400, 404, 409),
        operation_id=op + "replace_memory",
        summary="Update a memory's content with the current integer version (stale: 409)",
    )
    async def put_memory(
        request: Request, memory_store_id: str, memory_id: str, body: CloudMemoryPut, view: View = FullView
    ) -> JsonAnswer:
        memory = engine.update_memory(
            dialect,
            memory_store_id,
            memory_id,
            content=body.content,
            expected_version=body.version,
            actor=actor_of(request),
        )
        return JsonAnswer(render_memory(memory, dialect, with_content=_with_content(view)))

    @router.delete(
        "/memory_stores/{memory_store_id}/memories/{memory_id}",
        response_model=Deleted,
        responses=error_responses(400, 404, 409),
        operation_id=op + "delete_memory",
        summary="Delete a memory (writes a tombstone version), optionally only if its hash is as expected",
    )
    async def delete_memory(
        request: Request,
        memory_store_id: str,
        memory_id: str,
        expected_content_sha256: str | None = Query(
            None,
            description="Delete only if the stored content has this hash (else 409, nothing deleted).",
            json_schema_extra={"pattern": SHA256_HEX},
        ),
    ) -> JsonAnswer:
        engine.delete_memory(
            dialect,
            memory_store_id,
            memory_id,
            expected_sha256=optional_sha256_param("expected_content_sha256", expected_content_sha256),
            actor=actor_of(request),
        )
        return JsonAnswer({"id": memory_id, "type": "memory_deleted", "deleted": True})


def _list_by_directory(
    engine: Engine,
    store_id: str,
    paging: CloudPaging,
    limit: int,
    page: str | None,
    after_id: str | None,
    before_id: str | None,
    path_prefix: str | None,
    view: View,
) -> dict[str, Any]:
    """A Cloud ``depth=1`` listing: the engine's path-order walk that Anthropic's listing uses, with
    Cloud's relative paths (an empty prefix is the root). Ids do not order it, so only ``page``
    continues it, and its ``first_id``/``last_id`` are those of its first and last memory."""
    if paging == "after-id":
        raise InvalidRequest(
            "depth",
            "depth=1 lists in path order, which only page tokens continue, and this server pages Cloud"
            " listings by after_id only (--cloud-paging after-id); leave depth out",
        )
    cloud_cursor(paging, None, after_id, before_id)
    for name, value in (("after_id", after_id), ("before_id", before_id)):
        if value is not None:
            raise InvalidRequest(name, "depth=1 lists in path order; continue it with page=<next_page>")
    prefix = path_prefix or ""
    if prefix and not prefix.endswith("/"):
        raise InvalidRequest("path_prefix", "with depth=1 must be empty or a directory ending in '/'")
    items, cursor = engine.list_memories_by_path(
        Dialect.CLOUD,
        store_id,
        limit=page_size(limit, view),
        prefix=prefix,
        depth=1,
        cursor=None if page is None else decode_cursor(page, ("memory", "prefix")),
    )
    full = _with_content(view)
    data = [
        {"type": "memory_prefix", "path": item.path}
        if isinstance(item, PrefixEntry)
        else render_memory(item, Dialect.CLOUD, with_content=full)
        for item in items
    ]
    return cloud_page(
        data,
        has_more=cursor is not None,
        next_page=None if cursor is None else encode_cursor(*cursor),
        paging=paging,
        ids=[item["id"] for item in data if item["type"] == "memory"],
    )


def _add_forward_version_list(router: APIRouter, engine: Engine) -> None:
    dialect = Dialect.FORWARD

    @router.get(
        "/memory_stores/{memory_store_id}/memory_versions",
        response_model=ForwardVersionList,
        responses=error_responses(400, 404),
        operation_id="forward_list_memory_versions",
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


def _add_cloud_version_list(
    router: APIRouter, engine: Engine, collection: str, suffix: str, paging: CloudPaging
) -> None:
    dialect = Dialect.CLOUD

    @router.get(
        f"/memory_stores/{{memory_store_id}}/{collection}",
        response_model=_list_model(paging, CloudVersionList, CloudVersionNextPageList, CloudVersionIdList),
        responses=error_responses(400, 404),
        operation_id=f"cloud_list_memory_versions{suffix}",
        summary="List versions, newest first (view=full: with content, at most 20 per page)",
    )
    async def list_versions(
        memory_store_id: str,
        limit: int = Limit,
        page: str | None = HiddenPage if paging == "after-id" else IdPageToken,
        after_id: str | None = HiddenAfterId if paging == "next-page" else AfterId,
        before_id: str | None = HiddenBeforeId if paging == "next-page" else BeforeId,
        filters: VersionFilters = Depends(version_filters),
        operation: CloudOperation | None = Query(None, description="`modified` is the same as `updated`."),
        view: View = BasicView,
    ) -> JsonAnswer:
        after, before = cloud_cursor(paging, page, after_id, before_id)
        result = engine.list_versions(
            dialect,
            memory_store_id,
            limit=page_size(limit, view),
            after_id=after,
            before_id=before,
            memory_id=filters.memory_id,
            operation="updated" if operation == "modified" else operation,
            created_gte=filters.created.gte,
            created_lte=filters.created.lte,
            actors=filters.actors,
        )
        data = [render_version(v, dialect, with_content=_with_content(view)) for v in result.items]
        return JsonAnswer(cloud_id_page(result, data, paging))


def _add_version_routes(
    router: APIRouter, engine: Engine, dialect: Dialect, collection: str, op: str, suffix: str
) -> None:
    cloud = dialect is Dialect.CLOUD
    version_model = CloudVersion if cloud else ForwardVersion

    if cloud:

        @router.get(
            f"/memory_stores/{{memory_store_id}}/{collection}/{{memory_version_id}}",
            response_model=version_model,
            responses=error_responses(400, 404),
            operation_id=f"{op}get_memory_version{suffix}",
            summary="Get a version with its content (null if redacted or a tombstone)",
        )
        async def get_cloud_version(
            memory_store_id: str, memory_version_id: str, view: View = FullView
        ) -> JsonAnswer:
            version = engine.get_version(dialect, memory_store_id, memory_version_id)
            return JsonAnswer(render_version(version, dialect, with_content=_with_content(view)))

    else:

        @router.get(
            f"/memory_stores/{{memory_store_id}}/{collection}/{{memory_version_id}}",
            response_model=version_model,
            responses=error_responses(404),
            operation_id=f"{op}get_memory_version{suffix}",
            summary="Get a version with its content (null if redacted or a tombstone)",
        )
        async def get_forward_version(memory_store_id: str, memory_version_id: str) -> JsonAnswer:
            version = engine.get_version(dialect, memory_store_id, memory_version_id)
            return JsonAnswer(render_version(version, dialect, with_content=True))

    @router.post(
        f"/memory_stores/{{memory_store_id}}/{collection}/{{memory_version_id}}/redact",
        response_model=version_model,
        responses=error_responses(404, 409),
        operation_id=f"{op}redact_memory_version{suffix}",
        summary="Redact a version's content for good (size and hash stay; a second redaction is a 409)",
    )
    async def redact_version(request: Request, memory_store_id: str, memory_version_id: str) -> JsonAnswer:
        version = engine.redact_version(dialect, memory_store_id, memory_version_id, actor=actor_of(request))
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
