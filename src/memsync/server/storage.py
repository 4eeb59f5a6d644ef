"""The one storage engine behind all three dialects: SQLite in WAL mode, one file.

Stores belong to the dialect that created them (a Forward store is not visible on the Cloud or
Anthropic routes), and each dialect's rules are a :class:`DialectPolicy`, so the route adapters only
translate wire formats. Paths are kept exactly as the dialect spells them (absolute on Anthropic),
which keeps "path order" the plain byte order of the stored text.

Every write runs in one ``BEGIN IMMEDIATE`` transaction under one lock, so writers to a memory are
serialised and a precondition is checked against the state the write then changes. Times are integer
milliseconds; the ``created_at`` of every object is the time encoded in its id (:mod:`.ids`), so
"newest first by id" and "newest first by (created_at, id)" are the same order.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Generic, TypeVar

from memsync import rules
from memsync.rules import Dialect

from .clock import Clock, system_clock, to_ms
from .ids import IdGenerator, order_of
from .problems import PATH_CONFLICT, PRECONDITION_FAILED, Conflict, InvalidRequest, NotFound

T = TypeVar("T")

MAX_EXPLICIT_MOUNTS = 10
MAX_SESSION_STORES = 8
MAX_SESSION_INSTRUCTIONS = 4096
ANTHROPIC_MOUNT_ROOT = "/mnt/memory/"
# The reference server's own way to write in a session's name (docs/server.md); no upstream header.
SESSION_HEADER = "x-memsync-reference-session"
_MOUNT_NAME_CHARS = 64
OPERATIONS = ("created", "updated", "deleted")
ACTOR_ID_FIELDS = {
    "session_actor": "session_id",
    "api_actor": "api_key_id",
    "user_actor": "user_id",
    "service_account_actor": "service_account_id",
}


@dataclass(frozen=True)
class DialectPolicy:
    """What differs between dialects in the engine's rules (docs/api-contract.md §2-§4 and §6)."""

    ancestor_paths_conflict: bool
    path_conflict_type: str
    precondition_type: str
    # Anthropic answers 200 to a failed precondition when the stored state already is the request.
    precondition_settles_if_equal: bool
    redact_live_head: bool
    redact_again_ok: bool
    archive_again_ok: bool
    delete_archived_store_ok: bool
    injected_store_metadata: Mapping[str, str] = field(default_factory=dict)
    # Whether a store holds at most StoreLimits' memories and versions (Anthropic, §4).
    limited: bool = False


@dataclass(frozen=True)
class StoreLimits:
    """The most live memories and versions a limited store holds: upstream's numbers unless a test
    lowers them (``memsync server --anthropic-max-memories``) to reach them cheaply."""

    memories: int = rules.MAX_ANTHROPIC_MEMORIES
    versions: int = rules.MAX_ANTHROPIC_VERSIONS

    def __post_init__(self) -> None:
        if self.memories < 1 or self.versions < 1:
            raise ValueError(f"store limits must be at least 1, not {self.memories} and {self.versions}")


POLICIES: dict[Dialect, DialectPolicy] = {
    Dialect.FORWARD: DialectPolicy(
        ancestor_paths_conflict=False,
        path_conflict_type="conflict_error",
        precondition_type="conflict_error",
        precondition_settles_if_equal=False,
        redact_live_head=True,
        redact_again_ok=False,
        archive_again_ok=False,
        delete_archived_store_ok=False,
        injected_store_metadata={rules.RESERVED_STORE_METADATA_KEY: "forward"},
    ),
    Dialect.CLOUD: DialectPolicy(
        ancestor_paths_conflict=False,
        path_conflict_type="conflict_error",
        precondition_type="conflict_error",
        precondition_settles_if_equal=False,
        redact_live_head=True,
        redact_again_ok=False,
        archive_again_ok=False,
        delete_archived_store_ok=False,
    ),
    Dialect.ANTHROPIC: DialectPolicy(
        ancestor_paths_conflict=True,
        path_conflict_type=PATH_CONFLICT,
        precondition_type=PRECONDITION_FAILED,
        precondition_settles_if_equal=True,
        redact_live_head=False,
        redact_again_ok=True,
        archive_again_ok=True,
        delete_archived_store_ok=True,
        limited=True,
    ),
}


@dataclass(frozen=True)
class Actor:
    """Who wrote a version (docs/api-contract.md §4 ``created_by``): a kind and the id that kind carries."""

    kind: str
    id: str

    def __post_init__(self) -> None:
        if self.kind not in ACTOR_ID_FIELDS:
            raise ValueError(f"unknown actor type {self.kind!r}; one of {', '.join(ACTOR_ID_FIELDS)}")

    def as_wire(self) -> dict[str, str]:
        return {"type": self.kind, ACTOR_ID_FIELDS[self.kind]: self.id}


@dataclass(frozen=True)
class SessionClaim(Actor):
    """A ``session_actor`` a request names by the reference-only header (docs/server.md): the write is
    taken only if that session exists and attaches the store ``read_write``. Seeded history names any
    session it likes, as a plain :class:`Actor`."""

    def __init__(self, session_id: str) -> None:
        super().__init__("session_actor", session_id)


@dataclass(frozen=True)
class StoreRow:
    id: str
    dialect: Dialect
    name: str
    description: str
    metadata: dict[str, str]
    system_managed: bool
    identity_id: str | None
    created_at: int
    updated_at: int
    archived_at: int | None
    entry_count: int
    total_size: int
    mount_count: int


@dataclass(frozen=True)
class MemoryRow:
    id: str
    store_id: str
    path: str
    content: str
    content_sha256: str
    content_size_bytes: int
    metadata: dict[str, str]
    version: int
    head_version_id: str
    created_at: int
    updated_at: int


@dataclass(frozen=True)
class VersionRow:
    id: str
    store_id: str
    memory_id: str
    path: str
    content: str | None
    content_sha256: str
    content_size_bytes: int
    operation: str
    created_by: Actor | None
    created_at: int
    redacted_at: int | None
    redacted_by: Actor | None


@dataclass(frozen=True)
class PrefixEntry:
    """A ``memory_prefix`` item of an Anthropic ``depth=1`` listing (a directory, ending in ``/``)."""

    path: str


@dataclass(frozen=True)
class MountRow:
    store: StoreRow
    identity_id: str
    template_id: str
    system_managed: bool
    created_at: int


@dataclass(frozen=True)
class SessionStoreRow:
    """One store attached to a session: its access and instructions, and the store's name and
    description as they were when the session was created."""

    store_id: str
    access: str
    instructions: str | None
    name: str
    description: str
    mount_path: str | None


@dataclass(frozen=True)
class SessionRow:
    id: str
    dialect: Dialect
    agent: str
    agent_version: int | None
    environment_id: str | None
    title: str | None
    metadata: dict[str, str]
    created_at: int
    stores: list[SessionStoreRow]


@dataclass(frozen=True)
class SessionStoreRequest:
    """A store to attach: ``mount_path`` is kept as given (Cloud), else derived where the dialect does."""

    store_id: str
    access: str = "read_write"
    instructions: str | None = None
    mount_path: str | None = None


def derive_mount_paths(names: Sequence[str]) -> list[str]:
    """The reference server's own mount paths for stores of these names, in order (docs/api-contract.md §6).

    A name becomes its lower-case form with every run of characters other than ``a-z``, ``0-9``, ``.``,
    ``_`` and ``-`` replaced by one ``-``, leading and trailing ``-`` and ``.`` removed, cut to 64
    characters (``store`` when nothing is left). A path already taken in the session gets ``-2``,
    ``-3``... so every store of a session has its own directory.
    """
    taken: set[str] = set()
    paths = []
    for name in names:
        base = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-.")[:_MOUNT_NAME_CHARS].strip("-.")
        base = base or "store"
        candidate, suffix = base, 1
        while candidate in taken:
            suffix += 1
            candidate = f"{base}-{suffix}"
        taken.add(candidate)
        paths.append(ANTHROPIC_MOUNT_ROOT + candidate)
    return paths


@dataclass(frozen=True)
class Page(Generic[T]):
    """``has_more`` speaks of the direction paged in (newer with ``before_id``); ``more_after`` of
    list order, which is the one direction a ``next_page`` token continues in."""

    items: list[T]
    has_more: bool
    more_after: bool


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS stores (
    id TEXT PRIMARY KEY,
    dialect TEXT NOT NULL,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    metadata TEXT NOT NULL,
    system_managed INTEGER NOT NULL,
    identity_id TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    archived_at INTEGER
);
CREATE INDEX IF NOT EXISTS stores_by_dialect ON stores (dialect, id);
CREATE TABLE IF NOT EXISTS idempotency (
    dialect TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    store_id TEXT NOT NULL,
    PRIMARY KEY (dialect, key)
);
CREATE TABLE IF NOT EXISTS memories (
    id TEXT PRIMARY KEY,
    store_id TEXT NOT NULL,
    path TEXT NOT NULL,
    content TEXT NOT NULL,
    content_sha256 TEXT NOT NULL,
    content_size_bytes INTEGER NOT NULL,
    metadata TEXT NOT NULL,
    version INTEGER NOT NULL,
    head_version_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    deleted_at INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS memories_live_path ON memories (store_id, path) WHERE deleted_at IS NULL;
CREATE INDEX IF NOT EXISTS memories_by_store ON memories (store_id, id);
-- Covers entry_count and total_size: without it every read of a store summed its memories' rows,
-- whose large content columns sit before content_size_bytes (330 ms a request at 10,000 memories).
CREATE INDEX IF NOT EXISTS memories_live_size ON memories (store_id, content_size_bytes)
  WHERE deleted_at IS NULL;
CREATE TABLE IF NOT EXISTS versions (
    id TEXT PRIMARY KEY,
    store_id TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    path TEXT NOT NULL,
    content TEXT,
    content_sha256 TEXT NOT NULL,
    content_size_bytes INTEGER NOT NULL,
    operation TEXT NOT NULL,
    actor_kind TEXT,
    actor_id TEXT,
    created_at INTEGER NOT NULL,
    redacted_at INTEGER,
    redactor_kind TEXT,
    redactor_id TEXT
);
CREATE INDEX IF NOT EXISTS versions_by_store ON versions (store_id, id);
-- A store's versions, counted as they come and go: counting them on every write (the Anthropic
-- limit) took 140-200 ms a write at 250,000 versions. Triggers, so every writer of the file keeps it.
CREATE TABLE IF NOT EXISTS version_counts (store_id TEXT PRIMARY KEY, count INTEGER NOT NULL);
CREATE TRIGGER IF NOT EXISTS versions_counted AFTER INSERT ON versions BEGIN
  INSERT INTO version_counts (store_id, count) VALUES (NEW.store_id, 1)
    ON CONFLICT (store_id) DO UPDATE SET count = count + 1;
END;
CREATE TRIGGER IF NOT EXISTS versions_uncounted AFTER DELETE ON versions BEGIN
  UPDATE version_counts SET count = count - 1 WHERE store_id = OLD.store_id;
END;
CREATE INDEX IF NOT EXISTS versions_by_memory ON versions (memory_id, id);
CREATE TABLE IF NOT EXISTS mounts (
    identity_id TEXT NOT NULL,
    template_id TEXT NOT NULL,
    store_id TEXT NOT NULL,
    system_managed INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (identity_id, template_id, store_id)
);
CREATE INDEX IF NOT EXISTS mounts_by_store ON mounts (store_id);
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    dialect TEXT NOT NULL,
    agent TEXT NOT NULL,
    agent_version INTEGER,
    environment_id TEXT,
    title TEXT,
    metadata TEXT NOT NULL,
    stores TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
"""

_STORE_SELECT = """
SELECT s.*,
  (SELECT COUNT(*) FROM memories m WHERE m.store_id = s.id AND m.deleted_at IS NULL) AS entry_count,
  (SELECT COALESCE(SUM(m.content_size_bytes), 0) FROM memories m
     WHERE m.store_id = s.id AND m.deleted_at IS NULL) AS total_size,
  (SELECT COUNT(*) FROM mounts b WHERE b.store_id = s.id) AS mount_count
FROM stores s
"""

_MOUNT_WHERE = " FROM mounts WHERE identity_id = ? AND template_id = ? AND store_id = ?"

_HEAD_OF_LIVE_MEMORY = (
    "EXISTS (SELECT 1 FROM memories m WHERE m.id = v.memory_id AND m.deleted_at IS NULL"
    " AND m.head_version_id = v.id)"
)


def encode_cursor(kind: str, key: str) -> str:
    """A ``page`` token (Anthropic pagination): the kind of the last item and its key.

    Clients treat it as opaque; it is plain text so that any token of the documented shape
    (``id:...``, ``memory:...``, ``prefix:...``) is a valid position to continue from.
    """
    return f"{kind}:{key}"


def decode_cursor(token: str, kinds: Sequence[str]) -> tuple[str, str]:
    kind, separator, key = token.partition(":")
    if not separator or kind not in kinds or not key:
        shapes = ", ".join(f"{k}:..." for k in kinds)
        raise InvalidRequest("page", f"is not a next_page value this server returned ({shapes})")
    return kind, key


class Engine:
    """The Memory Store: stores, memories, versions and mounts of every dialect, in one database."""

    def __init__(
        self,
        db: Path | str,
        *,
        clock: Clock = system_clock,
        retention: timedelta | None = None,
        limits: StoreLimits | None = None,
    ) -> None:
        self._clock = clock
        self._limits = StoreLimits() if limits is None else limits
        self._retention_ms = None if retention is None else int(retention.total_seconds() * 1000)
        self._lock = threading.RLock()
        self._depth = 0
        self._db = sqlite3.connect(str(db), isolation_level=None, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        # WAL with synchronous=NORMAL survives a killed process; only a power cut may lose the tail.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(_SCHEMA)
        self._count_versions_once()
        self._ids = IdGenerator(self._highest_order())

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- infrastructure ----------------------------------------------------------------------

    def _highest_order(self) -> int:
        highest = 0
        for table in ("stores", "memories", "versions", "sessions"):
            row = self._db.execute(f"SELECT MAX(id) FROM {table}").fetchone()
            if row[0] is not None:
                highest = max(highest, order_of(row[0]) or 0)
        return highest

    def _count_versions_once(self) -> None:
        """A database made before the counts were kept gets them once; the triggers keep them since."""
        with self._write() as db:
            if db.execute("SELECT 1 FROM meta WHERE key = 'version_counts'").fetchone() is None:
                db.execute("DELETE FROM version_counts")
                db.execute(
                    "INSERT INTO version_counts (store_id, count)"
                    " SELECT store_id, COUNT(*) FROM versions GROUP BY store_id"
                )
                db.execute("INSERT INTO meta (key, value) VALUES ('version_counts', '1')")

    def now_ms(self) -> int:
        return to_ms(self._clock())

    def _new_id(self, prefix: str, at_ms: int | None) -> tuple[str, int]:
        if at_ms is None:
            return self._ids.next(prefix, self.now_ms())
        return self._ids.at(prefix, at_ms)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            outermost = self._depth == 0
            if outermost:
                self._db.execute("BEGIN IMMEDIATE")
            self._depth += 1
            try:
                yield self._db
            except BaseException:
                self._depth -= 1
                if outermost:
                    self._db.execute("ROLLBACK")
                raise
            self._depth -= 1
            if outermost:
                self._db.execute("COMMIT")

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Run several engine calls as one transaction (seeding): all of them apply, or none."""
        with self._write():
            yield

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield self._db

    def meta_get(self, key: str) -> str | None:
        with self._read() as db:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def meta_set(self, key: str, value: str) -> None:
        with self._write() as db:
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def _retention_clause(self) -> tuple[str, list[Any]]:
        if self._retention_ms is None:
            return "", []
        cutoff = self.now_ms() - self._retention_ms
        return f" AND (v.created_at >= ? OR {_HEAD_OF_LIVE_MEMORY})", [cutoff]

    @staticmethod
    def _paged(
        db: sqlite3.Connection,
        select: str,
        where: str,
        params: list[Any],
        *,
        id_column: str,
        limit: int,
        after_id: str | None,
        before_id: str | None,
    ) -> tuple[list[sqlite3.Row], bool, bool]:
        """Newest first by id; ``after_id`` pages to older items, ``before_id`` to newer ones.

        Returns the rows, whether more lie in the direction paged, and whether older ones follow
        the last row.
        """
        if after_id is not None and before_id is not None:
            raise InvalidRequest("after_id", "after_id and before_id are mutually exclusive; send one")
        if before_id is not None:
            sql = f"{select} WHERE {where} AND {id_column} > ? ORDER BY {id_column} ASC LIMIT ?"
            rows = db.execute(sql, [*params, before_id, limit + 1]).fetchall()
            page = list(reversed(rows[:limit]))
            older = bool(page) and (
                db.execute(
                    f"{select} WHERE {where} AND {id_column} < ? LIMIT 1", [*params, page[-1]["id"]]
                ).fetchone()
                is not None
            )
            return page, len(rows) > limit, older
        if after_id is not None:
            where += f" AND {id_column} < ?"
            params = [*params, after_id]
        sql = f"{select} WHERE {where} ORDER BY {id_column} DESC LIMIT ?"
        rows = db.execute(sql, [*params, limit + 1]).fetchall()
        return rows[:limit], len(rows) > limit, len(rows) > limit

    # --- rows --------------------------------------------------------------------------------

    @staticmethod
    def _store_from(row: sqlite3.Row) -> StoreRow:
        return StoreRow(
            id=row["id"],
            dialect=Dialect(row["dialect"]),
            name=row["name"],
            description=row["description"],
            metadata=json.loads(row["metadata"]),
            system_managed=bool(row["system_managed"]),
            identity_id=row["identity_id"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            archived_at=row["archived_at"],
            entry_count=row["entry_count"],
            total_size=row["total_size"],
            mount_count=row["mount_count"],
        )

    @staticmethod
    def _memory_from(row: sqlite3.Row) -> MemoryRow:
        return MemoryRow(
            id=row["id"],
            store_id=row["store_id"],
            path=row["path"],
            content=row["content"],
            content_sha256=row["content_sha256"],
            content_size_bytes=row["content_size_bytes"],
            metadata=json.loads(row["metadata"]),
            version=row["version"],
            head_version_id=row["head_version_id"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )

    @staticmethod
    def _version_from(row: sqlite3.Row) -> VersionRow:
        return VersionRow(
            id=row["id"],
            store_id=row["store_id"],
            memory_id=row["memory_id"],
            path=row["path"],
            content=row["content"],
            content_sha256=row["content_sha256"],
            content_size_bytes=row["content_size_bytes"],
            operation=row["operation"],
            created_by=None if row["actor_kind"] is None else Actor(row["actor_kind"], row["actor_id"]),
            created_at=row["created_at"],
            redacted_at=row["redacted_at"],
            redacted_by=(
                None if row["redactor_kind"] is None else Actor(row["redactor_kind"], row["redactor_id"])
            ),
        )

    def _require_store(self, db: sqlite3.Connection, dialect: Dialect, store_id: str) -> None:
        """404 unless the store exists: for reads that need no more than that (no counts)."""
        row = db.execute("SELECT 1 FROM stores WHERE id = ? AND dialect = ?", (store_id, dialect)).fetchone()
        if row is None:
            raise NotFound(f"memory store {store_id!r} does not exist")

    def _store(self, db: sqlite3.Connection, dialect: Dialect, store_id: str) -> StoreRow:
        row = db.execute(f"{_STORE_SELECT} WHERE s.id = ? AND s.dialect = ?", (store_id, dialect)).fetchone()
        if row is None:
            raise NotFound(f"memory store {store_id!r} does not exist")
        return self._store_from(row)

    def _live_memory(self, db: sqlite3.Connection, store_id: str, memory_id: str) -> MemoryRow:
        row = db.execute(
            "SELECT * FROM memories WHERE id = ? AND store_id = ? AND deleted_at IS NULL",
            (memory_id, store_id),
        ).fetchone()
        if row is None:
            raise NotFound(f"memory {memory_id!r} does not exist in memory store {store_id!r}")
        return self._memory_from(row)

    @staticmethod
    def _refuse_archived(store: StoreRow, action: str) -> None:
        if store.archived_at is not None:
            raise Conflict(
                f"memory store {store.id} is archived: cannot {action} it; archived stores are read-only"
            )

    # --- stores ------------------------------------------------------------------------------

    def create_store(
        self,
        dialect: Dialect,
        *,
        name: str,
        description: str = "",
        metadata: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
        fingerprint: str = "",
        system_managed: bool = False,
        identity_id: str | None = None,
        template_id: str | None = None,
        at_ms: int | None = None,
    ) -> tuple[StoreRow, bool]:
        """Create a store; returns it and whether it is an idempotent replay of an earlier create."""
        policy = POLICIES[dialect]
        name, description = rules.check_new_store(name, description, dialect)
        checked = rules.check_store_metadata(metadata if metadata is not None else {}, dialect)
        stored_metadata = {**checked, **policy.injected_store_metadata}
        with self._write() as db:
            if idempotency_key is not None:
                prior = db.execute(
                    "SELECT fingerprint, store_id FROM idempotency WHERE dialect = ? AND key = ?",
                    (dialect, idempotency_key),
                ).fetchone()
                if prior is not None:
                    if prior["fingerprint"] != fingerprint:
                        raise Conflict(
                            "Idempotency-Key was already used with a different request body;"
                            " use a new key for a different store"
                        )
                    try:
                        return self._store(db, dialect, prior["store_id"]), True
                    except NotFound:
                        raise Conflict(
                            f"Idempotency-Key was used to create memory store {prior['store_id']},"
                            " which has since been deleted; use a new key"
                        ) from None
            store_id, created = self._new_id("memstore_", at_ms)
            db.execute(
                "INSERT INTO stores (id, dialect, name, description, metadata, system_managed, identity_id,"
                " created_at, updated_at, archived_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)",
                (
                    store_id,
                    dialect,
                    name,
                    description,
                    json.dumps(stored_metadata, ensure_ascii=False),
                    int(system_managed),
                    identity_id,
                    created,
                    created,
                ),
            )
            if idempotency_key is not None:
                db.execute(
                    "INSERT INTO idempotency (dialect, key, fingerprint, store_id) VALUES (?, ?, ?, ?)",
                    (dialect, idempotency_key, fingerprint, store_id),
                )
            if system_managed and identity_id is not None and template_id is not None:
                db.execute(
                    "INSERT INTO mounts (identity_id, template_id, store_id, system_managed, created_at)"
                    " VALUES (?, ?, ?, 1, ?)",
                    (identity_id, template_id, store_id, created),
                )
            return self._store(db, dialect, store_id), False

    def get_store(self, dialect: Dialect, store_id: str) -> StoreRow:
        with self._read() as db:
            return self._store(db, dialect, store_id)

    def list_stores(
        self,
        dialect: Dialect,
        *,
        limit: int,
        after_id: str | None = None,
        before_id: str | None = None,
        system_managed: bool | None = None,
        include_archived: bool = True,
        created_gte: int | None = None,
        created_lte: int | None = None,
    ) -> Page[StoreRow]:
        where = "s.dialect = ?"
        params: list[Any] = [dialect]
        if system_managed is not None:
            where += " AND s.system_managed = ?"
            params.append(int(system_managed))
        if not include_archived:
            where += " AND s.archived_at IS NULL"
        if created_gte is not None:
            where += " AND s.created_at >= ?"
            params.append(created_gte)
        if created_lte is not None:
            where += " AND s.created_at <= ?"
            params.append(created_lte)
        with self._read() as db:
            rows, has_more, more_after = self._paged(
                db,
                _STORE_SELECT,
                where,
                params,
                id_column="s.id",
                limit=limit,
                after_id=after_id,
                before_id=before_id,
            )
        return Page([self._store_from(r) for r in rows], has_more, more_after)

    def update_store(
        self,
        dialect: Dialect,
        store_id: str,
        *,
        name: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        metadata_is_patch: bool = False,
    ) -> StoreRow:
        """Change name, description or metadata (a whole new map, or a patch where null deletes)."""
        policy = POLICIES[dialect]
        if name is not None:
            name = rules.check_store_name(name, dialect)
        if description is not None:
            rules.check_store_text("description", description, required=False)
        checked = (
            None
            if metadata is None
            else rules.check_store_metadata(metadata, dialect, patch=metadata_is_patch)
        )
        with self._write() as db:
            store = self._store(db, dialect, store_id)
            self._refuse_archived(store, "update")
            new_metadata = dict(store.metadata)
            if checked is not None:
                if metadata_is_patch:
                    for key, value in checked.items():
                        if value is None:
                            new_metadata.pop(key, None)
                        else:
                            new_metadata[key] = value
                    if len(new_metadata) > rules.MAX_METADATA_KEYS:
                        raise InvalidRequest(
                            "metadata",
                            f"would hold {len(new_metadata)} keys after this change; at most"
                            f" {rules.MAX_METADATA_KEYS}",
                        )
                else:
                    new_metadata = {k: v for k, v in checked.items() if v is not None}
                    new_metadata.update(policy.injected_store_metadata)
            new_name = store.name if name is None else name
            new_description = store.description if description is None else description
            if (new_name, new_description, new_metadata) == (store.name, store.description, store.metadata):
                return store
            db.execute(
                "UPDATE stores SET name = ?, description = ?, metadata = ?, updated_at = ? WHERE id = ?",
                (
                    new_name,
                    new_description,
                    json.dumps(new_metadata, ensure_ascii=False),
                    max(self.now_ms(), store.updated_at),
                    store_id,
                ),
            )
            return self._store(db, dialect, store_id)

    def archive_store(self, dialect: Dialect, store_id: str, *, at_ms: int | None = None) -> StoreRow:
        policy = POLICIES[dialect]
        with self._write() as db:
            store = self._store(db, dialect, store_id)
            if store.archived_at is not None:
                if policy.archive_again_ok:
                    return store
                raise Conflict(f"memory store {store_id} is already archived")
            if store.mount_count:
                raise Conflict(
                    f"memory store {store_id} is mounted by {store.mount_count} (identity, template)"
                    " pair(s); unmount it before archiving"
                )
            when = self.now_ms() if at_ms is None else at_ms
            db.execute(
                "UPDATE stores SET archived_at = ?, updated_at = ? WHERE id = ?",
                (when, max(when, store.updated_at), store_id),
            )
            return self._store(db, dialect, store_id)

    def delete_store(self, dialect: Dialect, store_id: str) -> None:
        policy = POLICIES[dialect]
        with self._write() as db:
            store = self._store(db, dialect, store_id)
            if store.archived_at is not None and not policy.delete_archived_store_ok:
                raise Conflict(f"memory store {store_id} is archived; archived stores cannot be deleted")
            if store.mount_count:
                raise Conflict(
                    f"memory store {store_id} is mounted by {store.mount_count} (identity, template)"
                    " pair(s); unmount it before deleting"
                )
            db.execute("DELETE FROM versions WHERE store_id = ?", (store_id,))
            db.execute("DELETE FROM version_counts WHERE store_id = ?", (store_id,))
            db.execute("DELETE FROM memories WHERE store_id = ?", (store_id,))
            db.execute("DELETE FROM stores WHERE id = ?", (store_id,))

    # --- memories ----------------------------------------------------------------------------

    def _check_path_free(
        self, db: sqlite3.Connection, store: StoreRow, path: str, *, moving: str | None = None
    ) -> None:
        policy = POLICIES[store.dialect]
        clash = db.execute(
            "SELECT id FROM memories WHERE store_id = ? AND path = ? AND deleted_at IS NULL AND id != ?",
            (store.id, path, moving or ""),
        ).fetchone()
        if clash is not None:
            raise Conflict(
                f"path {path!r} is already used by memory {clash['id']}; update that memory instead",
                error_type=policy.path_conflict_type,
            )
        if not policy.ancestor_paths_conflict:
            return
        segments = path.split("/")
        ancestors = ["/".join(segments[:n]) for n in range(2, len(segments))]
        # Every descendant of path sorts in [path + "/", path + "0"): "0" follows "/" in UTF-8.
        params: list[Any] = [store.id, moving or "", path + "/", path + "0"]
        sql = (
            "SELECT id, path FROM memories WHERE store_id = ? AND deleted_at IS NULL AND id != ?"
            " AND ((path >= ? AND path < ?)"
        )
        if ancestors:
            sql += f" OR path IN ({', '.join('?' * len(ancestors))})"
            params.extend(ancestors)
        sql += ") LIMIT 1"
        other = db.execute(sql, params).fetchone()
        if other is not None:
            relation = "below" if path.startswith(other["path"] + "/") else "above"
            raise Conflict(
                f"path {path!r} conflicts with memory {other['id']} at {other['path']!r} (it would sit"
                f" {relation} it); a memory's path cannot be an ancestor or descendant of another's",
                error_type=policy.path_conflict_type,
            )

    def _check_room(self, db: sqlite3.Connection, store: StoreRow, *, creating: bool) -> None:
        """Refuse a write past a limited store's memories (a create) or versions (any write), §4."""
        if not POLICIES[store.dialect].limited:
            return
        limits = self._limits
        if creating and store.entry_count >= limits.memories:
            raise Conflict(
                f"memory store {store.id} already holds {store.entry_count} memories, the most a store"
                f" can hold ({limits.memories}); delete some first"
            )
        row = db.execute("SELECT count FROM version_counts WHERE store_id = ?", (store.id,)).fetchone()
        count = 0 if row is None else row[0]
        if count >= limits.versions and self._retention_ms is not None:
            # Only versions still kept count; the retention clause is dearer, so it runs only here.
            clause, params = self._retention_clause()
            count = db.execute(
                "SELECT COUNT(*) FROM versions v WHERE v.store_id = ?" + clause, [store.id, *params]
            ).fetchone()[0]
        if count >= limits.versions:
            raise Conflict(
                f"memory store {store.id} already holds {count} versions, the most a store keeps"
                f" ({limits.versions}); no memory can be created, changed or deleted in it until old"
                " versions expire: move on to a new store"
            )

    def _insert_version(
        self,
        db: sqlite3.Connection,
        *,
        store_id: str,
        memory_id: str,
        path: str,
        content: str | None,
        sha: str,
        size: int,
        operation: str,
        actor: Actor | None,
        at_ms: int | None,
    ) -> tuple[str, int]:
        if isinstance(actor, SessionClaim):
            self._check_session_writes(db, actor.id, store_id)
        version_id, created = self._new_id("memver_", at_ms)
        db.execute(
            "INSERT INTO versions (id, store_id, memory_id, path, content, content_sha256,"
            " content_size_bytes, operation, actor_kind, actor_id, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                version_id,
                store_id,
                memory_id,
                path,
                content,
                sha,
                size,
                operation,
                None if actor is None else actor.kind,
                None if actor is None else actor.id,
                created,
            ),
        )
        return version_id, created

    def create_memory(
        self,
        dialect: Dialect,
        store_id: str,
        *,
        path: str,
        content: str,
        metadata: Mapping[str, str] | None = None,
        actor: Actor | None = None,
        at_ms: int | None = None,
    ) -> MemoryRow:
        rules.check_path(path, dialect)
        rules.check_content(content, dialect)
        checked = {} if metadata is None else rules.check_memory_metadata(metadata, dialect)
        sha, size = rules.sha256_hex(content), len(content.encode("utf-8"))
        with self._write() as db:
            store = self._store(db, dialect, store_id)
            self._refuse_archived(store, "create a memory in")
            self._check_path_free(db, store, path)
            self._check_room(db, store, creating=True)
            memory_id, created = self._new_id("mem_", at_ms)
            version_id, _ = self._insert_version(
                db,
                store_id=store_id,
                memory_id=memory_id,
                path=path,
                content=content,
                sha=sha,
                size=size,
                operation="created",
                actor=actor,
                at_ms=at_ms,
            )
            db.execute(
                "INSERT INTO memories (id, store_id, path, content, content_sha256, content_size_bytes,"
                " metadata, version, head_version_id, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?)",
                (
                    memory_id,
                    store_id,
                    path,
                    content,
                    sha,
                    size,
                    json.dumps(checked, ensure_ascii=False),
                    version_id,
                    created,
                    created,
                ),
            )
            return self._live_memory(db, store_id, memory_id)

    def get_memory(self, dialect: Dialect, store_id: str, memory_id: str) -> MemoryRow:
        with self._read() as db:
            self._require_store(db, dialect, store_id)
            return self._live_memory(db, store_id, memory_id)

    def list_memories(
        self,
        dialect: Dialect,
        store_id: str,
        *,
        limit: int,
        after_id: str | None = None,
        before_id: str | None = None,
        path_prefix: str | None = None,
    ) -> Page[MemoryRow]:
        """Newest first by id; ``path_prefix`` is a plain string prefix (``a/b`` matches ``a/bc.md``)."""
        where = "store_id = ? AND deleted_at IS NULL"
        params: list[Any] = [store_id]
        if path_prefix:
            where += " AND substr(path, 1, ?) = ?"
            params += [len(path_prefix), path_prefix]
        with self._read() as db:
            self._require_store(db, dialect, store_id)
            rows, has_more, more_after = self._paged(
                db,
                "SELECT * FROM memories",
                where,
                params,
                id_column="id",
                limit=limit,
                after_id=after_id,
                before_id=before_id,
            )
        return Page([self._memory_from(r) for r in rows], has_more, more_after)

    def list_memories_by_path(
        self,
        dialect: Dialect,
        store_id: str,
        *,
        limit: int,
        prefix: str,
        depth: int,
        cursor: tuple[str, str] | None,
    ) -> tuple[list[MemoryRow | PrefixEntry], tuple[str, str] | None]:
        """Memories below ``prefix`` (ends with ``/``, or is empty: every relative path) in UTF-8 byte
        order of their paths.

        With ``depth=1`` the memories deeper than one level are rolled up into one
        :class:`PrefixEntry` per directory, placed where ``/dir/`` sorts. The cursor is the last item
        returned: ``("memory", path)`` or ``("prefix", "/dir/")``.
        """
        # Every path starting with prefix sorts in [prefix, prefix[:-1] + "0"); "" has no upper bound.
        below: tuple[str, ...] = (prefix, prefix[:-1] + "0") if prefix else ()
        within = " AND path >= ? AND path < ?" if prefix else ""
        items: list[MemoryRow | PrefixEntry] = []
        bound_op, bound = ">=", prefix
        if cursor is not None:
            kind, key = cursor
            bound_op, bound = (">", key) if kind == "memory" else (">=", key[:-1] + "0")
        with self._read() as db:
            self._require_store(db, dialect, store_id)
            while len(items) <= limit:
                rows = db.execute(
                    "SELECT * FROM memories WHERE store_id = ? AND deleted_at IS NULL"
                    f" AND path {bound_op} ?{within} ORDER BY path LIMIT ?",
                    (store_id, bound, *below, limit + 1 - len(items)),
                ).fetchall()
                if not rows:
                    break
                for row in rows:
                    rest = row["path"][len(prefix) :]
                    if depth == 1 and "/" in rest:
                        directory = prefix + rest.split("/", 1)[0] + "/"
                        items.append(PrefixEntry(directory))
                        bound_op, bound = ">=", directory[:-1] + "0"
                        break
                    items.append(self._memory_from(row))
                    bound_op, bound = ">", row["path"]
        page = items[:limit]
        if len(items) <= limit or not page:
            return page, None
        last = page[-1]
        return page, (("prefix", last.path) if isinstance(last, PrefixEntry) else ("memory", last.path))

    def update_memory(
        self,
        dialect: Dialect,
        store_id: str,
        memory_id: str,
        *,
        content: str | None = None,
        path: str | None = None,
        metadata: Mapping[str, str] | None = None,
        expected_sha256: str | None = None,
        expected_version: int | None = None,
        actor: Actor | None = None,
        at_ms: int | None = None,
    ) -> MemoryRow:
        """Write a new version if content or path change; metadata alone changes without a version."""
        policy = POLICIES[dialect]
        if content is not None:
            rules.check_content(content, dialect)
        if path is not None:
            rules.check_path(path, dialect)
        checked = None if metadata is None else rules.check_memory_metadata(metadata, dialect)
        with self._write() as db:
            store = self._store(db, dialect, store_id)
            memory = self._live_memory(db, store_id, memory_id)
            self._refuse_archived(store, "update a memory in")
            new_content = memory.content if content is None else content
            new_path = memory.path if path is None else path
            unchanged = new_content == memory.content and new_path == memory.path
            if expected_sha256 is not None and expected_sha256 != memory.content_sha256:
                if policy.precondition_settles_if_equal and unchanged and checked is None:
                    return memory
                raise Conflict(
                    f"precondition failed: memory {memory_id} has content_sha256 {memory.content_sha256},"
                    f" not {expected_sha256}; read it again and retry on top of the current content",
                    error_type=policy.precondition_type,
                )
            if expected_version is not None and expected_version != memory.version:
                raise Conflict(
                    f"version conflict: memory {memory_id} is at version {memory.version}, not"
                    f" {expected_version}; read it again and retry on top of the current content"
                )
            if new_path != memory.path:
                if dialect is not Dialect.ANTHROPIC:
                    raise InvalidRequest(
                        "path",
                        "cannot change on this dialect; delete the memory and create it at the new path",
                    )
                self._check_path_free(db, store, new_path, moving=memory_id)
            now = self.now_ms() if at_ms is None else at_ms
            if checked is not None and checked != memory.metadata:
                db.execute(
                    "UPDATE memories SET metadata = ?, updated_at = ? WHERE id = ?",
                    (json.dumps(checked, ensure_ascii=False), max(now, memory.updated_at), memory_id),
                )
            if unchanged:
                return self._live_memory(db, store_id, memory_id)
            self._check_room(db, store, creating=False)
            sha, size = rules.sha256_hex(new_content), len(new_content.encode("utf-8"))
            version_id, created = self._insert_version(
                db,
                store_id=store_id,
                memory_id=memory_id,
                path=new_path,
                content=new_content,
                sha=sha,
                size=size,
                operation="updated",
                actor=actor,
                at_ms=at_ms,
            )
            db.execute(
                "UPDATE memories SET path = ?, content = ?, content_sha256 = ?, content_size_bytes = ?,"
                " version = version + 1, head_version_id = ?, updated_at = ? WHERE id = ?",
                (new_path, new_content, sha, size, version_id, created, memory_id),
            )
            return self._live_memory(db, store_id, memory_id)

    def delete_memory(
        self,
        dialect: Dialect,
        store_id: str,
        memory_id: str,
        *,
        expected_sha256: str | None = None,
        actor: Actor | None = None,
        at_ms: int | None = None,
    ) -> VersionRow:
        """Logical delete: writes a tombstone (content null, path and the deleted content's hash kept)."""
        policy = POLICIES[dialect]
        with self._write() as db:
            store = self._store(db, dialect, store_id)
            memory = self._live_memory(db, store_id, memory_id)
            self._refuse_archived(store, "delete a memory in")
            if expected_sha256 is not None and expected_sha256 != memory.content_sha256:
                raise Conflict(
                    f"precondition failed: memory {memory_id} has content_sha256 {memory.content_sha256},"
                    f" not {expected_sha256}; nothing was deleted",
                    error_type=policy.precondition_type,
                )
            self._check_room(db, store, creating=False)
            version_id, created = self._insert_version(
                db,
                store_id=store_id,
                memory_id=memory_id,
                path=memory.path,
                content=None,
                sha=memory.content_sha256,
                size=memory.content_size_bytes,
                operation="deleted",
                actor=actor,
                at_ms=at_ms,
            )
            db.execute(
                "UPDATE memories SET deleted_at = ?, head_version_id = ?, updated_at = ? WHERE id = ?",
                (created, version_id, created, memory_id),
            )
            return self._version(db, store_id, version_id)

    # --- versions ----------------------------------------------------------------------------

    def _version(self, db: sqlite3.Connection, store_id: str, version_id: str) -> VersionRow:
        retention, params = self._retention_clause()
        row = db.execute(
            f"SELECT v.* FROM versions v WHERE v.id = ? AND v.store_id = ?{retention}",
            [version_id, store_id, *params],
        ).fetchone()
        if row is None:
            raise NotFound(f"memory version {version_id!r} does not exist in memory store {store_id!r}")
        return self._version_from(row)

    def get_version(self, dialect: Dialect, store_id: str, version_id: str) -> VersionRow:
        with self._read() as db:
            self._require_store(db, dialect, store_id)
            return self._version(db, store_id, version_id)

    def list_versions(
        self,
        dialect: Dialect,
        store_id: str,
        *,
        limit: int,
        after_id: str | None = None,
        before_id: str | None = None,
        memory_id: str | None = None,
        operation: str | None = None,
        created_gte: int | None = None,
        created_lte: int | None = None,
        actors: Sequence[tuple[str, str]] = (),
    ) -> Page[VersionRow]:
        """Newest first by id, which is newest first by (created_at, id)."""
        retention, params = self._retention_clause()
        where = "v.store_id = ?" + retention
        params = [store_id, *params]
        if memory_id is not None:
            where += " AND v.memory_id = ?"
            params.append(memory_id)
        if operation is not None:
            where += " AND v.operation = ?"
            params.append(operation)
        if created_gte is not None:
            where += " AND v.created_at >= ?"
            params.append(created_gte)
        if created_lte is not None:
            where += " AND v.created_at <= ?"
            params.append(created_lte)
        for kind, actor_id in actors:
            where += " AND v.actor_kind = ? AND v.actor_id = ?"
            params += [kind, actor_id]
        with self._read() as db:
            self._require_store(db, dialect, store_id)
            rows, has_more, more_after = self._paged(
                db,
                "SELECT v.* FROM versions v",
                where,
                params,
                id_column="v.id",
                limit=limit,
                after_id=after_id,
                before_id=before_id,
            )
        return Page([self._version_from(r) for r in rows], has_more, more_after)

    def redact_version(
        self,
        dialect: Dialect,
        store_id: str,
        version_id: str,
        *,
        actor: Actor | None = None,
        at_ms: int | None = None,
    ) -> VersionRow:
        """Remove one version's content for good; size and hash stay (adapters decide what to show)."""
        policy = POLICIES[dialect]
        with self._write() as db:
            self._require_store(db, dialect, store_id)
            if isinstance(actor, SessionClaim):
                self._check_session_writes(db, actor.id, store_id)
            version = self._version(db, store_id, version_id)
            if version.redacted_at is not None:
                if policy.redact_again_ok:
                    return version
                raise Conflict(f"memory version {version_id} is already redacted")
            if not policy.redact_live_head:
                head = db.execute(
                    "SELECT 1 FROM memories WHERE id = ? AND deleted_at IS NULL AND head_version_id = ?",
                    (version.memory_id, version_id),
                ).fetchone()
                if head is not None:
                    raise Conflict(
                        f"memory version {version_id} holds the current content of memory"
                        f" {version.memory_id}; update or delete the memory first, then redact this version"
                    )
            db.execute(
                "UPDATE versions SET content = NULL, redacted_at = ?, redactor_kind = ?, redactor_id = ?"
                " WHERE id = ?",
                (
                    self.now_ms() if at_ms is None else at_ms,
                    None if actor is None else actor.kind,
                    None if actor is None else actor.id,
                    version_id,
                ),
            )
            return self._version(db, store_id, version_id)

    # --- mounts (Forward) --------------------------------------------------------------------

    def _mount_from(self, db: sqlite3.Connection, row: sqlite3.Row) -> MountRow:
        return MountRow(
            store=self._store(db, Dialect.FORWARD, row["store_id"]),
            identity_id=row["identity_id"],
            template_id=row["template_id"],
            system_managed=bool(row["system_managed"]),
            created_at=row["created_at"],
        )

    def mount(self, identity_id: str, template_id: str, store_id: str) -> MountRow:
        with self._write() as db:
            store = self._store(db, Dialect.FORWARD, store_id)
            if store.archived_at is not None:
                raise Conflict(f"memory store {store_id} is archived; only active stores can be mounted")
            pair = (identity_id, template_id)
            if db.execute("SELECT 1" + _MOUNT_WHERE, (*pair, store_id)).fetchone():
                raise Conflict(f"memory store {store_id} is already mounted for this (identity, template)")
            explicit = db.execute(
                "SELECT COUNT(*) FROM mounts WHERE identity_id = ? AND template_id = ?"
                " AND system_managed = 0",
                pair,
            ).fetchone()[0]
            if explicit >= MAX_EXPLICIT_MOUNTS:
                raise Conflict(
                    f"this (identity, template) already mounts {explicit} memory stores, the most allowed"
                    f" ({MAX_EXPLICIT_MOUNTS} besides the default store); unmount one first"
                )
            db.execute(
                "INSERT INTO mounts (identity_id, template_id, store_id, system_managed, created_at)"
                " VALUES (?, ?, ?, 0, ?)",
                (*pair, store_id, self.now_ms()),
            )
            row = db.execute("SELECT *" + _MOUNT_WHERE, (*pair, store_id)).fetchone()
            return self._mount_from(db, row)

    def list_mounts(self, identity_id: str, template_id: str) -> list[MountRow]:
        """The default (system-managed) store first, then by mount time."""
        with self._read() as db:
            rows = db.execute(
                "SELECT * FROM mounts WHERE identity_id = ? AND template_id = ?"
                " ORDER BY system_managed DESC, created_at ASC, rowid ASC",
                (identity_id, template_id),
            ).fetchall()
            return [self._mount_from(db, r) for r in rows]

    def unmount(self, identity_id: str, template_id: str, store_id: str) -> None:
        with self._write() as db:
            row = db.execute(
                "SELECT system_managed" + _MOUNT_WHERE,
                (identity_id, template_id, store_id),
            ).fetchone()
            if row is None:
                raise NotFound(f"memory store {store_id!r} is not mounted for this (identity, template)")
            if row["system_managed"]:
                raise Conflict(
                    f"memory store {store_id} is the default store of this (identity, template);"
                    " the system manages that mount and it cannot be removed"
                )
            db.execute(
                "DELETE FROM mounts WHERE identity_id = ? AND template_id = ? AND store_id = ?",
                (identity_id, template_id, store_id),
            )

    # --- sessions (Cloud, Anthropic) ---------------------------------------------------------

    def create_session(
        self,
        dialect: Dialect,
        *,
        agent: str,
        agent_version: int | None = None,
        stores: Sequence[SessionStoreRequest],
        environment_id: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, str] | None = None,
        derive_mounts: bool = False,
        at_ms: int | None = None,
        session_id: str | None = None,
    ) -> SessionRow:
        """A session with ``stores`` attached, in order; their names and descriptions are copied now.

        More than :data:`MAX_SESSION_STORES`, a store twice or instructions too long: 400; a store
        unknown in ``dialect``: 404; an archived one: 409. ``derive_mounts`` gives each store the
        mount path of :func:`derive_mount_paths` (Anthropic); otherwise a store's mount path is the
        one requested, or None. ``session_id`` and ``at_ms`` choose the id and creation time (seeds);
        a chosen id already taken is a 409.
        """
        if len(stores) > MAX_SESSION_STORES:
            raise InvalidRequest(
                "resources",
                f"a session attaches at most {MAX_SESSION_STORES} memory stores; {len(stores)} were given",
            )
        seen: set[str] = set()
        for index, wanted in enumerate(stores):
            where = f"resources[{index}]"
            if wanted.store_id in seen:
                raise InvalidRequest(f"{where}.memory_store_id", f"{wanted.store_id} is attached twice")
            seen.add(wanted.store_id)
            if wanted.access not in ("read_write", "read_only"):
                raise InvalidRequest(f"{where}.access", "must be read_write or read_only")
            if wanted.instructions is not None and len(wanted.instructions) > MAX_SESSION_INSTRUCTIONS:
                raise InvalidRequest(
                    f"{where}.instructions",
                    f"must be at most {MAX_SESSION_INSTRUCTIONS} characters, not {len(wanted.instructions)}",
                )
        with self._write() as db:
            rows = []
            for wanted in stores:
                store = self._store(db, dialect, wanted.store_id)
                if store.archived_at is not None:
                    raise Conflict(f"memory store {store.id} is archived; only active stores can be attached")
                rows.append(store)
            mounts = derive_mount_paths([s.name for s in rows]) if derive_mounts else None
            attached = [
                SessionStoreRow(
                    store_id=store.id,
                    access=wanted.access,
                    instructions=wanted.instructions,
                    name=store.name,
                    description=store.description,
                    mount_path=wanted.mount_path if mounts is None else mounts[index],
                )
                for index, (store, wanted) in enumerate(zip(rows, stores, strict=True))
            ]
            if session_id is None:
                session_id, created = self._new_id("sesn_", at_ms)
            else:
                if db.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone():
                    raise Conflict(f"session {session_id} exists already")
                created = self.now_ms() if at_ms is None else at_ms
            db.execute(
                "INSERT INTO sessions (id, dialect, agent, agent_version, environment_id, title, metadata,"
                " stores, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    session_id,
                    dialect,
                    agent,
                    agent_version,
                    environment_id,
                    title,
                    json.dumps(dict(metadata or {}), ensure_ascii=False),
                    json.dumps([dataclasses.asdict(a) for a in attached], ensure_ascii=False),
                    created,
                ),
            )
            return self._session(db, dialect, session_id)

    def get_session(self, dialect: Dialect, session_id: str) -> SessionRow:
        with self._read() as db:
            return self._session(db, dialect, session_id)

    @staticmethod
    def _session(db: sqlite3.Connection, dialect: Dialect, session_id: str) -> SessionRow:
        row = db.execute(
            "SELECT * FROM sessions WHERE id = ? AND dialect = ?", (session_id, dialect)
        ).fetchone()
        if row is None:
            raise NotFound(f"session {session_id!r} does not exist")
        return SessionRow(
            id=row["id"],
            dialect=Dialect(row["dialect"]),
            agent=row["agent"],
            agent_version=row["agent_version"],
            environment_id=row["environment_id"],
            title=row["title"],
            metadata=json.loads(row["metadata"]),
            created_at=row["created_at"],
            stores=[SessionStoreRow(**raw) for raw in json.loads(row["stores"])],
        )

    @staticmethod
    def _check_session_writes(db: sqlite3.Connection, session_id: str, store_id: str) -> None:
        """A write in a session's name (docs/server.md) needs the session to hold the store read_write."""
        row = db.execute(
            "SELECT stores FROM sessions WHERE id = ?"
            " AND dialect = (SELECT dialect FROM stores WHERE id = ?)",
            (session_id, store_id),
        ).fetchone()
        if row is None:
            raise InvalidRequest(
                SESSION_HEADER, f"session {session_id!r} does not exist in this dialect; create it first"
            )
        for attached in json.loads(row["stores"]):
            if attached["store_id"] == store_id:
                if attached["access"] != "read_write":
                    raise InvalidRequest(
                        SESSION_HEADER, f"session {session_id} attaches memory store {store_id} read_only"
                    )
                return
        raise InvalidRequest(SESSION_HEADER, f"session {session_id} does not attach memory store {store_id}")
