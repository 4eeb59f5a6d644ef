"""Pure decisions of an import: who authored a version, which listed versions are new, and what the
history says about itself (truncation, redacted content, inferred deletes, metadata).

The pull in :mod:`memsync.sync.pull` does the I/O; what is decided here depends only on values, so
it is tested without a server or a repository.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, TypeVar

# The commit identity of versions no actor is known for (Forward and Cloud record none).
DEFAULT_AUTHOR = ("memsync", "memsync@localhost")

V = TypeVar("V")

# Items per page of a memory listing (docs/api-contract.md §2: at most 100).
LIST_PAGE = 100

_EMAIL_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


def author_for(actor_type: str | None, actor_id: str | None, actor_name: str | None) -> tuple[str, str]:
    """The commit author ``(name, email)`` of a version written by an Anthropic actor.

    A pure function of the actor, so two mirrors agree on commit ids: the name is the actor's display
    name when the API gives one, else ``"<type> <id>"``; the email is ``<id>@<type>.memsync.invalid``
    (the reserved ``.invalid`` top-level domain: it is an identifier, never an address to write to).
    """
    if not actor_type:
        return DEFAULT_AUTHOR
    kind = _EMAIL_UNSAFE.sub("-", actor_type.removesuffix("_actor").replace("_", "-")) or "actor"
    ident = actor_id or "unknown"
    name = actor_name or f"{actor_type} {ident}"
    local = _EMAIL_UNSAFE.sub("-", ident)[:64] or "unknown"
    return name, f"{local}@{kind}.memsync.invalid"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The last imported version, as the mirror's tip records it."""

    version_id: str
    created_at: datetime

    @property
    def order_key(self) -> tuple[datetime, str]:
        return (self.created_at, self.version_id)


def newer_than_checkpoint(
    newest_first: Iterable[V], order_key: Callable[[V], tuple[datetime, str]], checkpoint: Checkpoint | None
) -> Iterator[tuple[V, bool]]:
    """Walk a newest-first listing; yield ``(version, is_new)`` up to the checkpoint.

    Every version strictly newer than the checkpoint is yielded as new; the first version at or before
    it is yielded once with ``is_new=False`` and the walk stops there, so no further page is fetched.
    The caller decides what that version means: the checkpoint itself (the usual case), an imported
    version (the checkpoint vanished through retention), or a version never imported and older than
    the tip — a late version (docs/api-contract.md §6), after which everything is listed. Without a
    checkpoint, everything is new.
    """
    for version in newest_first:
        if checkpoint is None or order_key(version) > checkpoint.order_key:
            yield version, True
            continue
        yield version, False
        return


# --- what the history says about itself --------------------------------------------------------------


class TruncationCounter:
    """Counts the memories of a first import whose listed history begins after their creation.

    A memory's first version is always its creation: when the listing holds updates or a delete of a
    memory but not its creation, versions of it expired before this import (docs/api-contract.md §6,
    retention). Memories created and deleted before then leave no version at all, so nothing can count
    them.
    """

    def __init__(self) -> None:
        self._created: set[str] = set()
        self._others: set[str] = set()

    def see(self, memory_id: str, operation: str) -> None:
        (self._created if operation == "created" else self._others).add(memory_id)

    @property
    def count(self) -> int:
        return len(self._others - self._created)


def redacted_content_changes(
    redacted: Iterable[tuple[str, str, str | None, bool]], served: Mapping[str, str | None]
) -> dict[str, bool]:
    """``{version id: write content}`` for redacted commits that no longer say what a fresh import would.

    ``redacted`` are ``(version id, memory id, kept content SHA-256, wrote content)``; ``served`` is the
    SHA-256 each memory serves now (None: deleted), for the memories looked at. A fresh import writes a
    redacted version's content exactly when its memory still serves that hash (the head of a live
    memory on Forward and Cloud), so a commit that wrote it must drop it once the memory moved on, and
    one that did not must write it when the memory serves it again.
    """
    changes: dict[str, bool] = {}
    for version_id, memory_id, sha, wrote in redacted:
        if sha is None or memory_id not in served:
            continue
        should = served[memory_id] == sha
        if should != wrote:
            changes[version_id] = should
    return changes


MetadataSource = Literal["unchanged", "listed", "read", "from-versions"]


def metadata_source(
    *,
    imported: bool,
    complete: bool,
    has_metadata: bool,
    live_touched: int,
    entry_count: int | None,
    contents_saved: int = 0,
) -> MetadataSource:
    """How a pull refreshes the memories' metadata snapshot, at the fewest requests.

    Nothing imported: nothing to refresh (``unchanged``). A first import or a full scan lists every
    memory anyway (``complete``). Without memory metadata (Anthropic) the documents are the paths the
    new versions carry (``from-versions``, no request). Otherwise the touched live memories are read
    one by one (``read``) when that costs fewer requests than listing every memory, 100 a page: a
    read also brings the memory's content, which spares the content request of its newest version
    when that content is new to the mirror (``contents_saved`` of them). A tie lists: a listing also
    catches metadata changed without a version.
    """
    if not imported and not complete:
        return "unchanged"
    if complete:
        return "listed"
    if not has_metadata:
        return "from-versions"
    # A listing costs at least its first page, even of an empty store.
    if entry_count is not None and live_touched - contents_saved < max(1, math.ceil(entry_count / LIST_PAGE)):
        return "read"
    return "listed"


def inferred_deletes(tip: Mapping[str, str], live: Container[str]) -> list[tuple[str, str]]:
    """``(path, memory id)`` of each file at the tip whose memory the store no longer lists, by path.

    Such a memory was deleted and its tombstone expired before it was imported: nothing else will
    ever remove its file.
    """
    return sorted((path, memory_id) for path, memory_id in tip.items() if memory_id not in live)
