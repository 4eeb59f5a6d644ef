"""``memsync status``: what waits for the user in each mirror, read without the lock or the network.

For each mirror: the open conflicts (``refs/memsync/conflicts/``), the rejected files and withheld
deletes, and what the next sync would push — found by running the reconcile planner against the last
imported state (``memstore/main``), so the answer is the planner's own, not a second opinion. Nothing
is written and no lock is taken: status may run while the daemon is in a cycle (it then shows the
state of that moment). Paths are working-tree paths.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memsync.engine.reconcile import Conflict, Create, Delete, Merge, Rename, Update, plan
from memsync.errors import EXIT_ATTENTION, EXIT_BLOCKED, EXIT_OK, MemsyncError, UsageError
from memsync.mirror import Mirror, Snapshots
from memsync.mirror import encode_path as _encode_path
from memsync.mirror.conflicts import ConflictRecord
from memsync.rules import Dialect, max_memories
from memsync.sync.outputs import StatusOutput
from memsync.sync.push import (
    DEFAULT_MAX_DELETE_SHARE,
    PushReport,
    local_entries,
    report_notices,
    rewind_of,
    snapshot_entries,
    working_tree_path,
)
from memsync.sync.report import StoreReport
from memsync.sync.stores import existing_mirrors

_PENDING = {Create: "create", Update: "update", Delete: "delete", Rename: "rename", Merge: "merge"}


@dataclass
class StatusReport(StoreReport):
    """One mirror's waiting work; ``daemon`` is filled by the caller from the daemon's state file."""

    path: str = ""
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, str]] = field(default_factory=list)
    withheld: list[dict[str, str]] = field(default_factory=list)
    pending: list[dict[str, str]] = field(default_factory=list)
    incoming: int = 0
    kept_commits: list[str] = field(default_factory=list)
    tip: str | None = None
    daemon: dict[str, Any] | None = None
    history_truncated: dict[str, Any] | None = None  # what the first commit's History-Truncated says
    blocked: str | None = None  # a git operation in progress or HEAD off main (the sync's message)

    @property
    def exit_code(self) -> int:
        if not self.ok:
            return self.code
        if self.blocked is not None:
            return EXIT_BLOCKED
        return EXIT_ATTENTION if self.conflicts or self.rejected or self.withheld else EXIT_OK

    def output(self) -> StatusOutput:
        return StatusOutput.model_validate(
            {
                "id": self.id,
                "name": self.name,
                "ok": self.ok,
                "error": self.error,
                "path": self.path,
                "conflicts": self.conflicts,
                "rejected": self.rejected,
                "withheld": self.withheld,
                "pending": self.pending,
                "incoming": self.incoming,
                "kept_commits": self.kept_commits,
                "tip": self.tip,
                "daemon": self.daemon,
                "history_truncated": self.history_truncated,
                "blocked": self.blocked,
            }
        )


def select_mirrors(root: Path, named: Iterable[str]) -> list[Path]:
    """The mirrors under ``root``: all, or those named by store id or by a glob over the store's name."""
    import fnmatch

    mirrors = existing_mirrors(root)
    wanted = list(named)
    if not wanted:
        return mirrors
    chosen: list[Path] = []
    matched: set[str] = set()
    for path in mirrors:
        name = _store_name(path)
        hits = [n for n in wanted if n == path.name or (name and fnmatch.fnmatchcase(name, n))]
        if hits:
            matched.update(hits)
            chosen.append(path)
    unknown = [n for n in wanted if n not in matched]
    if unknown:
        raise UsageError(
            f"no mirror under {root} matches {', '.join(unknown)}; run memsync pull (or sync) to create it"
        )
    return chosen


def _store_name(path: Path) -> str:
    try:
        with Mirror.open(path) as mirror:
            store, _ = mirror.read_metadata()
    except MemsyncError:
        return ""
    return str(store.get("name", "")) if store else ""


def mirror_status(
    path: Path, dialect: Dialect, *, max_delete_share: float = DEFAULT_MAX_DELETE_SHARE
) -> StatusReport:
    """The waiting work of the mirror at ``path``; errors end up in the report."""
    report = StatusReport(id=path.name, path=str(path))
    try:
        with Mirror.open(path) as mirror:
            _fill(mirror, dialect, max_delete_share, report)
    except MemsyncError as exc:
        report.fail(str(exc), exc.exit_code)
    return report


def _fill(mirror: Mirror, dialect: Dialect, max_delete_share: float, report: StatusReport) -> None:
    store, _ = mirror.read_metadata()
    report.name = str(store.get("name", "")) if store else ""
    facts = mirror.facts(save=False)  # cached by the pulls: no walk of the history
    if facts.truncated is not None:
        report.history_truncated = {"commit": facts.root, "memories": facts.truncated}
    report.tip = mirror.tip()
    report.blocked = mirror.head_problem()
    if report.blocked is not None:
        # Mid-operation the files are git's work in progress: what they would push means nothing.
        _report_conflicts(mirror, report)
        return
    snaps = Snapshots(mirror)  # not saved: status writes nothing
    base_ref, base = snaps.base()
    remote = snaps.of(report.tip)
    scan = mirror.worktree.scan(dialect, known=set(base) | set(remote), save_cache=False)
    records = mirror.conflicts.open()
    current = plan(
        snapshot_entries(base),
        local_entries(scan),
        snapshot_entries(remote),
        dialect=dialect,
        open_conflicts=set(records),
        max_delete_share=max_delete_share,
        rewind=rewind_of(base_ref, snaps),
        max_memories=max_memories(dialect),
    )
    notes = PushReport(id=report.id)
    report_notices(mirror, notes, current, scan)
    report.rejected, report.withheld = notes.rejected, notes.withheld
    for action in current.actions:
        kind = _PENDING.get(type(action))
        if kind is not None:
            entry = {"path": working_tree_path(mirror, action.path), "action": kind}
            if isinstance(action, Rename):
                entry["to"] = _encode_path(action.new_path)
            report.pending.append(entry)
        elif isinstance(action, Conflict):
            report.pending.append({"path": working_tree_path(mirror, action.path), "action": "conflict"})
        else:
            report.incoming += 1
    _report_conflicts(mirror, report, records)


def _report_conflicts(
    mirror: Mirror, report: StatusReport, records: Mapping[str, ConflictRecord] | None = None
) -> None:
    for memory_path, record in sorted((mirror.conflicts.open() if records is None else records).items()):
        report.conflicts.append(
            {
                "path": working_tree_path(mirror, memory_path),
                "reason": record.reason,
                "ref": record.ref,
                "recorded_at": record.recorded_at.isoformat().replace("+00:00", "Z"),
            }
        )
    report.kept_commits = [ref for ref in mirror.pushed_refs() if not _in_store_history(mirror, ref)]


def _in_store_history(mirror: Mirror, ref: str) -> bool:
    """Whether every file a kept ``main`` changed reached the store: each path it changed since it
    left ``memstore/main`` is, as it had it, in some imported commit since then (deleted: absent).
    Files a push never sends (ignored ones, ``.gitignore``) are left out. Such a ref keeps nothing the
    store lacks, so status stops naming it."""
    git, tip = mirror.git, mirror.tip()
    kept = git.ref_target(ref)
    if kept is None or tip is None:
        return False
    if git.is_ancestor(kept, tip):
        return True
    since = git.merge_base(kept, tip)
    before, after = git.tree_files(since), git.tree_files(kept)
    waiting = {
        path: after.get(path)
        for path in before.keys() | after.keys()
        if before.get(path) != after.get(path) and not mirror.is_ignored(path)
    }
    # Newest first: a push's writes are the newest imports, so the walk usually ends at once.
    for commit in git.walk(tip, since=since):
        tree = git.tree(str(commit.id))
        for path, blob in list(waiting.items()):
            there = str(tree[path].id) if path in tree else None
            if there == blob:
                del waiting[path]
        if not waiting:
            return True
    return not waiting


def conflict_paths(checkout: Path) -> list[str]:
    """The working-tree paths of the conflicts open in one mirror now, read from its refs.

    The daemon's metrics use this where a cycle's report went stale: ``memsync resolve`` ends a
    conflict from another process, sometimes without changing a file the watcher would see.
    """
    with Mirror.open(checkout) as mirror:
        return sorted(working_tree_path(mirror, path) for path in mirror.conflicts.open())
