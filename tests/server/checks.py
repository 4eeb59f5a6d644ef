"""Assertions shared by the server's contract tests: the error envelope and common setup."""

from __future__ import annotations

import hashlib
import itertools
import uuid
from typing import Any

import httpx

_names = itertools.count()


def sha(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, f"{response.status_code}: {response.text}"
    assert response.headers.get("request-id", "").startswith("req_")
    return response.json()


def expect_error(
    response: httpx.Response, status: int, error_type: str | None = None, field: str | None = None
) -> dict[str, Any]:
    """The answer is the error envelope of docs/api-contract.md §5 with this status (and type, and a
    message naming field)."""
    assert response.status_code == status, f"expected {status}, got {response.status_code}: {response.text}"
    body = response.json()
    assert set(body) == {"type", "error", "request_id"}, body
    assert body["type"] == "error"
    assert body["request_id"] == response.headers["request-id"]
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if error_type is not None:
        assert body["error"]["type"] == error_type, body
    if field is not None:
        assert body["error"]["message"].startswith(f"{field}:"), body
    if status == 409:
        assert response.headers.get("x-should-retry") == "false"
    return body


def forward_store(client: httpx.Client, **fields: Any) -> dict[str, Any]:
    body = {"name": f"store-{next(_names)}", **fields}
    response = client.post("/memory_stores", json=body, headers={"Idempotency-Key": uuid.uuid4().hex})
    return ok(response)


def cloud_store(client: httpx.Client, **fields: Any) -> dict[str, Any]:
    return ok(
        client.post(
            "/memory_stores", json={"name": f"cloud-{next(_names)}", "description": "a test store", **fields}
        ),
        201,
    )


def anthropic_store(client: httpx.Client, **fields: Any) -> dict[str, Any]:
    return ok(client.post("/memory_stores", json={"name": f"anthropic-{next(_names)}", **fields}))
