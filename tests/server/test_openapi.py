"""``/openapi.json`` covers the three dialects and declares every status and the error envelope."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.server import ServerProcess

FORWARD = "/api/v1/forward"
CLOUD = "/api/v1/cloud"
STORE = "/memory_stores/{memory_store_id}"
MEMORY = STORE + "/memories/{memory_id}"
VERSION = STORE + "/memory_versions/{memory_version_id}"
MOUNTS = "/identities/{identity_id}/templates/{template_id}/memory_stores"

QODER_OPERATIONS = [
    ("post", "/memory_stores"),
    ("get", "/memory_stores"),
    ("get", STORE),
    ("post", STORE),
    ("delete", STORE),
    ("post", STORE + "/archive"),
    ("post", STORE + "/memories"),
    ("get", STORE + "/memories"),
    ("get", MEMORY),
    ("post", MEMORY),
    ("delete", MEMORY),
    ("get", STORE + "/memory_versions"),
    ("get", VERSION),
    ("post", VERSION + "/redact"),
]
SESSION_OPERATIONS = [("post", "/sessions"), ("get", "/sessions/{session_id}")]
EXPECTED = (
    [(m, FORWARD + p) for m, p in QODER_OPERATIONS]
    + [
        ("post", FORWARD + MOUNTS),
        ("get", FORWARD + MOUNTS),
        ("delete", FORWARD + MOUNTS + "/{memory_store_id}"),
    ]
    + [(m, CLOUD + p) for m, p in QODER_OPERATIONS]
    + [
        ("put", CLOUD + MEMORY),
        ("get", CLOUD + STORE + "/versions"),
        ("get", CLOUD + STORE + "/versions/{memory_version_id}"),
        ("post", CLOUD + STORE + "/versions/{memory_version_id}/redact"),
    ]
    + [(m, "/v1" + p) for m, p in QODER_OPERATIONS]
    + [(m, base + p) for base in (CLOUD, "/v1") for m, p in SESSION_OPERATIONS]
)

# Anthropic allows archiving an archived store and deleting an archived store: no conflict there.
NEVER_CONFLICTING = {("delete", "/v1" + STORE), ("post", "/v1" + STORE + "/archive")}
# Operations that can meet a conflict besides every write below a store (docs/api-contract.md §2-§4, §6).
CONFLICTING = {
    ("post", FORWARD + "/memory_stores"),
    ("post", "/v1" + STORE + "/memories"),
    ("post", "/v1" + MEMORY),
    ("delete", "/v1" + MEMORY),
    ("post", "/v1" + VERSION + "/redact"),
    ("post", FORWARD + MOUNTS),
    ("delete", FORWARD + MOUNTS + "/{memory_store_id}"),
    ("post", CLOUD + "/sessions"),
    ("post", "/v1/sessions"),
}


@pytest.fixture(scope="module")
def schema(server: ServerProcess) -> dict[str, Any]:
    response = httpx.get(server.base_url + "/openapi.json")
    assert response.status_code == 200
    return dict(response.json())


def _operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if method in ("get", "post", "put", "delete")
    ]


def test_every_route_of_the_three_dialects_is_there(schema: dict[str, Any]) -> None:
    found = {(method, path) for method, path, _ in _operations(schema)}
    assert found == set(EXPECTED)


def test_every_operation_declares_its_errors_with_the_envelope(schema: dict[str, Any]) -> None:
    envelope = schema["components"]["schemas"]["ErrorEnvelope"]
    assert set(envelope["required"]) == {"type", "error", "request_id"}
    assert "HTTPValidationError" not in schema["components"]["schemas"]
    for method, path, operation in _operations(schema):
        responses = operation["responses"]
        where = f"{method.upper()} {path}"
        assert "422" not in responses, where
        wanted = {"401", "429", "500"}
        if "{memory_store_id}" in path:
            wanted.add("404")
        if operation.get("requestBody") or any(p["in"] == "query" for p in operation.get("parameters", [])):
            wanted.add("400")
        if operation.get("requestBody"):
            wanted.add("413")
        writes_in_store = method in ("post", "put", "delete") and "{memory_store_id}" in path
        if (method, path) in CONFLICTING or (writes_in_store and (method, path) not in NEVER_CONFLICTING):
            wanted.add("409")
        assert wanted <= set(responses), f"{where} lacks {sorted(wanted - set(responses))}"
        for status, answer in responses.items():
            content = answer.get("content", {}).get("application/json", {})
            if status.startswith(("4", "5")):
                assert content["schema"] == {"$ref": "#/components/schemas/ErrorEnvelope"}, where
            else:
                assert "$ref" in content.get("schema", {}), f"{where} {status} has no answer model"
        assert operation.get("security"), f"{where} declares no token"


def test_the_anthropic_routes_take_either_token_form(schema: dict[str, Any]) -> None:
    for _, path, operation in _operations(schema):
        schemes = {name for requirement in operation["security"] for name in requirement}
        assert schemes == ({"HTTPBearer", "APIKeyHeader"} if path.startswith("/v1/") else {"HTTPBearer"}), (
            path
        )


def test_a_created_session_links_to_its_retrieval(schema: dict[str, Any]) -> None:
    for base, status, op in ((CLOUD, "201", "cloud_"), ("/v1", "200", "anthropic_")):
        links = schema["paths"][base + "/sessions"]["post"]["responses"][status]["links"]
        assert links == {
            op + "retrieve_session": {
                "operationId": op + "retrieve_session",
                "parameters": {"session_id": "$response.body#/id"},
            }
        }
