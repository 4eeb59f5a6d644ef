"""Bringing the checkout (``main`` and the working tree) up to the imported tip, never over a local edit.

The working tree goes to the tip *first* and ``main`` after (the other order changes nothing on disk and
leaves a staged reverse change), then the base.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pygit2
from pygit2.enums import CheckoutNotify, CheckoutStrategy, RepositoryState

from memsync.crashpoints import crash_point
from memsync.errors import MirrorError
from memsync.mirror.errors import translated
from memsync.mirror.gitstore import make_durable, replace_file
from memsync.mirror.paths import escape_for_terminal
from memsync.mirror.refs import BASE_REF, MAIN_REF, MEMSTORE_REF
from memsync.mirror.worktree import prune_folders

if TYPE_CHECKING:
    from memsync.mirror.gitstore import GitStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CheckoutUpdate:
    """What :func:`update_checkout` did; ``reason``: why nothing moved."""

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

    def checkout_notify(self, why: CheckoutNotify, path: str, *files: pygit2.DiffFile | None) -> None:
        self.paths.append(path)

    def checkout_progress(self, path: str | None, completed_steps: int, total_steps: int) -> None:
        # libgit2 reports each file it wrote: a kill here leaves the tree part way to the tip.
        if path is not None:
            crash_point("checkout.file_written")


def changed_paths(mirror: GitStore, old: str | None, new: str) -> set[str]:
    """The tree paths that differ between two commits (both sides of a rename)."""
    with translated(f"comparing {old} with {new}"):
        deltas = mirror.tree(old).diff_to_tree(mirror.tree(new)).deltas
        return {path for delta in deltas for path in (delta.old_file.path, delta.new_file.path)}


def local_changes(mirror: GitStore) -> tuple[str, ...]:
    """Paths the user changed since ``refs/memsync/base``: in the working tree and index, or committed."""
    in_checkout = set(mirror.status())
    head, tip = mirror.ref_target(MAIN_REF), mirror.ref_target(MEMSTORE_REF)
    committed: set[str] = set()
    # With main at the tip (killed before the base followed), base..main is imported history.
    if head is not None and head != tip:
        # Lost refs/memsync/base: where main left the imported history (imported commits are not local).
        base = mirror.ref_target(BASE_REF) or (None if tip is None else mirror.merge_base(head, tip))
        committed = changed_paths(mirror, base, head) if base != head else set()
    if in_checkout and not committed and _toward_tip(mirror, head, in_checkout):
        return ()
    return tuple(sorted(in_checkout | committed))


def _toward_tip(mirror: GitStore, head: str | None, paths: set[str]) -> bool:
    """Whether each of ``paths`` already holds what the imported tip holds there: a kill part way
    through :func:`update_checkout` leaves files the tip's and the rest ``main``'s, none the user's."""
    tip = mirror.ref_target(MEMSTORE_REF)
    if tip is None or (head is not None and not mirror.is_ancestor(head, tip)):
        return False
    tree = mirror.tree(tip)
    # libgit2 writes in place: after a killed checkout (only then), one file cut short is the tip's too.
    may_be_cut = _killed_checkout(mirror) is not None
    for path in paths:
        wanted = _blob_data(tree, path)
        on_disk = mirror.workdir / path
        if wanted is None:
            # The tip has no file here; a folder of the tip's is fine (the status lists its files).
            is_folder = path in tree and os.path.isdir(on_disk) and not os.path.islink(on_disk)
            if os.path.lexists(on_disk) and not is_folder:
                return False
            continue
        if os.path.islink(on_disk):
            return False
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


def _marked_checkout(
    mirror: GitStore,
    old: str | None,
    new: str,
    *,
    conflicts: ConflictPaths | None = None,
    force: list[str] | None = None,
) -> None:
    """libgit2's checkout from main's commit ``old`` to the tip ``new``: SAFE, or FORCE for exactly the
    paths ``force`` names. The state's ``checkout`` intent stays unless it ends well."""
    tree = mirror.tree(new)
    mirror.state.put("checkout", {"from": old, "to": new, "started": time.time()})
    strategy = CheckoutStrategy.SAFE if force is None else CheckoutStrategy.FORCE
    mirror.checkout(
        tree, strategy=strategy | CheckoutStrategy.DONT_OVERWRITE_IGNORED, callbacks=conflicts, paths=force
    )
    # Durable before the intent goes: a file a power cut left short stays memsync's to settle, not an edit.
    written = force if force is not None else changed_paths(mirror, old, new)
    make_durable(mirror.workdir, written)
    mirror.state.put("checkout", None)


def _killed_checkout(mirror: GitStore) -> dict[str, Any] | None:
    """The intent a checkout left: the caller holds the store's lock, so it is an interrupted one."""
    intent = mirror.state.get("checkout")
    return intent if isinstance(intent, dict) and isinstance(intent.get("started"), int | float) else None


def undo_interrupted_checkout(mirror: GitStore) -> tuple[str, ...]:
    """Settle a checkout that stopped part way (docs/reliability.md, "The checkout's intent"); returns
    the paths left alone because the user changed them since."""
    intent = _killed_checkout(mirror)
    if intent is None:
        return ()
    kept: list[str] = []
    if intent.get("to") is not None:
        lock = mirror.git_dir / "index.lock"
        with contextlib.suppress(OSError):
            if lock.stat().st_mtime >= intent["started"]:
                lock.unlink()  # libgit2's, held for the whole checkout: the kill left it
        kept = _settle(mirror, intent.get("from"), intent["to"])
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
    """Back to ``old``, or on to ``new`` for a first checkout (no commit to merge an edit against)."""
    forward = old is None
    old_tree, new_tree = mirror.tree(old), mirror.tree(new)
    root = mirror.workdir
    kept: list[str] = []
    settle: dict[str, bytes | None] = {}  # tree path → the content it gets (None: no file)
    for path in sorted(changed_paths(mirror, old, new)):
        before, after = _blob_data(old_tree, path), _blob_data(new_tree, path)
        on_disk = root / path
        if os.path.islink(on_disk) or os.path.isdir(on_disk):
            # A folder of one tree's: its files are listed on their own. A link, or another folder: not ours.
            if os.path.islink(on_disk) or before is not None or after is not None:
                kept.append(path)
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
        elif data != (target := after if forward else before):
            settle[path] = target
    # Files that go first, deepest first, with the folders they leave empty; then files written.
    for path in sorted((p for p, c in settle.items() if c is None), key=lambda p: -p.count("/")):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(root / path)
        prune_folders(root, path)
    for path, content in sorted(settle.items()):
        if content is None:
            continue
        try:
            os.makedirs((root / path).parent, exist_ok=True)
            replace_file(root / path, content)
        except (NotADirectoryError, IsADirectoryError, FileExistsError):
            kept.append(path)  # the user's file or folder is in the way: left as it is
    index = mirror.index()
    if forward:
        index.read_tree(new_tree)
    else:
        for path, content in settle.items():
            if path in kept:
                continue
            if content is not None:  # main's blob
                index.add(pygit2.IndexEntry(path, old_tree[path].id, pygit2.enums.FileMode.BLOB))
            elif path in index:
                index.remove(path)
    index.write()
    if forward and mirror.ref_target(MAIN_REF) is None:
        mirror.set_ref_if_equals(MAIN_REF, new, None, message="memsync: first checkout completed")
        if mirror.ref_target(BASE_REF) is None:
            mirror.set_ref_if_equals(BASE_REF, new, None, message="memsync: first checkout completed")
    return sorted(kept)


def _blob_data(tree: pygit2.Tree, path: str) -> bytes | None:
    entry = tree[path] if path in tree else None  # noqa: SIM401 (a pygit2.Tree has no get)
    return entry.data if isinstance(entry, pygit2.Blob) else None


def update_checkout(mirror: GitStore) -> CheckoutUpdate:
    """Fast-forward ``main`` and the working tree to ``memstore/main`` if nothing local is pending."""
    tip = mirror.ref_target(MEMSTORE_REF)
    if tip is None:
        return CheckoutUpdate(tip=None, reason="nothing has been imported yet")
    undo_interrupted_checkout(mirror)
    # Mid-rebase (or merge, ...), moving main or the files would make its --continue or --abort go wrong.
    if (problem := head_problem(mirror)) is not None:
        return CheckoutUpdate(tip=tip, diverged=True, reason=problem)
    if changes := local_changes(mirror):
        return CheckoutUpdate(tip=tip, local_changes=changes, reason="local changes are pending")
    head = mirror.ref_target(MAIN_REF)
    base = mirror.ref_target(BASE_REF)
    if head is not None and head != tip and not mirror.is_ancestor(head, tip):
        return CheckoutUpdate(tip=tip, diverged=True, reason="main has commits that memstore/main lacks")
    if head != tip:
        conflicts = ConflictPaths()
        try:
            _marked_checkout(mirror, head, tip, conflicts=conflicts)
        except pygit2.GitError as exc:
            if not conflicts.paths:
                raise MirrorError(f"checking out the imported tip: {exc}") from exc
            # A file appeared in the way since the status (libgit2 then writes nothing). If it is the tip's
            # (a run killed before moving main), force those files and main..tip to the tip, no more.
            if _toward_tip(mirror, head, set(conflicts.paths)):
                moved = changed_paths(mirror, head, tip) | set(conflicts.paths)
                _marked_checkout(mirror, head, tip, force=sorted(moved))
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
    return CheckoutUpdate(tip=tip, updated=head != tip or base != tip)


# What ends each git operation in progress (the sequencer's multi-commit forms too), as git says it.
_IN_PROGRESS: dict[RepositoryState, str] = {
    state: (
        f"a {command} is in progress in the mirror: finish it with `{command} --continue` (after"
        f" resolving any conflicts and `git add`) or undo it with `{command} --abort`"
    )
    for command, states in (
        ("git revert", (RepositoryState.REVERT, RepositoryState.REVERT_SEQUENCE)),
        ("git cherry-pick", (RepositoryState.CHERRYPICK, RepositoryState.CHERRYPICK_SEQUENCE)),
        (
            "git rebase",
            (RepositoryState.REBASE, RepositoryState.REBASE_INTERACTIVE, RepositoryState.REBASE_MERGE),
        ),
        ("git am", (RepositoryState.APPLY_MAILBOX,)),
    )
    for state in states
} | {
    RepositoryState.MERGE: (
        "a git merge is in progress in the mirror: finish it (resolve any conflicts, `git add` the"
        " files, then `git commit`) or undo it with `git merge --abort`"
    ),
    RepositoryState.BISECT: (
        "a git bisect is in progress in the mirror: end it with `git bisect reset`, which returns to main"
    ),
    RepositoryState.APPLY_MAILBOX_OR_REBASE: (
        "a git rebase or git am is in progress in the mirror: finish it with `git rebase --continue`"
        " (or `git am --continue`) or undo it with `git rebase --abort` (or `git am --abort`)"
    ),
}
_AFTER = ", then sync again"


def head_problem(mirror: GitStore) -> str | None:
    """Why the checkout cannot be reconciled now, naming the git command that ends it; or None.
    A git operation in progress comes first: a rebase or a bisect also detaches HEAD."""
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
