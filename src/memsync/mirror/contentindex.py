"""Which blob holds the content with a given SHA-256, and back: ``.git/memsync/content-index``.

The engine asks before fetching a version's content; a hit saves a request. The push engine asks the
other way round (a blob's SHA-256 is the API's ``content_sha256``), for every file of the snapshots
it compares. Both are one relation (a blob id and a SHA-256 each name the same bytes), so one table
answers both. The index is an SQLite database, one row per content (32-byte SHA-256, 20-byte blob
id, indexed both ways) and one marker row: the commit up to which everything imported is indexed;
rows noted outside an import (what a push wrote, hashes computed for snapshots) sit beside them.
SQLite rather than a dictionary in memory: a mirror's index grows with its history (100,000
versions made ~35 MiB of Python objects), while a query costs a few microseconds and the process
stays at SQLite's page cache whatever the store's size.

A batch's entries and its marker are committed in one transaction, so a kill leaves the index at
a batch boundary. The index is a cache: every answer is checked against the object store, and when
the file is missing, is not an index (an older memsync's text file, damage), or its marker is not an
ancestor of the tip (history was rewritten), it is rebuilt from the trailers and trees of the
history; a tip ahead of the marker is caught up the same way.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path

from memsync.errors import MirrorError, storage_error
from memsync.mirror.errors import FormatError
from memsync.mirror.gitstore import GitStore, blob_at
from memsync.mirror.trailers import parse_message

SCHEMA_VERSION = 2  # 2: the blob index (an index of schema 1 gains it on open)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS content (sha256 BLOB PRIMARY KEY, blob BLOB NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS content_by_blob ON content (blob);
CREATE TABLE IF NOT EXISTS marker (id INTEGER PRIMARY KEY CHECK (id = 1), commit_id TEXT NOT NULL);
"""


class ContentIndex:
    """The index of one mirror, whose history ``store`` holds."""

    def __init__(self, store: GitStore, path: Path) -> None:
        self._store = store
        self._path = path
        self._db: sqlite3.Connection | None = None
        self._covered: str | None = None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def lookup(self, sha256: str, tip: str | None) -> str | None:
        """The blob id for ``sha256`` if the object store has it, after catching up to ``tip``."""
        self._catch_up(tip)
        blob = self._get(sha256)
        return blob if blob is not None and self._store.has_object(blob) else None

    def sha256_of(self, blob: str) -> str | None:
        """The SHA-256 of ``blob``'s bytes, if a row has it (no history is read for it)."""
        if self._db is None and not self._path.exists():
            return None  # a reader (memsync status) makes no index; the blob is hashed instead
        try:
            key = bytes.fromhex(blob)
            row = self._connection().execute("SELECT sha256 FROM content WHERE blob = ?", (key,)).fetchone()
        except (ValueError, OSError, sqlite3.Error, MirrorError):
            return None  # a cache that cannot be read (a read-only mirror): hashed instead
        return bytes(row[0]).hex() if row else None

    def note(self, entries: Mapping[str, str]) -> None:
        """Add ``sha256 -> blob`` rows learnt outside an import; the marker stays where it is."""
        if entries:
            self._commit(entries.items(), None)

    def record(self, previous: str | None, tip: str, entries: Mapping[str, str]) -> None:
        """Add what the batch from ``previous`` to ``tip`` wrote; called once the ref is at ``tip``.

        Catching up to ``previous`` first keeps the marker honest when an earlier batch's entries
        were lost to a kill between its ref update and its commit here.
        """
        self._catch_up(previous)
        self._commit(entries.items(), tip)

    # --- the database ----------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                self._db = self._open()
            except sqlite3.DatabaseError:
                # Not an index: an older memsync's text file, or damage. It is only a cache: it goes,
                # and so does the rollback journal a kill mid-transaction leaves (SQLite's one side file).
                self._path.with_name(self._path.name + "-journal").unlink(missing_ok=True)
                self._path.unlink(missing_ok=True)
                self._db = self._open()
        return self._db

    def _open(self) -> sqlite3.Connection:
        # check_same_thread=False: the daemon opens a mirror in one thread and may use it in
        # another; the store's lock already keeps two users apart.
        db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, 1, SCHEMA_VERSION):
                raise sqlite3.DatabaseError(f"content index schema {version}")
            db.execute("PRAGMA synchronous = NORMAL")
            # A lookup reads a few interior pages (kept) and one leaf: SQLite's default 2 MiB cache
            # would only fill with leaves of large indexes, memory that grows with the store.
            db.execute("PRAGMA cache_size = -512")
            if version != SCHEMA_VERSION:
                # Only then: a reader (a dry run, memsync status) must not write the file.
                db.executescript(_SCHEMA)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            row = db.execute("SELECT commit_id FROM marker WHERE id = 1").fetchone()
        except sqlite3.DatabaseError:
            db.close()
            raise
        self._covered = row[0] if row else None
        return db

    def _get(self, sha256: str) -> str | None:
        try:
            key = bytes.fromhex(sha256)
        except ValueError:
            return None
        row = self._connection().execute("SELECT blob FROM content WHERE sha256 = ?", (key,)).fetchone()
        return bytes(row[0]).hex() if row else None

    def _commit(
        self, entries: Iterable[tuple[str, str]], covered: str | None, *, reset: bool = False
    ) -> None:
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            if reset:
                db.execute("DELETE FROM content")
                db.execute("DELETE FROM marker")
            db.executemany(
                "INSERT OR REPLACE INTO content (sha256, blob) VALUES (?, ?)",
                ((bytes.fromhex(sha), bytes.fromhex(blob)) for sha, blob in entries),
            )
            if covered is not None:
                db.execute("INSERT OR REPLACE INTO marker (id, commit_id) VALUES (1, ?)", (covered,))
            db.execute("COMMIT")
        except BaseException as exc:
            # A COMMIT that failed on a write (a full disk, an I/O error) has already rolled back.
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):
                raise storage_error(f"writing the content index {self._path}: {exc}") from None
            raise
        if covered is not None:
            self._covered = covered

    # --- catching up with history ----------------------------------------------------------------

    def _catch_up(self, tip: str | None) -> None:
        self._connection()
        if tip is None or self._covered == tip:
            return
        since = self._covered
        if since is not None and not self._store.is_ancestor(since, tip):
            since = None
        self._commit(self._index_history(tip, since), tip, reset=since is None)

    def _index_history(self, tip: str, since: str | None) -> Iterable[tuple[str, str]]:
        for commit in self._store.walk(tip, since=since, oldest_first=True):
            try:
                trailers = parse_message(commit.message, str(commit.id))
            except FormatError:
                continue
            if trailers.memory_path is None or trailers.operation == "deleted" or trailers.skipped:
                continue
            blob = blob_at(commit.tree, trailers.memory_path)
            if blob is not None:
                yield hashlib.sha256(blob.data).hexdigest(), str(blob.id)
