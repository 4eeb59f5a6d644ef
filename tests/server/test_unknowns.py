"""docs/api-contract.md §6: a parameter, JSON field or header the server does not know is a 400 naming it,
never silently dropped; what the official SDKs send on every call keeps working."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.server.checks import anthropic_store, cloud_store, expect_error, forward_store, ok

# What qca-sdk 0.11.0 and anthropic 2.14.0 send on every call besides auth (captured from real
# requests of each client).
QCA_HEADERS = {
    "Accept": "application/json",
    "User-Agent": "qca-python/0.11.0",
    "X-Qoder-Retry-Count": "1",
    "X-Qoder-Lang": "python",
    "X-Qoder-Package-Version": "0.11.0",
    "X-Qoder-OS": "Linux",
    "X-Qoder-Arch": "x64",
    "X-Qoder-Runtime": "CPython",
    "X-Qoder-Runtime-Version": "3.11.7",
    "X-Qoder-Timeout": "600",
}
ANTHROPIC_SDK_HEADERS = {
    "x-stainless-timeout": "NOT_GIVEN",
    "x-stainless-retry-count": "0",
    "x-stainless-read-timeout": "600",
    "user-agent": "Anthropic/Python 2.14.0",
    "x-stainless-lang": "python",
    "x-stainless-package-version": "2.14.0",
    "x-stainless-os": "Linux",
    "x-stainless-arch": "x64",
    "x-stainless-runtime": "CPython",
    "x-stainless-runtime-version": "3.11.7",
    "x-stainless-async": "false",
    "anthropic-version": "2026-10-21",
    "anthropic-beta": "agent-memory-2026-07-22",
}
CLIENT_FIXTURES = {"forward": "forward", "cloud": "cloud", "anthropic": "anthropic_http"}


@pytest.fixture
def client(request: pytest.FixtureRequest, dialect: str) -> httpx.Client:
    """The client of the dialect a test is parametrized with."""
    chosen: httpx.Client = request.getfixturevalue(CLIENT_FIXTURES[dialect])
    return chosen


def test_the_sdks_default_headers_are_accepted(
    forward: httpx.Client, cloud: httpx.Client, anthropic_http: httpx.Client
) -> None:
    key = {"Idempotency-Key": uuid.uuid4().hex}
    forward_id = ok(forward.post("/memory_stores", json={"name": "h"}, headers={**QCA_HEADERS, **key}))["id"]
    ok(forward.get(f"/memory_stores/{forward_id}", headers=QCA_HEADERS))
    cloud_id = ok(
        cloud.post("/memory_stores", json={"name": "h", "description": "d"}, headers={**QCA_HEADERS, **key}),
        201,
    )["id"]
    # An empty beta list (betas=[]) asks for nothing.
    ok(cloud.get(f"/memory_stores/{cloud_id}", headers={**QCA_HEADERS, "x-qoder-beta": ""}))
    store = ok(anthropic_http.post("/memory_stores", json={"name": "h"}, headers=ANTHROPIC_SDK_HEADERS))
    ok(
        anthropic_http.get(
            f"/memory_stores/{store['id']}", headers={**ANTHROPIC_SDK_HEADERS, "anthropic-beta": "x"}
        )
    )
    # Some SDK versions append ?beta=true to every call (docs/api-contract.md §4).
    ok(anthropic_http.get("/memory_stores", params={"beta": "true"}))
    ok(anthropic_http.delete(f"/memory_stores/{store['id']}", params={"beta": "true"}))


@pytest.mark.parametrize(
    ("dialect", "method", "url", "param"),
    [
        ("forward", "GET", "/memory_stores", "include_archived"),
        ("forward", "GET", "/memory_stores", "page"),
        ("forward", "GET", "{store}/memories", "view"),
        ("forward", "GET", "{store}/memory_versions", "operation"),
        ("forward", "DELETE", "{store}", "force"),
        ("cloud", "GET", "/memory_stores", "system_managed"),
        ("cloud", "GET", "{store}/memories", "frobnicate"),
        ("cloud", "GET", "{store}", "view"),
        ("cloud", "POST", "{store}/archive", "beta"),
        ("anthropic", "GET", "/memory_stores", "after_id"),
        ("anthropic", "GET", "{store}/memories", "path"),
        ("anthropic", "GET", "{store}/memory_versions", "before_id"),
    ],
)
def test_unknown_query_parameters_are_named(
    client: httpx.Client, dialect: str, method: str, url: str, param: str
) -> None:
    make = {"forward": forward_store, "cloud": cloud_store, "anthropic": anthropic_store}[dialect]
    store = make(client)
    target = url.format(store=f"/memory_stores/{store['id']}")
    body = expect_error(
        client.request(method, target, params={param: "1"}), 400, "invalid_request_error", param
    )
    assert "unknown parameter" in body["error"]["message"]
    # The store is still there, unchanged: the refusal came before anything was done.
    assert ok(client.get(f"/memory_stores/{store['id']}")) == store


def test_unknown_body_fields_are_named(
    forward: httpx.Client, cloud: httpx.Client, anthropic_http: httpx.Client
) -> None:
    key = {"Idempotency-Key": uuid.uuid4().hex}
    refusals = [
        (forward, "POST", "/memory_stores", {"name": "n", "labels": {}}, "labels", key),
        (cloud, "POST", "/memory_stores", {"name": "n", "mount": {}}, "mount", {}),
        (anthropic_http, "POST", "/memory_stores", {"name": "n", "status": "active"}, "status", {}),
    ]
    fstore, cstore, astore = forward_store(forward), cloud_store(cloud), anthropic_store(anthropic_http)
    fmem = ok(forward.post(f"/memory_stores/{fstore['id']}/memories", json={"path": "a", "content": "a"}))
    cmem = ok(cloud.post(f"/memory_stores/{cstore['id']}/memories", json={"path": "a", "content": "a"}), 201)
    amem = ok(
        anthropic_http.post(f"/memory_stores/{astore['id']}/memories", json={"path": "/a", "content": "a"})
    )
    precondition = {"type": "content_sha256", "content_sha256": amem["content_sha256"]}
    fstore = ok(forward.get(f"/memory_stores/{fstore['id']}"))
    refusals += [
        (
            forward,
            "POST",
            f"/memory_stores/{fstore['id']}",
            {"name": "x", "status": "archived"},
            "status",
            {},
        ),
        (
            forward,
            "POST",
            f"/memory_stores/{fstore['id']}/memories",
            {"path": "b", "content": "b", "version": 1},
            "version",
            {},
        ),
        (
            forward,
            "POST",
            f"/memory_stores/{fstore['id']}/memories/{fmem['id']}",
            {"content": "b", "precondition": precondition},
            "precondition",
            {},
        ),
        (
            cloud,
            "PUT",
            f"/memory_stores/{cstore['id']}/memories/{cmem['id']}",
            {"content": "b", "version": 1, "path": "a"},
            "path",
            {},
        ),
        (
            anthropic_http,
            "POST",
            f"/memory_stores/{astore['id']}/memories/{amem['id']}",
            {"content": "b", "metadata": {}},
            "metadata",
            {},
        ),
        (
            anthropic_http,
            "POST",
            f"/memory_stores/{astore['id']}/memories/{amem['id']}",
            {"precondition": {**precondition, "strict": True}},
            "precondition.strict",
            {},
        ),
        (
            forward,
            "POST",
            "/identities/i/templates/t/memory_stores",
            {"memory_store_id": fstore["id"], "access": "read_only"},
            "access",
            {},
        ),
        # Calls without a body: the SDKs send {} and that is fine, but a field is not.
        (forward, "POST", f"/memory_stores/{fstore['id']}/archive", {"reason": "old"}, "reason", {}),
        (
            cloud,
            "DELETE",
            f"/memory_stores/{cstore['id']}/memories/{cmem['id']}",
            {"expected_content_sha256": cmem["content_sha256"]},
            "expected_content_sha256",
            {},
        ),
        (
            anthropic_http,
            "POST",
            f"/memory_stores/{astore['id']}/memory_versions/{amem['memory_version_id']}/redact",
            {"reason": "pii"},
            "reason",
            {},
        ),
    ]
    for client, method, url, body, field, headers in refusals:
        refused = expect_error(
            client.request(method, url, json=body, headers=headers), 400, "invalid_request_error", field
        )
        assert "unknown field" in refused["error"]["message"], refused
    # Nothing was written by any of them.
    assert ok(forward.get(f"/memory_stores/{fstore['id']}")) == fstore
    assert ok(forward.get(f"/memory_stores/{fstore['id']}/memories/{fmem['id']}"))["content"] == "a"
    assert ok(cloud.get(f"/memory_stores/{cstore['id']}/memories/{cmem['id']}"))["version"] == 1
    assert ok(anthropic_http.get(f"/memory_stores/{astore['id']}/memories/{amem['id']}"))["content"] == "a"
    assert ok(forward.get("/identities/i/templates/t/memory_stores"))["data"] == []
    # An empty object, as the Qoder SDK sends on DELETE, is no field at all.
    assert ok(cloud.request("DELETE", f"/memory_stores/{cstore['id']}/memories/{cmem['id']}", json={}))[
        "deleted"
    ]


@pytest.mark.parametrize(
    ("dialect", "header", "value", "reason"),
    [
        ("cloud", "qoder-workspace-id", "wrkspc_1", "workspaces are not implemented"),
        ("forward", "qoder-workspace-id", "wrkspc_1", "workspaces are not implemented"),
        ("cloud", "x-qoder-beta", "memory-2026-01-01", "unknown beta memory-2026-01-01"),
        ("cloud", "x-qoder-frobnicate", "1", "unknown header"),
        ("forward", "x-qoder-beta", "a,b", "unknown beta a, b"),
        ("anthropic", "anthropic-workspace-id", "wrkspc_1", "workspaces are not implemented"),
        ("anthropic", "anthropic-user-profile-id", "uprof_1", "user profiles are not implemented"),
        ("anthropic", "anthropic-frobnicate", "1", "unknown header"),
    ],
)
def test_headers_of_missing_features_are_named(
    client: httpx.Client, header: str, value: str, reason: str
) -> None:
    before = ok(client.get("/memory_stores", params={"limit": 1}))
    body = expect_error(
        client.post("/memory_stores", json={"name": "w"}, headers={header: value, "Idempotency-Key": "w"}),
        400,
        "invalid_request_error",
        header,
    )
    assert reason in body["error"]["message"]
    assert ok(client.get("/memory_stores", params={"limit": 1})) == before, "nothing was created"
    expect_error(client.get("/memory_stores", headers={header: value}), 400, "invalid_request_error", header)
