"""How far ``main`` was moved back behind the base: the push engine's rewind guard."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pygit2.enums import DeltaStatus

from memsync.mirror.errors import translated
from memsync.mirror.snapshots import Snapshots, reconciled_import
from memsync.mirror.spellings import decoded

if TYPE_CHECKING:
    from memsync.mirror.repository import Mirror


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
