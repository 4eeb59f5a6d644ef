"""Which blob holds the content with a given SHA-256: ``.git/memsync/content-index``.

The engine asks before fetching a version's content; a hit saves a request. The file is append-only
text, so recording a batch costs one small write::

    memsync-content-index 1
    <sha256 hex> <blob id>
    ...
    @ <commit id>        everything imported up to this commit is indexed

Lines after the last ``@`` come from a batch whose marker never made it (a kill): they are kept,
since every answer is checked against the object store anyway. The index is a cache: when it is
missing, or its last ``@`` is not an ancestor of the tip (history was rewritten), it is rebuilt from
the trailers and trees of the history, and a tip ahead of the marker is caught up the same way.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

import pygit2

from memsync.mirror.errors import FormatError
from memsync.mirror.paths import encode_path
from memsync.mirror.trailers import parse_message

HEADER = "memsync-content-index 1"


class ContentIndex:
    def __init__(self, repo: pygit2.Repository, path: Path) -> None:
        self._repo = repo
        self._path = path
        self._entries: dict[str, str] | None = None
        self._covered: str | None = None

    def lookup(self, sha256: str, tip: str | None) -> str | None:
        """The blob id for ``sha256`` if the object store has it, after catching up to ``tip``."""
        self._catch_up(tip)
        assert self._entries is not None
        blob = self._entries.get(sha256)
        if blob is None or not self._repo.odb.exists(blob):
            return None
        return blob

    def knows(self, sha256: str) -> bool:
        """Whether the index (as loaded, without catching up) names a blob for ``sha256``."""
        if self._entries is None:
            self._load()
        assert self._entries is not None
        return sha256 in self._entries

    def record(self, previous: str | None, tip: str, entries: Mapping[str, str]) -> None:
        """Append what the batch from ``previous`` to ``tip`` wrote; called once the ref is at ``tip``.

        Catching up to ``previous`` first keeps the ``@`` marker honest when an earlier batch's
        entries were lost to a kill between its ref update and its append.
        """
        self._catch_up(previous)
        assert self._entries is not None
        self._entries.update(entries)
        self._append(entries, tip, fresh=not self._path.exists())
        self._covered = tip

    def _append(self, entries: Mapping[str, str], tip: str, *, fresh: bool) -> None:
        lines = [HEADER] if fresh else []
        lines.extend(f"{sha} {blob}" for sha, blob in entries.items())
        lines.append(f"@ {tip}")
        with open(self._path, "a", encoding="ascii") as out:
            out.write("\n".join(lines) + "\n")

    def _load(self) -> None:
        entries: dict[str, str] = {}
        covered: str | None = None
        try:
            with open(self._path, encoding="ascii") as source:
                lines = source.read().splitlines()
        except (FileNotFoundError, UnicodeDecodeError):
            lines = []
        if lines and lines[0] == HEADER:
            for line in lines[1:]:
                if line.startswith("@ ") and len(line) == 42:
                    covered = line[2:]
                else:
                    sha, _, blob = line.partition(" ")
                    if len(sha) == 64 and len(blob) == 40:
                        entries[sha] = blob
        self._entries = entries
        self._covered = covered

    def _is_ancestor(self, ancestor: str, descendant: str) -> bool:
        if ancestor == descendant:
            return True
        try:
            return bool(self._repo.descendant_of(descendant, ancestor))
        except (pygit2.GitError, KeyError, ValueError):
            return False

    def _catch_up(self, tip: str | None) -> None:
        if self._entries is None:
            self._load()
        assert self._entries is not None
        if tip is None or self._covered == tip:
            return
        since = self._covered
        if since is not None and not self._is_ancestor(since, tip):
            since = None
        if since is None:
            # Rebuild from scratch: the file starts again.
            self._entries = {}
            tmp = self._path.with_suffix(".tmp")
            tmp.write_text(HEADER + "\n", encoding="ascii")
            os.replace(tmp, self._path)
        found = self._index_history(tip, since)
        self._entries.update(found)
        self._append(found, tip, fresh=False)
        self._covered = tip

    def _index_history(self, tip: str, since: str | None) -> dict[str, str]:
        found: dict[str, str] = {}
        walker = self._repo.walk(tip, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
        if since is not None:
            walker.hide(since)
        for commit in walker:
            try:
                trailers = parse_message(commit.message, str(commit.id))
            except FormatError:
                continue
            if trailers.memory_path is None or trailers.operation == "deleted" or trailers.skipped:
                continue
            blob = _blob_at(commit.tree, trailers.memory_path)
            if blob is not None:
                found[hashlib.sha256(blob.data).hexdigest()] = str(blob.id)
        return found


def note_contents(path: Path, entries: Mapping[str, str]) -> None:
    """Append ``sha256 -> blob`` lines for blobs written outside an import (what a push sent), so the
    import of those versions does not fetch them again. They go after the last ``@`` marker, which a
    load keeps; a missing index is left to be rebuilt from history instead."""
    if not entries or not path.exists():
        return
    with open(path, "a", encoding="ascii") as out:
        out.write("".join(f"{sha} {blob}\n" for sha, blob in entries.items()))


def _blob_at(tree: pygit2.Tree, memory_path: str) -> pygit2.Blob | None:
    # The file is spelled with the %_ suffix exactly when a directory of the same name exists.
    for suffixed in (False, True):
        try:
            entry = tree[encode_path(memory_path, directory_sibling=suffixed)]
        except KeyError:
            continue
        if isinstance(entry, pygit2.Blob):
            return entry
    return None
