"""One git repository per memory store: layout, configuration and the import checkpoint.

A normal, non-bare repository with ``main`` checked out, one file per memory at its encoded path (the
layout is in docs/mirror.md, the refs in :mod:`memsync.mirror.refs`, the caches and intents in
``.git/memsync/state.sqlite``, :mod:`memsync.mirror.state`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pygit2
from pygit2.enums import FileMode

from memsync.crashpoints import crash_point
from memsync.errors import MirrorError
from memsync.mirror.checkout import (
    CheckoutUpdate,
    head_problem,
    local_changes,
    undo_interrupted_checkout,
    update_checkout,
)
from memsync.mirror.conflicts import Conflicts
from memsync.mirror.contentindex import ContentIndex
from memsync.mirror.errors import FormatError, translated
from memsync.mirror.gitbinary import require_git
from memsync.mirror.gitstore import GitStore, clear_stale_locks, temporary_beside
from memsync.mirror.history import (
    DEFAULT_AUTHOR_EMAIL,
    DEFAULT_AUTHOR_NAME,
    DEFAULT_BATCH_BYTES,
    DEFAULT_BATCH_COMMITS,
    HistoryFacts,
    HistoryWriter,
    PathMap,
    history_facts,
    replay,
)
from memsync.mirror.ignores import EXCLUDE_BLOCK, OLD_EXCLUDE_BLOCKS, is_ignored
from memsync.mirror.metadata import read_metadata, write_metadata
from memsync.mirror.origin import Origin, record_origin
from memsync.mirror.paths import decoded
from memsync.mirror.refs import BASE_REF, MAIN_REF, MEMSTORE_REF, METADATA_REF
from memsync.mirror.trailers import Operation, Trailers, parse_message
from memsync.mirror.worktree import Worktree

MIRROR_FORMAT = "1"
PUSHED_PREFIX = "refs/memsync/pushed/"

# git reads this as the memstore remote's location: /dev/null is not a directory, so nothing can
# ever exist there, and git's refusal quotes the URL, which tells the user what to do instead.
REMOTE_URL = "/dev/null/memsync-managed: run 'memsync sync' instead of git fetch, pull or push"

# Highest-precedence attributes: whatever a global gitattributes says, contents stay plain bytes.
ATTRIBUTES_BLOCK = """\
# memsync: memory files are plain bytes, never converted or filtered
* -text -filter -ident -working-tree-encoding
"""

# A checkout of plain bytes at exactly the paths in the tree (the awareness view's too).
PLAIN_CHECKOUT: dict[str, str] = {
    "core.autocrlf": "false",
    "core.safecrlf": "false",
    "core.filemode": "false",
    "core.symlinks": "false",
    "core.ignorecase": "false",
    "core.precomposeunicode": "false",
    # git for Windows: paths past Windows' 260-character limit (memory paths may be 1,024 bytes).
    "core.longpaths": "true",
    # git 2.36 and later fsyncs the objects and refs it writes (older git ignores the key): an
    # imported batch's pack and the ref that commits it survive a power cut together.
    "core.fsync": "committed",
    # A global ignore file must not hide a new memory from the push (only info/exclude counts).
    "core.excludesfile": "/dev/null",
}
_CONFIG: dict[str, str] = {
    **PLAIN_CHECKOUT,
    "remote.memstore.url": REMOTE_URL,
    "remote.memstore.pushurl": REMOTE_URL,
    "remote.memstore.fetch": "+refs/heads/main:refs/remotes/memstore/main",
    "remote.memstore.tagopt": "--no-tags",
    "branch.main.remote": "memstore",
    "branch.main.merge": "refs/heads/main",
    "memsync.mirrorformat": MIRROR_FORMAT,
}
_LAYOUT_DIGEST = hashlib.sha256(
    json.dumps([_CONFIG, EXCLUDE_BLOCK, ATTRIBUTES_BLOCK, MIRROR_FORMAT]).encode("utf-8")
).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class ImportedVersion:
    """An imported version as its commit records it (the checkpoint, when it is the tip)."""

    commit: str
    version_id: str
    memory_id: str
    operation: Operation
    created_at: datetime
    memory_path: str | None
    content_sha256: str | None
    redacted: bool
    skipped: str | None
    inferred: str | None = None  # a delete memsync inferred: no API version stands behind it
    history_truncated: int | None = None
    format: int = 1  # Memsync-Format: 2 when the tree spells a path by a rule format 1 lacked

    @classmethod
    def from_trailers(cls, commit: str, trailers: Trailers) -> ImportedVersion:
        # Every trailer has a field of the same name here.
        return cls(commit, **{name: getattr(trailers, name) for name in trailers.__slots__})


class Mirror:
    """The git repository of one memory store. Create with :meth:`init`, reopen with :meth:`open`.

    Git plumbing (refs, trees, blobs, the index) is asked of the :class:`GitStore` it holds as ``git``.
    """

    MEMSTORE_REF = MEMSTORE_REF
    MAIN_REF = MAIN_REF
    BASE_REF = BASE_REF
    METADATA_REF = METADATA_REF

    def __init__(self, path: Path, *, create: bool = False) -> None:
        self.git = GitStore(path, create="worktree" if create else None)
        self.path = self.git.path
        self.git_dir = self.git.git_dir
        self.state_dir = self.git.state_dir
        self.content_index = ContentIndex(self.git)
        self._path_map_cache: tuple[str, PathMap] | None = None
        self.conflicts = Conflicts(self.git)
        self.worktree = Worktree(self.git)

    def __enter__(self) -> Mirror:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- creating and opening --------------------------------------------------------------------

    @classmethod
    def init(cls, path: str | os.PathLike[str]) -> Mirror:
        """Create the mirror at ``path`` (absent or an empty directory); refuse anything else."""
        require_git()
        root = Path(path).absolute()
        if root.exists() and (not root.is_dir() or any(root.iterdir())):
            raise MirrorError(f"cannot create a mirror at {root}: it exists and is not an empty directory")
        root.mkdir(parents=True, exist_ok=True)
        # Made whole beside it, then renamed into place: a kill part way leaves no repository at
        # ``path`` that is not yet a mirror (the next run would refuse it for good), only a hidden
        # temporary that the next creation of this mirror removes.
        temporary = temporary_beside(root)
        shutil.rmtree(temporary, ignore_errors=True)
        try:
            with cls(temporary, create=True) as made:
                made._ensure_layout()
            crash_point("mirror.created")  # whole under its temporary name, not in place
            os.rename(temporary, root)  # replaces the empty folder; refuses one someone filled
        except BaseException as exc:
            shutil.rmtree(temporary, ignore_errors=True)
            if isinstance(exc, OSError):
                raise MirrorError(f"cannot create a mirror at {root}: {exc.strerror}") from None
            raise
        return cls.open(root)

    @staticmethod
    def clear_stale_locks(path: str | os.PathLike[str], *, since: float) -> list[Path]:
        """Remove (and return) the git lock files in the mirror at ``path`` made at ``since`` or later:
        a killed run's, which the caller (holding the store's lock) knows began then; left in place,
        they would fail every later git write. Older ones are a user's git command's, and stay."""
        return clear_stale_locks(Path(path) / ".git", since=since)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Mirror:
        """Open the mirror whose working tree is ``path``."""
        require_git()
        root = Path(path).absolute()
        if not (root / ".git").is_dir():
            raise MirrorError(f"{root} is not a memsync mirror (no .git directory); create it with init")
        mirror = cls(root)
        try:
            if mirror.git.is_bare or mirror.git.workdir.resolve() != root.resolve():
                raise MirrorError(
                    f"{root} is not a memsync mirror: its repository is not a plain working tree"
                )
            if "memsync.mirrorformat" not in mirror.git.config:
                raise MirrorError(
                    f"{root} is a git repository but not a memsync mirror (memsync.mirrorformat is unset)"
                )
            version = mirror.git.config["memsync.mirrorformat"]
            if version != MIRROR_FORMAT:
                raise FormatError(
                    f"{root} is a memsync mirror of format {version}; this memsync handles format "
                    f"{MIRROR_FORMAT}: upgrade memsync"
                )
        except MirrorError:
            mirror.close()
            raise
        mirror._ensure_layout()
        # Reopened when next asked: an SQLite connection costs ~110 KiB of memory (its lookaside and
        # pages), and the daemon's watcher holds a mirror open per store without using its state.
        mirror.git.state.close()
        return mirror

    def close(self) -> None:
        """Release the repository's files (pack handles and maps); the mirror is unusable after."""
        self.git.close()

    def drop_history_caches(self) -> None:
        """Forget the caches naming commits of a rewritten history; each is rebuilt when next asked."""
        self.git.state.drop_caches("paths", "history-facts", content_index=True)
        self._path_map_cache = None

    def _ensure_layout(self) -> None:
        """Apply the configuration and helper files; idempotent, so every open does it.

        A full check is half of what opening a mirror costs, so it is skipped while the files it
        checks match the state's ``layout`` note (their stat data and the layout's digest).
        """
        fingerprint = self._layout_fingerprint()
        if fingerprint is not None and self.git.state.get("layout") == fingerprint:
            return
        self.state_dir.mkdir(exist_ok=True)
        upgraded = _replace_old_exclude_block(self.git_dir / "info" / "exclude")
        wrote = self.git.configure(_CONFIG, {"exclude": EXCLUDE_BLOCK, "attributes": ATTRIBUTES_BLOCK})
        # Taken before the check, the fingerprint is only noted when the check changed nothing: an
        # edit made meanwhile, or this check's own writes, make the next open check again.
        if fingerprint is not None and not (wrote or upgraded):
            with contextlib.suppress(MirrorError):  # a note only: the next open checks in full
                self.git.state.put("layout", fingerprint)

    def _layout_fingerprint(self) -> str | None:
        """What the layout check depends on, or None when a file it checks is missing."""
        parts = [_LAYOUT_DIGEST]
        try:
            for name in ("config", "info/exclude", "info/attributes"):
                info = os.stat(self.git_dir / name)
                parts.append(f"{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}")
            # The folder the case probe tests: another device or inode is a mirror moved elsewhere.
            info = os.stat(self.state_dir)
            parts.append(f"{info.st_dev}:{info.st_ino}")
        except OSError:
            return None
        return " ".join(parts)

    # --- the imported history ----------------------------------------------------------------

    def tip(self) -> str | None:
        """The last imported commit (``memstore/main``), or None before the first import."""
        return self.git.ref_target(self.MEMSTORE_REF)

    def last_imported(self) -> ImportedVersion | None:
        """The checkpoint: the tip's trailers, validated; None before the first import."""
        tip = self.tip()
        if tip is None:
            return None
        return ImportedVersion.from_trailers(tip, parse_message(self.git.commit(tip).message, tip))

    def imported_versions(self) -> Iterator[ImportedVersion]:
        """Every imported version, newest first, read as consumed (the import history is one line)."""
        tip = self.tip()
        for commit in self.git.first_parents(tip) if tip is not None else ():
            commit_id = str(commit.id)
            yield ImportedVersion.from_trailers(commit_id, parse_message(commit.message, commit_id))

    def blob_for_sha256(self, sha256: str) -> str | None:
        """The blob holding the content with this SHA-256, if the mirror has it: fetch it otherwise."""
        return self.blob_for_sha256_at(sha256, self.tip())

    def blob_for_sha256_at(self, sha256: str, tip: str | None) -> str | None:
        # A writer knows the tip it flushed last: no ref read per content asked about.
        return self.content_index.lookup(sha256.lower(), tip)

    def paths(self, commit: str | None = None) -> dict[str, str]:
        """``{memory_path: memory_id}`` of the files at ``commit`` of the imported history (tip)."""
        return self.path_map_at(commit or self.tip()).as_dict()

    def files(self, commit: str) -> dict[str, str]:
        """``{memory_path: blob id}`` of any commit's tree (each path decoded strictly, and cached)."""
        return {decoded(tree_path): blob for tree_path, blob in self.git.tree_files(commit).items()}

    def history_writer(
        self, *, batch_commits: int = DEFAULT_BATCH_COMMITS, batch_bytes: int = DEFAULT_BATCH_BYTES
    ) -> HistoryWriter:
        """A :class:`HistoryWriter` continuing ``memstore/main``, one pack per batch."""
        return HistoryWriter(self, batch_commits=batch_commits, batch_bytes=batch_bytes)

    def path_map_at(self, tip: str | None) -> PathMap:
        """The path map at ``tip``: the state's ``paths`` cache, caught up by replaying trailers."""
        if tip is None:
            return PathMap()
        if self._path_map_cache is not None and self._path_map_cache[0] == tip:
            return self._path_map_cache[1]
        cached_tip: str | None = None
        paths = PathMap()
        try:
            data = self.git.state.get("paths")
            if data.get("format") == 1 and isinstance(data.get("paths"), dict):
                cached_tip = data.get("tip")
                paths = PathMap(data["paths"])
                if len(set(data["paths"].values())) != len(paths):
                    raise ValueError("two paths owned by one memory: a damaged cache")
        except (AttributeError, ValueError, TypeError, KeyError):
            cached_tip = None
        if cached_tip != tip:
            if not (cached_tip and self.git.is_ancestor(cached_tip, tip)):
                cached_tip, paths = None, PathMap()
            with translated("rebuilding the path map from history"):
                replay(self.git, paths, tip, cached_tip)
            if tip == self.tip():  # a map of an older commit must not replace the tip's cache
                self._save_path_map(tip, paths)
        self._path_map_cache = (tip, paths)
        return paths

    def _save_path_map(self, tip: str, paths: PathMap) -> None:
        self.git.state.put("paths", {"format": 1, "tip": tip, "paths": dict(paths.view())})

    def checkpoint_written(
        self, ref: str, previous: str | None, tip: str, paths: PathMap, content: dict[str, str]
    ) -> None:
        """Bring the caches up to a tip a writer just moved ``ref`` to."""
        if ref == self.MEMSTORE_REF:
            # Saved, not copied: a copy per batch would double the map's memory while the writer
            # goes on; a later reader of this tip parses the saved map once.
            self._save_path_map(tip, paths)
            self._path_map_cache = None
            self.content_index.record(previous, tip, content)

    # --- the checkout, its origin and the metadata branch ----------------------------------------

    def main(self) -> str | None:
        """The commit the user's branch (``main``) is at, or None before the first checkout."""
        return self.git.ref_target(self.MAIN_REF)

    def base(self) -> str | None:
        """The commit the checkout was last reconciled with (``refs/memsync/base``), or None."""
        return self.git.ref_target(self.BASE_REF)

    def content(self, blob: str) -> bytes:
        """The bytes of a memory's file (a blob of the mirror)."""
        return self.git.read_blob(blob)

    def facts(self, *, save: bool = True) -> HistoryFacts:
        """What the imported history says about itself; ``save=False`` writes no cache (status)."""
        return history_facts(self.git, save=save)

    def local_changes(self) -> tuple[str, ...]:
        """Working-tree paths the user changed since ``refs/memsync/base``."""
        return local_changes(self.git)

    def update_checkout(self) -> CheckoutUpdate:
        """Fast-forward ``main`` and the working tree to the tip unless local changes are pending."""
        return update_checkout(self.git)

    def settle_interrupted_checkout(self) -> tuple[str, ...]:
        """Settle a checkout a kill or a full disk stopped part way; the paths left as the user has them."""
        return undo_interrupted_checkout(self.git)

    def head_problem(self) -> str | None:
        """Why the checkout is not main's to sync (a rebase in progress, HEAD elsewhere), or None."""
        return head_problem(self.git)

    def is_ignored(self, tree_path: str) -> bool:
        """Whether git's ignore rules (the user's ``.gitignore`` files, the exclude list) skip it."""
        return is_ignored(self.git, tree_path)

    def record_origin(self, origin: Origin) -> Origin | None:
        """Record the API the mirror is pulled from; the origin it replaces, if it was another."""
        return record_origin(self.git, origin)

    def metadata_follows(self) -> str | None:
        """The imported tip the memories' metadata was last refreshed for, if noted (a cache: losing it
        costs one listing of every memory, the way a mirror without it is brought up to date)."""
        tip = self.git.state.get("metadata-follows")
        return tip if isinstance(tip, str) and len(tip) == 40 else None

    def note_metadata_follows(self, tip: str | None) -> None:
        """Note that the memories' metadata reflects the store as of the imported ``tip``."""
        self.git.state.put("metadata-follows", tip)  # unchanged (a pull that found nothing): no write

    def write_metadata(
        self,
        *,
        store: Mapping[str, Any] | None,
        memories: Mapping[str, Mapping[str, Any]] | Iterable[tuple[str, Mapping[str, Any]]] | None,
        when: datetime,
        author_name: str = DEFAULT_AUTHOR_NAME,
        author_email: str = DEFAULT_AUTHOR_EMAIL,
        changed: Mapping[str, Mapping[str, Any]] | None = None,
        removed: Iterable[str] = (),
    ) -> str | None:
        """Snapshot metadata on ``refs/heads/memsync/metadata``; the commit, or None if unchanged."""
        return write_metadata(self.git, store, memories, when, author_name, author_email, changed, removed)

    def read_metadata(self, commit: str | None = None) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """``(store document or None, {memory id: document})`` of the metadata branch."""
        return read_metadata(self.git, commit)

    # --- main after a push -------------------------------------------------------------------------

    def reset_main(self, tip: str, *, when: datetime) -> str | None:
        """Point ``main`` and the index at the imported ``tip`` once a push is imported; local commits
        the tip lacks are kept first under ``refs/memsync/pushed/<UTC time>-<commit>`` (that ref, or None).
        """
        old = self.main()
        kept: str | None = None
        if old is not None and old != tip and not self.git.is_ancestor(old, tip):
            kept = f"{PUSHED_PREFIX}{when.strftime('%Y%m%dT%H%M%SZ')}-{old[:12]}"
            if self.git.ref_target(kept) != old:
                self.git.set_ref_if_equals(kept, old, None, message="memsync: local commits pushed")
        self.align_index(tip)
        if old != tip:
            self.git.set_ref_if_equals(self.MAIN_REF, tip, old, message="memsync: reset to the pushed tip")
        return kept

    def pushed_refs(self) -> list[str]:
        """The refs keeping earlier ``main`` tips, oldest first."""
        return self.git.refs(PUSHED_PREFIX)

    def align_index(self, commit: str) -> None:
        """Make the index hold ``commit``'s tree. Entries of files the checkout holds as the commit has
        them get fresh stat data, so ``git status`` stays fast and shows exactly the files still local.
        """
        wanted = self.git.tree_files(commit)
        index = self.git.index()
        with translated("reading the index"):
            conflicted = index.conflicts is not None
            current = {} if conflicted else {entry.path: str(entry.id) for entry in index}
        stale = current.keys() - wanted.keys()
        fresh = [(path, blob) for path, blob in wanted.items() if current.get(path) != blob]
        if not (conflicted or stale or fresh):
            return
        with translated("updating the index"):
            if conflicted:  # read_tree drops the conflict entries
                index.read_tree(self.git.tree(commit))
            for path in stale:
                index.remove(path)
            for path, blob in fresh:
                if self.worktree.blob(path) == blob:
                    index.add(path)  # reads the file: the entry gets its stat data
                else:
                    index.add(pygit2.IndexEntry(path, pygit2.Oid(hex=blob), FileMode.BLOB))
        try:
            index.write()
        except (pygit2.GitError, OSError) as exc:
            if (self.git_dir / "index.lock").exists():
                raise MirrorError(
                    f"cannot update the index of {self.path}: git is working there (.git/index.lock exists);"
                    " run again when it is done"
                ) from exc
            raise MirrorError(f"writing the index of {self.path}: {exc}") from exc


def _replace_old_exclude_block(target: Path) -> bool:
    """The list an earlier memsync wrote, replaced in place by today's (the user's lines stay put)."""
    current = target.read_text(encoding="utf-8") if target.exists() else ""
    for old in OLD_EXCLUDE_BLOCKS:
        if old in current and EXCLUDE_BLOCK not in current:
            target.write_text(current.replace(old, EXCLUDE_BLOCK, 1), encoding="utf-8")
            return True
    return False
