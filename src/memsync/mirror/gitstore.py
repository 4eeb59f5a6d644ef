"""The git repository under a mirror or a view: the one place memsync reads and writes it.

libgit2 reads and moves refs (only by compare-and-swap); git's own programs write packs
(:mod:`memsync.mirror.fastimport`, :meth:`GitStore.repack`); memsync encodes none of git's formats.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Self

import pygit2

from memsync.errors import MirrorError
from memsync.mirror.errors import PathEncodingError, RefMoved, translated
from memsync.mirror.fastimport import SCRATCH_REF, FastImport
from memsync.mirror.gitbinary import run_git
from memsync.mirror.paths import decode_path, segment_spellings
from memsync.mirror.state import State
from memsync.processes import process_alive

# libgit2 fsyncs (process-wide) what it writes in git folders, as git does with core.fsync (in each mirror):
# a ref that commits a batch never survives a power cut that its objects did not.
pygit2.option(pygit2.enums.Option.ENABLE_FSYNC_GITDIR, True)

# How many open packs may pile up before git merges them (GitStore.repack); a pack this big is sealed.
GEOMETRIC_FROM = 8
SEALED_BYTES = 4 << 20
# One thread: memsync's machines are small. git's delta base cache (96 MiB by default) held a merge at
# 100,000 versions 67 MiB above what 1 MiB costs it, in no measurable extra time.
PACK_OBJECTS = ["-c", "pack.threads=1", "-c", "core.deltaBaseCacheLimit=1m", "pack-objects"]

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
# Matches the ".#*" line of memsync.mirror.ignores: git, scans and the watcher ignore memsync's temporaries.
TEMPORARY_PREFIX = ".#memsync-"
# The lock files git and libgit2 take in a repository's git folder; refs/ holds one per ref updated.
_GIT_LOCKS = ("index.lock", "HEAD.lock", "ORIG_HEAD.lock", "packed-refs.lock", "config.lock", "shallow.lock")
# Windows flushes a file only through a handle that may write to it; POSIX through any.
_SYNC_FILE_FLAGS = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
_SYNC_FILE_FLAGS |= os.O_RDWR if sys.platform == "win32" else os.O_RDONLY
# Past this many files a whole-filesystem sync (Linux syncfs) is cheaper than one fsync per file.
_SYNC_EACH_UP_TO = 64
# Windows cannot replace a file another program holds open (an editor, a virus scanner) until it lets go.
REPLACE_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class Head:
    """HEAD: the operation in progress, the commit (None: unborn), the branch (None: detached)."""

    state: pygit2.enums.RepositoryState
    target: str | None
    branch: str | None
    shorthand: str | None


class GitStore:
    """The git repository at exactly ``path`` (a working tree, or bare); ``create`` makes it first.
    Never a parent folder's repository (``NO_SEARCH``), which memsync would then write."""

    def __init__(
        self, path: Path, *, create: Literal["worktree", "bare"] | None = None, action: str = ""
    ) -> None:
        with translated(action or f"opening the git repository at {path}"):
            if create is None:
                self._repo = _open(path)
            else:
                self._repo = pygit2.init_repository(str(path), bare=create == "bare", initial_head="main")
        self.path = path
        self.git_dir = Path(self._repo.path)
        self.objects_dir = self.git_dir / "objects"
        self.state_dir = self.git_dir / "memsync"
        self.state = State(self.state_dir)

    def close(self) -> None:
        """Release the repository's files (pack handles, maps, the state database); unusable after."""
        self.state.close()
        self._repo.free()

    @contextlib.contextmanager
    def _released(self) -> Iterator[None]:
        """The repository's files released while git replaces its packs; fresh pygit2 handles after."""
        self.close()
        try:
            yield
        finally:
            with translated("reopening the repository"):
                self._repo = _open(self.path)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def configure(self, settings: Mapping[str, str], info: Mapping[str, str]) -> bool:
        """Set ``settings`` and add each ``info`` block to ``.git/info/<name>``; whether anything changed."""
        wrote = False
        self.state_dir.mkdir(exist_ok=True)
        config = self.config
        with translated(f"configuring the repository at {self.path}"):
            for key, value in settings.items():
                if key not in config or config[key] != value:
                    config[key] = value
                    wrote = True
        (self.git_dir / "info").mkdir(exist_ok=True)
        for name, block in info.items():
            target = self.git_dir / "info" / name
            current = target.read_text(encoding="utf-8") if target.exists() else ""
            if block not in current:
                separator = "" if current == "" or current.endswith("\n") else "\n"
                target.write_text(current + separator + block, encoding="utf-8")
                wrote = True
        return wrote

    @property
    def is_bare(self) -> bool:
        return bool(self._repo.is_bare)

    def ref_target(self, name: str) -> str | None:
        """The commit id ``name`` points at, or None if the ref does not exist."""
        with translated(f"reading {name}"):
            ref = self._repo.references.get(name)
            return None if ref is None else str(ref.resolve().target)

    def set_ref_if_equals(
        self, name: str, new: str, expected_old: str | None, *, message: str = "memsync"
    ) -> None:
        """Point ``name`` at ``new`` only if it still points at ``expected_old`` (None: absent), atomic
        against other writers (libgit2 compares under the ref lock); :class:`RefMoved` otherwise."""
        if not name.startswith("refs/"):
            raise MirrorError(f"refusing to update {name!r}: not a full ref name under refs/")
        try:
            if expected_old is None:
                self._repo.create_reference_direct(name, new, False, message=message)
                return
            ref = self._repo.references.get(name)
            if ref is None or str(ref.target) != expected_old:
                raise RefMoved(name, expected_old, None if ref is None else str(ref.target))
            ref.set_target(new, message)
        except pygit2.AlreadyExistsError:
            raise RefMoved(name, expected_old, self.ref_target(name)) from None
        except (pygit2.GitError, OSError) as exc:  # pygit2 reports a held lock as an OSError
            if "does not match" in str(exc) or "modified" in str(exc):
                raise RefMoved(name, expected_old, self.ref_target(name)) from None
            lock = self.git_dir / f"{name}.lock"
            if lock.exists():
                raise MirrorError(
                    f"cannot update {name}: {lock} exists. Another git process is updating it, or one "
                    "was killed; if none is running, delete that file and run again"
                ) from exc
            raise MirrorError(f"updating {name}: {exc}") from exc

    def delete_ref_if_equals(self, name: str, expected_old: str) -> None:
        """Delete ``name`` only if it points at ``expected_old``; :class:`RefMoved` otherwise."""
        if (actual := self.ref_target(name)) != expected_old:
            raise RefMoved(name, expected_old, actual)
        # git update-ref compares under the ref lock; pygit2's delete cannot.
        try:
            run_git(self.path, ["update-ref", "-d", name, expected_old], action=f"deleting {name}")
        except MirrorError:
            raise RefMoved(name, expected_old, self.ref_target(name)) from None

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        """Whether ``ancestor`` is ``descendant`` or one of its ancestors."""
        if ancestor == descendant:
            return True
        try:
            return bool(self._repo.descendant_of(descendant, ancestor))
        except (pygit2.GitError, KeyError, ValueError):
            return False

    def refs(self, prefix: str) -> list[str]:
        with translated(f"listing {prefix}"):
            return sorted(name for name in self._repo.references if name.startswith(prefix))

    def direct_refs(self) -> dict[str, str]:
        """``{ref name: the object id it points at}`` of every ref that is not symbolic."""
        with translated("listing refs"):
            refs = self._repo.references
            direct = pygit2.enums.ReferenceType.DIRECT
            return {name: str(ref.target) for name in refs if (ref := refs[name]).type == direct}

    def detach_head(self, commit: str) -> None:
        with translated(f"pointing HEAD at {commit}"):
            self._repo.set_head(pygit2.Oid(hex=commit))

    def revision(self, spec: str) -> str | None:
        """The commit a git revision names (an id, a ref, ``main~3``), or None."""
        try:
            return str(self._repo.revparse_single(spec).peel(pygit2.Commit).id)
        except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError):
            return None

    def advertised_refs(self, url: str, callbacks: pygit2.RemoteCallbacks) -> dict[str, str]:
        """``{ref: commit}`` a remote advertises to a pusher; pygit2's ``GitError`` if unreachable."""
        remote = self._repo.remotes.create_anonymous(url)
        remote.connect(callbacks=callbacks, direction=1)  # GIT_DIRECTION_PUSH: as receive-pack lists them
        return {
            head.name: str(head.oid)
            for head in remote.list_heads(connect=False)
            if head.name and head.name.startswith("refs/") and not head.name.endswith("^{}")
        }

    def push_refs(self, url: str, specs: list[str], callbacks: pygit2.RemoteCallbacks) -> None:
        # A remote that listed refs stays connected for fetching; pushing needs one of its own.
        self._repo.remotes.create_anonymous(url).push(specs, callbacks=callbacks)

    def merge_base(self, one: str, other: str) -> str | None:
        """The best common ancestor of two commits, or None when they share no history."""
        with contextlib.suppress(pygit2.GitError, KeyError, ValueError, TypeError):
            if (found := self._repo.merge_base(one, other)) is not None:
                return str(found)
        return None

    def commit(self, commit_id: str) -> pygit2.Commit:
        with translated(f"reading commit {commit_id}"):
            return self._repo[commit_id].peel(pygit2.Commit)

    def tree(self, commit_or_tree: str | None) -> pygit2.Tree:
        """The tree of a commit (or a tree itself); None gives the empty tree."""
        with translated(f"reading the tree of {commit_or_tree}"):
            return self._repo[commit_or_tree or EMPTY_TREE].peel(pygit2.Tree)

    def walk(
        self, tip: str, *, since: str | None = None, oldest_first: bool = False
    ) -> Iterator[pygit2.Commit]:
        """The commits of ``tip`` not reachable from ``since``, newest first (or oldest first)."""
        sort = pygit2.enums.SortMode
        walker = self._repo.walk(tip, sort.TOPOLOGICAL | (sort.REVERSE if oldest_first else sort.NONE))
        if since is not None:
            walker.hide(since)
        return iter(walker)

    def first_parents(self, tip: str) -> Iterator[pygit2.Commit]:
        """``tip`` and its first parents, newest first, read as consumed (a sorted walk reads all first)."""
        (walker := self._repo.walk(tip, pygit2.enums.SortMode.NONE)).simplify_first_parent()
        return iter(walker)

    def tree_files(self, commit: str | None) -> dict[str, str]:
        """``{tree path: blob id}`` of every file in ``commit``'s tree (None: none)."""
        return dict(walk_tree(self.tree(commit)))

    def read_blob(self, blob_id: str) -> bytes:
        with translated(f"reading blob {blob_id}"):
            blob = self._repo[blob_id]
        if not isinstance(blob, pygit2.Blob):
            raise MirrorError(f"{blob_id} is not a blob")
        return blob.data

    def object_type(self, object_id: str) -> str | None:
        """``"commit"``, ``"tree"``, ``"blob"`` or ``"tag"``; None when the repository lacks it."""
        with translated(f"looking up {object_id}"):
            try:
                found = self._repo.get(object_id)
            except ValueError:
                return None
            return None if found is None else found.type_str

    def has_object(self, object_id: str) -> bool:
        with translated(f"looking up {object_id}"):
            return bool(self._repo.odb.exists(object_id))

    @property
    def workdir(self) -> Path:
        """The working tree's root (a bare repository's own folder)."""
        return Path(self._repo.workdir) if self._repo.workdir else self.path

    @property
    def config(self) -> pygit2.Config:
        return self._repo.config

    def status(self) -> dict[str, int]:
        """``{tree path: FileStatus flags}`` of every path not current (untracked files one by one)."""
        with translated("reading the status of the checkout"):
            return dict(self._repo.status(untracked_files="all", ignored=False))

    def index(self) -> pygit2.Index:
        """The index as it is on disk now."""
        with translated("reading the index"):
            index = self._repo.index
            index.read(False)
            return index

    def is_ignored(self, tree_path: str) -> bool:
        with translated(f"checking whether {tree_path} is ignored"):
            return bool(self._repo.path_is_ignored(tree_path))

    def checkout(
        self,
        tree: pygit2.Tree,
        *,
        strategy: pygit2.enums.CheckoutStrategy,
        callbacks: pygit2.CheckoutCallbacks | None = None,
        paths: list[str] | None = None,
    ) -> None:
        """libgit2's checkout of ``tree`` into the index and working tree (its errors as they come)."""
        # libgit2 (1.9) mishandles a file that becomes a folder (or the reverse) whose old side the user
        # already deleted: it fails ("null OID cannot exist"), or skips the new file without a word (it
        # would then read as the user's deletion). With HEAD's old files put back first, it replaces them.
        repo, wanted = self._repo, None if paths is None else set(paths)
        restored: dict[Path, bytes] = {}
        if not repo.head_is_unborn and repo.workdir is not None and len(head := repo.head.peel(pygit2.Tree)):
            for delta in head.diff_to_tree(tree).deltas:
                path = delta.old_file.path
                on_disk = self.workdir / path
                if (
                    delta.status != pygit2.enums.DeltaStatus.DELETED
                    or (wanted is not None and path not in wanted)
                    or os.path.lexists(on_disk)
                    or not _changes_kind(tree, path)
                    or not _plain_folders(self.workdir, path)
                ):
                    continue
                data = repo[delta.old_file.id].peel(pygit2.Blob).data
                on_disk.parent.mkdir(parents=True, exist_ok=True)
                on_disk.write_bytes(data)
                restored[on_disk] = data
        try:
            repo.checkout_tree(tree, strategy=strategy, callbacks=callbacks, paths=paths)
        except pygit2.GitError:
            # Nothing was checked out: the files put back are deleted again, as the user left them.
            for on_disk, data in restored.items():
                with contextlib.suppress(OSError):
                    if on_disk.read_bytes() == data:
                        on_disk.unlink()
            raise

    def head(self) -> Head:
        """Where HEAD is, and which git operation (rebase, merge, ...) is in progress."""
        with translated("reading HEAD"):
            repo = self._repo
            state = pygit2.enums.RepositoryState(repo.state())
            if repo.head_is_unborn:
                return Head(state, None, None, None)
            target = str(repo.head.target)
            if repo.head_is_detached:
                return Head(state, target, None, None)
            return Head(state, target, repo.head.name, repo.head.shorthand)

    def create_blob(self, data: bytes) -> str:
        with translated("writing a blob"):
            return str(self._repo.create_blob(data))

    def write_tree(self, files: Mapping[str, str]) -> str:
        """A tree of ``{tree path: blob id}`` (paths that do not collide: one pass, no checks)."""
        with translated("writing a tree"):
            index = pygit2.Index()
            for path, blob in files.items():
                index.add(pygit2.IndexEntry(path, pygit2.Oid(hex=blob), pygit2.enums.FileMode.BLOB))
            return str(index.write_tree(self._repo))

    def write_flat_tree(
        self, blobs: Mapping[str, bytes], *, trees: Mapping[str, str] | None = None, base: str | None = None
    ) -> str:
        """A one-level tree: ``base``'s entries, ``blobs`` as files and ``trees`` (or commits) as folders."""
        with translated("writing a tree"):
            repo = self._repo
            builder = repo.TreeBuilder(repo[base].peel(pygit2.Tree)) if base else repo.TreeBuilder()
            for name, data in blobs.items():
                builder.insert(name, repo.create_blob(data), pygit2.enums.FileMode.BLOB)
            for name, tree in (trees or {}).items():
                builder.insert(name, repo[tree].peel(pygit2.Tree).id, pygit2.enums.FileMode.TREE)
            return str(builder.write())

    def merge_file(
        self, base: bytes | None, ours: tuple[str, bytes], theirs: tuple[str, bytes]
    ) -> tuple[bool, bytes]:
        """git's three-way merge of one file: whether it merged cleanly, and the result (with markers)."""

        def entry(label: str, data: bytes) -> pygit2.IndexEntry:
            return pygit2.IndexEntry(label, self._repo.create_blob(data), pygit2.enums.FileMode.BLOB)

        with translated("merging"):
            result = self._repo.merge_file_from_index(
                None if base is None else entry("base", base), entry(*ours), entry(*theirs)
            )
        return bool(result.automergeable), result.contents.encode("utf-8")

    def create_commit(self, tree: str, parents: list[str], author: pygit2.Signature, message: str) -> str:
        """A commit written by libgit2 (committer = author), not on any ref."""
        with translated("writing a commit"):
            return str(self._repo.create_commit(None, author, author, message, tree, parents))

    def edit_tree(self, tree: str, changes: Iterable[tuple[str, str | None]]) -> str:
        """``tree`` with ``(tree path, blob id or None)`` changes applied in order, as a checkout would."""
        with translated(f"editing tree {tree}"):
            index = pygit2.Index()
            index.read_tree(self._repo[tree].peel(pygit2.Tree))
            for path, blob in changes:
                for entry in [e.path for e in index if e.path == path or e.path.startswith(path + "/")]:
                    index.remove(entry)
                if blob is None:
                    continue
                parts = path.split("/")
                for depth in range(1, len(parts)):
                    if "/".join(parts[:depth]) in index:
                        index.remove("/".join(parts[:depth]))
                index.add(pygit2.IndexEntry(path, pygit2.Oid(hex=blob), pygit2.enums.FileMode.BLOB))
            return str(index.write_tree(self._repo))

    def recommit(self, commit: str, tree: str, parents: list[str]) -> str:
        """``commit`` with another tree and parents, and no signature (it would no longer verify)."""
        with translated(f"rewriting commit {commit}"):
            old = self._repo[commit].peel(pygit2.Commit)
            encoding = [old.message_encoding] if old.message_encoding else []
            oid = self._repo.create_commit(
                None, old.author, old.committer, old.raw_message, tree, parents, *encoding
            )
        return str(oid)

    def fast_import(self) -> FastImport:
        # What a killed writer left (the caller's lock keeps out live ones): its scratch ref, a crash report.
        with translated("clearing a killed import's scratch ref"):
            if self._repo.references.get(SCRATCH_REF) is not None:
                self._repo.references.delete(SCRATCH_REF)
        for report in self.git_dir.glob("fast_import_crash_*"):
            report.unlink(missing_ok=True)
        self.state_dir.mkdir(exist_ok=True)
        return FastImport(self.git_dir, self.state_dir / "import-marks")

    def repack(self) -> bool:
        """Past :data:`GEOMETRIC_FROM` open packs (one per import), merge them into one; True if it did.

        ``pack-objects --revs`` walks only from the tips recorded when the last pack was sealed, so a
        merge's memory does not grow with the mirror's age, as ``git repack --geometric``'s does
        (benchmarks/git_write_bench.py --growth). Without a trustworthy record all packs are merged once.
        """
        pack_dir = self.objects_dir / "pack"
        packs = {path.name for path in pack_dir.glob("pack-*.pack")}
        # A pack someone keeps (.keep) or a cruft pack of git gc's (.mtimes) is git's, not ours.
        foreign = {p for p in packs for s in (".keep", ".mtimes") if (pack_dir / p).with_suffix(s).exists()}
        try:
            record = self.state.get("packs")
            sealed, tips = [str(p) for p in record["sealed"]], [str(t) for t in record["tips"]]
        except (TypeError, KeyError):
            sealed, tips = [], []
        if not set(sealed) <= packs:
            sealed, tips = [], []
        open_packs = packs - set(sealed) - foreign
        if len(open_packs) <= GEOMETRIC_FROM:
            return False
        # Checked only now, once per merge: the boundary holds every commit the reflogs named.
        if not all(self.object_type(tip) is not None for tip in tips):
            sealed, tips = [], []
            open_packs = packs - foreign
        wanted = self._tips()
        revisions = "".join(f"{tip}\n" for tip in wanted) + "".join(f"^{tip}\n" for tip in tips)
        args = [*PACK_OBJECTS, "--revs", "--reflog", "--indexed-objects", "--delta-base-offset", "-q"]
        args.append(str(pack_dir / "pack"))
        with self._released():
            name = run_git(self.path, args, stdin=revisions, action="merging the packs").strip()
            merged = f"pack-{name}.pack"
            for old in sorted((open_packs if tips else packs - foreign) - {merged}):
                # The index first: without it no reader looks into the pack, whatever is left of it.
                for suffix in (".idx", ".pack", ".rev", ".bitmap"):
                    (pack_dir / old).with_suffix(suffix).unlink(missing_ok=True)
            if (pack_dir / merged).stat().st_size >= SEALED_BYTES:
                # The reflogs' commits too, or pack-objects --reflog would walk from each to the boundary.
                sealed, tips = [*sealed, merged] if tips else [merged], self._tips(reflogs=True)
            self.state.put("packs", {"sealed": sealed, "tips": tips})
        return True

    def _tips(self, *, reflogs: bool = False) -> list[str]:
        """What the refs (and a detached HEAD) point at; with ``reflogs``, all their reflogs name too."""
        tips = set(self.direct_refs().values())
        head = self.head()
        if head.branch is None and head.target is not None:
            tips.add(head.target)
        if reflogs:
            with translated("reading the reflogs"):
                for name in ["HEAD", *self._repo.references]:
                    try:
                        entries = list(self._repo.references[name].log())
                    except (KeyError, pygit2.GitError):
                        continue
                    tips.update(str(oid) for e in entries for oid in (e.oid_old, e.oid_new))
            tips = {tip for tip in tips if self.has_object(tip)}  # a new ref's old id is all zeros
        return sorted(tips)

    def drop_unreachable(self, *, keep_reflog: str | None = None) -> None:
        """Expire reflogs (but ``keep_reflog``'s: the stash lives in its reflog) and prune every object
        nothing reaches."""
        kept_log = self.git_dir / "logs" / keep_reflog if keep_reflog else None
        kept = kept_log.read_bytes() if kept_log is not None and kept_log.exists() else None
        expire = ["reflog", "expire", "--expire=now", "--expire-unreachable=now", "--all"]
        run_git(self.path, expire, action="expiring the reflogs")
        if kept_log is not None and kept is not None:
            temporary = kept_log.with_suffix(".memsync-tmp")
            temporary.write_bytes(kept)
            temporary.replace(kept_log)
        with self._released():
            run_git(self.path, ["gc", "--prune=now", "--quiet"], action="pruning unreachable objects")
        # git gc packed everything reachable: its packs are sealed at the refs as they are now.
        packs = sorted(path.name for path in (self.objects_dir / "pack").glob("pack-*.pack"))
        self.state.put("packs", {"sealed": packs, "tips": self._tips(reflogs=True)})


def _plain_folders(root: Path, path: str) -> bool:
    """Whether writing ``path`` stays inside ``root``: a valid memory path, no symbolic link on the way."""
    try:
        decode_path(path)
    except PathEncodingError:
        return False
    folder = root
    for part in path.split("/")[:-1]:
        folder = folder / part
        if os.path.islink(folder) or (os.path.lexists(folder) and not folder.is_dir()):
            return False
    return True


def _changes_kind(tree: pygit2.Tree, path: str) -> bool:
    """Whether ``tree`` has a folder at ``path``, or a file where a folder above it is."""
    parts = path.split("/")
    for cut in range(1, len(parts) + 1):
        above = "/".join(parts[:cut])
        if above not in tree:
            return False
        if tree[above].type != pygit2.enums.ObjectType.TREE:
            return cut < len(parts)
    return True


def walk_tree(tree: pygit2.Tree, prefix: str = "") -> Iterator[tuple[str, str]]:
    """``(tree path, blob id)`` of every file under ``tree``: memsync's one walk of a tree."""
    for item in tree:
        name = prefix + (item.name or "")
        if isinstance(item, pygit2.Tree):
            yield from walk_tree(item, name + "/")
        elif isinstance(item, pygit2.Blob):
            yield name, str(item.id)


def blob_at(tree: pygit2.Tree, memory_path: str) -> pygit2.Blob | None:
    """The file of ``memory_path`` in ``tree``, whichever way it is spelled there (``segment_spellings``)."""
    segments = memory_path.split("/")
    folders = [tree]
    for segment in segments[:-1]:
        folders = [
            found
            for folder in folders
            for components in segment_spellings(segment, last=False)
            if isinstance(found := _entry(folder, components), pygit2.Tree)
        ]
    for folder in folders:
        for components in segment_spellings(segments[-1], last=True):
            if isinstance(found := _entry(folder, components), pygit2.Blob):
                return found
    return None


def _entry(tree: pygit2.Tree, components: tuple[str, ...]) -> pygit2.Object | None:
    try:
        return tree["/".join(components)]
    except KeyError:
        return None


def _open(path: Path) -> pygit2.Repository:
    return pygit2.Repository(str(path), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)


def is_repository(path: Path) -> bool:
    """Whether git can open ``path`` itself as a repository (bare or not); nothing is kept open."""
    try:
        _open(path).free()
    except (pygit2.GitError, OSError):
        return False
    return True


def clear_stale_locks(git_dir: Path, *, since: float) -> list[Path]:
    """Remove (and return) git's lock files in ``git_dir`` made at ``since`` or later: a dead run's, the
    caller knows. An older lock is a user's git command's, and stays (git names it when in the way)."""
    removed = []
    for lock in [*(git_dir / name for name in _GIT_LOCKS), *(git_dir / "refs").rglob("*.lock")]:
        # A second of slack: some filesystems keep whole-second (or coarser) modification times.
        with contextlib.suppress(OSError):
            if lock.stat().st_mtime >= since - 1.0:
                lock.unlink()
                removed.append(lock)
    return removed


def replace_file(path: Path, data: bytes) -> None:
    """Give ``path`` the content ``data`` whole, or leave it as it was, durably. The temporary's name is
    short (any file name fits beside it), one per thread, and ignored (:data:`TEMPORARY_PREFIX`)."""
    temporary = path.parent / f"{TEMPORARY_PREFIX}{os.getpid()}-{threading.get_ident()}"
    try:
        with open(temporary, "wb") as out:
            out.write(data)
            out.flush()
            # Before the rename: after a power cut the name holds old or new content, never an empty file.
            os.fsync(out.fileno())
        replace_over(temporary, path)
        sync_folder(path.parent)
    finally:
        temporary.unlink(missing_ok=True)  # gone already once renamed


def sync_folder(folder: Path) -> None:
    """Make the names in ``folder`` durable (a rename, a create, an unlink); a no-op on Windows,
    whose filesystems cannot open a folder to flush it and journal names with their data."""
    if sys.platform != "win32":
        _fsync(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


def _fsync(path: Path, flags: int) -> None:
    """fsync ``path`` opened with ``flags``; nothing if it is gone or cannot be synced (EINVAL, EBADF)."""
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EBADF):
            raise
    finally:
        os.close(fd)


def make_durable(root: Path, tree_paths: Iterable[str]) -> None:
    """Make the files at ``tree_paths`` under ``root`` and their names durable: what a checkout wrote,
    before its intent is removed. Gone or unreadable files are skipped: a later run settles them."""
    paths = sorted(set(tree_paths))
    if len(paths) > _SYNC_EACH_UP_TO and _syncfs(root):
        return
    for tree_path in paths:
        _fsync(root / tree_path, _SYNC_FILE_FLAGS)
    for folder in sorted({root, *((root / tree_path).parent for tree_path in paths)}):
        sync_folder(folder)


def _syncfs(root: Path) -> bool:
    """Flush the filesystem holding ``root`` (Linux's syncfs); False where there is none."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(root, os.O_RDONLY)
    except (OSError, AttributeError):
        return False
    try:
        return bool(libc.syncfs(fd) == 0)
    finally:
        os.close(fd)


def replace_over(
    source: Path,
    target: Path,
    *,
    replace: Callable[[Path, Path], None] = os.replace,
    sleep: Callable[[float], None] = time.sleep,
    retry: bool = sys.platform == "win32",
) -> None:
    """``os.replace``, tried a few times where an open file cannot be replaced (Windows), then refused."""
    for attempt in range(1, REPLACE_ATTEMPTS + 1):
        try:
            replace(source, target)
            return
        except PermissionError as exc:
            if not retry:
                raise
            if attempt == REPLACE_ATTEMPTS:
                raise PermissionError(
                    exc.errno,
                    f"{target} is held open by another program (an editor, a virus scanner?) and could"
                    f" not be replaced after {REPLACE_ATTEMPTS} tries: close it and run again",
                    str(target),
                ) from None
            sleep(0.05 * 2 ** (attempt - 1))


def temporary_beside(path: Path) -> Path:
    """Where this process makes a repository whole before renaming it to ``path``, after removing
    what killed processes left there (their pid is gone)."""
    prefix = f".{path.name}.memsync-tmp-"
    for stale in path.parent.glob(f"{prefix}*"):
        pid = stale.name.removeprefix(prefix)
        # One alive under another user counts as alive.
        if pid.isdigit() and not stale.is_symlink() and not process_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    return path.parent / f"{prefix}{os.getpid()}"
