"""Pure decisions of an import: who authored a version, and which listed versions are new.

The pull in :mod:`memsync.sync.pull` does the I/O; what is decided here depends only on values, so
it is tested without a server or a repository.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

# The commit identity of versions no actor is known for (Forward and Cloud record none).
DEFAULT_AUTHOR = ("memsync", "memsync@localhost")

V = TypeVar("V")

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
    the tip — a late version (api.md §6), after which everything is listed. Without a checkpoint,
    everything is new.
    """
    for version in newest_first:
        if checkpoint is None or order_key(version) > checkpoint.order_key:
            yield version, True
            continue
        yield version, False
        return
