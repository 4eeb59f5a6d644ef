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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2
from pygit2.enums import CheckoutNotify, CheckoutStrategy, FileStatus, RepositoryState

from memsync.crashpoints import crash_point
from memsync.errors import MirrorError
from memsync.mirror.errors import translated
from memsync.mirror.gitstore import make_durable, replace_file
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


# The state's "checkout" intent: {"from": main's commit, "to": the tip, "started": a time}. Noted
# before libgit2 writes a file, removed once it wrote them all; a kill, a full disk or any error in
# between leaves it, and the next run holding the store's lock (so no checkout of ours can be
# running) rolls the working tree back by it.


def _marked_checkout(
    mirror: GitStore,
    tree: pygit2.Tree,
    strategy: CheckoutStrategy,
    *,
    intent: tuple[str | None, str],
    callbacks: ConflictPaths | None = None,
    paths: list[str] | None = None,
) -> None:
    """libgit2's checkout of ``tree`` (never over an ignored file) from main's commit to the tip
    (``intent``), with the intent noted until every file is written (the state's ``checkout``)."""
    mirror.state.put("checkout", {"from": intent[0], "to": intent[1], "started": time.time()})
    mirror.checkout(
        tree,
        strategy=strategy | CheckoutStrategy.DONT_OVERWRITE_IGNORED,
        callbacks=callbacks,
        paths=paths,
    )
    # The files durable before the intent goes: after a power cut, a file the checkout wrote that
    # came back empty or short must still be memsync's to settle, never taken for the user's edit.
    written = paths if paths is not None else _changed_paths(mirror, intent[0], intent[1])
    make_durable(mirror.workdir, written)
    mirror.state.put("checkout", None)


def _killed_checkout(mirror: GitStore) -> float | None:
    """When a checkout of this mirror stopped part way: the time it started, else None. The caller
    holds the store's lock, so no checkout of ours is running now: a mark left is an interrupted one."""
    intent = mirror.state.get("checkout")
    started = intent.get("started") if isinstance(intent, dict) else None
    return float(started) if isinstance(started, int | float) else None


def undo_interrupted_checkout(mirror: GitStore) -> tuple[str, ...]:
    """Settle a checkout that stopped part way (a kill, a full disk, an I/O error) so that none of
    memsync's writes is taken for the user's; returns the paths left alone because the user changed
    them since (they stay exactly as they are). No-op without an intent.

    For every path the checkout was to change, a file that holds main's content, the tip's, or the
    start of the tip's (the file libgit2 was writing when it stopped) is memsync's; anything else is
    the user's. A checkout from an earlier commit is rolled back: memsync's files get main's
    content again (or go, where main had none), and the index main's entries; ``main`` and the base
    never moved, so an edit the user made meanwhile meets the tip in the ordinary three-way merge,
    whichever side they edited. The first checkout of a mirror (main has no commit: nothing to merge
    an edit against) is completed instead: memsync's files get the tip's content, the index the
    tip's tree, ``main`` and the base the tip, so an edit the user made meanwhile is an edit of the
    tip's file.
    """
    started = _killed_checkout(mirror)
    if started is None:
        return ()
    intent = mirror.state.get("checkout")
    old, new = intent.get("from"), intent.get("to")
    kept: list[str] = []
    if new is not None:
        lock = mirror.git_dir / "index.lock"
        with contextlib.suppress(OSError):
            if lock.stat().st_mtime >= started:
                lock.unlink()  # libgit2's, held for the whole checkout: the kill left it
        kept = _settle(mirror, old, new)
        if kept:
            log.warning(
                "a checkout that stopped part way was settled; %d file(s) changed since were left"
                " as they are: %s",
                len(kept),
                ", ".join(escape_for_terminal(path) for path in kept[:10]),
            )
    mirror.state.put("checkout", None)
    return tuple(kept)


def _settle(mirror: GitStore, old: str | None, new: str) -> list[str]:
    """:func:`undo_interrupted_checkout`'s work: back to ``old``, or on to ``new`` when ``old`` is None."""
    forward = old is None
    old_tree = mirror.tree(old) if old is not None else None
    new_tree = mirror.tree(new)
    with translated(f"comparing {old} with {new}"):
        deltas = (
            old_tree.diff_to_tree(new_tree) if old_tree is not None else new_tree.diff_to_tree(swap=True)
        ).deltas
        changed = sorted({path for delta in deltas for path in (delta.old_file.path, delta.new_file.path)})
    root = str(mirror.workdir)
    kept: list[str] = []
    settle: dict[str, bytes | None] = {}  # tree path → the content it gets (None: no file)
    for path in changed:
        before = _blob_data(old_tree, path)
        after = _blob_data(new_tree, path)
        target = after if forward else before
        on_disk = os.path.join(root, path)
        if os.path.islink(on_disk):
            kept.append(path)
            continue
        if os.path.isdir(on_disk):
            if before is None and after is None:
                continue  # a folder of one tree's: its files are listed on their own
            kept.append(path)  # a folder where the checkout reads or writes a file: not memsync's
            continue
        try:
            with open(on_disk, "rb") as file:
                data: bytes | None = file.read()
        except FileNotFoundError:
            data = None
        except OSError:
            kept.append(path)
            continue
        cut = data is not None and after is not None and len(data) < len(after) and after.startswith(data)
        if not (data in (before, after) or cut):
            kept.append(path)
        elif data != target:
            settle[path] = target
    # Files that go first, deepest first, with the folders they leave empty; then files written.
    for path in sorted((p for p, c in settle.items() if c is None), key=lambda p: -p.count("/")):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(root, path))
        _prune_empty_folders(root, path)
    for path, content in sorted(settle.items()):
        if content is None:
            continue
        target_file = os.path.join(root, path)
        try:
            os.makedirs(os.path.dirname(target_file), exist_ok=True)
            replace_file(Path(target_file), content)
        except (NotADirectoryError, IsADirectoryError, FileExistsError):
            kept.append(path)  # the user's file or folder is in the way: left as it is
    index = mirror.index()
    if forward:
        index.read_tree(new_tree)
    else:
        for path in settle:
            if path in kept:
                continue
            entry = old_tree[path] if old_tree is not None and path in old_tree else None
            if isinstance(entry, pygit2.Blob):
                index.add(pygit2.IndexEntry(path, entry.id, pygit2.enums.FileMode.BLOB))
            elif path in index:
                index.remove(path)
    index.write()
    if forward and mirror.ref_target(MAIN_REF) is None:
        mirror.set_ref_if_equals(MAIN_REF, new, None, message="memsync: first checkout completed")
        if mirror.ref_target(BASE_REF) is None:
            mirror.set_ref_if_equals(BASE_REF, new, None, message="memsync: first checkout completed")
    return sorted(kept)


def _blob_data(tree: pygit2.Tree | None, path: str) -> bytes | None:
    if tree is None or path not in tree:
        return None
    entry = tree[path]
    return entry.data if isinstance(entry, pygit2.Blob) else None


def _prune_empty_folders(root: str, path: str) -> None:
    folder = os.path.dirname(path)
    while folder:
        try:
            os.rmdir(os.path.join(root, folder))
        except OSError:
            return  # not empty (or not there): it and the folders above it stay
        folder = os.path.dirname(folder)


def update_checkout(mirror: GitStore) -> CheckoutUpdate:
    """Fast-forward ``main`` and the working tree to ``memstore/main`` if nothing local is pending."""
    tip = mirror.ref_target(MEMSTORE_REF)
    if tip is None:
        return CheckoutUpdate(tip=None, reason="nothing has been imported yet")
    undo_interrupted_checkout(mirror)
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
            _marked_checkout(mirror, target, CheckoutStrategy.SAFE, intent=(head, tip), callbacks=conflicts)
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
                _marked_checkout(
                    mirror, target, CheckoutStrategy.FORCE, intent=(head, tip), paths=sorted(moved)
                )
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
    # "updated" only when something moved: a pull that found nothing new leaves it "unchanged".
    return CheckoutUpdate(tip=tip, updated=head != tip or base != tip)


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
