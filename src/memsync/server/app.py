"""Assembling the ASGI app: the three dialect adapters over one engine, errors, auth, faults, schema."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Security
from fastapi.openapi.utils import get_openapi
from fastapi.security import APIKeyHeader, HTTPBearer

from memsync.rules import Dialect

from . import anthropic_api, qoder
from .envelope import JsonAnswer, error_responses, install_error_handlers
from .faults import FaultInjector
from .gateway import ANTHROPIC_BASE, CLOUD_BASE, DEBUG_BASE, FORWARD_BASE, ASGIApp, Gateway
from .storage import Engine

# These only document the token forms in /openapi.json; the Gateway enforces them before routing.
_bearer = HTTPBearer(auto_error=False, description="The server's token: `Authorization: Bearer <token>`.")
_api_key = APIKeyHeader(name="x-api-key", auto_error=False, description="Anthropic dialect: the token.")

_DESCRIPTION = """\
The memsync reference Memory Store: one engine, three dialects.

* Qoder Forward at `/api/v1/forward` (seeds 000 and 003),
* Qoder Cloud at `/api/v1/cloud` (seeds 002 and 004),
* Anthropic Managed Agents at `/v1` (the `anthropic` SDK's `client.beta.memory_stores`).

Cloud and Anthropic also create and read sessions with memory stores attached (`/sessions`).

A store belongs to the dialect that created it. Errors use the envelope
`{"type": "error", "error": {"type", "message"}, "request_id"}`; every answer carries `request-id`.
"""


def create_app(
    engine: Engine,
    *,
    tokens: Sequence[str],
    fault_rate: float = 0.0,
    fault_seed: int | None = None,
    cloud_paging: qoder.CloudPaging = "both",
) -> ASGIApp:
    """The whole server as an ASGI app (run it with :func:`memsync.server.run`, or any ASGI server
    whose HTTP protocol is :class:`~memsync.server.faults.TransportExposingH11Protocol` when faults
    are on).

    ``cloud_paging="next-page"`` makes Cloud listings page only by ``next_page`` (no
    ``first_id``/``last_id``; ``after_id``/``before_id`` are a 400), a service variant that a client
    must survive; the default ``"both"`` offers both ways.
    """
    api = FastAPI(
        title="memsync reference Memory Store",
        version="1",
        description=_DESCRIPTION,
        docs_url=None,
        redoc_url=None,
        strict_content_type=False,
    )
    install_error_handlers(api)
    api.include_router(
        qoder.build_router(engine, Dialect.FORWARD), prefix=FORWARD_BASE, dependencies=[Security(_bearer)]
    )
    api.include_router(
        qoder.build_router(engine, Dialect.CLOUD, cloud_paging=cloud_paging),
        prefix=CLOUD_BASE,
        dependencies=[Security(_bearer)],
    )
    api.include_router(
        anthropic_api.build_router(engine),
        prefix=ANTHROPIC_BASE,
        dependencies=[Security(_bearer), Security(_api_key)],
    )

    app: ASGIApp = api
    if fault_rate > 0:
        injector = FaultInjector(api, rate=fault_rate, seed=fault_seed)

        @api.get(
            DEBUG_BASE + "/faults",
            include_in_schema=False,
            responses=error_responses(),
        )
        async def fault_counts() -> JsonAnswer:
            return JsonAnswer(injector.snapshot())

        app = injector

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            api.openapi_schema = _finish_schema(
                get_openapi(
                    title=api.title,
                    version=api.version,
                    description=api.description,
                    routes=api.routes,
                )
            )
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]
    return Gateway(app, tokens=tokens)


def _finish_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """FastAPI documents a 422 on every route, but this server answers validation failures with 400;
    and any request body may meet the Gateway's size limit (413)."""
    too_large = {
        "description": "The request body is larger than the server accepts (8 MiB).",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}},
    }
    for path_item in schema.get("paths", {}).values():
        for operation in path_item.values():
            if isinstance(operation, dict):
                responses = operation.setdefault("responses", {})
                responses.pop("422", None)
                if "requestBody" in operation:
                    responses.setdefault("413", too_large)
    schemas = schema.get("components", {}).get("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    _add_links(schema.get("paths", {}))
    return schema


_STORE = "/memory_stores/{memory_store_id}"
_MEMORY = _STORE + "/memories/{memory_id}"


def _add_links(paths: dict[str, Any]) -> None:
    """OpenAPI links from each create to what it created, so stateful fuzzing reaches real objects."""
    operations = [
        (method, path, operation)
        for path, item in paths.items()
        for method, operation in item.items()
        if isinstance(operation, dict) and "operationId" in operation
    ]

    def link(source_method: str, source_path: str, target_prefix: str, parameters: dict[str, str]) -> None:
        source = paths.get(source_path, {}).get(source_method)
        if source is None:
            return
        status = "201" if "201" in source["responses"] else "200"
        links = source["responses"][status].setdefault("links", {})
        for _, path, target in operations:
            rest = path[len(target_prefix) :]
            if path.startswith(target_prefix) and "{" not in rest:
                wanted = set(re.findall(r"\{(\w+)\}", path))
                links[target["operationId"]] = {
                    "operationId": target["operationId"],
                    "parameters": {k: v for k, v in parameters.items() if k in wanted},
                }

    for base in (FORWARD_BASE, CLOUD_BASE, ANTHROPIC_BASE):
        link("post", base + "/memory_stores", base + _STORE, {"memory_store_id": "$response.body#/id"})
        created_memory = {
            "memory_store_id": "$request.path.memory_store_id",
            "memory_id": "$response.body#/id",
        }
        link("post", base + _STORE + "/memories", base + _MEMORY, created_memory)
        for collection in ("memory_versions", "versions"):
            link(
                "get",
                base + _STORE + f"/{collection}",
                base + _STORE + f"/{collection}/{{memory_version_id}}",
                {
                    "memory_store_id": "$request.path.memory_store_id",
                    "memory_version_id": "$response.body#/data/0/id",
                },
            )
    for base in (CLOUD_BASE, ANTHROPIC_BASE):
        link(
            "post", base + "/sessions", base + "/sessions/{session_id}", {"session_id": "$response.body#/id"}
        )
    head_version = {
        "memory_store_id": "$request.path.memory_store_id",
        "memory_version_id": "$response.body#/memory_version_id",
    }
    for source_method, source_path in (("post", _STORE + "/memories"), ("post", _MEMORY)):
        link(
            source_method,
            ANTHROPIC_BASE + source_path,
            ANTHROPIC_BASE + _STORE + "/memory_versions/{memory_version_id}",
            head_version,
        )
    mounts = FORWARD_BASE + "/identities/{identity_id}/templates/{template_id}/memory_stores"
    link(
        "post",
        mounts,
        mounts + "/{memory_store_id}",
        {
            "identity_id": "$request.path.identity_id",
            "template_id": "$request.path.template_id",
            "memory_store_id": "$response.body#/memory_store_id",
        },
    )
