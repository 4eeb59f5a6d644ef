"""One git repository per memory store: layout, refs, configuration and the import checkpoint.

Layout (see docs/mirror.md)::

    <store>/                      the working tree: one file per memory, at its encoded path
    <store>/.git/                 a normal, non-bare repository with ``main`` checked out
        refs/remotes/memstore/main   the imported history and nothing else (memsync writes it)
        refs/heads/main              what the user edits; upstream is memstore/main
        refs/memsync/base            the commit the checkout was last reconciled with
        refs/heads/memsync/metadata  store and memory metadata snapshots
        memsync/paths.json           cache: memory path → memory id at the tip (rebuildable)
        memsync/content-index        cache: content SHA-256 → blob (SQLite, rebuildable)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any

import pygit2

from memsync.crashpoints import crash_point
from memsync.errors import MirrorError
from memsync.mirror.checkout import CheckoutUpdate, local_changes, update_checkout
from memsync.mirror.conflicts import end_conflict, open_conflicts
from memsync.mirror.contentindex import ContentIndex
from memsync.mirror.errors import FormatError, translated
from memsync.mirror.gitbinary import require_git, run_git
from memsync.mirror.gitstore import GitStore, temporary_beside
from memsync.mirror.history import (
    DEFAULT_AUTHOR_EMAIL,
    DEFAULT_AUTHOR_NAME,
    DEFAULT_BATCH_BYTES,
    DEFAULT_BATCH_COMMITS,
    HistoryWriter,
    PathMap,
    replay,
)
from memsync.mirror.ignores import EXCLUDE_BLOCK, OLD_EXCLUDE_BLOCKS
from memsync.mirror.metadata import read_metadata, write_metadata
from memsync.mirror.paths import decode_path
from memsync.mirror.refs import BASE_REF, MAIN_REF, MEMSTORE_REF, METADATA_REF
from memsync.mirror.trailers import Operation, Trailers, parse_message

MIRROR_FORMAT = "1"

# The note of the last full layout check (Mirror._ensure_layout), and the layout it checked.
LAYOUT_STAMP = "layout-checked"
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
        return cls(commit, **{field.name: getattr(trailers, field.name) for field in fields(trailers)})


class Mirror(GitStore):
    """The git repository of one memory store. Create with :meth:`init`, reopen with :meth:`open`."""

    MEMSTORE_REF = MEMSTORE_REF
    MAIN_REF = MAIN_REF
    BASE_REF = BASE_REF
    METADATA_REF = METADATA_REF

    def __init__(self, path: Path, *, create: bool = False) -> None:
        super().__init__(path, create="worktree" if create else None)
        self._content = ContentIndex(self, self.state_dir / "content-index")
        self._path_map_cache: tuple[str, PathMap] | None = None

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

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Mirror:
        """Open the mirror whose working tree is ``path``."""
        require_git()
        root = Path(path).absolute()
        if not (root / ".git").is_dir():
            raise MirrorError(f"{root} is not a memsync mirror (no .git directory); create it with init")
        mirror = cls(root)
        try:
            if mirror.is_bare or mirror.workdir.resolve() != root.resolve():
                raise MirrorError(
                    f"{root} is not a memsync mirror: its repository is not a plain working tree"
                )
            if "memsync.mirrorformat" not in mirror.config:
                raise MirrorError(
                    f"{root} is a git repository but not a memsync mirror (memsync.mirrorformat is unset)"
                )
            version = mirror.config["memsync.mirrorformat"]
            if version != MIRROR_FORMAT:
                raise FormatError(
                    f"{root} is a memsync mirror of format {version}; this memsync handles format "
                    f"{MIRROR_FORMAT}: upgrade memsync"
                )
        except MirrorError:
            mirror.close()
            raise
        mirror._ensure_layout()
        return mirror

    def close(self) -> None:
        """Release the repository's files (pack handles and maps); the mirror is unusable after."""
        self._content.close()
        super().close()

    def reopen(self) -> None:
        self._content.close()
        super().reopen()
        self._content = ContentIndex(self, self.state_dir / "content-index")
        self._path_map_cache = None

    def _ensure_layout(self) -> None:
        """Apply the configuration and helper files; idempotent, so every open does it.

        A full check reads 15 configuration keys, two files and probes the filesystem: half of what
        opening a mirror costs, and a cycle opens one three times. So when the files it checks are
        exactly as the last full check left them (same device, inode, size and mtime, noted in
        ``.git/memsync/layout-checked`` with the layout's digest), it is skipped: a ``git config``
        run, an edited exclude file, a mirror copied elsewhere or a memsync with another layout all
        change that note's match, and the next open checks in full again.
        """
        fingerprint = self._layout_fingerprint()
        stamp = self.state_dir / LAYOUT_STAMP
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if fingerprint is not None and stamp.read_text(encoding="ascii") == fingerprint:
                return
        self.state_dir.mkdir(exist_ok=True)
        upgraded = _replace_old_exclude_block(self.git_dir / "info" / "exclude")
        wrote = self.configure(_CONFIG, {"exclude": EXCLUDE_BLOCK, "attributes": ATTRIBUTES_BLOCK})
        # Taken before the check, the fingerprint is only noted when the check changed nothing: an
        # edit made meanwhile, or this check's own writes, make the next open check again.
        if fingerprint is not None and not (wrote or upgraded):
            temporary = stamp.with_name(f"{LAYOUT_STAMP}.{secrets.token_hex(4)}.tmp")
            try:
                temporary.write_text(fingerprint, encoding="ascii")
                os.replace(temporary, stamp)
            except OSError:
                temporary.unlink(missing_ok=True)  # a note only: the next open checks in full

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
        return self.ref_target(self.MEMSTORE_REF)

    def last_imported(self) -> ImportedVersion | None:
        """The checkpoint: the tip's trailers, validated; None before the first import."""
        tip = self.tip()
        if tip is None:
            return None
        return ImportedVersion.from_trailers(tip, parse_message(self.commit(tip).message, tip))

    def imported_versions(self) -> Iterator[ImportedVersion]:
        """Every imported version, newest first (a walk of the whole history: for rare cases)."""
        tip = self.tip()
        if tip is None:
            return
        for commit in self.walk(tip):
            commit_id = str(commit.id)
            yield ImportedVersion.from_trailers(commit_id, parse_message(commit.message, commit_id))

    def imported_version_ids(self) -> Iterator[str]:
        """The ids of every imported version (skipped ones included), newest first."""
        return (version.version_id for version in self.imported_versions())

    def blob_for_sha256(self, sha256: str) -> str | None:
        """The blob holding the content with this SHA-256, if the mirror has it: fetch it otherwise."""
        return self.blob_for_sha256_at(sha256, self.tip())

    def blob_for_sha256_at(self, sha256: str, tip: str | None) -> str | None:
        # A writer knows the tip it flushed last: no ref read per content asked about.
        return self._content.lookup(sha256.lower(), tip)

    def paths(self, commit: str | None = None) -> dict[str, str]:
        """``{memory_path: memory_id}`` of the files at ``commit`` of the imported history (tip)."""
        return self.path_map_at(commit or self.tip()).as_dict()

    def files(self, commit: str) -> dict[str, str]:
        """``{memory_path: blob id}`` of any commit's tree, decoded strictly."""
        return {decode_path(tree_path): blob for tree_path, blob in self.tree_files(commit).items()}

    def history_writer(
        self, *, batch_commits: int = DEFAULT_BATCH_COMMITS, batch_bytes: int = DEFAULT_BATCH_BYTES
    ) -> HistoryWriter:
        """A :class:`HistoryWriter` continuing ``memstore/main``: one pack per ``batch_commits``
        commits or ``batch_bytes`` of content."""
        return HistoryWriter(self, batch_commits=batch_commits, batch_bytes=batch_bytes)

    def path_map_at(self, tip: str | None) -> PathMap:
        if tip is None:
            return PathMap()
        if self._path_map_cache is not None and self._path_map_cache[0] == tip:
            return self._path_map_cache[1]
        cache_file = self.state_dir / "paths.json"
        cached_tip: str | None = None
        paths = PathMap()
        try:
            data = json.loads(cache_file.read_text(encoding="utf-8"))
            if data.get("format") == 1 and isinstance(data.get("paths"), dict):
                cached_tip = data.get("tip")
                paths = PathMap(data["paths"])
                if len(set(data["paths"].values())) != len(paths):
                    raise ValueError("two paths owned by one memory: a damaged cache")
        except (OSError, ValueError, TypeError, KeyError):
            cached_tip = None
        if cached_tip != tip:
            since = cached_tip if cached_tip and self.is_ancestor(cached_tip, tip) else None
            if since is None:
                paths = PathMap()
            with translated("rebuilding the path map from history"):
                replay(self, paths, tip, since)
            if tip == self.tip():  # a map of an older commit must not replace the tip's cache
                self._save_path_map(tip, paths)
        self._path_map_cache = (tip, paths)
        return paths

    def _save_path_map(self, tip: str, paths: PathMap) -> None:
        cache_file = self.state_dir / "paths.json"
        tmp = cache_file.with_suffix(".tmp")
        # Streamed, from a view: the map is saved after every batch, and neither a copy of it nor
        # its whole JSON text should be held beside it.
        with open(tmp, "w", encoding="utf-8") as out:
            json.dump({"format": 1, "tip": tip, "paths": paths.view()}, out)
        os.replace(tmp, cache_file)

    def checkpoint_written(
        self, ref: str, previous: str | None, tip: str, paths: PathMap, content: dict[str, str]
    ) -> None:
        """Bring the caches up to a tip a writer just moved ``ref`` to."""
        if ref != self.MEMSTORE_REF:
            return
        # Saved, not copied: a copy per batch would double the map's memory while the writer goes
        # on; a later reader of this tip parses the file once.
        self._save_path_map(tip, paths)
        self._path_map_cache = None
        self._content.record(previous, tip, content)

    # --- the checkout and the metadata branch ----------------------------------------------------

    def local_changes(self) -> tuple[str, ...]:
        """Working-tree paths the user changed since ``refs/memsync/base``."""
        return local_changes(self)

    def update_checkout(self) -> CheckoutUpdate:
        """Fast-forward ``main`` and the working tree to the tip unless local changes are pending."""
        return update_checkout(self)

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
        return write_metadata(
            self,
            store=store,
            memories=memories,
            when=when,
            author_name=author_name,
            author_email=author_email,
            changed=changed,
            removed=removed,
        )

    def read_metadata(self, commit: str | None = None) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """``(store document or None, {memory id: document})`` of the metadata branch."""
        return read_metadata(self, commit)


def _replace_old_exclude_block(target: Path) -> bool:
    """The list an earlier memsync wrote, replaced in place by today's (the user's lines stay put)."""
    current = target.read_text(encoding="utf-8") if target.exists() else ""
    for old in OLD_EXCLUDE_BLOCKS:
        if old in current and EXCLUDE_BLOCK not in current:
            target.write_text(current.replace(old, EXCLUDE_BLOCK, 1), encoding="utf-8")
            return True
    return False


def configure_clone(git_dir: Path) -> bool:
    """Make a plain git clone of a store check out memories as a mirror does: plain bytes (a memory's
    ``\\r`` is content, no filter or conversion), exact paths, the editor temporaries left out.

    For ``git-remote-memstore``: the clone is the user's repository, so only these settings are
    added; its remotes, branches and hooks stay as git made them. Whether anything was written.
    """
    with GitStore(git_dir, action=f"opening the clone at {git_dir}") as clone:
        return clone.configure(PLAIN_CHECKOUT, {"exclude": EXCLUDE_BLOCK, "attributes": ATTRIBUTES_BLOCK})


def copy_history(mirror: Path, git_dir: Path, ref: str) -> str | None:
    """Copy the imported history of the mirror at ``mirror`` into the repository ``git_dir`` (its
    objects, and ``ref`` there pointing at its tip, forced); the tip, or None before any import.

    git's own fetch does the copying (only what ``git_dir`` lacks), so a clone and its mirror hold
    the same commits, ids included.
    """
    with Mirror.open(mirror) as source:
        tip = source.tip()
    if tip is None:
        return None
    run_git(
        git_dir,
        [
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-auto-gc",
            "--no-recurse-submodules",
            str(mirror / ".git"),
            f"+{MEMSTORE_REF}:{ref}",
        ],
        action=f"copying the history of {mirror} into {git_dir}",
    )
    return tip


def discard_local(mirror: Path) -> None:
    """Put the mirror at ``mirror`` back where its imported history is: open conflicts closed (each
    kept under ``refs/memsync/resolved/``), ``main`` and the base at ``memstore/main``, the working
    tree and the index holding its files.

    A clone's private mirror after a push that did not go through: the clone holds the user's work
    and merges there, as git users do, so the private mirror keeps no edit or conflict of its own
    that would refuse every later push.
    """
    with Mirror.open(mirror) as repo:
        for record in open_conflicts(repo).values():
            end_conflict(repo, record, resolution="discarded: the clone that pushed merges it")
        tip = repo.ref_target(MEMSTORE_REF)
        for ref in (MAIN_REF, BASE_REF):
            current = repo.ref_target(ref)
            if tip is None and current is not None:
                repo.delete_ref_if_equals(ref, current)
            elif tip is not None and current != tip:
                repo.set_ref_if_equals(ref, tip, current, message="memsync: back at the imported tip")
        if tip is None:
            _clear_worktree(mirror)
        else:
            stage_commit(mirror / ".git", tip, mirror)
        index = repo.index()
        with translated("resetting the index"):
            if tip is None:
                index.clear()
            else:
                index.read_tree(repo.tree(tip))
            index.write()


def _clear_worktree(mirror: Path) -> None:
    for entry in mirror.iterdir():
        if entry.name == ".git":
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def stage_commit(source: Path, commit: str, mirror: Path) -> list[str]:
    """Make the working tree of the mirror at ``mirror`` hold exactly the files of ``commit`` in the
    repository at ``source`` (a clone's git dir), byte for byte: no filter, attribute or line-ending
    conversion applies. What memsync would push from it is then the commit's change.

    Returns the tree entries that cannot be a memory's file (a symbolic link, a submodule), which are
    not written. Paths come from git trees, whose names git itself refuses to hold as ``..`` or
    ``.git``; memsync's scan then judges every name as it judges a user's file.
    """
    problems: list[str] = []
    _clear_worktree(mirror)
    with GitStore(source, action=f"opening {source}") as clone, translated(f"reading commit {commit}"):
        tree = clone.tree(commit)
        pending: list[tuple[str, pygit2.Tree]] = [("", tree)]
        while pending:
            prefix, folder = pending.pop()
            for item in folder:
                base = item.name or ""
                name = f"{prefix}{base}"
                if base in ("", ".", "..", ".git") or "/" in base:
                    problems.append(f"{name}: a name git should not hold")
                elif item.filemode == pygit2.enums.FileMode.TREE:
                    assert isinstance(item, pygit2.Tree)
                    (mirror / name).mkdir()
                    pending.append((f"{name}/", item))
                elif item.filemode in (pygit2.enums.FileMode.BLOB, pygit2.enums.FileMode.BLOB_EXECUTABLE):
                    (mirror / name).write_bytes(clone.read_blob(str(item.id)))
                else:
                    problems.append(f"{name}: a symbolic link or submodule, not a file")
    return problems
