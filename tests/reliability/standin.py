"""A stand-in Memory Store server that memsync cannot trust: honest until a test makes it hostile.

It serves what ``memsync pull`` asks of one store — the store listing, the version listing (newest
first, paged), each version with its content, and the memory listing — in the Forward or the
Anthropic dialect. A test first lets memsync make a mirror from honest versions, then adds hostile
versions (:meth:`StandIn.add`, any path, any content, any claimed hash) or replaces whole answers
(:attr:`StandIn.override`), and watches memsync refuse them.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.reliability.loopback import LoopbackServer, Reply, Request

STORE_ID = "memstore_standin00000000001"
_EPOCH = datetime(2026, 3, 1, tzinfo=UTC)
_PREFIX = {"forward": "/api/v1/forward", "cloud": "/api/v1/cloud", "anthropic": "/v1"}


def sha256(data: str | bytes) -> str:
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()


@dataclass
class StandInVersion:
    id: str
    memory_id: str
    path: str
    operation: str
    content: str | None
    claimed_sha256: str | None
    created_at: datetime
    raw_path: bool = False


def reply_json(data: Any, status: int = 200, **headers: str) -> Reply:
    return Reply(status, json.dumps(data).encode(), {"content-type": "application/json", **headers})


class StandIn:
    """One store, in ``dialect`` ("forward", "cloud" or "anthropic"), served on 127.0.0.1."""

    def __init__(self, dialect: str = "forward", *, store_id: str = STORE_ID) -> None:
        self.dialect = dialect
        self.store_id = store_id
        self.versions: list[StandInVersion] = []  # oldest first
        self.override: Callable[[Request], Reply | None] | None = None
        self._lock = threading.Lock()
        self.http = LoopbackServer(self._handle)

    # --- what the store holds ------------------------------------------------------------------

    def add(
        self,
        path: str,
        content: str | None,
        *,
        operation: str = "created",
        memory_id: str | None = None,
        claimed_sha256: str | None = None,
        raw_path: bool = False,
        version_id: str | None = None,
    ) -> StandInVersion:
        """Append a version; its hash is the content's unless ``claimed_sha256`` lies. ``raw_path``
        serves ``path`` exactly as given, without the dialect's spelling (Anthropic's leading /)."""
        with self._lock:
            n = len(self.versions) + 1
            version = StandInVersion(
                id=version_id or f"memver_standin{n:012d}",
                memory_id=memory_id or f"mem_standin{n:012d}",
                path=path,
                operation=operation,
                content=content,
                claimed_sha256=claimed_sha256 or (sha256(content) if content is not None else None),
                created_at=_EPOCH + timedelta(seconds=n),
                raw_path=raw_path,
            )
            self.versions.append(version)
        return version

    # --- the wire ------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return self.http.base_url

    def start(self) -> StandIn:
        self.http.start()
        return self

    def stop(self) -> None:
        self.http.stop()

    def wire_path(self, path: str) -> str:
        return "/" + path if self.dialect == "anthropic" else path

    def store_object(self) -> dict[str, Any]:
        moment = _EPOCH.isoformat().replace("+00:00", "Z")
        store: dict[str, Any] = {
            "id": self.store_id,
            "type": "memory_store",
            "name": "stand-in",
            "description": "",
            "metadata": {},
            "created_at": moment,
            "updated_at": moment,
            "archived_at": None,
        }
        if self.dialect != "anthropic":
            store.update(status="active", system_managed=False, identity_id=None, entry_count=0, total_size=0)
            store["binding_info"] = {"identity_template_count": 0}
        return store

    def version_object(self, version: StandInVersion, *, with_content: bool) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": version.id,
            "type": "memory_version",
            "memory_store_id": self.store_id,
            "memory_id": version.memory_id,
            "path": version.path if version.raw_path else self.wire_path(version.path),
            "content_size_bytes": len((version.content or "").encode("utf-8", "surrogatepass")),
            "content_sha256": version.claimed_sha256,
            "operation": version.operation,
            "created_at": version.created_at.isoformat().replace("+00:00", "Z"),
        }
        if self.dialect != "anthropic":
            data.update(redacted=False, redacted_at=None)
        else:
            data.update(created_by=None, redacted_at=None, redacted_by=None)
            if version.operation == "deleted":
                data.update(content_sha256=None, content_size_bytes=None)
        if with_content:
            data["content"] = version.content
        return data

    def live_memories(self) -> Iterator[dict[str, Any]]:
        latest: dict[str, StandInVersion] = {}
        for version in self.versions:
            latest[version.memory_id] = version
        for version in latest.values():
            if version.operation == "deleted":
                continue
            moment = version.created_at.isoformat().replace("+00:00", "Z")
            memory: dict[str, Any] = {
                "id": version.memory_id,
                "type": "memory",
                "memory_store_id": self.store_id,
                "path": version.path if version.raw_path else self.wire_path(version.path),
                "content_size_bytes": len((version.content or "").encode("utf-8", "surrogatepass")),
                "content_sha256": version.claimed_sha256,
                "created_at": moment,
                "updated_at": moment,
            }
            if self.dialect != "anthropic":
                memory["metadata"] = {}
            else:
                memory["memory_version_id"] = version.id
            yield memory

    def page(self, items: list[dict[str, Any]], request: Request) -> Reply:
        """One page of ``items`` (newest first) after the request's cursor."""
        limit = int(request.query.get("limit") or 20)
        cursor = request.query.get("page" if self.dialect == "anthropic" else "after_id")
        start = 0
        if cursor:
            ids = [item["id"] for item in items]
            start = ids.index(cursor) + 1 if cursor in ids else len(items)
        chunk = items[start : start + limit]
        more = start + limit < len(items)
        if self.dialect == "anthropic":
            return reply_json({"data": chunk, "next_page": chunk[-1]["id"] if more and chunk else None})
        return reply_json(
            {
                "data": chunk,
                "first_id": chunk[0]["id"] if chunk else None,
                "last_id": chunk[-1]["id"] if chunk else None,
                "has_more": more,
            }
        )

    def _handle(self, request: Request) -> Reply:
        if self.override is not None:
            replaced = self.override(request)
            if replaced is not None:
                return replaced
        prefix = _PREFIX[self.dialect]
        if not request.path.startswith(prefix + "/memory_stores"):
            return reply_json({"type": "error", "error": {"type": "not_found_error", "message": "no"}}, 404)
        parts = request.path[len(prefix) :].strip("/").split("/")
        with self._lock:
            versions = list(reversed(self.versions))
        if parts == ["memory_stores"]:
            return self.page([self.store_object()], request)
        if parts[1:2] != [self.store_id]:
            return reply_json({"type": "error", "error": {"type": "not_found_error", "message": "no"}}, 404)
        rest = parts[2:]
        if rest == []:
            return reply_json(self.store_object())
        collection = "versions" if self.dialect == "cloud" else "memory_versions"
        if rest == [collection]:
            full = request.query.get("view") == "full"
            return self.page([self.version_object(v, with_content=full) for v in versions], request)
        if rest[:1] == [collection] and len(rest) == 2:
            for version in versions:
                if version.id == rest[1]:
                    return reply_json(self.version_object(version, with_content=True))
        if rest == ["memories"]:
            return self.page(list(self.live_memories()), request)
        return reply_json({"type": "error", "error": {"type": "not_found_error", "message": "no"}}, 404)
