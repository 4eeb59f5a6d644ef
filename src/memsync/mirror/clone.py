"""What ``git clone memstore::…`` (:mod:`memsync.remote`) needs of memsync's mirrors (:class:`Clone`)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from pathlib import Path

import pygit2
from pygit2.enums import FileMode

from memsync.errors import MirrorError, RuleViolation
from memsync.mirror.errors import PathEncodingError, translated
from memsync.mirror.gitbinary import run_git
from memsync.mirror.gitstore import GitStore
from memsync.mirror.ignores import EXCLUDE_BLOCK
from memsync.mirror.paths import decoded, escape_for_terminal, precomposed_twins
from memsync.mirror.refs import BASE_REF, MAIN_REF, MEMSTORE_REF
from memsync.mirror.repository import ATTRIBUTES_BLOCK, PLAIN_CHECKOUT, Mirror
from memsync.mirror.snapshots import SnapshotEntry
from memsync.mirror.worktree import WorktreeFile, WorktreeScan
from memsync.rules import Dialect, decode_content

# git's own judgement of the clone's drive (git clone probes it; git for Windows and macOS preset it).
DRIVE_SETTINGS = ("core.ignorecase", "core.precomposeunicode")


@dataclass(frozen=True, slots=True)
class CommitFiles:
    """A commit of the clone as a push's local side, read from git's objects and never from a drive
    (where two committed names may be one file): its memories and strays as a checkout's scan finds them."""

    git_dir: Path
    found: WorktreeScan
    blobs: Mapping[str, str] = field(default_factory=dict)  # memory path → blob id

    def scan(
        self,
        dialect: Dialect,
        *,
        known: Set[str] = frozenset(),
        save_cache: bool = True,
        trust_cache: bool = True,
    ) -> WorktreeScan:
        """The files as read once (judged by the dialect :meth:`Clone.files` was given)."""
        return self.found

    def read(self, memory_path: str, expected_sha256: str) -> bytes:
        with GitStore(self.git_dir, action=f"opening the clone at {self.git_dir}") as clone:
            data = clone.read_blob(self.blobs[memory_path])
        if hashlib.sha256(data).hexdigest() != expected_sha256:
            raise MirrorError(f"the commit's {escape_for_terminal(memory_path)} is not {expected_sha256}")
        return data


@dataclass(frozen=True, slots=True)
class Clone:
    """A git clone of a store (its ``git_dir``) and memsync's private mirror of that store."""

    git_dir: Path
    mirror: Path

    def configure(self) -> bool:
        """Make the clone check out memories as a mirror does (plain bytes, editor temporaries excluded),
        its drive judged by git itself (:data:`DRIVE_SETTINGS`); whether anything was written."""
        settings = {key: value for key, value in PLAIN_CHECKOUT.items() if key not in DRIVE_SETTINGS}
        with GitStore(self.git_dir, action=f"opening the clone at {self.git_dir}") as clone:
            return clone.configure(settings, {"exclude": EXCLUDE_BLOCK, "attributes": ATTRIBUTES_BLOCK})

    def copy_history(self, ref: str) -> str | None:
        """Fetch the private mirror's imported history into the clone as ``ref`` (forced); the tip, or
        None before any import."""
        with Mirror.open(self.mirror) as repo:
            tip = repo.tip()
        if tip is None:
            return None
        flags = ["--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-gc", "--no-recurse-submodules"]
        fetch = ["fetch", *flags, str(self.mirror / ".git"), f"+{MEMSTORE_REF}:{ref}"]
        run_git(self.git_dir, fetch, action=f"copying the history of {self.mirror} into {self.git_dir}")
        return tip

    def discard_local(self) -> None:
        """Put the private mirror back at its imported history: conflicts ended, ``main``, the base and
        the index at ``memstore/main``. The clone holds the user's work, so the private mirror keeps no
        edit or conflict that would refuse every later push. Its files are never the push's: a push
        reads the commit from git's objects, and a checkout on the clone's drive could lose one of
        two names that differ only in case."""
        with Mirror.open(self.mirror) as repo:
            for record in repo.conflicts.open().values():
                repo.conflicts.end(record, resolution="discarded: the clone that pushed merges it")
            tip = repo.tip()
            for ref in (MAIN_REF, BASE_REF):
                current = repo.git.ref_target(ref)
                if tip is None and current is not None:
                    repo.git.delete_ref_if_equals(ref, current)
                elif tip is not None and current != tip:
                    repo.git.set_ref_if_equals(ref, tip, current, message="memsync: back at the imported tip")
            if tip is not None:
                repo.align_index(tip)

    def files(
        self, commit: str, dialect: Dialect, *, store: Mapping[str, SnapshotEntry], precomposed: bool = False
    ) -> CommitFiles:
        """The files of the clone's ``commit``; what ``store`` (the snapshot the push builds on) holds
        already is not read again. ``precomposed`` (git's ``core.precomposeunicode``, macOS): a name git
        read from the drive in NFC is the store's memory spelled in NFD that the commit no longer names."""
        found, blobs = WorktreeScan(), {}
        hashes = {entry.blob: entry.sha256 for entry in store.values()}
        with GitStore(self.git_dir, action=f"opening the clone at {self.git_dir}") as clone:
            with translated(f"reading commit {commit}"):
                pending, entries = [("", clone.tree(commit))], []
                while pending:
                    prefix, folder = pending.pop()
                    for item in folder:
                        tree_path = f"{prefix}{item.name}"
                        if isinstance(item, pygit2.Tree):
                            pending.append((f"{tree_path}/", item))
                        else:
                            entries.append((tree_path, item.filemode, str(item.id)))
            for tree_path, mode, blob in sorted(entries):
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
                if mode not in (FileMode.BLOB, FileMode.BLOB_EXECUTABLE):
                    kind = "symlink" if mode == FileMode.LINK else "submodule"
                    found.files[memory_path] = WorktreeFile(tree_path, kind)
                    continue
                sha, problem = hashes.get(blob), None
                if sha is None:
                    data = clone.read_blob(blob)
                    sha = hashlib.sha256(data).hexdigest()
                    try:
                        decode_content(data, dialect)
                    except RuleViolation as exc:
                        problem = str(exc)
                found.files[memory_path] = WorktreeFile(tree_path, "file", sha, problem)
                blobs[memory_path] = blob
        if precomposed:
            for name, known in precomposed_twins(found.files, store).items():
                found.files[known] = found.files.pop(name)
                blobs[known] = blobs.pop(name)
        return CommitFiles(self.git_dir, found, blobs)
