"""Which watched paths really changed: the checkout compared with what memsync last put there.

A pull's checkout update, a merge memsync writes, a ``touch``, an editor's temporary file that is gone
again by the end of the quiet period — none of these is an edit to push. After the quiet period each
path is re-hashed (as a git blob id) and compared with the tree of ``refs/memsync/base`` (the commit
the checkout was last reconciled with; ``main`` before the first reconcile): equal means nothing to do.
A path that differs is requested once per content: if the same content shows up again (a second
``touch``), the cycle already requested for it covers it. A path that holds exactly the markers memsync
wrote for an open conflict is memsync's own write too.
Untracked paths that :meth:`memsync.mirror.Mirror.is_ignored` leaves out never count: the same list of
editor temporaries and the same ignore rules as the push's scan, matched by git's rules.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from memsync.errors import MemsyncError
from memsync.mirror import (
    Mirror,
    blob_id,
    encode_path,
    encode_paths,
)

log = logging.getLogger("memsync.daemon.watch")

_SYMLINK = "symlink"  # a pseudo blob id: never equal to a base blob, so a symlink is reported once


# Past this a file is no memory (at most 100 KiB): it is not read whole, only reported as changed, and
# the push names why it refuses it.
HASHED_BYTES = 1 << 20


def file_blob_id(path: Path) -> str | None:
    """The git blob id of the file at ``path`` (None if absent or not a file), without following links.

    Opened without blocking and checked again once open: a FIFO or device swapped in after the
    ``lstat`` must not stall the watcher's thread. A file over :data:`HASHED_BYTES` gets a pseudo id
    from its size and mtime, different from every blob's.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return _SYMLINK
    if not stat.S_ISREG(info.st_mode):
        return None
    flags = (
        os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    )
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return _SYMLINK if os.path.islink(path) else None  # swapped for a link: ELOOP
    with os.fdopen(fd, "rb") as handle:
        opened = os.fstat(handle.fileno())
        if not stat.S_ISREG(opened.st_mode):
            return None
        if opened.st_size > HASHED_BYTES:
            return f"large:{opened.st_size}:{opened.st_mtime_ns}"
        data = handle.read(HASHED_BYTES + 1)
    if len(data) > HASHED_BYTES:
        return f"large:{len(data)}:{opened.st_mtime_ns}"
    return blob_id(data)


class CheckoutBaseline:
    """The base tree of one checkout, and which of a set of paths differ from it."""

    def __init__(self, checkout: Path) -> None:
        self.checkout = checkout
        self._mirror: Mirror | None = None
        self._tree: tuple[str | None, dict[str, str]] = (None, {})
        # Tree path -> the content (blob id, None: absent) a cycle was last requested for.
        self._requested: dict[str, str | None] = {}

    def close(self) -> None:
        if self._mirror is not None:
            self._mirror.close()
            self._mirror = None

    def changed(self, tree_paths: Iterable[str]) -> list[str]:
        """The paths among ``tree_paths`` whose content is an edit memsync has not been asked to handle."""
        try:
            return self._changed(sorted(set(tree_paths)))
        finally:
            # The mirror is not kept open between comparisons: an open repository keeps every pack the
            # cycles write and later consolidate away open, descriptors and maps that grow with imports.
            self.close()

    def _changed(self, wanted: list[str]) -> list[str]:
        try:
            base = self._base_tree()
        except MemsyncError as exc:
            # Cannot tell: let the cycle look (it reports what is wrong with the mirror).
            log.warning("cannot read the base of %s (%s); requesting a cycle", self.checkout, exc)
            return wanted
        candidates: dict[str, str | None] = {}
        for tree_path in wanted:
            current = file_blob_id(self.checkout / tree_path)
            if current is None and os.path.isdir(self.checkout / tree_path):
                # A directory appearing is its files appearing: they have their own events.
                continue
            if current == base.get(tree_path) and not (current is None and _has_files_under(base, tree_path)):
                self._requested.pop(tree_path, None)
                continue
            if current is None and tree_path not in base and not _has_files_under(base, tree_path):
                self._requested.pop(tree_path, None)  # a temporary that came and went
                continue
            if tree_path in self._requested and self._requested[tree_path] == current:
                continue
            candidates[tree_path] = current
        if candidates:
            for tree_path, markers in self._conflict_markers().items():
                if candidates.get(tree_path, "") == markers:
                    # The conflict markers a cycle wrote: memsync's own write, and no resolution
                    # (only ``memsync resolve`` ends a conflict), so nothing a cycle could do.
                    del candidates[tree_path]
                    self._requested.pop(tree_path, None)
        changed = [p for p in candidates if p in base or not self._ignored(p)]
        for tree_path in changed:
            self._requested[tree_path] = candidates[tree_path]
        return changed

    def _base_tree(self) -> dict[str, str]:
        """``{tree path: blob id}`` of the base commit, cached per commit."""
        if self._mirror is None:
            self._mirror = Mirror.open(self.checkout)
        mirror = self._mirror
        commit = mirror.base() or mirror.main()
        if commit == self._tree[0]:
            return self._tree[1]
        if commit is None:
            tree: dict[str, str] = {}
        else:
            try:
                files = mirror.files(commit)
            except MemsyncError:
                # The pack this handle knew may have been consolidated away: one fresh look.
                mirror.close()
                self._mirror = mirror = Mirror.open(self.checkout)
                files = mirror.files(commit)
            encoded = encode_paths(files)
            tree = {encoded[memory_path]: blob for memory_path, blob in files.items()}
        self._tree = (commit, tree)
        return tree

    def _conflict_markers(self) -> dict[str, str]:
        """``{tree path: blob id of the markers memsync wrote}`` of the open conflicts."""
        assert self._mirror is not None  # opened by _base_tree, which changed() calls first
        mirror = self._mirror
        try:
            markers = {}
            for memory_path, record in mirror.conflicts.open().items():
                blob = mirror.conflicts.blob(record, "markers")
                if blob is not None:
                    markers[mirror.worktree.locate(memory_path) or encode_path(memory_path)] = blob
            return markers
        except MemsyncError as exc:
            log.warning("cannot read the open conflicts of %s: %s", self.checkout, exc)
            return {}

    def _ignored(self, tree_path: str) -> bool:
        """Whether the push's scan would leave the untracked file out too (memsync.mirror.ignores)."""
        assert self._mirror is not None  # opened by _base_tree, which changed() calls first
        try:
            return self._mirror.is_ignored(tree_path)
        except MemsyncError as exc:
            log.warning("cannot tell whether %s is ignored in %s: %s", tree_path, self.checkout, exc)
            return False


def _has_files_under(tree: dict[str, str], tree_path: str) -> bool:
    prefix = tree_path.rstrip("/") + "/"
    return any(path.startswith(prefix) for path in tree)
