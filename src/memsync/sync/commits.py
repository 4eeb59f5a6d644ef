"""A commit of a ``git clone memstore::…`` as a push's local side (:class:`CommitFiles`).

Read from git's objects, never from a drive: on a case-insensitive drive two committed names can be
one file, and a push must send what was committed. The memories and strays are judged as a scan of a
checkout judges them (docs/push.md, "What is a memory").
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field

from memsync.errors import MirrorError, RuleViolation
from memsync.mirror import Clone, escape_for_terminal
from memsync.mirror.errors import PathEncodingError
from memsync.mirror.paths import decoded
from memsync.mirror.snapshots import SnapshotEntry
from memsync.mirror.worktree import WorktreeFile, WorktreeScan
from memsync.rules import Dialect, decode_content


@dataclass(frozen=True, slots=True)
class CommitFiles:
    """The files of one commit of a clone: memories by memory path, strays, and each memory's blob."""

    clone: Clone
    found: WorktreeScan
    blobs: Mapping[str, str] = field(default_factory=dict)

    def scan(
        self,
        dialect: Dialect,
        *,
        known: Set[str] = frozenset(),
        save_cache: bool = True,
        trust_cache: bool = True,
    ) -> WorktreeScan:
        """The files as read once, judged by the dialect :func:`commit_files` was given."""
        return self.found

    def read(self, memory_path: str, expected_sha256: str) -> bytes:
        data = self.clone.read(self.blobs[memory_path])
        if hashlib.sha256(data).hexdigest() != expected_sha256:
            raise MirrorError(f"the commit's {escape_for_terminal(memory_path)} is not {expected_sha256}")
        return data


def commit_files(
    clone: Clone,
    commit: str,
    dialect: Dialect,
    *,
    store: Mapping[str, SnapshotEntry],
    precomposed: bool = False,
) -> CommitFiles:
    """The files of the clone's ``commit``; what ``store`` (the snapshot the push builds on) holds is
    not read again. ``precomposed`` (git's ``core.precomposeunicode``, set by git on macOS): a name git
    read from the drive in NFC is the store's memory spelled in NFD that the commit no longer names."""
    found, blobs = WorktreeScan(), {}
    hashes = {entry.blob: entry.sha256 for entry in store.values()}
    for tree_path, kind, blob in clone.entries(commit):
        try:
            memory_path = decoded(tree_path)
        except PathEncodingError as exc:
            found.strays[tree_path] = str(exc)
            continue
        if (other := found.files.get(memory_path)) is not None:
            found.strays[tree_path] = (
                f"{escape_for_terminal(other.tree_path)} and {escape_for_terminal(tree_path)} are two"
                f" spellings of the memory {escape_for_terminal(memory_path)}; keep one of them"
            )
            continue
        if kind != "file":
            found.files[memory_path] = WorktreeFile(tree_path, kind)
            continue
        sha, problem = hashes.get(blob), None
        if sha is None:
            data = clone.read(blob)
            sha = hashlib.sha256(data).hexdigest()
            try:
                decode_content(data, dialect)
            except RuleViolation as exc:
                problem = str(exc)
        found.files[memory_path] = WorktreeFile(tree_path, kind, sha, problem)
        blobs[memory_path] = blob
    if precomposed:
        for name, known in precomposed_twins(found.files, store).items():
            found.files[known] = found.files.pop(name)
            blobs[known] = blobs.pop(name)
    return CommitFiles(clone, found, blobs)


def precomposed_twins(found: Iterable[str], known: Iterable[str]) -> dict[str, str]:
    """``{path: known path}`` where a path of ``found`` differs from one of ``known`` that ``found`` lacks
    only as git on macOS reads a name from the drive, in NFC: one memory either way, one to one."""
    found, known = set(found), set(known)
    gone: dict[str, list[str]] = {}
    new: dict[str, list[str]] = {}
    for paths, side in ((known - found, gone), (found - known, new)):
        for path in paths:
            side.setdefault(unicodedata.normalize("NFC", path), []).append(path)
    return {paths[0]: gone[key][0] for key, paths in new.items() if len(paths) == len(gone.get(key, ())) == 1}
