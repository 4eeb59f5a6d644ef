"""Awareness views: read-only git repositories whose tree is what an agent's sandbox sees (docs/awareness.md).

Commit ids are a pure function of what is written: author and committer are copied from the store commit,
the message derives from ids and paths, the tree from the file set.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import IO
from urllib.parse import quote

import pygit2
from pygit2.enums import CheckoutStrategy, DeltaStatus, DiffOption

from memsync.errors import MirrorError, UsageError
from memsync.mirror.checkout import ConflictPaths, changed_paths
from memsync.mirror.errors import translated
from memsync.mirror.fastimport import FastImport
from memsync.mirror.gitbinary import NO_HOOKS, git_environment, require_git, run_git
from memsync.mirror.gitstore import GitStore
from memsync.mirror.history import DEFAULT_BATCH_BYTES, DEFAULT_BATCH_COMMITS, PathMap, TreeChanges
from memsync.mirror.paths import decoded, quote_for_message
from memsync.mirror.refs import MAIN_REF
from memsync.mirror.repository import ATTRIBUTES_BLOCK, EXCLUDE_BLOCK, PLAIN_CHECKOUT, ImportedVersion, Mirror
from memsync.mirror.trailers import format_time, parse_message

VIEW_FORMAT = "1"
VIEWS_FOLDER = "awareness"
_ID_SEGMENT_MAX = 200  # bytes of one escaped id: two of them and the root stay far below PATH_MAX
_VIEW_TRAILER = "Memsync-View-Format"
_CHECKOUT = CheckoutStrategy.SAFE | CheckoutStrategy.ALLOW_CONFLICTS | CheckoutStrategy.DONT_OVERWRITE_IGNORED

_CONFIG: dict[str, str] = {
    **PLAIN_CHECKOUT,
    # A rebuild prunes what it replaced: a reflog naming those commits would keep content no store serves.
    "core.logallrefupdates": "false",
    "memsync.viewformat": VIEW_FORMAT,
}


@dataclass(frozen=True, slots=True)
class StoreCommit:
    """One imported version of a store, and the new blob id of each memory path it touched (None: removed)."""

    version: ImportedVersion
    author: bytes
    committer: bytes
    changes: dict[str, str | None]


@dataclass(frozen=True, slots=True)
class ViewCommit:
    """A store commit that changed the visible tree, and the stores whose copies of its paths stay hidden."""

    store_id: str
    source: StoreCommit
    shadowed: tuple[str, ...]

    def message(self) -> bytes:
        """A summary line and one paragraph of trailers; paths quoted (:func:`quote_for_message`)."""
        version = self.source.version
        paths = sorted(self.source.changes)
        shown = quote_for_message(paths[0]) if paths else f"memory {version.memory_id}"
        more = f" (+{len(paths) - 1} more)" if len(paths) > 1 else ""
        lines = [
            f"{version.operation} {shown}{more} in {self.store_id}",
            "",
            f"Memory-Store-Id: {self.store_id}",
            f"Memory-Version: {version.version_id}",
            f"Memory-Id: {version.memory_id}",
            f"Created-At: {format_time(version.created_at)}",
            f"Operation: {version.operation}",
        ]
        lines += [f"Memory-Path: {quote_for_message(path)}" for path in paths]
        lines += [f"Shadowed-Store-Id: {store}" for store in self.shadowed]
        lines.append(f"{_VIEW_TRAILER}: {VIEW_FORMAT}")
        return ("\n".join(lines) + "\n").encode("utf-8")


class View:
    """The git repository of one awareness view (:meth:`open`); the plumbing stays behind ``git``."""

    def __init__(self, git: GitStore, branch: str = MAIN_REF, root: str | None = None) -> None:
        self.git, self.path = git, git.path
        self.branch, self.root = branch, root  # root: the first commit of a shared view's branch

    @staticmethod
    def folder_name(value: str, what: str = "id") -> str:
        """``value`` (an opaque identity or template id) as one path segment, reversibly: every byte
        outside ``[A-Za-z0-9_.~-]`` percent-escaped, and a leading ``.`` too (no ``.``, ``..``, ``.git``)."""
        if not isinstance(value, str) or value == "":
            raise UsageError(f"the {what} is empty; give the id as the API knows it")
        segment = quote(value, safe="~")
        if segment.startswith("."):
            segment = "%2E" + segment[1:]
        if len(segment.encode("utf-8")) > _ID_SEGMENT_MAX:
            raise UsageError(
                f"the {what} {value[:40]!r}... is too long for a folder name ({len(segment)} bytes escaped,"
                f" at most {_ID_SEGMENT_MAX})"
            )
        return segment

    @staticmethod
    def path_for(root: Path, identity_id: str, template_id: str) -> Path:
        """Where the view of (``identity_id``, ``template_id``) lives under the mirror root."""
        identity = View.folder_name(identity_id, "identity id")
        return root / VIEWS_FOLDER / identity / View.folder_name(template_id, "template id")

    @staticmethod
    def store_history(
        mirror: Mirror, since: str | None = None, until: str | None = None
    ) -> Iterator[StoreCommit]:
        """The imported commits after ``since`` (an ancestor) up to ``until`` (default: the tip), oldest
        first, streamed by one ``git log`` (pygit2's tree diff per commit costs several times more)."""

        def fields(stream: IO[bytes], pending: bytes = b"") -> Iterator[bytes]:  # read a chunk at a time
            while chunk := stream.read(1 << 16):
                *whole, pending = (pending + chunk).split(b"\0")
                yield from whole
            yield pending

        if (tip := until or mirror.tip()) is None:
            return
        command = ["git", *NO_HOOKS, f"--git-dir={mirror.git.git_dir}", "log", "-z", "--reverse", "--raw"]
        # Each option pins what a user's git config could change (colour, abbreviation, renames, the
        # messages' output encoding).
        command += ["--topo-order", "--root", "--no-renames", "--no-abbrev", "--no-color", "--date=raw", tip]
        command += ["--encoding=UTF-8"]
        command += ["--format=%x01%H%n%an <%ae> %ad%n%cn <%ce> %cd%n%B", *([f"^{since}"] if since else [])]
        git = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=git_environment())
        assert git.stdout is not None

        tokens, head, removed, added = fields(git.stdout), b"", dict[str, str](), dict[str, str]()
        try:  # each commit's fields, then `:mode mode old-blob new-blob status` and the path of each file
            for token in chain(tokens, [b"\x01"]):  # the last commit ends at a commit of none
                if token.startswith(b"\x01") and head:
                    commit_id, author, committer, message = head.split(b"\n", 3)
                    cid = commit_id.decode()
                    # A file respelled (`a` → `a%_` as `a/b` appears) is removed and added alike: no change.
                    changes: dict[str, str | None] = {path: None for path in removed if path not in added}
                    changes.update((path, blob) for path, blob in added.items() if removed.get(path) != blob)
                    version = ImportedVersion.from_trailers(cid, parse_message(message.decode(), cid))
                    yield StoreCommit(version, author, committer, changes)
                if token.startswith(b"\x01"):
                    head, removed, added = token[1:], {}, {}
                elif token.strip(b"\n"):
                    _, _, old, new, status = token.lstrip(b"\n").decode().split(" ")
                    path = decoded(next(tokens).decode("utf-8", "surrogateescape"))
                    removed.update({path: old} if status in ("D", "T") else {})
                    added.update({path: new} if status != "D" else {})
        finally:  # a reader that stopped early closes the pipe, and git dies of SIGPIPE at its next write
            git.stdout.close()
            errors = git.communicate()[1].decode("utf-8", "replace").strip().splitlines()
            if git.returncode > 0:
                raise MirrorError(f"reading the history of {mirror.path} failed: {' / '.join(errors[-3:])}")

    def close(self) -> None:
        self.git.close()

    def __enter__(self) -> View:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, create: bool = False) -> View:
        """The view at ``path``; with ``create``, made when absent (an empty folder is fine too)."""
        require_git()
        root = Path(path).absolute()
        if not (root / ".git").exists():  # a file in a linked worktree (open_shared)
            if not create:
                raise MirrorError(f"{root} is not an awareness view (no .git); memsync awareness makes it")
            if root.exists() and (not root.is_dir() or any(root.iterdir())):
                raise MirrorError(f"cannot create an awareness view at {root}: it exists and is not empty")
            root.mkdir(parents=True, exist_ok=True)
            view = cls(GitStore(root, create="worktree", action=f"creating the awareness view at {root}"))
        else:
            view = cls(GitStore(root, action=f"opening the awareness view at {root}"))
            config = view.git.config
            found = config["memsync.viewformat"] if "memsync.viewformat" in config else None  # noqa: SIM401
            if found != VIEW_FORMAT:
                view.close()
                if found is None:
                    raise MirrorError(f"{root} is a git repository but not an awareness view")
                raise MirrorError(
                    f"{root} is an awareness view of format {found}; this memsync writes format"
                    f" {VIEW_FORMAT}: delete the folder and run memsync awareness again"
                )
        view.git.configure(_CONFIG, {"exclude": EXCLUDE_BLOCK, "attributes": ATTRIBUTES_BLOCK})
        return view

    @classmethod
    def open_shared(cls, repository: Path, path: Path, branch: str, root: str | None = None) -> View:
        """The view on ``branch`` of the bare ``repository`` such views share (made when absent), in a linked
        worktree at ``path``; each branch starts at the same :meth:`empty_commit` (``root``, if known)."""
        with GitStore(repository, create=None if repository.is_dir() else "bare") as shared:
            shared.configure(_CONFIG, {"exclude": EXCLUDE_BLOCK, "attributes": ATTRIBUTES_BLOCK})
            root = root or cls(shared).empty_commit()
            if not (path / ".git").is_file():
                if shared.ref_target(branch) is None:
                    shared.set_ref_if_equals(branch, root, None)
                add = ["worktree", "add", "--quiet", str(path), branch.removeprefix("refs/heads/")]
                run_git(repository, add, action=f"making the view's checkout at {path}")
        return cls(GitStore(path, action=f"opening the awareness view at {path}"), branch, root)

    def empty_commit(self) -> str:
        """The commit of the empty tree (epoch, ``memsync``): a view before anything was visible."""
        epoch = pygit2.Signature("memsync", "memsync@memsync.invalid", 0, 0)
        return self.git.create_commit(self.git.write_tree({}), [], epoch, "Nothing visible\n")

    def tip(self) -> str | None:
        """What ``main`` points at, or None before the first commit."""
        return self.git.ref_target(self.branch)

    def head_problem(self) -> str | None:
        """Why the checkout is not on ``main`` (in words), or None when it is."""
        head = self.git.head()
        if head.target is not None and head.branch != self.branch:
            return f"HEAD is not on {self.branch[11:]}: run `git checkout {self.branch[11:]}` in the view"
        return None

    def foreign_commits(self, since: str | None, tip: str) -> list[str]:
        """Commits after ``since`` up to ``tip`` (newest first) that memsync did not write."""
        with translated("reading the view's history"):
            hidden = since if since is not None and self.git.is_ancestor(since, tip) else None
            return [  # a line of the last paragraph (the trailers) is memsync's
                str(commit.id)
                for commit in self.git.walk(tip, since=hidden)
                if f"\n{_VIEW_TRAILER}: " not in "\n" + commit.message.rstrip("\n").split("\n\n")[-1]
            ]

    def edits(self) -> list[tuple[str, str]]:
        """``(tree path, "added", "modified" or "deleted")`` of each difference of the working tree from
        ``main``'s tree (not the index: a staged edit counts too), sorted: edits nobody will push."""
        flags = DiffOption.INCLUDE_UNTRACKED | DiffOption.RECURSE_UNTRACKED_DIRS
        kinds = {DeltaStatus.ADDED: "added", DeltaStatus.UNTRACKED: "added", DeltaStatus.DELETED: "deleted"}
        with translated("comparing the view's checkout with main"):
            deltas = self.git.tree(self.tip()).diff_to_workdir(flags).deltas
            found = [
                (delta.new_file.path, kinds.get(delta.status, "modified"))
                for delta in deltas
                if delta.status is not DeltaStatus.UNMODIFIED
            ]
        return sorted(found, key=lambda edit: edit[0])


class ViewWriter:
    """Writes view commits (``git fast-import``, a process per batch); nothing is visible before
    :meth:`finish` checks them out and moves ``main``, so an interrupted build leaves at most an
    unreferenced pack. With ``rebuild`` the history starts empty, and what it replaced is pruned. ``paths``:
    the ``paths`` a writer left at the tip it appends to (decoding every path of the tree is slow)."""

    def __init__(self, view: View, *, rebuild: bool, paths: PathMap | None = None) -> None:
        self._git, self._branch = view.git, view.branch
        self._rebuild, self._expected, self._root = rebuild, view.tip(), view.root
        self._tip = start = view.root if rebuild else self._expected  # the last commit of a finished batch
        if paths is None or rebuild:
            paths = PathMap({path: path for path in map(decoded, self._git.tree_files(start))})
        self.paths, self._changes = paths, TreeChanges()
        paths.listener = self._changes
        self._stream: FastImport | None = None
        self._blobs: set[str] = set()  # blobs this writer streamed (a rebuild keeps none of the old)
        self.ids: list[str] = []  # of the commits written, in order (by the end of finish)

    def add(
        self, visible: Mapping[str, tuple[str, Callable[[str], bytes]] | None], commit: ViewCommit
    ) -> None:
        """One commit: ``visible`` maps each path whose visible copy changed to ``(blob id, read)``
        (``read`` gives a blob's bytes from the store's mirror), or None where it left the view."""
        stream = self._stream = self._stream or self._git.fast_import()
        self._changes.clear()
        for path, target in visible.items():
            if target is None:
                if self.paths.owner(path) is not None:
                    self.paths.remove(path)
                continue
            blob_id, read = target
            if blob_id not in self._blobs and (self._rebuild or not self._git.has_object(blob_id)):
                if stream.blob(read(blob_id)) != blob_id:
                    raise MirrorError(f"blob {blob_id} read from a store's mirror does not hash to its id")
                self._blobs.add(blob_id)
            if self.paths.owner(path) is None:
                self.paths.add(path, path)
            self._changes.put(self.paths, path, blob_id)
        who = {"author": commit.source.author, "committer": commit.source.committer}
        stream.commit(parent=self._tip, message=commit.message(), changes=self._changes, **who)
        # Ten of an import's batches: each waits for its pack, and past eight packs the view is repacked.
        if stream.commits >= 10 * DEFAULT_BATCH_COMMITS or stream.bytes_written >= DEFAULT_BATCH_BYTES:
            self._write_batch()

    def finish(self) -> str | None:
        """Write what is pending, check the new tip out and move ``main`` (compare-and-swap); the tip.
        A file edited in the view keeps the user's bytes and shows as an edit against ``main``: never lost."""
        self._write_batch()
        tip, expected = self._tip, self._expected
        if tip != expected:
            with translated("checking out the awareness view"):
                target = self._git.tree(tip)
                conflicts = ConflictPaths()
                # An append checks out only what it changed: a whole tree's check costs its size.
                changed = None if self._rebuild else sorted(changed_paths(self._git, expected, tip or ""))
                self._git.checkout(target, strategy=_CHECKOUT, callbacks=conflicts, paths=changed)
                if conflicts.paths:
                    # The index takes main's entry for each skipped file, so git status shows the edit.
                    index = self._git.index()
                    for path in conflicts.paths:
                        if path in target:
                            index.add(pygit2.IndexEntry(path, target[path].id, pygit2.enums.FileMode.BLOB))
                        elif path in index:
                            index.remove(path)
                    index.write()
            if tip is not None:
                self._git.set_ref_if_equals(self._branch, tip, expected, message="memsync: awareness view")
            elif expected is not None:
                self._git.delete_ref_if_equals(self._branch, expected)
        if self._rebuild and self._expected not in (None, self._root):  # a new branch replaced nothing
            # The replaced history (and content a rewritten store no longer holds) leaves the view.
            self._git.drop_unreachable()
        else:
            self._git.repack()
        return tip

    def _write_batch(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            ids = stream.finish()
            self.ids += [ids[mark] for mark in range(1, stream.commits + 1)]
            self._tip = self.ids[-1] if self.ids else self._tip
