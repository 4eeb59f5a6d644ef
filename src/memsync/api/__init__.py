"""memsync.api: the one client through which memsync talks to Memory Stores (docs/design.md §3).

Three dialects (Qoder Forward, Qoder Cloud, Anthropic Managed Agents) behind one :class:`Client` and one
set of normalised models. Usage::

    from memsync.api import open_client
    from memsync.rules import Dialect

    with open_client(Dialect.FORWARD, "http://127.0.0.1:8765", token) as client:
        listing = client.iter_versions(store_id)
        new = []
        for version in listing:          # newest first, paged lazily
            if version.id == last_known:
                break
            new.append(version)
        for version, content in client.fetch_contents(store_id, reversed(new)):
            ...

This is the whole public surface; the modules behind it are private. ``docs/api-client.md`` says what
each error means and what the client does about it.
"""

from memsync.api._client import Client, open_client
from memsync.api._errors import (
    AuthenticationError,
    BadRequest,
    Conflict,
    ContentMismatch,
    InvalidResponse,
    NotFound,
    PathConflict,
    PreconditionFailed,
    RateLimited,
    ServerError,
    StoreArchived,
    TransportError,
)
from memsync.api._models import (
    Actor,
    Memory,
    MemoryVersion,
    Mount,
    Operation,
    Page,
    Session,
    SessionStore,
    Store,
    StoreStatus,
)
from memsync.api._pages import VersionListing
from memsync.api._transport import NO_RETRIES, RetryPolicy
from memsync.errors import ApiError

__all__ = [
    "NO_RETRIES",
    "Actor",
    "ApiError",
    "AuthenticationError",
    "BadRequest",
    "Client",
    "Conflict",
    "ContentMismatch",
    "InvalidResponse",
    "Memory",
    "MemoryVersion",
    "Mount",
    "NotFound",
    "Operation",
    "Page",
    "PathConflict",
    "PreconditionFailed",
    "RateLimited",
    "RetryPolicy",
    "ServerError",
    "Session",
    "SessionStore",
    "Store",
    "StoreArchived",
    "StoreStatus",
    "TransportError",
    "VersionListing",
    "open_client",
]
