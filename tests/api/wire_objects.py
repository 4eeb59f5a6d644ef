"""Wire objects as the dialects spell them, for tests that play a server the real one cannot be."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import httpx

Handler = Callable[[httpx.Request], httpx.Response]


def sha(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def forward_version(
    version_id: str,
    content: str | None = "text",
    *,
    path: str = "notes/a.md",
    operation: str = "created",
    created_at: str = "2026-08-14T10:00:00Z",
    memory_id: str = "mem_1",
    with_content: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    body = content if content is not None else ""
    data: dict[str, Any] = {
        "id": version_id,
        "type": "memory_version",
        "memory_store_id": "memstore_1",
        "memory_id": memory_id,
        "path": path,
        "content_size_bytes": len(body.encode()),
        "content_sha256": sha(body),
        "operation": operation,
        "redacted": False,
        "redacted_at": None,
        "created_at": created_at,
    }
    if with_content:
        data["content"] = content
    data.update(extra)
    return data


def forward_page(items: list[dict[str, Any]], *, has_more: bool = False, last_id: str | None = None) -> dict:
    return {
        "data": items,
        "first_id": items[0]["id"] if items else None,
        "last_id": last_id if last_id is not None else (items[-1]["id"] if items else None),
        "has_more": has_more,
    }


def json_response(data: Any, status: int = 200, **headers: str) -> httpx.Response:
    return httpx.Response(status, content=json.dumps(data).encode(), headers=headers)


def error_response(status: int, error_type: str, message: str = "", **headers: str) -> httpx.Response:
    body = {"type": "error", "error": {"type": error_type, "message": message}, "request_id": "req_1"}
    return json_response(body, status, **headers)
