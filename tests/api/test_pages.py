"""Listings the real server never gives: loops, endless pages, versions out of order."""

from __future__ import annotations

import httpx
import pytest

from memsync.api import InvalidResponse, open_client
from memsync.rules import Dialect
from tests.api.wire_objects import forward_page, forward_version, json_response


def serve(pages: list[dict] | None = None, *, endless: bool = False):  # type: ignore[no-untyped-def]
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if endless:
            n = len(seen)
            return json_response(forward_page([forward_version(f"memver_{n}")], has_more=True))
        assert pages is not None
        return json_response(pages[min(len(seen), len(pages)) - 1])

    return httpx.MockTransport(handle), seen


def test_endless_pagination_stops_at_the_bound() -> None:
    transport, seen = serve(endless=True)
    with (
        open_client(Dialect.FORWARD, "http://h", "t", transport=transport, max_pages=50) as client,
        pytest.raises(InvalidResponse, match="more than 50 pages"),
    ):
        for _ in client.iter_versions("memstore_1"):
            pass
    assert len(seen) == 50


def test_a_repeated_cursor_is_a_loop() -> None:
    page = forward_page([forward_version("memver_1")], has_more=True)
    transport, seen = serve([page, page])
    with (
        open_client(Dialect.FORWARD, "http://h", "t", transport=transport) as client,
        pytest.raises(InvalidResponse, match="repeats the cursor"),
    ):
        list(client.list_memories("memstore_1"))
    assert len(seen) == 2


def test_has_more_without_a_cursor_is_refused() -> None:
    transport, _ = serve([{"data": [], "has_more": True, "first_id": None, "last_id": None}])
    with (
        open_client(Dialect.FORWARD, "http://h", "t", transport=transport) as client,
        pytest.raises(InvalidResponse, match="neither a 'next_page' nor a 'last_id'"),
    ):
        list(client.iter_versions("memstore_1"))


def test_cloud_follows_next_page_where_a_page_carries_one() -> None:
    """The official Qoder SDK's paging: a ``page`` token from ``next_page``, filters kept, no ``after_id``."""
    first = {**forward_page([forward_version("memver_2")], has_more=True), "next_page": "tok-2"}
    second = {**forward_page([forward_version("memver_1")]), "next_page": None}
    transport, seen = serve([first, second])
    with open_client(Dialect.CLOUD, "http://h", "t", transport=transport) as client:
        listed = [v.id for v in client.iter_versions("memstore_1", memory_id="mem_1")]
    assert listed == ["memver_2", "memver_1"]
    assert "page" not in seen[0].url.params
    assert seen[1].url.params["page"] == "tok-2"
    assert "after_id" not in seen[1].url.params
    assert seen[1].url.params["memory_id"] == "mem_1"


def test_cloud_pages_by_next_page_alone() -> None:
    """A service that sends neither ``has_more`` nor ids: ``next_page`` alone says where the listing goes."""
    first = {"data": [forward_version("memver_2")], "next_page": "tok-2"}
    second = {"data": [forward_version("memver_1")], "next_page": None}
    transport, seen = serve([first, second])
    with open_client(Dialect.CLOUD, "http://h", "t", transport=transport) as client:
        assert [v.id for v in client.iter_versions("memstore_1")] == ["memver_2", "memver_1"]
    assert len(seen) == 2


def test_cloud_without_next_page_follows_after_id() -> None:
    first = forward_page([forward_version("memver_2")], has_more=True)
    transport, seen = serve([first, forward_page([forward_version("memver_1")])])
    with open_client(Dialect.CLOUD, "http://h", "t", transport=transport) as client:
        assert [v.id for v in client.iter_versions("memstore_1")] == ["memver_2", "memver_1"]
    assert seen[1].url.params["after_id"] == "memver_2"
    assert "page" not in seen[1].url.params


def test_a_next_page_that_does_not_advance_is_a_loop() -> None:
    page = {**forward_page([forward_version("memver_2")], has_more=True), "next_page": "same"}
    transport, seen = serve([page, {**page, "data": [forward_version("memver_1")]}])
    with (
        open_client(Dialect.CLOUD, "http://h", "t", transport=transport) as client,
        pytest.raises(InvalidResponse, match="repeats the cursor page='same'"),
    ):
        list(client.iter_versions("memstore_1"))
    assert len(seen) == 2


def test_has_more_false_with_a_next_page_is_refused() -> None:
    """Contradictory pages are refused rather than read as the end (a short listing looks like deletes)."""
    page = {**forward_page([forward_version("memver_2")], has_more=False), "next_page": "tok"}
    transport, _ = serve([page])
    with (
        open_client(Dialect.CLOUD, "http://h", "t", transport=transport) as client,
        pytest.raises(InvalidResponse, match="'has_more': false and a 'next_page'"),
    ):
        list(client.list_memories("memstore_1"))


def test_anthropic_repeated_next_page_is_a_loop() -> None:
    transport, _ = serve([{"data": [], "next_page": "p1"}] * 3)
    with (
        open_client(Dialect.ANTHROPIC, "http://h", "t", transport=transport) as client,
        pytest.raises(InvalidResponse, match="repeats the cursor"),
    ):
        list(client.list_stores())


@pytest.mark.parametrize(
    "envelope", [{"data": {}}, {"items": []}, {"data": [1]}, {"data": [], "has_more": "no"}]
)
def test_malformed_envelopes(envelope: dict) -> None:
    transport, _ = serve([envelope])
    with (
        open_client(Dialect.FORWARD, "http://h", "t", transport=transport) as client,
        pytest.raises(InvalidResponse),
    ):
        list(client.iter_versions("memstore_1"))


def at(second: int) -> str:
    return f"2026-08-14T10:00:{second:02d}Z"


def test_versions_out_of_order_are_yielded_and_flagged() -> None:
    first = forward_page(
        [forward_version("memver_5", created_at=at(5)), forward_version("memver_3", created_at=at(3))],
        has_more=True,
    )
    # The second page holds a version newer than the end of the first: a late arrival.
    second = forward_page(
        [forward_version("memver_4", created_at=at(4)), forward_version("memver_1", created_at=at(1))]
    )
    transport, _ = serve([first, second])
    with open_client(Dialect.FORWARD, "http://h", "t", transport=transport) as client:
        listing = client.iter_versions("memstore_1")
        assert [v.id for v in listing] == ["memver_5", "memver_3", "memver_4", "memver_1"]
    assert listing.out_of_order and listing.order_violation == ("memver_3", "memver_4")
    assert listing.pages_fetched == 2


def test_ties_on_created_at_are_ordered_by_id() -> None:
    same = at(7)
    good = forward_page(
        [forward_version("memver_b", created_at=same), forward_version("memver_a", created_at=same)]
    )
    bad = forward_page(
        [forward_version("memver_a", created_at=same), forward_version("memver_b", created_at=same)]
    )
    for page, expected in ((good, False), (bad, True)):
        transport, _ = serve([page])
        with open_client(Dialect.FORWARD, "http://h", "t", transport=transport) as client:
            listing = client.iter_versions("memstore_1")
            list(listing)
        assert listing.out_of_order is expected


def test_a_version_repeated_at_a_page_seam_is_yielded_once() -> None:
    first = forward_page([forward_version("memver_2", created_at=at(2))], has_more=True)
    second = forward_page(
        [forward_version("memver_2", created_at=at(2)), forward_version("memver_1", created_at=at(1))]
    )
    transport, _ = serve([first, second])
    with open_client(Dialect.FORWARD, "http://h", "t", transport=transport) as client:
        listing = client.iter_versions("memstore_1")
        assert [v.id for v in listing] == ["memver_2", "memver_1"]
    assert not listing.out_of_order
