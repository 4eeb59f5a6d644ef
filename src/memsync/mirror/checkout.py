"""Bringing the checkout (``main`` and the working tree) up to the imported tip, never over a local edit.

Local changes are everything the user did since the last reconciliation: working-tree and index
differences from ``main`` (new files included, editor temporaries excluded), plus what commits on
``main`` changed since ``refs/memsync/base``. With any local change, nothing moves and the changed
paths are returned: the push engine reconciles them. Otherwise the working tree is checked out to the
tip *first* and ``main`` moved after (the other order changes nothing on disk and leaves a staged
reverse change), then ``refs/memsync/base``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pygit2
from pygit2.enums import CheckoutNotify, CheckoutStrategy, FileStatus

from memsync.crashpoints import crash_point
from memsync.errors import MirrorError
from memsync.mirror.errors import translated
from memsync.mirror.packfiles import NotPacked, checkout_objects
from memsync.mirror.worktree import head_problem

if TYPE_CHECKING:
    from memsync.mirror.repository import Mirror

_EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

# A checkout that writes at least this many files first gathers what it reads into one pack. A
# 1,000-file first import (11 packs) kept 1.4 MiB of indexes mapped, 10,000 files (51 packs) 12.9;
# a few dozen files touch a few pages, and listing and copying them would cost more than it saves.
GATHER_FROM_FILES = 256


@dataclass(frozen=True, slots=True)
class CheckoutUpdate:
    """What :func:`update_checkout` did.

    ``updated``: ``main``, the working tree and ``refs/memsync/base`` now equal ``tip``.
    ``local_changes``: working-tree paths (``/``-separated, as on disk) changed since the base; when
    any exist nothing was moved. ``diverged``: ``main`` holds commits the tip does not contain and
    that change nothing, so it cannot fast-forward; the push engine decides. ``reason`` says in
    words why nothing moved (None when ``updated``).
    """

    updated: bool
    tip: str | None
    local_changes: tuple[str, ...] = ()
    diverged: bool = False
    reason: str | None = None


class ConflictPaths(pygit2.CheckoutCallbacks):
    """Collects the paths a SAFE checkout refuses to overwrite (a local edit where the tree changes)."""

    def __init__(self) -> None:
        super().__init__()
        self.paths: list[str] = []

    def checkout_notify_flags(self) -> CheckoutNotify:
        return CheckoutNotify.CONFLICT

    def checkout_notify(
        self,
        why: CheckoutNotify,
        path: str,
        baseline: pygit2.DiffFile | None,
        target: pygit2.DiffFile | None,
        workdir: pygit2.DiffFile | None,
    ) -> None:
        self.paths.append(path)


def _reconciled_base(mirror: Mirror, head: str) -> str | None:
    """The base to diff ``main`` against: ``refs/memsync/base``, or, when that ref was lost, the
    last commit ``main`` shares with the imported history (so imported commits never count as local).
    """
    base = mirror.ref_target(mirror.BASE_REF)
    if base is not None:
        return base
    tip = mirror.tip()
    if tip is None:
        return None
    with translated("finding where main left the imported history"):
        try:
            return str(mirror._repo.merge_base(head, tip))
        except (pygit2.GitError, KeyError, ValueError, TypeError):
            return None


def local_changes(mirror: Mirror) -> tuple[str, ...]:
    """Working-tree paths the user changed since ``refs/memsync/base`` (sorted, unique)."""
    repo = mirror._repo
    changed: set[str] = set()
    with translated("reading the status of the checkout"):
        for path, flags in repo.status(untracked_files="all", ignored=False).items():
            if flags not in (FileStatus.CURRENT, FileStatus.IGNORED):
                changed.add(path)
        head = mirror.ref_target(mirror.MAIN_REF)
        if head is not None:
            base = _reconciled_base(mirror, head)
            if head != base:
                old = repo[base].peel(pygit2.Tree) if base else repo[_EMPTY_TREE].peel(pygit2.Tree)
                for delta in old.diff_to_tree(repo[head].peel(pygit2.Tree)).deltas:
                    changed.add(delta.old_file.path)
                    changed.add(delta.new_file.path)
    if changed and _left_at_tip(mirror, head):
        return ()
    return tuple(sorted(changed))


_WORKTREE_CHANGES = (
    FileStatus.WT_NEW
    | FileStatus.WT_MODIFIED
    | FileStatus.WT_DELETED
    | FileStatus.WT_TYPECHANGE
    | FileStatus.WT_RENAMED
    | FileStatus.WT_UNREADABLE
    | FileStatus.CONFLICTED
)


def _left_at_tip(mirror: Mirror, head: str | None) -> bool:
    """Whether index and working tree are exactly the imported tip, with main behind it.

    That is what a kill leaves between :func:`update_checkout` writing the tip's tree and moving
    ``main`` and the base: nothing of it is the user's, and reporting it as local changes would
    keep the checkout from ever reaching the tip again.
    """
    repo = mirror._repo
    tip = mirror.tip()
    if tip is None or (head is not None and not mirror._is_ancestor(head, tip)):
        return False
    with translated("comparing the checkout with the imported tip"):
        index = repo.index
        index.read()
        if len(index.diff_to_tree(repo[tip].peel(pygit2.Tree))) != 0:
            return False
        statuses = repo.status(untracked_files="all", ignored=False).values()
    return not any(flags & _WORKTREE_CHANGES for flags in statuses)


def _gathered_for_checkout(
    mirror: Mirror, head: str | None, tip: str
) -> contextlib.AbstractContextManager[None]:
    """For a large checkout, what it reads gathered into one pack (:meth:`Mirror.gathered`).

    What it reads: the tip's root tree, and every tree and file that differs from ``main`` (a first
    checkout: all of them), listed by reading the packs directly (:func:`checkout_objects`) rather
    than through libgit2, whose lookups are the very cost this avoids.
    """
    if mirror.pack_count() < 2:
        return contextlib.nullcontext()
    try:
        wanted, files = checkout_objects(mirror.objects_dir / "pack", tip, head)
    except NotPacked:
        return contextlib.nullcontext()  # loose objects (a local commit on main): libgit2 reads them
    return mirror.gathered(wanted) if files >= GATHER_FROM_FILES else contextlib.nullcontext()


def update_checkout(mirror: Mirror) -> CheckoutUpdate:
    """Fast-forward ``main`` and the working tree to ``memstore/main`` if nothing local is pending."""
    repo = mirror._repo
    tip = mirror.tip()
    if tip is None:
        return CheckoutUpdate(updated=False, tip=None, reason="nothing has been imported yet")
    # Mid-rebase (or merge, bisect, ...) the checkout is git's and the user's: moving main or the
    # files under that operation would make its --continue or --abort go wrong.
    problem = head_problem(mirror)
    if problem is not None:
        return CheckoutUpdate(updated=False, tip=tip, diverged=True, reason=problem)
    changes = local_changes(mirror)
    if changes:
        return CheckoutUpdate(
            updated=False, tip=tip, local_changes=changes, reason="local changes are pending"
        )
    head = mirror.ref_target(mirror.MAIN_REF)
    base = mirror.ref_target(mirror.BASE_REF)
    if head is not None and head != tip and not mirror._is_ancestor(head, tip):
        return CheckoutUpdate(
            updated=False, tip=tip, diverged=True, reason="main has commits that memstore/main lacks"
        )
    if head != tip:
        target = repo[tip].peel(pygit2.Tree)
        conflicts = ConflictPaths()
        try:
            with _gathered_for_checkout(mirror, head, tip):
                repo.checkout_tree(
                    target,
                    strategy=CheckoutStrategy.SAFE | CheckoutStrategy.DONT_OVERWRITE_IGNORED,
                    callbacks=conflicts,
                )
        except pygit2.GitError as exc:
            if not conflicts.paths:
                raise MirrorError(f"checking out the imported tip: {exc}") from exc
            # A file appeared in the way after the status was read (libgit2 checks every conflict
            # before writing anything, so nothing was touched): report it, move nothing. Unless
            # the files in the way are the tip's own, written by a run killed before moving main.
            if not _left_at_tip(mirror, head):
                pending = set(local_changes(mirror)) | set(conflicts.paths)
                return CheckoutUpdate(
                    updated=False,
                    tip=tip,
                    local_changes=tuple(sorted(pending)),
                    reason="files are in the way",
                )
        crash_point("checkout.tree_written")
        mirror.set_ref_if_equals(mirror.MAIN_REF, tip, head, message="memsync: checkout of the imported tip")
        crash_point("checkout.main_moved")
    if base != tip:
        mirror.set_ref_if_equals(mirror.BASE_REF, tip, base, message="memsync: checkout reconciled")
    return CheckoutUpdate(updated=True, tip=tip)
