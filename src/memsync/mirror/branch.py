"""``main`` after a push: reset to the imported tip, local commits kept, the index in step.

Once a push is imported, ``memstore/main`` holds what the user committed, so ``main`` moves to it and
``git status`` reads "up to date". Local commits the tip does not contain are kept first under
``refs/memsync/pushed/<UTC time>-<commit>``. The index gets the tip's tree with fresh stat data for
every file the checkout holds as the tip has it, so ``git status`` stays fast and shows exactly the
files still local (conflicts, rejected files, withheld deletes).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import pygit2
from pygit2.enums import DeltaStatus, FileMode

from memsync.errors import MirrorError
from memsync.mirror.errors import translated
from memsync.mirror.snapshots import Snapshots, reconciled_import
from memsync.mirror.spellings import decoded

if TYPE_CHECKING:
    from memsync.mirror.repository import Mirror

PUSHED_PREFIX = "refs/memsync/pushed/"


def reset_main(mirror: Mirror, tip: str, *, when: datetime) -> str | None:
    """Point ``main`` (and the index) at ``tip``; the ref keeping the old ``main``, if it had to be kept."""
    old = mirror.git.ref_target(mirror.MAIN_REF)
    kept: str | None = None
    if old is not None and old != tip and not mirror.git.is_ancestor(old, tip):
        kept = f"{PUSHED_PREFIX}{when.strftime('%Y%m%dT%H%M%SZ')}-{old[:12]}"
        if mirror.git.ref_target(kept) != old:
            mirror.git.set_ref_if_equals(kept, old, None, message="memsync: local commits pushed")
    align_index(mirror, tip)
    if old != tip:
        mirror.git.set_ref_if_equals(mirror.MAIN_REF, tip, old, message="memsync: reset to the pushed tip")
    return kept


def main_rewind(
    mirror: Mirror, base: str | None, snaps: Snapshots
) -> tuple[str | None, int, dict[str, str | None]] | None:
    """How far ``main`` was moved back behind the base (``git reset --hard HEAD~2``), or None: the
    base's reconciled import must be missing from ``main``'s history (commits after it are no rewind).

    ``(fork, versions, before)``, the push engine's ``Rewind``: the newest imported commit ``main``
    still contains (None: none), how many imported versions lie between it and the reconciled commit,
    and each memory path they changed with its content's SHA-256 at ``fork`` (None: absent there).
    """
    main = mirror.git.ref_target(mirror.MAIN_REF)
    reconciled = reconciled_import(mirror, base) if base is not None else None
    if main is None or reconciled is None or mirror.git.is_ancestor(reconciled, main):
        return None
    with translated("finding where main was moved back to"):
        fork = mirror.git.merge_base(main, reconciled)
        versions = sum(1 for _ in mirror.git.walk(reconciled, since=fork))
        before: dict[str, str | None] = {}
        for delta in mirror.git.tree(fork).diff_to_tree(mirror.git.tree(reconciled)).deltas:
            if delta.status != DeltaStatus.ADDED:
                before[decoded(delta.old_file.path)] = snaps.sha256(str(delta.old_file.id))
            if delta.status != DeltaStatus.DELETED:
                before.setdefault(decoded(delta.new_file.path), None)
    return fork, versions, before


def pushed_refs(mirror: Mirror) -> list[str]:
    """The refs keeping earlier ``main`` tips, oldest first."""
    return mirror.git.refs(PUSHED_PREFIX)


def align_index(mirror: Mirror, commit: str) -> None:
    """Make the index hold ``commit``'s tree; entries of files the checkout holds unchanged get stat data."""
    wanted = mirror.git.tree_files(commit)
    index = mirror.git.index()
    with translated("reading the index"):
        conflicted = index.conflicts is not None
        current = {} if conflicted else {entry.path: str(entry.id) for entry in index}
    stale = current.keys() - wanted.keys()
    fresh = [(path, blob) for path, blob in wanted.items() if current.get(path) != blob]
    if not (conflicted or stale or fresh):
        return
    with translated("updating the index"):
        if conflicted:  # read_tree drops the conflict entries
            index.read_tree(mirror.git.tree(commit))
        for path in stale:
            index.remove(path)
        for path, blob in fresh:
            if mirror.worktree.blob(path) == blob:
                index.add(path)  # reads the file: the entry gets its stat data
            else:
                index.add(pygit2.IndexEntry(path, pygit2.Oid(hex=blob), FileMode.BLOB))
    try:
        index.write()
    except (pygit2.GitError, OSError) as exc:
        if (mirror.git_dir / "index.lock").exists():
            raise MirrorError(
                f"cannot update the index of {mirror.path}: git is working there (.git/index.lock exists);"
                " run again when it is done"
            ) from exc
        raise MirrorError(f"writing the index of {mirror.path}: {exc}") from exc
