"""Listings that never end without ever repeating a cursor are refused within a few pages.

The hostile-server trials meet these through ``memsync pull``; here the bounds are pinned: a page
served again under a new cursor (also every other page: A, B, A), and a run of empty pages that
claim more, while an honest listing with a few empty pages still goes through.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from memsync.api import InvalidResponse, open_client
from memsync.api._pages import MAX_EMPTY_PAGES
from memsync.rules import Dialect
from tests.reliability.standin import STORE_ID, StandIn


def _client(pages: Callable[[int], dict[str, object]], seen: list[str]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, content=json.dumps(pages(len(seen))).encode())

    return httpx.MockTransport(handle)


def _versions(*numbers: int) -> list[dict[str, object]]:
    standin = StandIn()
    made = [standin.add(f"notes/{n}.md", f"content {n}\n") for n in range(1, max(numbers) + 1)]
    return [standin.version_object(made[n - 1], with_content=False) for n in numbers]


@pytest.mark.parametrize(
    "cycle",
    [[(3, 2)], [(3, 2), (1,)]],
    ids=["same-page-again", "alternating-pages"],
)
def test_a_page_served_again_under_a_new_cursor_is_refused(cycle: list[tuple[int, ...]]) -> None:
    seen: list[str] = []

    def page(n: int) -> dict[str, object]:
        return {"data": _versions(*cycle[(n - 1) % len(cycle)]), "has_more": True, "last_id": f"cursor-{n}"}

    with (
        open_client(Dialect.FORWARD, "http://standin", "token", transport=_client(page, seen)) as client,
        pytest.raises(InvalidResponse, match="no progress"),
    ):
        list(client.iter_versions(STORE_ID))
    assert len(seen) == len(cycle) + 1


def test_endless_empty_pages_are_refused_but_a_few_are_tolerated() -> None:
    seen: list[str] = []

    def endless(n: int) -> dict[str, object]:
        return {"data": [], "has_more": True, "last_id": f"cursor-{n}"}

    with (
        open_client(Dialect.FORWARD, "http://standin", "token", transport=_client(endless, seen)) as client,
        pytest.raises(InvalidResponse, match="empty pages in a row"),
    ):
        list(client.iter_versions(STORE_ID))
    assert len(seen) == MAX_EMPTY_PAGES

    def some_empty(n: int) -> dict[str, object]:
        if n < MAX_EMPTY_PAGES:
            return {"data": [], "has_more": True, "last_id": f"cursor-{n}"}
        return {"data": _versions(2, 1), "has_more": False}

    with open_client(Dialect.FORWARD, "http://standin", "token", transport=_client(some_empty, [])) as client:
        assert [v.path for v in client.iter_versions(STORE_ID)] == ["notes/2.md", "notes/1.md"]
