"""Killing memsync at seeded crash points, and what must hold after the next run.

A crash point is a ``crash_point("name")`` call in the code; ``MEMSYNC_CRASH_AT=name:n`` makes the
process SIGKILL itself at the n-th pass (``memsync.crashpoints``): exactly ``kill -9``, at an exact
place, repeatably. :data:`CRASH_POINTS` lists, per command, the points where an interruption leaves
something half done. Push, the daemon and backups add their command's entry here, and
:func:`crash_then_finish` works for them unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tests.reliability.harness import (
    BATCH_ENV,
    CRASH_ENV,
    MEMSTORE_REF,
    Finished,
    GitOracle,
    MemsyncCli,
)

CRASH_POINTS: dict[str, tuple[str, ...]] = {
    "pull": (
        "mirror.created",  # a new mirror whole under a temporary name, not renamed into place
        "pull.version",  # after each version's commit is streamed into git fast-import (sync/pull.py)
        "mirror.pack_written",  # fast-import done, its pack on disk, the ref not moved (mirror/history.py)
        "mirror.ref_moved",  # the ref moved, the caches (path map, content index) not yet updated
        "checkout.file_written",  # some of the tip's files written, the rest and the index not yet
        "checkout.tree_written",  # the working tree is at the tip, main not moved (mirror/checkout.py)
        "checkout.main_moved",  # main moved, refs/memsync/base not yet
    ),
    # Killed by tests/push/test_crashes.py (one CLI push per point) and the soak's push rounds.
    "push": (
        "push.store_write",  # after each store write (create, update, delete, rename, merge)
        "push.conflict_recorded",  # a conflict's record ref written, its markers not yet
        "push.imported",  # the writes imported into memstore/main, the checkout not moved
        "push.checkout_written",  # the checkout written, the base not moved
        "push.base_moved",  # refs/memsync/base moved, the plan's end not reported
    ),
    # A backup also runs pull's points inside its pull (and rewrite.* with --full-scan).
    "backup": (
        "backup.pulled",  # a store's pull done, nothing pushed (sync/backup.py)
        "backup.remote_initialised",  # a local remote made whole at its temporary name, not renamed
        "backup.remote_created",  # a local remote created empty, nothing pushed (mirror/backups.py)
        "backup.prune_noted",  # a forced update is owed a prune (.git/memsync/backup-prune-pending)
        "backup.remote_pushed",  # a remote's refs moved; a forced update not pruned yet
        "backup.remote_pruned",  # a local remote pruned, the note not cleared
    ),
}


@dataclass(frozen=True)
class CrashCase:
    point: str
    count: int

    def __str__(self) -> str:
        return f"{self.point}:{self.count}"


def crash_then_finish(
    cli: MemsyncCli, args: Sequence[str], crashes: Sequence[CrashCase], *, batch: int
) -> tuple[list[Finished], Finished]:
    """Run ``memsync args`` once per crash (each must die of SIGKILL there), then once to the end."""
    crashed = []
    for case in crashes:
        run = cli.run(*args, env={CRASH_ENV: str(case), BATCH_ENV: str(batch)})
        assert run.killed, f"expected a kill at {case}:\n{run.describe()}"
        crashed.append(run)
    final = cli.run(*args, env={BATCH_ENV: str(batch)})
    # A kill leaves OS file locks behind only in a dead process's table: never 75 here.
    assert final.returncode == 0, f"after crashes at {', '.join(map(str, crashes))}:\n{final.describe()}"
    return crashed, final


def assert_converged(repo_tips: Mapping[str, GitOracle], reference_tips: Mapping[str, str]) -> None:
    """Each mirror ends exactly where an uninterrupted pull ends, clean and fully checked out."""
    for store_id, oracle in repo_tips.items():
        tip = oracle.ref(MEMSTORE_REF)
        assert tip == reference_tips[store_id], (
            f"{store_id}: tip {tip}, uninterrupted {reference_tips[store_id]}"
        )
        assert oracle.lock_files() == [], f"{store_id}: stale locks {oracle.lock_files()}"
        oracle.fsck()
        # The checkout reached the tip too: main, the base and the working tree.
        assert oracle.ref("refs/heads/main") == tip, f"{store_id}: main is not at the tip"
        assert oracle.ref("refs/memsync/base") == tip, f"{store_id}: refs/memsync/base is not at the tip"
        status = oracle.text("status", "--porcelain", "--untracked-files=all")
        assert status == "", f"{store_id}: the checkout differs from the tip:\n{status}"
