"""The normalised objects of every dialect: one set of names, relative paths, UTC datetimes.

Whatever a dialect calls a field (``store_id`` or ``memory_store_id``, ``size`` or
``content_size_bytes``, ``action`` or ``operation``...), whether its paths are absolute (Anthropic) or
relative, and whether it says ``modified`` or ``updated``, the rest of memsync sees these models. The
translation from the wire lives in :mod:`memsync.api._wire`; these classes know nothing of dialects,
so the engine's tests can build them directly.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Annotated, Generic, NamedTuple, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, StringConstraints


class Operation(enum.StrEnum):
    """What a version records. Anthropic's ``modified`` is :attr:`UPDATED`."""

    CREATED = "created"
    UPDATED = "updated"
    DELETED = "deleted"


class StoreStatus(enum.StrEnum):
    ACTIVE = "active"
    ARCHIVED = "archived"
    DELETED = "deleted"  # Cloud listings only


def _aware_utc(value: object) -> datetime:
    if isinstance(value, str):
        try:
            # RFC 3339 allows a lower-case 't' and 'z', which fromisoformat does not.
            parsed = datetime.fromisoformat(value.upper())
        except ValueError:
            raise ValueError(f"{value!r} is not an RFC 3339 timestamp") from None
    elif isinstance(value, datetime):
        parsed = value
    else:
        raise ValueError("must be an RFC 3339 timestamp string")
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise ValueError(f"{value!s} has no UTC offset; RFC 3339 timestamps carry one")
    return parsed.astimezone(UTC)


UtcDatetime = Annotated[datetime, BeforeValidator(_aware_utc)]
"""A timezone-aware datetime in UTC; naive values are refused rather than guessed at."""

Sha256Hex = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Actor(_Model):
    """Who wrote (or redacted) a version on Anthropic: ``session_actor``, ``api_actor``, ``user_actor``,
    ``service_account_actor``, or a type this client does not know yet.

    ``id`` is the actor's identifying value (``session_id``, ``api_key_id``, ``user_id``,
    ``service_account_id`` or ``id``), ``name`` its display name when the API gives one; ``fields``
    keeps every string field the API sent, so an author can be derived from them deterministically.
    """

    type: str
    id: str | None = None
    name: str | None = None
    fields: dict[str, str] = {}


class Store(_Model):
    id: str
    name: str
    description: str = ""
    status: StoreStatus = StoreStatus.ACTIVE
    metadata: dict[str, str] = {}
    system_managed: bool = False
    identity_id: str | None = None
    entry_count: int | None = None
    total_size: int | None = None
    mount_count: int | None = None  # Forward: binding_info.identity_template_count
    created_at: UtcDatetime
    updated_at: UtcDatetime | None = None
    archived_at: UtcDatetime | None = None

    @property
    def archived(self) -> bool:
        return self.status is StoreStatus.ARCHIVED


class Mount(_Model):
    """One store mounted for an (identity, template) on Forward (seed 000's mount object).

    ``name``, ``status`` and ``entry_count`` are the API's best-effort copies of the store's: ``""``,
    ``""`` and 0 when it could not read the store. Only an ``active`` mount is injected into a session.
    """

    store_id: str
    identity_id: str
    template_id: str
    access: str
    system_managed: bool = False
    name: str = ""
    status: str = ""
    entry_count: int = 0
    created_at: UtcDatetime

    @property
    def active(self) -> bool:
        return self.status == StoreStatus.ACTIVE.value


class SessionStore(_Model):
    """One memory store attached to a session (Cloud, Anthropic), as the API reports it.

    ``access`` is ``read_write`` or ``read_only``; ``name`` and ``description`` are the store's as they
    were when the session attached it; ``mount_path`` is exactly the API's (absolute), or None when it
    gives none. memsync never derives one.
    """

    memory_store_id: str
    access: str
    instructions: str | None = None
    name: str | None = None
    description: str | None = None
    mount_path: str | None = None


class Session(_Model):
    """A session's attached stores, in the API's order, and the instant it was created."""

    id: str
    created_at: UtcDatetime
    stores: list[SessionStore]


class Memory(_Model):
    """A memory at its canonical relative ``path``. ``content`` is None in listings."""

    id: str
    store_id: str
    path: str
    content: str | None = None
    content_sha256: Sha256Hex
    content_size_bytes: int | None = None
    metadata: dict[str, str] | None = None  # None on Anthropic, which has no memory metadata
    version: int | None = None  # Cloud's integer version (1 at creation, +1 per update)
    head_version_id: str | None = None  # Anthropic's memory_version_id
    created_at: UtcDatetime
    updated_at: UtcDatetime | None = None


class MemoryVersion(_Model):
    """One immutable version. ``content`` is None in basic listings, on tombstones and once redacted.

    ``path``, ``content_sha256`` and ``content_size_bytes`` are None where the dialect drops them
    (Anthropic redacted versions; tombstones of some servers).
    """

    id: str
    store_id: str
    memory_id: str
    path: str | None
    operation: Operation
    content: str | None = None
    content_sha256: Sha256Hex | None = None
    content_size_bytes: int | None = None
    redacted: bool = False
    redacted_at: UtcDatetime | None = None
    created_at: UtcDatetime
    created_by: Actor | None = None
    redacted_by: Actor | None = None
    path_problem: str | None = None
    """Why the API's path for this version was refused (``path`` is then None): never write it."""

    @property
    def order_key(self) -> tuple[datetime, str]:
        """Import order (docs/api-contract.md §6): oldest first by (``created_at``, ``id``)."""
        return (self.created_at, self.id)

    @property
    def has_content(self) -> bool:
        """Whether this version holds content the API can serve (not a tombstone, not redacted)."""
        return self.operation is not Operation.DELETED and not self.redacted and self.path_problem is None


T = TypeVar("T")


class Cursor(NamedTuple):
    """Where the next page of a listing starts: the query parameter that carries it, and its value.

    Dialects and service generations page differently: an opaque token in ``page`` (Anthropic, and
    Cloud listings that carry ``next_page``) or the last item's id in ``after_id`` (Forward, Cloud).
    """

    param: str
    value: str


class Page(_Model, Generic[T]):
    """One page of a listing: its items, and the cursor of the next page (None on the last)."""

    items: list[T]
    next_cursor: Cursor | None = None
