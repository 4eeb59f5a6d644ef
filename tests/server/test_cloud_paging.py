"""Cloud listings page by ``next_page`` as the Cloud SDK (qca.managed) does, and by id
(docs/api-contract.md §3)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from memsync.server import Engine, create_app, wire
from tests.server.checks import cloud_store, expect_error, ok
from tests.server.conftest import dialect_client
from tests.support.server import ServerProcess

Factory = Callable[..., ServerProcess]
CLOUD = "/api/v1/cloud"


def walk(client: httpx.Client, url: str, cursor: str, **params: Any) -> list[dict[str, Any]]:
    """Every page of a listing, following ``next_page`` (cursor "page") or ``last_id`` ("after_id")."""
    pages = [ok(client.get(url, params=params))]
    while pages[-1]["next_page"] is not None:
        previous = pages[-1]
        assert previous["has_more"] is True
        token = previous["next_page"] if cursor == "page" else previous["last_id"]
        pages.append(ok(client.get(url, params={**params, cursor: token})))
    assert pages[-1]["has_more"] is False
    return pages


def listing_parameters(tmp_path: Path, cloud_paging: str) -> set[str]:
    """The query parameters the OpenAPI document names for the Cloud store listing in a paging mode.

    Read from the app ``memsync server --cloud-paging`` serves, in this process: the document is
    built on its first request, the costliest the server answers (~0.3 s of CPU), which a server
    process starved of CPU by a whole run on two cores did not answer within a request's timeout."""
    engine = Engine(tmp_path / "openapi.sqlite3")
    try:
        with TestClient(create_app(engine, tokens=["t"], cloud_paging=cloud_paging)) as app:
            schema = ok(app.get("/openapi.json"))
    finally:
        engine.close()
    return {p["name"] for p in schema["paths"][CLOUD + "/memory_stores"]["get"]["parameters"]}


def ids(pages: list[dict[str, Any]]) -> list[str]:
    return [item["id"] for page in pages for item in page["data"]]


def filled_store(cloud: httpx.Client, memories: int) -> str:
    sid = cloud_store(cloud)["id"]
    for n in range(memories):
        made = ok(
            cloud.post(f"/memory_stores/{sid}/memories", json={"path": f"m/{n}.md", "content": "a"}), 201
        )
        ok(cloud.put(f"/memory_stores/{sid}/memories/{made['id']}", json={"content": "b", "version": 1}))
    return sid


@pytest.mark.parametrize("collection", ["memories", "versions", "memory_versions"])
def test_next_page_walks_every_item_once_and_equals_after_id(cloud: httpx.Client, collection: str) -> None:
    sid = filled_store(cloud, 7)
    url = f"/memory_stores/{sid}/{collection}"
    by_token = walk(cloud, url, "page", limit=3)
    by_id = walk(cloud, url, "after_id", limit=3)
    assert by_token == by_id
    everything = ok(cloud.get(url, params={"limit": 100}))
    assert everything["next_page"] is None and everything["has_more"] is False
    walked = ids(by_token)
    assert walked == [item["id"] for item in everything["data"]] and len(set(walked)) == len(walked)
    assert len(walked) == (7 if collection == "memories" else 14)
    model = wire.CloudMemoryList if collection == "memories" else wire.CloudVersionList
    for page in by_token:
        model.model_validate(page)
    # Asking again from the same position gives the same page and the same token.
    for earlier, later in itertools.pairwise(by_token):
        assert ok(cloud.get(url, params={"limit": 3, "page": earlier["next_page"]})) == later


def test_store_listing_walks_every_store_once(cloud: httpx.Client) -> None:
    made = {cloud_store(cloud)["id"] for _ in range(5)}
    by_token = walk(cloud, "/memory_stores", "page", limit=2)
    walked = ids(by_token)
    assert len(set(walked)) == len(walked) and made <= set(walked)
    assert by_token == walk(cloud, "/memory_stores", "after_id", limit=2)
    for page in by_token:
        wire.CloudStoreList.model_validate(page)


def test_a_before_id_page_continues_forward_with_next_page(cloud: httpx.Client) -> None:
    sid = filled_store(cloud, 5)
    url = f"/memory_stores/{sid}/memories"
    listed = ids(walk(cloud, url, "page", limit=100))
    newer = ok(cloud.get(url, params={"limit": 2, "before_id": listed[3]}))
    assert ids([newer]) == listed[1:3] and newer["has_more"] is True
    # has_more speaks of the newer side; next_page continues in list order, from listed[2].
    assert ids([ok(cloud.get(url, params={"limit": 5, "page": newer["next_page"]}))]) == listed[3:]
    newest = ok(cloud.get(url, params={"limit": 2, "before_id": listed[2]}))
    assert ids([newest]) == listed[:2] and newest["has_more"] is False and newest["next_page"] is not None
    empty = ok(cloud.get(url, params={"before_id": listed[0]}))
    assert empty["data"] == [] and empty["next_page"] is None


def test_cursors_exclude_each_other_and_tokens_are_checked(cloud: httpx.Client) -> None:
    sid = filled_store(cloud, 2)
    for collection in ("memories", "versions"):
        url = f"/memory_stores/{sid}/{collection}"
        token = ok(cloud.get(url, params={"limit": 1}))["next_page"]
        for params, named in (
            ({"page": token, "after_id": "mem_x"}, "page"),
            ({"page": token, "before_id": "mem_x"}, "page"),
            ({"after_id": "mem_x", "before_id": "mem_y"}, "after_id"),
        ):
            body = expect_error(cloud.get(url, params=params), 400, "invalid_request_error", named)
            assert all(name in body["error"]["message"] for name in params)
        expect_error(cloud.get(url, params={"page": "mem_x"}), 400, "invalid_request_error", "page")
    expect_error(cloud.get("/memory_stores", params={"page": "nope"}), 400, "invalid_request_error", "page")


def test_next_page_only_mode_refuses_id_cursors(server_factory: Factory, tmp_path: Path) -> None:
    server = server_factory("--cloud-paging", "next-page")
    with dialect_client(server, CLOUD) as cloud, dialect_client(server, "/api/v1/forward") as forward:
        sid = filled_store(cloud, 3)
        for url, count in (
            ("/memory_stores", 1),
            (f"/memory_stores/{sid}/memories", 3),
            (f"/memory_stores/{sid}/versions", 6),
        ):
            pages = walk(cloud, url, "page", limit=2)
            assert len(ids(pages)) == count
            for page in pages:
                assert set(page) == {"data", "has_more", "next_page"}
            for cursor in ("after_id", "before_id"):
                body = expect_error(
                    cloud.get(url, params={cursor: ids(pages)[0]}), 400, "invalid_request_error", cursor
                )
                assert "next_page" in body["error"]["message"]
        wire.CloudStoreNextPageList.model_validate(ok(cloud.get("/memory_stores")))
        wire.CloudMemoryNextPageList.model_validate(ok(cloud.get(f"/memory_stores/{sid}/memories")))
        wire.CloudVersionNextPageList.model_validate(ok(cloud.get(f"/memory_stores/{sid}/versions")))
        # Forward is not affected.
        assert {"first_id", "last_id"} <= set(ok(forward.get("/memory_stores")))
    parameters = listing_parameters(tmp_path, "next-page")
    assert parameters >= {"page", "limit"}
    assert not parameters & {"after_id", "before_id"}


def test_after_id_only_mode_sends_no_next_page_and_refuses_tokens(
    server_factory: Factory, tmp_path: Path
) -> None:
    """The seeds' generation of Cloud: ids and has_more only; a page token or depth=1 is a 400."""
    server = server_factory("--cloud-paging", "after-id")
    with dialect_client(server, CLOUD) as cloud:
        sid = filled_store(cloud, 3)
        for url, count in (
            ("/memory_stores", 1),
            (f"/memory_stores/{sid}/memories", 3),
            (f"/memory_stores/{sid}/versions", 6),
        ):
            pages = [ok(cloud.get(url, params={"limit": 2}))]
            while pages[-1]["has_more"]:
                pages.append(ok(cloud.get(url, params={"limit": 2, "after_id": pages[-1]["last_id"]})))
            assert len(ids(pages)) == count
            for page in pages:
                assert set(page) == {"data", "first_id", "last_id", "has_more"}
            body = expect_error(
                cloud.get(url, params={"page": f"id:{ids(pages)[0]}"}), 400, "invalid_request_error", "page"
            )
            assert "after_id" in body["error"]["message"]
        expect_error(
            cloud.get(f"/memory_stores/{sid}/memories", params={"depth": 1}),
            400,
            "invalid_request_error",
            "depth",
        )
        wire.CloudStoreIdList.model_validate(ok(cloud.get("/memory_stores")))
        wire.CloudMemoryIdList.model_validate(ok(cloud.get(f"/memory_stores/{sid}/memories")))
        wire.CloudVersionIdList.model_validate(ok(cloud.get(f"/memory_stores/{sid}/versions")))
    parameters = listing_parameters(tmp_path, "after-id")
    assert parameters >= {"after_id", "before_id", "limit"}
    assert "page" not in parameters


def test_an_unknown_cloud_paging_mode_stops_the_start(server_factory: Factory) -> None:
    with pytest.raises(RuntimeError, match="cloud-paging"):
        server_factory("--cloud-paging", "sometimes")
