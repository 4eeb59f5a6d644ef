"""What memsync keeps beside a repository's history: one SQLite database, ``.git/memsync/state.sqlite``.

Each entry is a **cache** (rebuilt from history whenever lost, damaged or outdated) or an **intent**
(an operation the next run holding the store's lock must finish or undo: it must survive a kill and a
power cut); docs/mirror.md, "State", lists them. A transaction that sets an intent is synced before it
returns (``synchronous = FULL``), so an intent reaches the disk before the work it covers; one of
caches only is not (``NORMAL``), which spares a first pull of a store about a third of its syncs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from memsync.errors import MirrorError, storage_error

log = logging.getLogger(__name__)

FILE = "state.sqlite"
SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS cache (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS intent (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS content (sha256 BLOB PRIMARY KEY, blob BLOB NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS content_by_blob ON content (blob);
CREATE TABLE IF NOT EXISTS marker (id INTEGER PRIMARY KEY CHECK (id = 1), commit_id TEXT NOT NULL);
"""

CACHES = frozenset(
    [
        "paths",
        "history-facts",
        "packs",
        "worktree-stat",
        "base-ids",
        "layout",
        "metadata-follows",
        "spelling-rules",
        "view",
    ]
)
INTENTS = frozenset(["checkout", "rewrite-pending", "superseded", "backup-prune-pending"])
# Older memsyncs kept a file per entry, named as the entry (but checkout-intent): the intents are brought
# in, the rest deleted (checkout-pid named no commit to settle by; import-marks is git fast-import's).
_LEGACY_INTENTS = ("checkout-intent", "rewrite-pending", "superseded", "backup-prune-pending")
_LEGACY_FILES = [
    "checkout-pid",
    "paths.json",
    "history-facts.json",
    "packs.json",
    "worktree-stat.json",
    "content-index",
    "content-index-journal",
    "blob-sha256",
    "layout-checked",
    "metadata-follows",
    "spelling-rules",
    "view.json",
]


class State:
    """The state database in ``folder`` (``.git/memsync``), opened on first use: a reader of a mirror
    without one writes none, but for an older memsync's intent to bring in."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / FILE
        self._db: sqlite3.Connection | None = None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def get(self, name: str) -> Any:
        """The value of ``name``, or None when it is not set (or, for a cache, cannot be read)."""
        table = _table(name)
        try:
            db = self.connection(create=False)
            text = None if db is None else _value(db, name)
            return None if text is None else json.loads(text)
        except (sqlite3.OperationalError, MirrorError, ValueError) as exc:
            if table == "cache":
                return None  # a cache that cannot be read (a read-only mirror): rebuilt by the caller
            if isinstance(exc, MirrorError):
                raise
            raise storage_error(f"reading the {name!r} entry of memsync's state {self.path}: {exc}") from None

    def put(self, name: str, value: Any) -> None:
        """Set ``name`` to ``value`` (JSON), or delete it when ``value`` is None, in one transaction."""
        self.put_many({name: value})

    def put_many(self, entries: Mapping[str, Any]) -> None:
        """Set (or, with None, delete) several entries in one transaction; an unchanged one is not written."""
        wanted = {
            name: None if value is None else json.dumps(value, sort_keys=True)
            for name, value in entries.items()
        }
        with self.transaction(durable=any(name in INTENTS for name in wanted)) as db:
            for name, text in wanted.items():
                table = _table(name)
                if _value(db, name) == text:
                    continue  # a pull that found nothing new writes nothing
                if text is None:
                    db.execute(f"DELETE FROM {table} WHERE name = ?", (name,))
                else:
                    db.execute(f"INSERT OR REPLACE INTO {table} (name, value) VALUES (?, ?)", (name, text))

    def drop_caches(self, *names: str, content_index: bool = False) -> None:
        """Forget the caches ``names``, and with ``content_index`` the content index's rows."""
        if any(_table(name) != "cache" for name in names):
            raise ValueError(f"not caches: {names}")
        if self.connection(create=False) is None:
            return
        with self.transaction() as db:
            db.executemany("DELETE FROM cache WHERE name = ?", ((name,) for name in names))
            if content_index:
                db.execute("DELETE FROM content")
                db.execute("DELETE FROM marker")

    @contextlib.contextmanager
    def transaction(self, *, durable: bool = False) -> Iterator[sqlite3.Connection]:
        """One write transaction: all of it lands, or none of it; ``durable``: on the disk once it returns."""
        db = self.connection()
        assert db is not None
        db.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
        try:
            db.execute("BEGIN IMMEDIATE")
            yield db
            db.execute("COMMIT")
        except BaseException as exc:
            # A COMMIT that failed on a write (a full disk, an I/O error) has already rolled back.
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):
                raise storage_error(f"writing memsync's state {self.path}: {exc}") from None
            raise

    def connection(self, *, create: bool = True) -> sqlite3.Connection | None:
        """The open database; None when it does not exist and ``create`` is False."""
        if self._db is None:
            legacy = any((self.folder / file).exists() for file in _LEGACY_INTENTS)
            if not create and not legacy and not self.path.exists():
                return None
            try:
                try:
                    self._db = self._open()
                except sqlite3.OperationalError:
                    raise
                except sqlite3.DatabaseError as exc:  # not this database: damaged, set aside
                    aside = self.path.with_name(f"{FILE}.damaged")
                    for side in ("-journal", "-wal", "-shm"):
                        self.path.with_name(FILE + side).unlink(missing_ok=True)
                    os.replace(self.path, aside)
                    log.warning(
                        "memsync's state %s could not be read (%s) and was moved to %s: its caches are"
                        " rebuilt from history; an interrupted checkout, redaction rewrite or backup prune"
                        " it recorded is not resumed (run `memsync verify` to check the mirror)",
                        self.path,
                        exc,
                        aside.name,
                    )
                    self._db = self._open()
            except (sqlite3.OperationalError, OSError) as exc:  # a full disk, a read-only folder
                raise storage_error(f"opening memsync's state {self.path}: {exc}") from None
        return self._db

    def _open(self) -> sqlite3.Connection:
        self.folder.mkdir(exist_ok=True)
        fresh = not self.path.exists()
        # check_same_thread=False: the daemon opens a mirror in one thread and may use it in another;
        # the store's lock keeps two writers apart, and busy_timeout waits out a reader's moment.
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise sqlite3.DatabaseError(f"memsync state schema {version}")
            db.execute("PRAGMA journal_mode = WAL")
            # A lookup reads a few interior pages (kept) and one leaf: SQLite's default 2 MiB cache
            # would only fill with leaves of a large content index, memory that grows with the store.
            db.execute("PRAGMA cache_size = -512")
            if version != SCHEMA_VERSION:
                db.executescript(_SCHEMA)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.DatabaseError:
            db.close()
            raise
        if fresh:
            self._bring_in_legacy_files(db)
        return db

    def _bring_in_legacy_files(self, db: sqlite3.Connection) -> None:
        found: dict[str, str] = {}
        for file in _LEGACY_INTENTS:
            name = "checkout" if file == "checkout-intent" else file
            with contextlib.suppress(OSError, ValueError):
                text = (self.folder / file).read_text(encoding="utf-8")
                value: Any = text.split() if name == "superseded" else json.loads(text)  # one id a line
                if name == "checkout" and isinstance(value, dict):
                    value["started"] = (self.folder / file).stat().st_mtime
                found[name] = json.dumps(value, sort_keys=True)
        if found:
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT OR REPLACE INTO intent (name, value) VALUES (?, ?)", found.items())
            db.execute("COMMIT")
        for file in (*_LEGACY_INTENTS, *_LEGACY_FILES):
            (self.folder / file).unlink(missing_ok=True)
        for older in self.folder.glob("base-ids-*.json"):
            older.unlink(missing_ok=True)


def _table(name: str) -> str:
    if name in INTENTS:
        return "intent"
    if name in CACHES:
        return "cache"
    raise ValueError(f"{name!r} is not an entry of memsync's state")


def _value(db: sqlite3.Connection, name: str) -> str | None:
    row = db.execute(f"SELECT value FROM {_table(name)} WHERE name = ?", (name,)).fetchone()
    return None if row is None else str(row[0])
