"""The wire forms of the three dialects, translated to and from the normalised models.

Everything a dialect spells its own way is here and nowhere else: URL prefixes and collection names, auth
headers, list envelopes and cursors, field-name variants (docs/api-contract.md §3), absolute vs relative
paths, ``modified`` vs ``updated``, Anthropic's ``redacted_at`` and actors. Answers are untrusted input:
a value of the wrong type, a path that breaks :mod:`memsync.rules` for the dialect, an id that could not
be put in a URL or a commit trailer, a content that does not hash to its ``content_sha256`` — each is
refused with :class:`InvalidResponse` (or :class:`ContentMismatch`) naming the object and the field.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import quote

from pydantic import BaseModel, ValidationError

from memsync.api._errors import ContentMismatch, InvalidResponse
from memsync.api._models import (
    Actor,
    Cursor,
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
from memsync.errors import RuleViolation
from memsync.rules import (
    ANTHROPIC_AGENTS_BETA,
    ANTHROPIC_MEMORY_BETA,
    Dialect,
    check_path,
    sha256_hex,
    to_absolute,
    to_relative,
)

ANTHROPIC_VERSION = "2023-06-01"
# Only this one: a memory endpoint also given managed-agents-2026-04-01 answers 400.
ANTHROPIC_BETA = ANTHROPIC_MEMORY_BETA
# The sessions endpoints' beta, sent instead of the memory one there.
ANTHROPIC_SESSIONS_BETA = ANTHROPIC_AGENTS_BETA

# Ids travel in URLs and in commit trailers: anything else than this is refused, never escaped.
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,255}\Z")

_OPERATIONS = {
    "created": Operation.CREATED,
    "updated": Operation.UPDATED,
    "modified": Operation.UPDATED,
    "deleted": Operation.DELETED,
}
_ACTOR_ID_FIELDS = ("id", "session_id", "api_key_id", "user_id", "service_account_id")

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


def _first(raw: Mapping[str, Any], *names: str) -> Any:
    """The value of the first of ``names`` present with a non-null value (field-name variants)."""
    for name in names:
        value = raw.get(name)
        if value is not None:
            return value
    return None


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors()[:3]:
        where = ".".join(str(part) for part in error["loc"]) or "value"
        problems.append(f"{where}: {error['msg']}")
    return "; ".join(problems)


def check_id(value: object, what: str) -> str:
    if not isinstance(value, str) or not _ID.match(value):
        shown = repr(value)[:80]
        raise InvalidResponse(f"the API returned {what} {shown}, which is not a plausible id; refusing it")
    return value


@dataclass(frozen=True)
class Wire:
    """One dialect's spelling of the API."""

    dialect: Dialect

    # --- requests ------------------------------------------------------------------------------

    @property
    def prefix(self) -> str:
        return {
            Dialect.FORWARD: "/api/v1/forward",
            Dialect.CLOUD: "/api/v1/cloud",
            Dialect.ANTHROPIC: "/v1",
        }[self.dialect]

    def auth_headers(self, token: str) -> dict[str, str]:
        if self.dialect is Dialect.ANTHROPIC:
            return {
                "x-api-key": token,
                "anthropic-version": ANTHROPIC_VERSION,
                "anthropic-beta": ANTHROPIC_BETA,
            }
        return {"Authorization": f"Bearer {token}"}

    def stores(self, store_id: str | None = None, *rest: str) -> str:
        parts = ["memory_stores"]
        if store_id is not None:
            parts.append(quote(store_id, safe=""))
        parts.extend(rest)
        return "/".join(parts)

    def memories(self, store_id: str, memory_id: str | None = None) -> str:
        url = f"{self.stores(store_id)}/memories"
        return url if memory_id is None else f"{url}/{quote(memory_id, safe='')}"

    def versions(self, store_id: str, version_id: str | None = None, *rest: str) -> str:
        collection = "versions" if self.dialect is Dialect.CLOUD else "memory_versions"
        url = f"{self.stores(store_id)}/{collection}"
        if version_id is not None:
            url += f"/{quote(version_id, safe='')}"
        return "/".join([url, *rest])

    def mounts(self, identity_id: str, template_id: str, store_id: str | None = None) -> str:
        """The mounts of an (identity, template) (Forward); the ids are opaque and quoted whole."""
        pair = f"identities/{quote(identity_id, safe='')}/templates/{quote(template_id, safe='')}"
        url = f"{pair}/memory_stores"
        return url if store_id is None else f"{url}/{quote(store_id, safe='')}"

    @staticmethod
    def sessions(session_id: str) -> str:
        return f"sessions/{quote(session_id, safe='')}"

    def session_headers(self) -> dict[str, str]:
        """Headers the sessions endpoints take beside the auth headers (Anthropic's sessions beta)."""
        return {"anthropic-beta": ANTHROPIC_SESSIONS_BETA} if self.dialect is Dialect.ANTHROPIC else {}

    @staticmethod
    def page_params(limit: int, cursor: Cursor | None) -> dict[str, str]:
        params = {"limit": str(limit)}
        if cursor is not None:
            params[cursor.param] = cursor.value
        return params

    def path_out(self, path: str) -> str:
        """A canonical relative path as this dialect spells it; a path the dialect refuses raises
        :class:`memsync.errors.RuleViolation` before any request is sent."""
        if self.dialect is Dialect.ANTHROPIC:
            if not isinstance(path, str) or path.startswith("/"):
                raise RuleViolation(
                    "path",
                    "absolute",
                    "memsync paths are relative (no leading '/'); it adds one for anthropic",
                )
            return to_absolute(check_path(to_absolute(path), Dialect.ANTHROPIC)[1:])
        return check_path(path, self.dialect)

    @staticmethod
    def timestamp_out(moment: datetime, shift: timedelta = timedelta(0)) -> str:
        return (moment + shift).isoformat(timespec="microseconds").replace("+00:00", "Z")

    # --- answers -------------------------------------------------------------------------------

    def path_in(self, value: object, what: str) -> str:
        """A path from the API, checked against the dialect's rules, in canonical relative form."""
        if not isinstance(value, str):
            raise InvalidResponse(f"the API returned {what} with a path of type {type(value).__name__}")
        try:
            check_path(value, self.dialect)
        except RuleViolation as exc:
            raise InvalidResponse(
                f"the API returned {what} at path {value[:200]!r}, which breaks the {self.dialect.value}"
                f" path rules ({exc.detail}); refusing it"
            ) from None
        return to_relative(value) if self.dialect is Dialect.ANTHROPIC else value

    def page(self, data: Mapping[str, Any], item: Callable[[Mapping[str, Any]], T | None]) -> Page[T]:
        """One list envelope. ``item`` parses one element (None skips it)."""
        raw_items = data.get("data")
        if not isinstance(raw_items, list):
            raise InvalidResponse("the API returned a list without a 'data' array")
        items = []
        for raw in raw_items:
            if not isinstance(raw, Mapping):
                raise InvalidResponse("the API returned a list element that is not an object")
            parsed = item(raw)
            if parsed is not None:
                items.append(parsed)
        return Page[T].model_construct(items=items, next_cursor=self._next_cursor(data, raw_items))

    def _next_cursor(self, data: Mapping[str, Any], raw_items: list[Any]) -> Cursor | None:
        """Where the next page starts, or None after the last page.

        A ``next_page`` token is followed when the page carries one (Anthropic always; Cloud where the
        service pages as the official Qoder SDK does), else the last item's id in ``after_id``. A page
        that claims more but gives no way to reach it is refused, never taken as the end: a silently
        short listing would read as deleted memories.
        """
        token = data.get("next_page")
        if token is not None and (not isinstance(token, str) or token == ""):
            raise InvalidResponse("the API returned a 'next_page' that is not a non-empty string")
        has_more = data.get("has_more")
        if has_more is not None and not isinstance(has_more, bool):
            raise InvalidResponse("the API returned 'has_more' that is not a boolean")
        if self.dialect is Dialect.ANTHROPIC or has_more is None:
            # Token paging alone: the token is the whole answer (null on the last page).
            return None if token is None else Cursor("page", token)
        if not has_more:
            if token is not None:
                raise InvalidResponse(
                    f"the API returned a page with 'has_more': false and a 'next_page' ({token[:80]!r});"
                    " refusing to guess whether the listing ends there"
                )
            return None
        if token is not None:
            return Cursor("page", token)
        last = data.get("last_id")
        if last is None and raw_items:
            last = raw_items[-1].get("id")
        if not isinstance(last, str) or last == "":
            raise InvalidResponse(
                "the API says 'has_more' but gives neither a 'next_page' nor a 'last_id' to continue from"
            )
        return Cursor("after_id", last)

    def store(self, raw: Mapping[str, Any]) -> Store:
        store_id = check_id(raw.get("id"), "a store id")
        what = f"store {store_id}"
        status = raw.get("status")
        if status is None:
            status = "archived" if raw.get("archived_at") is not None else "active"
        try:
            status = StoreStatus(status)
        except ValueError:
            raise InvalidResponse(f"the API returned {what} with unknown status {status!r:.40}") from None
        binding = raw.get("binding_info")
        mounts = binding.get("identity_template_count") if isinstance(binding, Mapping) else None
        fields = {
            "id": store_id,
            "name": raw.get("name"),
            "description": raw.get("description") or "",
            "status": status,
            "metadata": raw.get("metadata") or {},
            "system_managed": raw.get("system_managed") or False,
            "identity_id": raw.get("identity_id"),
            "entry_count": raw.get("entry_count"),
            "total_size": raw.get("total_size"),
            "mount_count": mounts,
            "created_at": raw.get("created_at"),
            "updated_at": raw.get("updated_at"),
            "archived_at": raw.get("archived_at"),
        }
        return _validated(Store, fields, what)

    def mount(self, raw: Mapping[str, Any]) -> Mount:
        store_id = check_id(raw.get("memory_store_id"), "a mounted store id")
        what = f"the mount of store {store_id}"
        access = raw.get("access")
        if access not in ("read_only", "read_write"):
            raise InvalidResponse(f"the API returned {what} with unknown access {access!r:.40}")
        fields = {
            "store_id": store_id,
            "identity_id": raw.get("identity_id"),
            "template_id": raw.get("template_id"),
            "access": access,
            "system_managed": raw.get("system_managed") or False,
            # Best-effort copies of the store's fields: null is taken as "could not read the store".
            "name": raw.get("name") or "",
            "status": raw.get("status") or "",
            "entry_count": raw.get("entry_count") or 0,
            "created_at": raw.get("created_at"),
        }
        return _validated(Mount, fields, what)

    def session(self, raw: Mapping[str, Any]) -> Session:
        """A session's memory stores, in the API's order; its other resources (files, repositories)
        are not memsync's and are skipped."""
        session_id = check_id(raw.get("id"), "a session id")
        what = f"session {session_id}"
        resources = raw.get("resources")
        if resources is None:
            resources = []
        if not isinstance(resources, list):
            raise InvalidResponse(f"the API returned {what} whose 'resources' is not an array")
        stores = []
        for index, resource in enumerate(resources):
            if not isinstance(resource, Mapping):
                raise InvalidResponse(f"the API returned {what} with resource {index} that is not an object")
            if resource.get("type") != "memory_store":
                continue
            store_id = check_id(resource.get("memory_store_id"), f"{what} with a memory store id")
            access = resource.get("access")
            if access is None:
                access = "read_write"  # the documented default of both dialects
            if access not in ("read_write", "read_only"):
                raise InvalidResponse(
                    f"the API returned {what} attaching store {store_id} with unknown access {access!r:.40}"
                )
            fields = {
                "memory_store_id": store_id,
                "access": access,
                "instructions": resource.get("instructions"),
                "name": resource.get("name"),
                "description": resource.get("description"),
                "mount_path": resource.get("mount_path"),
            }
            stores.append(_validated(SessionStore, fields, f"{what}, store {store_id}"))
        return _validated(
            Session, {"id": session_id, "created_at": raw.get("created_at"), "stores": stores}, what
        )

    def memory(self, raw: Mapping[str, Any]) -> Memory | None:
        if raw.get("type") == "memory_prefix":
            # A directory roll-up (Anthropic depth=1); never asked for, and not a memory.
            return None
        memory_id = check_id(raw.get("id"), "a memory id")
        what = f"memory {memory_id}"
        fields = {
            "id": memory_id,
            "store_id": check_id(_first(raw, "memory_store_id", "store_id"), f"{what} with store id"),
            "path": self.path_in(_first(raw, "path", "entry_path"), what),
            "content": raw.get("content"),
            "content_sha256": raw.get("content_sha256"),
            "content_size_bytes": _first(raw, "content_size_bytes", "size"),
            "metadata": None if self.dialect is Dialect.ANTHROPIC else (raw.get("metadata") or {}),
            "version": raw.get("version"),
            # The head version's id: the official Qoder SDK's models call it ``memory_version_id``.
            "head_version_id": _first(raw, "memory_version_id", "version_id"),
            "created_at": raw.get("created_at"),
            "updated_at": raw.get("updated_at"),
        }
        memory = _validated(Memory, fields, what)
        if memory.content is not None:
            verify_content(memory_id, memory.content, memory.content_sha256)
        return memory

    def version(self, raw: Mapping[str, Any]) -> MemoryVersion:
        version_id = check_id(raw.get("id"), "a version id")
        what = f"version {version_id}"
        operation_raw = _first(raw, "operation", "action")
        operation = _OPERATIONS.get(operation_raw) if isinstance(operation_raw, str) else None
        if operation is None:
            raise InvalidResponse(f"the API returned {what} with unknown operation {operation_raw!r:.40}")
        redacted_flag = raw.get("redacted", False)
        if not isinstance(redacted_flag, bool):
            raise InvalidResponse(f"the API returned {what} whose 'redacted' is not a boolean")
        redacted = redacted_flag or raw.get("redacted_at") is not None
        raw_path = _first(raw, "path", "entry_path")
        if raw_path is None and not redacted:
            raise InvalidResponse(f"the API returned {what} without a path")
        # A version with a hostile path is kept, with the path left out and the problem named, so a
        # pull can stop just before it (and import everything older) instead of failing the listing.
        path: str | None = None
        path_problem: str | None = None
        if raw_path is not None:
            try:
                path = self.path_in(raw_path, what)
            except InvalidResponse as exc:
                path_problem = str(exc)
        content = raw.get("content")
        if path_problem is not None or redacted or operation is Operation.DELETED:
            # Content the API says is gone (redacted) or never was (tombstone) is not kept, whatever came.
            content = None
        fields = {
            "id": version_id,
            "store_id": check_id(_first(raw, "memory_store_id", "store_id"), f"{what} with store id"),
            "memory_id": check_id(_first(raw, "memory_id", "entry_id"), f"{what} with memory id"),
            "path": path,
            "path_problem": path_problem,
            "operation": operation,
            "content": content,
            "content_sha256": raw.get("content_sha256"),
            "content_size_bytes": _first(raw, "content_size_bytes", "size"),
            "redacted": redacted,
            "redacted_at": raw.get("redacted_at"),
            "created_at": raw.get("created_at"),
            "created_by": _actor(raw.get("created_by"), what),
            "redacted_by": _actor(raw.get("redacted_by"), what),
        }
        version = _validated(MemoryVersion, fields, what)
        if version.content is not None:
            if version.content_sha256 is None:
                raise InvalidResponse(f"the API returned {what} with content but no content_sha256")
            verify_content(version_id, version.content, version.content_sha256)
        return version


def _actor(raw: object, what: str) -> Actor | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not isinstance(raw.get("type"), str):
        raise InvalidResponse(f"the API returned {what} with an actor that is not an object with a type")
    fields = {key: value for key, value in raw.items() if isinstance(value, str) and key != "type"}
    name = raw.get("name")
    return Actor(
        type=raw["type"],
        id=_first(fields, *_ACTOR_ID_FIELDS),
        name=name if isinstance(name, str) else None,
        fields=fields,
    )


def _validated(model: type[M], fields: dict[str, Any], what: str) -> M:
    try:
        return model.model_validate(fields, strict=True)
    except ValidationError as exc:
        raise InvalidResponse(f"the API returned {what} with wrong fields ({_describe(exc)})") from None


def verify_content(object_id: str, content: str, expected_sha256: str) -> None:
    """Refuse ``content`` unless it hashes to ``expected_sha256``, with no normalisation
    (docs/api-contract.md §1)."""
    try:
        actual = sha256_hex(content)
    except RuleViolation:
        raise InvalidResponse(f"the API returned content for {object_id} that is not valid UTF-8") from None
    if actual != expected_sha256:
        raise ContentMismatch(object_id, expected_sha256, actual)
