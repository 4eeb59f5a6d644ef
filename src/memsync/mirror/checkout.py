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
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pygit2
from pygit2.enums import CheckoutNotify, CheckoutStrategy, FileStatus, RepositoryState

from memsync.crashpoints import crash_point
from memsync.errors import MirrorError
from memsync.mirror.errors import translated
from memsync.mirror.gitstore import process_gone
from memsync.mirror.paths import escape_for_terminal
from memsync.mirror.refs import BASE_REF, MAIN_REF, MEMSTORE_REF

if TYPE_CHECKING:
    from memsync.mirror.gitstore import GitStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CheckoutUpdate:
    """What :func:`update_checkout` did.

    ``updated``: ``main``, the working tree and ``refs/memsync/base`` now equal ``tip``.
    ``local_changes``: working-tree paths (``/``-separated, as on disk) changed since the base; when
    any exist nothing was moved. ``diverged``: ``main`` holds commits the tip does not contain and
    that change nothing, so it cannot fast-forward; the push engine decides. ``reason`` says in
    words why nothing moved (None when ``updated``).
    """

    tip: str | None
    updated: bool = False
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

    def checkout_progress(self, path: str | None, completed_steps: int, total_steps: int) -> None:
        # libgit2 reports each file it wrote: a kill here leaves the tree part way to the tip.
        if path is not None:
            crash_point("checkout.file_written")


def _changed_paths(mirror: GitStore, old: str | None, new: str) -> set[str]:
    """The tree paths that differ between two commits (both sides of a rename)."""
    with translated(f"comparing {old} with {new}"):
        deltas = mirror.tree(old).diff_to_tree(mirror.tree(new)).deltas
        return {path for delta in deltas for path in (delta.old_file.path, delta.new_file.path)}


def local_changes(mirror: GitStore) -> tuple[str, ...]:
    """Working-tree paths the user changed since ``refs/memsync/base`` (sorted, unique)."""
    status = mirror.status()
    in_checkout = {
        path for path, flags in status.items() if flags not in (FileStatus.CURRENT, FileStatus.IGNORED)
    }
    head, tip = mirror.ref_target(MAIN_REF), mirror.ref_target(MEMSTORE_REF)
    committed: set[str] = set()
    # With main at the tip (moved there by a checkout killed before the base followed), what lies
    # between the base and main is imported history, not the user's.
    if head is not None and head != tip:
        # Lost refs/memsync/base: where main left the imported history (imported commits are not local).
        base = mirror.ref_target(BASE_REF) or (None if tip is None else mirror.merge_base(head, tip))
        committed = _changed_paths(mirror, base, head) if base != head else set()
    if in_checkout and not committed and _toward_tip(mirror, head, in_checkout):
        return ()
    return tuple(sorted(in_checkout | committed))


def _toward_tip(mirror: GitStore, head: str | None, paths: set[str]) -> bool:
    """Whether each of ``paths`` already holds what the imported tip holds there.

    That is what a kill leaves part way through :func:`update_checkout` writing the tip's tree:
    libgit2 writes the working tree file by file (and the index last), so some files are the tip's
    and the rest still ``main``'s. None of it is the user's, and the checkout must go on to the tip
    rather than report the tip's own files as local changes. A file that matches neither (an edit)
    makes this False, and with it nothing is overwritten.
    """
    tip = mirror.ref_target(MEMSTORE_REF)
    if tip is None or (head is not None and not mirror.is_ancestor(head, tip)):
        return False
    tree = mirror.tree(tip)
    # libgit2 writes each file in place, so a kill can cut the one it was writing short: after a
    # killed checkout (and only then), one file that is the start of the tip's is the tip's too.
    may_be_cut = _killed_checkout(mirror) is not None
    for path in paths:
        entry = tree[path] if path in tree else None  # noqa: SIM401 (a pygit2.Tree has no get)
        on_disk = os.path.join(mirror.workdir, path)
        if not isinstance(entry, pygit2.Blob):
            # The tip has no file here. A folder of the tip's in its place is fine: the status
            # lists the files in it on their own.
            is_folder = entry is not None and os.path.isdir(on_disk) and not os.path.islink(on_disk)
            if os.path.lexists(on_disk) and not is_folder:
                return False
            continue
        if os.path.islink(on_disk):
            return False
        wanted = entry.data
        try:
            # Read, not stat-then-read: the user's editor may be saving it this very moment.
            with open(on_disk, "rb") as file:
                data = file.read(len(wanted) + 1)
        except OSError:
            return False
        if data != wanted:
            if not (may_be_cut and len(data) < len(wanted) and wanted.startswith(data)):
                return False
            may_be_cut = False
    return True


_CHECKOUT_MARK = "checkout-pid"


def _marked_checkout(
    mirror: GitStore,
    tree: pygit2.Tree,
    strategy: CheckoutStrategy,
    *,
    callbacks: ConflictPaths | None = None,
    paths: list[str] | None = None,
) -> None:
    """libgit2's checkout of ``tree`` (never over an ignored file), while ``.git/memsync/checkout-pid``
    names this process as the one writing the tree.

    libgit2 holds ``.git/index.lock`` for the whole checkout; a kill leaves it behind, and git (like
    libgit2) then refuses every command until someone deletes it. The mark lets the next run tell
    that lock from a live git command's: see :func:`_clear_killed_checkout`.
    """
    mark = mirror.state_dir / _CHECKOUT_MARK
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.write_text(str(os.getpid()), encoding="ascii")
    try:
        mirror.checkout(
            tree,
            strategy=strategy | CheckoutStrategy.DONT_OVERWRITE_IGNORED,
            callbacks=callbacks,
            paths=paths,
        )
    finally:
        mark.unlink(missing_ok=True)


def _killed_checkout(mirror: GitStore) -> float | None:
    """When a checkout of this mirror was killed part way: the time it started, else None.

    The mark names a process that no longer exists; the store lock keeps any other memsync out, so
    nothing of ours is writing. The mark stays until a checkout completes.
    """
    mark = mirror.state_dir / _CHECKOUT_MARK
    try:
        pid = int(mark.read_text(encoding="ascii"))
        started = mark.stat().st_mtime
    except (OSError, ValueError):
        return None
    # Alive (or the pid was reused): not ours to judge.
    return started if process_gone(pid) else None


def _clear_killed_checkout(mirror: GitStore) -> None:
    """Delete the ``index.lock`` a killed checkout of this mirror left, and only that one.

    It is that one when no older than the killed checkout's mark. A lock of a git command started
    since stays: :func:`wait_for_index_lock` waits for it, then names it.
    """
    started = _killed_checkout(mirror)
    lock = mirror.git_dir / "index.lock"
    with contextlib.suppress(OSError):
        if started is not None and lock.stat().st_mtime >= started:
            lock.unlink()
            log.warning("removed %s, left by a killed checkout", lock)


def update_checkout(mirror: GitStore) -> CheckoutUpdate:
    """Fast-forward ``main`` and the working tree to ``memstore/main`` if nothing local is pending."""
    tip = mirror.ref_target(MEMSTORE_REF)
    if tip is None:
        return CheckoutUpdate(tip=None, reason="nothing has been imported yet")
    _clear_killed_checkout(mirror)
    # Mid-rebase (or merge, bisect, ...) the checkout is git's and the user's: moving main or the
    # files under that operation would make its --continue or --abort go wrong.
    if (problem := head_problem(mirror)) is not None:
        return CheckoutUpdate(tip=tip, diverged=True, reason=problem)
    if changes := local_changes(mirror):
        return CheckoutUpdate(tip=tip, local_changes=changes, reason="local changes are pending")
    head = mirror.ref_target(MAIN_REF)
    base = mirror.ref_target(BASE_REF)
    if head is not None and head != tip and not mirror.is_ancestor(head, tip):
        return CheckoutUpdate(tip=tip, diverged=True, reason="main has commits that memstore/main lacks")
    if head != tip:
        target = mirror.tree(tip)
        conflicts = ConflictPaths()
        try:
            _marked_checkout(mirror, target, CheckoutStrategy.SAFE, callbacks=conflicts)
        except pygit2.GitError as exc:
            if not conflicts.paths:
                raise MirrorError(f"checking out the imported tip: {exc}") from exc
            # A file appeared in the way after the status was read (libgit2 checks every conflict
            # before writing anything, so nothing was touched): report it, move nothing. Unless
            # the files in the way are the tip's own, written by a run killed before moving main:
            # then the rest (main's) are forced to the tip too.
            if _toward_tip(mirror, head, set(conflicts.paths)):
                # Forced only where main and the tip differ: a file the tip does not change is
                # never rewritten, whatever happened to it since the status was read.
                moved = _changed_paths(mirror, head, tip) | set(conflicts.paths)
                _marked_checkout(mirror, target, CheckoutStrategy.FORCE, paths=sorted(moved))
            else:
                pending = set(local_changes(mirror)) | set(conflicts.paths)
                return CheckoutUpdate(
                    tip=tip, local_changes=tuple(sorted(pending)), reason="files are in the way"
                )
        crash_point("checkout.tree_written")
        mirror.set_ref_if_equals(MAIN_REF, tip, head, message="memsync: checkout of the imported tip")
        crash_point("checkout.main_moved")
    if base != tip:
        mirror.set_ref_if_equals(BASE_REF, tip, base, message="memsync: checkout reconciled")
    return CheckoutUpdate(tip=tip, updated=True)


def _continue_or_abort(command: str) -> str:
    return (
        f"a {command} is in progress in the mirror: finish it with `{command} --continue` (after"
        f" resolving any conflicts and `git add`) or undo it with `{command} --abort`"
    )


# What ends each git operation, named as git itself says it: "finish" first, then "undo".
_IN_PROGRESS: dict[RepositoryState, str] = {
    RepositoryState.MERGE: (
        "a git merge is in progress in the mirror: finish it (resolve any conflicts, `git add` the"
        " files, then `git commit`) or undo it with `git merge --abort`"
    ),
    RepositoryState.REVERT: _continue_or_abort("git revert"),
    RepositoryState.CHERRYPICK: _continue_or_abort("git cherry-pick"),
    RepositoryState.BISECT: (
        "a git bisect is in progress in the mirror: end it with `git bisect reset`, which returns to main"
    ),
    RepositoryState.REBASE: _continue_or_abort("git rebase"),
    RepositoryState.APPLY_MAILBOX: _continue_or_abort("git am"),
    RepositoryState.APPLY_MAILBOX_OR_REBASE: (
        "a git rebase or git am is in progress in the mirror: finish it with `git rebase --continue`"
        " (or `git am --continue`) or undo it with `git rebase --abort` (or `git am --abort`)"
    ),
}
# The sequencer's multi-commit forms end with the same commands.
_IN_PROGRESS[RepositoryState.REVERT_SEQUENCE] = _IN_PROGRESS[RepositoryState.REVERT]
_IN_PROGRESS[RepositoryState.CHERRYPICK_SEQUENCE] = _IN_PROGRESS[RepositoryState.CHERRYPICK]
_IN_PROGRESS[RepositoryState.REBASE_INTERACTIVE] = _IN_PROGRESS[RepositoryState.REBASE]
_IN_PROGRESS[RepositoryState.REBASE_MERGE] = _IN_PROGRESS[RepositoryState.REBASE]
_AFTER = ", then sync again"


def head_problem(mirror: GitStore) -> str | None:
    """Why the checkout cannot be reconciled now, naming the git command that ends it; or None.

    A git operation in progress comes first: a rebase or a bisect also detaches HEAD, and the
    `git switch main` that a detached HEAD calls for is what git refuses in the middle of them.
    """
    head = mirror.head()
    if (state := head.state) is not RepositoryState.NONE:
        return _IN_PROGRESS.get(state, f"a git operation ({state.name.lower()}) is in progress") + _AFTER
    if head.target is None:
        return None
    if head.branch is None:
        return (
            f"HEAD is detached (at {head.target[:12]}) in the mirror, not on main, the"
            " branch memsync syncs: run `git switch main` (to keep commits made there, run `git"
            " branch NAME` first and merge it into main)" + _AFTER
        )
    if head.branch != MAIN_REF:
        branch = escape_for_terminal(head.shorthand or head.branch)
        return (
            f"HEAD is on the branch `{branch}` in the mirror, not on main, the branch memsync syncs:"
            f" run `git switch main` (then `git merge {branch}` to bring its changes along)" + _AFTER
        )
    return None
