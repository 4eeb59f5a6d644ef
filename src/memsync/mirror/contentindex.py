"""Which blob holds the content with a given SHA-256, and back: tables of the mirror's state database.

The pull engine asks before fetching a version's content (a hit saves a request); the push engine asks
the other way round for every file of the snapshots it compares. SQLite rather than a dictionary in
memory: 100,000 versions made ~35 MiB of Python objects, while a query costs a few microseconds. A
batch's entries and its marker (the commit up to which imports are indexed) are one transaction. A
cache: every answer is checked against the object store, and a marker that is not an ancestor of the
tip (history was rewritten) has the index rebuilt from the trailers and trees of the history.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable, Mapping

from memsync.errors import MirrorError
from memsync.mirror.errors import FormatError
from memsync.mirror.gitstore import GitStore, blob_at
from memsync.mirror.trailers import parse_message


class ContentIndex:
    """The index of one mirror, whose history ``store`` holds."""

    def __init__(self, store: GitStore) -> None:
        self._store = store

    def lookup(self, sha256: str, tip: str | None) -> str | None:
        """The blob id for ``sha256`` if the object store has it, after catching up to ``tip``."""
        self._catch_up(tip)
        try:
            key = bytes.fromhex(sha256)
        except ValueError:
            return None
        row = self._db().execute("SELECT blob FROM content WHERE sha256 = ?", (key,)).fetchone()
        blob = bytes(row[0]).hex() if row else None
        return blob if blob is not None and self._store.has_object(blob) else None

    def sha256_of(self, blob: str) -> str | None:
        """The SHA-256 of ``blob``'s bytes, if a row has it (no history is read for it)."""
        try:
            # A reader (memsync status) makes no database: the blob is hashed instead.
            db = self._store.state.connection(create=False)
            if db is None:
                return None
            row = db.execute("SELECT sha256 FROM content WHERE blob = ?", (bytes.fromhex(blob),)).fetchone()
        except (ValueError, OSError, sqlite3.Error, MirrorError):
            return None  # a cache that cannot be read (a read-only mirror): hashed instead
        return bytes(row[0]).hex() if row else None

    def note(self, entries: Mapping[str, str]) -> None:
        """Add ``sha256 -> blob`` rows learnt outside an import; the marker stays where it is."""
        if entries:
            self._commit(entries.items(), None)

    def record(self, previous: str | None, tip: str, entries: Mapping[str, str]) -> None:
        """Add what the batch from ``previous`` to ``tip`` wrote, once the ref is at ``tip``; catching up
        to ``previous`` first covers an earlier batch lost to a kill between its ref update and here."""
        self._catch_up(previous)
        self._commit(entries.items(), tip)

    def _db(self) -> sqlite3.Connection:
        db = self._store.state.connection()
        assert db is not None
        return db

    def _commit(self, entries: Iterable[tuple[str, str]], covered: str | None, reset: bool = False) -> None:
        with self._store.state.transaction() as db:
            if reset:
                db.execute("DELETE FROM content")
                db.execute("DELETE FROM marker")
            db.executemany(
                "INSERT OR REPLACE INTO content (sha256, blob) VALUES (?, ?)",
                ((bytes.fromhex(sha), bytes.fromhex(blob)) for sha, blob in entries),
            )
            if covered is not None:
                db.execute("INSERT OR REPLACE INTO marker (id, commit_id) VALUES (1, ?)", (covered,))

    def _catch_up(self, tip: str | None) -> None:
        if tip is None:
            return
        row = self._db().execute("SELECT commit_id FROM marker WHERE id = 1").fetchone()
        since = row[0] if row else None
        if since == tip:
            return
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
