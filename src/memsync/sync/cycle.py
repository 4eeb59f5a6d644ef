"""One store's cycle, the unit both the CLI (`memsync sync`, `memsync push`) and the daemon run.

docs/design.md §3: scheduler ticks and watcher events both request the same per-store cycle — pull (import
new versions) → reconcile the checkout → push local edits → import what the push created. This module
is that sequence, under the store's lock from start to end (so the CLI and the daemon never interleave
a pull and a push); callers hold no git or HTTP knowledge of their own.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from memsync.api import Client, Store
from memsync.errors import LockHeld, MemsyncError, combine_exit_codes, storage_fault
from memsync.mirror import Mirror, Snapshots
from memsync.sync.outputs import CycleOutput
from memsync.sync.pull import PullReport, mirror_path, open_mirror, pull_store, store_lock
from memsync.sync.push import (
    DEFAULT_MAX_DELETE_SHARE,
    PushReport,
    needs_reconcile,
    reconcile,
    report_open_conflicts,
)
from memsync.sync.report import Reported

log = logging.getLogger("memsync.cycle")


@dataclass
class CycleReport(Reported):
    """The outcome of one cycle: ``changed`` (anything imported, pushed or written), ``ok``, the parts.

    ``conflicts`` (working-tree paths of the open conflicts) and ``rejected`` (``{"path", "reason"}``)
    are what the daemon's state file shows; ``push`` is None when the pull failed or the lock was busy.
    ``blocked`` says why the checkout was not reconciled at all (a git operation in progress, HEAD
    off main): the cycle is ok, its exit code 6.
    """

    store_id: str
    pull: PullReport
    push: PushReport | None = None
    pushed: int = 0
    conflicts: list[str] = field(default_factory=list)
    rejected: list[dict[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.pull.ok and (self.push is None or self.push.ok)

    @property
    def error(self) -> str | None:
        """The first error of the cycle (the pull's, else the push's), or None."""
        return self.pull.error or (self.push.error if self.push is not None else None)

    @property
    def blocked(self) -> str | None:
        return self.push.blocked if self.push is not None else None

    @property
    def changed(self) -> bool:
        wrote = self.push is not None and bool(self.push.checkout)
        return self.pull.imported > 0 or self.pushed > 0 or wrote

    @property
    def exit_code(self) -> int:
        codes = [self.pull.exit_code]
        if self.push is not None:
            codes.append(self.push.exit_code)
        return combine_exit_codes(codes)

    def output(self) -> CycleOutput:
        push = self.push
        return CycleOutput.model_validate(
            {
                **self.pull.fields(),
                "ok": self.ok,
                "error": self.error,
                "pushed": push.pushed if push is not None else [],
                "conflicts": [{"path": path} for path in self.conflicts],
                "rejected": self.rejected,
                "withheld": push.withheld if push is not None else [],
                "kept_commits": push.kept_commits if push is not None else None,
                "blocked": push.blocked if push is not None else None,
                "push": push.output() if push is not None else None,
            }
        )


def run_cycle(
    client: Client,
    store: Store,
    root: Path,
    *,
    full_scan: bool = False,
    force: bool = False,
    max_delete_share: float = DEFAULT_MAX_DELETE_SHARE,
    skip_versions: frozenset[str] = frozenset(),
    pulled: PullReport | None = None,
    withhold_over_limit: bool = False,
) -> CycleReport:
    """Pull, reconcile and push one store; errors end up in the report, never raised.

    ``force`` lets a push delete more than ``max_delete_share`` of the store (config
    ``push.max_delete_share``; the delete guard of the reconcile planner). ``skip_versions`` as
    :func:`~memsync.sync.pull.pull_store` takes them, for every pull of the cycle. ``pulled`` is a
    pull the caller made moments ago (git's ``list for-push`` before a push): the cycle builds on
    it instead of listing the store again. Nothing is lost if the store moved since: every write
    carries its precondition, and a store that moved is a conflict, as in any cycle.

    Creates that would pass the store's memory limit (Anthropic: 2,000) refuse the whole push before
    any write (``memsync push``, a clone's push); ``withhold_over_limit`` (``sync``, the daemon)
    withholds them instead, named in ``status``, while the other changes go.
    """
    try:
        with store_lock(root, store.id), _opened(root, store.id) as mirror:
            pull = pulled
            if pull is None:
                pull = pull_store(
                    client,
                    store,
                    root,
                    full_scan=full_scan,
                    locked=True,
                    skip_versions=skip_versions,
                    mirror=mirror,
                )
            push: PushReport | None = None
            if pull.ok:
                push = PushReport(id=store.id, name=store.name, path=str(mirror_path(root, store.id)))
                _push(
                    client,
                    store,
                    root,
                    pull,
                    push,
                    force=force,
                    max_delete_share=max_delete_share,
                    skip_versions=skip_versions,
                    withhold_over_limit=withhold_over_limit,
                    mirror=mirror,
                )
    except LockHeld as exc:
        pull = PullReport(id=store.id, name=store.name, path=str(mirror_path(root, store.id)))
        pull.fail(str(exc), exc.exit_code)
        push = None
    except OSError as exc:  # the lock's own folder cannot be written (a read-only root, a full disk)
        pull = PullReport(id=store.id, name=store.name, path=str(mirror_path(root, store.id)))
        pull.fail(str(storage_fault(exc, "locking the mirror")))
        push = None
    report = CycleReport(store_id=store.id, pull=pull, push=push)
    if push is not None:
        report.pushed = len(push.pushed)
        report.conflicts = [conflict["path"] for conflict in push.conflicts]
        report.rejected = list(push.rejected)
    return report


@contextlib.contextmanager
def _opened(root: Path, store_id: str) -> Iterator[Mirror | None]:
    """The store's mirror, opened once for the cycle's pull and push, with the base's memory ids kept
    while they are cheap to read (before the pull moves the tip); None when there is none yet or it
    cannot be opened: the pull then opens (or creates) it itself and reports why it cannot."""
    where = mirror_path(root, store_id)
    if not (where / ".git").is_dir():
        yield None
        return
    try:
        mirror = Mirror.open(where)
    except MemsyncError as exc:
        log.debug("%s: base ids not kept: %s", store_id, exc)
        yield None
        return
    with mirror:
        try:
            Snapshots(mirror).keep_base_ids()
        except MemsyncError as exc:
            # A cache: without it the reconcile replays the history for the base's ids instead.
            log.debug("%s: base ids not kept: %s", store_id, exc)
        yield mirror


def _push(
    client: Client,
    store: Store,
    root: Path,
    pull: PullReport,
    push: PushReport,
    *,
    force: bool,
    max_delete_share: float,
    skip_versions: frozenset[str],
    withhold_over_limit: bool,
    mirror: Mirror | None,
) -> None:
    def import_new_versions() -> None:
        # Import only: the reconcile moves the checkout, the base and main itself once its plan
        # ran. A fast-forward here took a checkout the user had staged exactly as pushed for the
        # leftover of an interrupted checkout, and moved the base under the reconcile. Through the
        # reconcile's own mirror (bound below): a second one would rebuild the path map it holds.
        again = pull_store(
            client, store, root, locked=True, checkout=False, skip_versions=skip_versions, mirror=mirror
        )
        pull.imported += again.imported
        pull.requests += again.requests
        pull.skipped += again.skipped
        pull.warnings += again.warnings
        pull.tip = again.tip
        if not again.ok:
            raise MemsyncError(f"importing the store's new versions: {again.error}")

    try:
        with open_mirror(root, store.id) if mirror is None else contextlib.nullcontext(mirror) as mirror:
            # Before the cheap "anything to do?" test: mid-rebase (or on another branch) git status
            # can be clean while the checkout is not main's at all, and the user should hear why
            # nothing of it is synced.
            push.blocked = mirror.head_problem()
            if push.blocked is not None:
                report_open_conflicts(mirror, push)
                return
            if not needs_reconcile(mirror):
                report_open_conflicts(mirror, push)
                return
            reconcile(
                client,
                store,
                mirror,
                push,
                import_new_versions,
                force=force,
                max_delete_share=max_delete_share,
                withhold_over_limit=withhold_over_limit,
            )
            pull.tip = mirror.tip()
    except MemsyncError as exc:
        push.fail(str(exc), exc.exit_code)
