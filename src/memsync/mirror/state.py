"""What memsync keeps beside a repository's history: one SQLite database, ``.git/memsync/state.sqlite``.

Each entry is either a **cache** (derived from the history, so dropped and rebuilt whenever it is lost,
damaged or outdated) or an **intent** (an operation started and not yet finished, which the next run
holding the store's lock must complete or undo, so it must survive a kill and a power cut). The two
kinds sit in their own tables (``cache`` and ``intent``, rows of a name and a JSON value); the
content index (:mod:`memsync.mirror.contentindex`) keeps its ``content`` and ``marker`` tables here
too. Every write is one transaction in SQLite's write-ahead log, which a kill or a power cut never
leaves half done. A transaction that sets an intent is synced before it returns (``synchronous =
FULL``), so an intent reaches the disk before the work it covers; one of caches only is not
(``NORMAL``: a power cut may lose the last ones, which are rebuilt), which spares a first pull of a
store about a third of its syncs. An unchanged value is not written again.

Older memsyncs kept one file each under ``.git/memsync/``; the first open of a mirror's state brings
their intents in and deletes them all (their caches are rebuilt). ``import-marks`` stays a file: it
is ``git fast-import``'s, in git's format.
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

# Every name, with its table (docs/mirror.md, "State", says what each holds).
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
# Older memsyncs' files: the intents are brought in (file, entry, format); the rest only go.
_LEGACY_INTENTS = (
    ("checkout-intent", "checkout", "json"),
    ("rewrite-pending", "rewrite-pending", "json"),
    ("superseded", "superseded", "lines"),
    ("backup-prune-pending", "backup-prune-pending", "json"),
)
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
]  # checkout-pid: an older mark that named no commits, so nothing to settle by


class State:
    """The state database of the repository whose git folder holds ``folder`` (``.git/memsync``).

    Opened on first use. A reader of a mirror that has none yet (``memsync status`` before the first
    pull) finds every entry absent and writes nothing; the first write creates it, as does the first
    read of a mirror whose older memsync left an intent (brought in, so that it is seen).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / FILE
        self._db: sqlite3.Connection | None = None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # --- entries ---------------------------------------------------------------------------------

    def get(self, name: str) -> Any:
        """The value of ``name``, or None when it is not set (or, for a cache, cannot be read)."""
        table = _table(name)
        try:
            db = self.connection(create=False)
            row = (
                None
                if db is None
                else db.execute(f"SELECT value FROM {table} WHERE name = ?", (name,)).fetchone()
            )
            return None if row is None else json.loads(row[0])
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
        """Set (or, with None, delete) several entries in one transaction."""
        wanted = {
            name: None if value is None else json.dumps(value, sort_keys=True)
            for name, value in entries.items()
        }
        with self.transaction(durable=any(name in INTENTS for name in wanted)) as db:
            for name, text in wanted.items():
                table = _table(name)
                row = db.execute(f"SELECT value FROM {table} WHERE name = ?", (name,)).fetchone()
                if (row[0] if row else None) == text:
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

    # --- the database ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, *, durable: bool = False) -> Iterator[sqlite3.Connection]:
        """One write transaction: all of it lands, or none of it (a kill, a full disk); ``durable``:
        on the disk once it returns."""
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
            legacy = any((self.folder / file).exists() for file, _, _ in _LEGACY_INTENTS)
            if not create and not legacy and not self.path.exists():
                return None
            try:
                try:
                    self._db = self._open()
                except sqlite3.DatabaseError as exc:
                    if isinstance(exc, sqlite3.OperationalError):
                        raise
                    self._set_aside(exc)
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

    def _set_aside(self, exc: sqlite3.DatabaseError) -> None:
        """A file that is not this database (damage): kept for inspection, and a new one started."""
        aside = self.path.with_name(f"{FILE}.damaged")
        for side in ("-journal", "-wal", "-shm"):
            self.path.with_name(FILE + side).unlink(missing_ok=True)
        os.replace(self.path, aside)
        log.warning(
            "memsync's state %s could not be read (%s) and was moved to %s: its caches are rebuilt from"
            " history; an interrupted checkout, redaction rewrite or backup prune it recorded is not"
            " resumed (run `memsync verify` to check the mirror)",
            self.path,
            exc,
            aside.name,
        )

    def _bring_in_legacy_files(self, db: sqlite3.Connection) -> None:
        found: dict[str, str] = {}
        for file, name, kind in _LEGACY_INTENTS:
            with contextlib.suppress(OSError, ValueError):
                text = (self.folder / file).read_text(encoding="utf-8")
                value: Any = text.split() if kind == "lines" else json.loads(text)
                if name == "checkout" and isinstance(value, dict):
                    value["started"] = (self.folder / file).stat().st_mtime
                found[name] = json.dumps(value, sort_keys=True)
        if found:
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT OR REPLACE INTO intent (name, value) VALUES (?, ?)", found.items())
            db.execute("COMMIT")
        for file in (*(f for f, _, _ in _LEGACY_INTENTS), *_LEGACY_FILES):
            (self.folder / file).unlink(missing_ok=True)
        for older in self.folder.glob("base-ids-*.json"):
            older.unlink(missing_ok=True)


def _table(name: str) -> str:
    if name in INTENTS:
        return "intent"
    if name in CACHES:
        return "cache"
    raise ValueError(f"{name!r} is not an entry of memsync's state")
