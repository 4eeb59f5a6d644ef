"""Walking paginated listings safely, and the newest-first version listing with its order check."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator
from typing import TypeVar

from memsync.api._errors import InvalidResponse
from memsync.api._models import Cursor, MemoryVersion, Page

log = logging.getLogger("memsync.api")

DEFAULT_MAX_PAGES = 100_000
# Empty pages that still claim more, in a row, before a listing is refused as making no progress. A
# real listing never sends one (a page ends where its items do); a few are tolerated in case a
# server filters after paging.
MAX_EMPTY_PAGES = 10

T = TypeVar("T")


def walk_pages(
    fetch: Callable[[Cursor | None], Page[T]], *, what: str, max_pages: int = DEFAULT_MAX_PAGES
) -> Iterator[Page[T]]:
    """Pages of one listing, fetched lazily, until the API gives no next cursor.

    A listing that hands back a cursor it already gave (a loop), serves a page it already served
    under a new cursor or keeps sending empty pages that claim more (no progress), or runs past
    ``max_pages`` (a bound far beyond any real store: 100,000 pages of 100) is refused with
    :class:`InvalidResponse` rather than followed forever.
    """
    seen: set[Cursor] = set()
    # A page is known by its first and last item and its length: two pages of one honest listing
    # never share all three, so a repeat means the server serves the same page again.
    served: dict[tuple[object, object, int], int] = {}
    empty_in_a_row = 0
    cursor: Cursor | None = None
    for number in range(1, max_pages + 1):
        page = fetch(cursor)
        # A repeated cursor is reported as the loop it is, below; this catches new cursors only.
        if page.next_cursor is not None and page.next_cursor not in seen:
            if page.items:
                empty_in_a_row = 0
                mark = (_item_id(page.items[0]), _item_id(page.items[-1]), len(page.items))
                if mark in served:
                    raise InvalidResponse(
                        f"listing {what}: page {number} repeats page {served[mark]} under a new cursor;"
                        " the listing makes no progress"
                    )
                served[mark] = number
            else:
                empty_in_a_row += 1
                if empty_in_a_row >= MAX_EMPTY_PAGES:
                    raise InvalidResponse(
                        f"listing {what}: {empty_in_a_row} empty pages in a row each claim more;"
                        " the listing makes no progress"
                    )
        yield page
        if page.next_cursor is None:
            return
        if page.next_cursor in seen:
            raise InvalidResponse(
                f"listing {what}: page {number} repeats the cursor"
                f" {page.next_cursor.param}={page.next_cursor.value[:80]!r};"
                " the listing loops"
            )
        seen.add(page.next_cursor)
        cursor = page.next_cursor
    raise InvalidResponse(f"listing {what}: more than {max_pages} pages; refusing to follow it further")


def _item_id(item: object) -> object:
    return getattr(item, "id", item)


class VersionListing(Iterator[MemoryVersion]):
    """Versions newest first, one page fetched at a time as the caller iterates.

    Stop iterating as soon as you reach a version you already have: no further page is requested. The
    listing checks that versions come in non-increasing (``created_at``, ``id``) order, across pages too
    (docs/api-contract.md §6). It does not stop on a violation: :attr:`out_of_order` becomes True and
    :attr:`order_violation` names the first pair, so the caller can apply the import rule (list every
    version, import late ones at the tip, warn).
    """

    def __init__(self, pages: Iterator[Page[MemoryVersion]], *, what: str) -> None:
        self._pages = pages
        self._what = what
        self._buffer: deque[MemoryVersion] = deque()
        self._previous: MemoryVersion | None = None
        self.pages_fetched = 0
        self.out_of_order = False
        self.order_violation: tuple[str, str] | None = None
        """(id listed first, id listed after it although it is newer)."""

    def __iter__(self) -> VersionListing:
        return self

    def __next__(self) -> MemoryVersion:
        while True:
            while not self._buffer:
                page = next(self._pages)
                self.pages_fetched += 1
                self._buffer.extend(page.items)
            version = self._buffer.popleft()
            previous = self._previous
            if previous is not None:
                if version.id == previous.id:
                    continue  # the same version again at a page seam: nothing new
                if version.order_key > previous.order_key:
                    self._note_violation(previous, version)
            self._previous = version
            return version

    def _note_violation(self, previous: MemoryVersion, version: MemoryVersion) -> None:
        if not self.out_of_order:
            log.warning(
                "versions of %s are not newest first: %s (%s) is listed after %s (%s)",
                self._what,
                version.id,
                version.created_at.isoformat(),
                previous.id,
                previous.created_at.isoformat(),
            )
            self.out_of_order = True
            self.order_violation = (previous.id, version.id)
