"""``memsync resolve``: end a recorded conflict, so the next push or sync sends the resolution.

Memories may contain ``<<<<<<<`` naturally, so removing markers from a file never ends a conflict;
only this does. The resolution is the checkout's content (``--ours``: the local side as it was when
the conflict was recorded), the store's (``--theirs``: the remote side then), or, without either, the
file as the user edited it (refused while it still holds exactly the markers memsync wrote; a deleted
file resolves to a delete). The file is written, the conflict's ref moves to
``refs/memsync/resolved/``, and the base entry of the path is the remote version the conflict was made
against, so the push that follows carries that version's hash as its precondition: a store that moved
on since answers 409 and the resolution is merged against the newer content.

Which mirror: PATH is absolute; or relative to the current folder when that is inside a mirror; or
else relative to the root of the one mirror with a conflict at that path (``store`` picks one when
several have).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from memsync.errors import MemsyncError, RuleViolation, UsageError, UserError
from memsync.mirror import Mirror, Snapshots, decode_path, escape_for_terminal
from memsync.mirror.conflicts import ConflictRecord
from memsync.mirror.snapshots import SnapshotEntry
from memsync.mirror.worktree import NOT_REGULAR, CheckoutChange
from memsync.rules import Dialect, decode_content
from memsync.sync.outputs import ResolveOutput
from memsync.sync.pull import store_lock
from memsync.sync.report import Reported
from memsync.sync.stores import existing_mirrors

OURS = "ours"
THEIRS = "theirs"


@dataclass(frozen=True)
class Target:
    """The conflict a PATH argument names: the mirror's working tree and the memory path."""

    mirror: Path
    memory_path: str
    tree_path: str


@dataclass(frozen=True)
class Resolution(Reported):
    """What :func:`resolve_conflict` did."""

    store_id: str
    path: str
    choice: str  # ours | theirs | edited | deleted
    resolved_ref: str
    # Whether the next push has something to send: not when the file now holds the store's content.
    sends: bool = True

    def output(self) -> ResolveOutput:
        return ResolveOutput.model_validate(
            {
                "id": self.store_id,
                "ok": True,
                "error": None,
                "path": self.path,
                "resolution": self.choice,
                "resolved_ref": self.resolved_ref,
            }
        )


def find_target(path: str, *, cwd: Path, root: Path, store: str | None = None) -> Target:
    """Which mirror and memory ``path`` means (see the module docstring)."""
    given = Path(path)
    if given.is_absolute():
        enclosing = _enclosing_mirror(given)
        if enclosing is None:
            raise UserError(
                f"{escape_for_terminal(path)} is not inside a memsync mirror (the mirrors are under {root})"
            )
        return _target_in(enclosing, given, path)
    here = _enclosing_mirror(cwd)
    if here is not None and store is None:
        return _target_in(here, cwd / given, path)
    candidates = [m for m in existing_mirrors(root) if store is None or m.name == store]
    if store is not None and not candidates:
        raise UsageError(f"there is no mirror of store {store} under {root}")
    found: list[Target] = []
    for mirror in candidates:
        try:
            target = _target_in(mirror, mirror / given, path)
        except UserError:
            continue
        with Mirror.open(mirror) as opened:
            if target.memory_path in opened.conflicts.open():
                found.append(target)
    if not found:
        raise UserError(
            f"no mirror under {root} has a conflict at {escape_for_terminal(path)}; memsync status lists"
            " the conflicts"
        )
    if len(found) > 1:
        stores = ", ".join(t.mirror.name for t in found)
        raise UsageError(
            f"several mirrors have a conflict at {escape_for_terminal(path)} ({stores}): add --store ID"
        )
    return found[0]


def _enclosing_mirror(where: Path) -> Path | None:
    """The mirror whose working tree contains ``where`` (its nearest folder with a ``.git``), or None."""
    current = Path(os.path.abspath(where))
    for candidate in [current, *current.parents]:
        if (candidate / ".git").is_dir():
            return candidate
    return None


def _target_in(mirror: Path, full: Path, given: str) -> Target:
    relative = os.path.relpath(os.path.abspath(full), mirror)
    if relative.startswith("..") or relative == ".":
        raise UserError(f"{escape_for_terminal(given)} is not a file inside the mirror {mirror}")
    tree_path = Path(relative).as_posix()
    try:
        memory_path = decode_path(tree_path)
    except MemsyncError as exc:
        raise UserError(f"{escape_for_terminal(given)} is no memory's file: {exc}") from None
    return Target(mirror, memory_path, tree_path)


def resolve_conflict(target: Target, choice: str | None, dialect: Dialect) -> Resolution:
    """End the conflict at ``target``: write the chosen side (or take the edited file), move the base."""
    mirror_path = target.mirror
    with store_lock(mirror_path.parent, mirror_path.name), Mirror.open(mirror_path) as mirror:
        record = mirror.conflicts.open().get(target.memory_path)
        if record is None:
            raise UserError(
                f"there is no conflict at {escape_for_terminal(target.tree_path)} in {mirror_path};"
                " memsync status lists the open ones"
            )
        mirror.worktree.wait_for_index_lock()
        outcome, replaced = _apply(mirror, record, choice, dialect)
        _base_from_conflict(mirror, record)
        resolved = mirror.conflicts.end(record, resolution=outcome, replaced=replaced)
        # The base is now the store's side: a file equal to it is no change to push.
        sends = mirror.worktree.sha256(record.memory_path) != record.remote_sha256
    where = locate_or(mirror_path, target)
    return Resolution(mirror_path.name, where, outcome, resolved, sends)


def locate_or(mirror_path: Path, target: Target) -> str:
    with Mirror.open(mirror_path) as mirror:
        return mirror.worktree.locate(target.memory_path) or target.tree_path


def _apply(
    mirror: Mirror, record: ConflictRecord, choice: str | None, dialect: Dialect
) -> tuple[str, bytes | None]:
    """Write the chosen side (or check the edited file): ``(resolution, bytes it overwrote or None)``."""
    path = record.memory_path
    now = mirror.worktree.sha256(path)
    if now == NOT_REGULAR:
        raise UserError(
            f"{escape_for_terminal(path)} is not a regular file in the checkout; replace it with a file first"
        )
    if choice in (OURS, THEIRS):
        data = mirror.conflicts.side(record, "local" if choice == OURS else "remote")
        assert data is not None
        _check(path, data, dialect)
        # Edits made to the file since the conflict was recorded are kept in the resolved record.
        replaced = None
        if now is not None and now not in (record.markers_sha256, record.local_sha256, record.remote_sha256):
            replaced = mirror.worktree.read(path, now)
        mirror.worktree.apply([CheckoutChange(path, data, now)], present=mirror.worktree.memory_paths())
        return choice, replaced
    if choice is not None:
        raise UsageError(f"unknown resolution {choice!r}: use --ours or --theirs, or edit the file")
    if now is None:
        return "deleted", None
    if now == record.markers_sha256:
        raise UserError(
            f"{escape_for_terminal(path)} still holds the conflict markers memsync wrote: edit it to the"
            " content you want (or delete it), or run resolve with --ours or --theirs"
        )
    _check(path, mirror.worktree.read(path, now), dialect)
    return "edited", None


def _check(path: str, data: bytes, dialect: Dialect) -> None:
    try:
        decode_content(data, dialect)
    except RuleViolation as exc:
        raise UserError(
            f"{escape_for_terminal(path)} cannot be pushed as it is ({exc}); fix it, then resolve again"
        ) from None


def _base_from_conflict(mirror: Mirror, record: ConflictRecord) -> None:
    """The path's base becomes the remote version the conflict was made against (the push's precondition).

    A normal reconcile already moved it there; this covers a reconcile that recorded the conflict and
    then failed before moving the base.
    """
    snaps = Snapshots(mirror)
    base_ref, base = snaps.base()
    remote_blob = mirror.conflicts.blob(record, "remote")
    assert remote_blob is not None
    wanted = SnapshotEntry(remote_blob, record.remote_sha256, record.remote_memory_id)
    if base.get(record.memory_path) == wanted:
        return
    entries = {**base, record.memory_path: wanted}
    tip = mirror.tip()
    snaps.write_base(entries, expected_old=base_ref, tip=tip, tip_snapshot=snaps.of(tip))
    snaps.save()
