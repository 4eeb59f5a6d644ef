"""Push: carry out the reconcile planner's actions against the store and the checkout.

One reconcile of one store, under the store lock and after a pull (docs/design.md §3):

1. Snapshots. The base is ``refs/memsync/base`` (the commit the checkout was last reconciled with);
   local is the working tree (regular files only, through the path encoding, validated with
   :mod:`memsync.rules`); remote is ``memstore/main``. Open conflicts come from
   ``refs/memsync/conflicts/``.
2. :func:`memsync.engine.reconcile.plan` decides; this module only executes. Store writes first, each
   with the hash the planner saw as its precondition (``Update``/``Delete``/``Rename`` with the base's
   hash, a ``Merge`` with the remote's); a merge runs git's three-way file merge: clean, it is pushed;
   not clean, the conflict is recorded under a ref and nothing is pushed.
3. A 409 (precondition failed, path taken), a memory gone, or a checkout file saved meanwhile stops
   the executor: pull, plan again from the same base, and go on (at most :data:`MAX_ATTEMPTS` plans).
   Writes that already happened now show as identical on both sides and are not repeated.
4. What the push created is imported (one commit per new version, like any other), then the checkout
   is written (every file re-checked against what the plan saw first), then the base moves
   (:func:`~memsync.engine.reconcile.next_base`), then ``main`` is reset to ``memstore/main``; local
   commits it lacked are kept under ``refs/memsync/pushed/``.

``predict_push`` is the ``--dry-run``: the store is read through the API (no import), merges run in a
scratch repository, and nothing is written anywhere.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from memsync.api import (
    Client,
    NotFound,
    PathConflict,
    PreconditionFailed,
    Store,
    StoreArchived,
)
from memsync.crashpoints import crash_point
from memsync.engine.reconcile import (
    Action,
    Conflict,
    Content,
    Create,
    Delete,
    Entry,
    LocalEntry,
    Merge,
    NoticeKind,
    Plan,
    RemoveCheckout,
    Rename,
    Rewind,
    Side,
    Update,
    WriteCheckout,
    next_base,
    plan,
)
from memsync.errors import (
    EXIT_ATTENTION,
    EXIT_BLOCKED,
    EXIT_OK,
    MemsyncError,
    MirrorError,
    UserError,
    storage_fault,
)
from memsync.mirror import Merger, Mirror, Snapshots, encode_paths
from memsync.mirror import encode_path as _encode_path
from memsync.mirror.conflicts import ConflictRecord
from memsync.mirror.paths import FILE_SUFFIX, Spelling, read_spelling
from memsync.mirror.snapshots import SnapshotEntry
from memsync.mirror.worktree import CheckoutChange, WorktreeChanged, WorktreeScan
from memsync.rules import Dialect, max_memories
from memsync.sync.outputs import PushOutput
from memsync.sync.pull import mirror_path
from memsync.sync.report import StoreReport

log = logging.getLogger("memsync.push")

# Plans per round: the first, and re-plans after a 409 or a checkout file saved meanwhile.
MAX_ATTEMPTS = 4
# Rounds per reconcile: a second one brings in what another writer stored while this one pushed
# (the import after the push sees it), so a sync ends with the checkout up to date.
ROUNDS = 2
DEFAULT_MAX_DELETE_SHARE = 0.5

Importer = Callable[[], None]
"""Imports the store's new versions into ``memstore/main`` (a pull under the lock already held) and
leaves the checkout, ``main`` and the base alone: they are the reconcile's until it ends."""


class LocalFiles(Protocol):
    """The local side of a reconcile: the mirror's checkout (``mirror.worktree``), or a commit's files
    read from git's objects (:class:`memsync.sync.commits.CommitFiles`), which no checkout write follows."""

    def scan(
        self, dialect: Dialect, *, known: Set[str] = ..., save_cache: bool = ..., trust_cache: bool = ...
    ) -> WorktreeScan: ...

    def read(self, memory_path: str, expected_sha256: str) -> bytes: ...


class Replan(Exception):
    """The world moved under the plan (a 409, a memory gone, a file saved): pull and plan again."""


@dataclass
class PushReport(StoreReport):
    """What a reconcile did (or, ``dry_run``, would do) to one store; paths as in the working tree."""

    path: str = ""
    dry_run: bool = False
    pushed: list[dict[str, str]] = field(default_factory=list)
    checkout: list[dict[str, str]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, str]] = field(default_factory=list)
    withheld: list[dict[str, str]] = field(default_factory=list)
    notices: list[dict[str, str]] = field(default_factory=list)
    respelled: list[dict[str, str]] = field(default_factory=list)
    predicted: list[dict[str, str]] = field(default_factory=list)
    kept_commits: str | None = None
    attempts: int = 0
    warnings: list[str] = field(default_factory=list)
    # Why nothing of the checkout was reconciled: a git operation in progress, or HEAD off main.
    # Not a failure (exit 6, not 1): the store is fine and the user ends it with the command named.
    blocked: str | None = None

    @property
    def needs_attention(self) -> bool:
        """Conflicts, rejected files or withheld deletes wait for the user (exit code 4); for a dry
        run, also the conflicts the push would record."""
        predicted = any(p["outcome"] in ("conflict", "rejected", "withheld") for p in self.predicted)
        return bool(self.conflicts or self.rejected or self.withheld or predicted)

    @property
    def exit_code(self) -> int:
        if not self.ok:
            return self.code
        if self.blocked is not None:
            return EXIT_BLOCKED
        return EXIT_ATTENTION if self.needs_attention else EXIT_OK

    def output(self) -> PushOutput:
        found: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "ok": self.ok,
            "error": self.error,
            "path": self.path,
            "dry_run": self.dry_run,
            "pushed": self.pushed,
            "checkout": self.checkout,
            "conflicts": self.conflicts,
            "rejected": self.rejected,
            "withheld": self.withheld,
            "notices": self.notices,
            "respelled": self.respelled,
            "kept_commits": self.kept_commits,
            "attempts": self.attempts,
            "warnings": self.warnings,
            "blocked": self.blocked,
        }
        if self.dry_run:
            found["predicted"] = self.predicted
        return PushOutput.model_validate(found)


def archived_message(store: Store) -> str:
    return (
        f"store {store.id} is archived: it refuses every write, so nothing was pushed and your edits"
        " stay in the checkout. Unarchive it (or copy the edits to another store) to push them"
    )


# --- snapshots -------------------------------------------------------------------------------------


def snapshot_entries(snapshot: Mapping[str, SnapshotEntry]) -> dict[str, Entry]:
    return {path: Entry(entry.sha256, entry.memory_id) for path, entry in snapshot.items()}


def local_entries(scan: WorktreeScan) -> dict[str, LocalEntry]:
    local: dict[str, LocalEntry] = {}
    for path, found in scan.files.items():
        if found.kind != "file":
            local[path] = LocalEntry.not_regular(found.kind)
        else:
            # A file without a hash vanished while it was read: held (reported), never a delete.
            local[path] = LocalEntry(found.sha256, found.problem)
    return local


def working_tree_path(mirror: Mirror, memory_path: str) -> str:
    """The path a user sees in the working tree for ``memory_path`` (where its file is, if any)."""
    try:
        return mirror.worktree.locate(memory_path) or _encode_path(memory_path)
    except MirrorError:
        return _encode_path(memory_path)


def report_notices(mirror: Mirror, report: PushReport, done: Plan, scan: WorktreeScan) -> None:
    """The notices of a plan, and the strays of a scan, into the report (user-facing paths)."""
    for notice in done.notices:
        entry = {"path": working_tree_path(mirror, notice.path), "reason": notice.reason}
        if notice.kind is NoticeKind.REJECTED:
            report.rejected.append(entry)
        elif notice.kind in (NoticeKind.WITHHELD, NoticeKind.REVERT_WITHHELD, NoticeKind.OVER_LIMIT):
            report.withheld.append(entry)
        elif notice.kind is not NoticeKind.CONFLICT_OPEN:
            report.notices.append({**entry, "kind": notice.kind.value})
    for tree_path, reason in scan.strays.items():
        report.rejected.append({"path": tree_path, "reason": f"not pushed: {reason}"})


def rewind_of(base_ref: str | None, snaps: Snapshots) -> Rewind | None:
    """The rewind guard's input: how far ``main`` was moved back behind the base, if it was."""
    found = snaps.rewind(base_ref)
    return None if found is None else Rewind(*found)


def _report_conflicts(
    mirror: Mirror, report: PushReport, records: Mapping[str, ConflictRecord], new: Iterable[str]
) -> None:
    recorded_now = set(new)
    for path, record in sorted(records.items()):
        report.conflicts.append(
            {
                "path": working_tree_path(mirror, path),
                "reason": record.reason,
                "ref": record.ref,
                "recorded_at": record.recorded_at.isoformat().replace("+00:00", "Z"),
                "new": path in recorded_now,
            }
        )


# --- the executor ----------------------------------------------------------------------------------


class _Execution:
    """One reconcile: snapshots, plans, store writes, conflicts, then the checkout and the refs."""

    def __init__(
        self,
        client: Client,
        store: Store,
        mirror: Mirror,
        report: PushReport,
        importer: Importer,
        *,
        force: bool,
        max_delete_share: float,
        withhold_over_limit: bool,
        local: LocalFiles | None = None,
    ) -> None:
        self.client = client
        self.store = store
        self.mirror = mirror
        self.report = report
        self.importer = importer
        self.force = force
        self.max_delete_share = max_delete_share
        self.withhold_over_limit = withhold_over_limit
        self.dialect = client.dialect
        self.snaps = Snapshots(mirror)
        self.merger = Merger()
        # Conflicts recorded during this round (also by a plan a 409 interrupted): what the base
        # takes for them, and the markers their files still need; and every path recorded at all.
        self.conflicted: dict[str, Entry] = {}
        self.conflict_writes: dict[str, CheckoutChange] = {}
        self.recorded: set[str] = set()
        # Blobs of contents this reconcile pushed, by sha256: the new base may name them.
        self.blobs: dict[str, str] = {}
        self.snapshots: dict[str | None, dict[str, SnapshotEntry]] = {}
        # A commit's files never take what the store changed: one round, and no checkout to write.
        self.local: LocalFiles = local or mirror.worktree
        self.in_checkout = local is None

    def run(self) -> None:
        try:
            self._run()
        finally:
            self.merger.close()
            self.snaps.save()

    def _run(self) -> None:
        # What a checkout that stopped part way wrote is memsync's, never an edit to push.
        self.mirror.settle_interrupted_checkout()
        self.report.blocked = self.mirror.head_problem()
        if self.report.blocked is not None:
            return
        for _ in range(ROUNDS if self.in_checkout else 1):
            if not self._round():
                return

    def _round(self) -> bool:
        """Plan and execute until a plan runs to its end; True when the import that followed the
        push brought changes of another writer the checkout does not have yet (one more round)."""
        self.mirror.worktree.wait_for_index_lock()
        base_ref, base = self.snaps.base()
        self._remember(base)
        # An imported base is also the remote snapshot when nothing new came in: read it once. (A
        # base commit of memsync's own is never a tip, so it is never asked for as one.)
        self.snapshots.setdefault(base_ref, base)
        # A finished round wrote its markers and moved the base over its conflicts.
        self.conflicted, self.conflict_writes = {}, {}
        rewind = rewind_of(base_ref, self.snaps)
        for _ in range(MAX_ATTEMPTS):
            self.report.attempts += 1
            tip = self.mirror.tip()
            remote = self._snapshot(tip)
            # After a re-plan every file is read again: a file saved in the same instant as the stat
            # cache saw it is the one thing that cache cannot tell.
            scan = self.local.scan(
                self.dialect,
                known=set(base) | set(remote),
                trust_cache=self.report.attempts == 1,
            )
            records = self.mirror.conflicts.open()
            current = plan(
                snapshot_entries(base),
                local_entries(scan),
                snapshot_entries(remote),
                dialect=self.dialect,
                open_conflicts=set(records),
                max_delete_share=self.max_delete_share,
                force=self.force,
                rewind=rewind,
                max_memories=max_memories(self.dialect),
            )
            over = [n for n in current.notices if n.kind is NoticeKind.OVER_LIMIT]
            if over and not self.withhold_over_limit:
                # A push (not a sync) is refused whole, so the user decides what the store keeps.
                named = ", ".join(working_tree_path(self.mirror, n.path) for n in over[:3])
                more = f" and {len(over) - 3} more" if len(over) > 3 else ""
                raise UserError(
                    f"nothing was pushed to store {self.store.id}: {named}{more}: {over[0].reason}"
                )
            writes = [a for a in current.actions if isinstance(a, Create | Update | Delete | Rename | Merge)]
            if writes and self.store.archived:
                self.report.fail(archived_message(self.store))
                return False
            try:
                pushed, changes = self._store_writes(current, base, remote, scan)
                if writes:
                    # What the push created becomes history now, before the checkout moves.
                    self.importer()
                    crash_point("push.imported")
                changes += self._pending_markers(current)
                self._checkout(changes, scan, {**snapshot_entries(remote), **pushed})
                crash_point("push.checkout_written")
            except Replan as why:
                log.info("%s: planning again after: %s", self.store.id, why)
                self.report.warnings.append(f"planned again: {why}")
                self.importer()
                continue
            return self._finish(base_ref, base, remote, current, pushed, scan)
        self.report.fail(
            f"the store or the checkout kept changing while memsync pushed ({MAX_ATTEMPTS} plans); run again"
        )
        return False

    # --- contents ----------------------------------------------------------------------------

    def _snapshot(self, commit: str | None) -> dict[str, SnapshotEntry]:
        """An imported commit's snapshot; each commit is read once per reconcile."""
        if commit not in self.snapshots:
            self.snapshots[commit] = self.snaps.of(commit)
            self._remember(self.snapshots[commit])
        return self.snapshots[commit]

    def _remember(self, snapshot: Mapping[str, SnapshotEntry]) -> None:
        for entry in snapshot.values():
            self.blobs.setdefault(entry.sha256, entry.blob)

    def _read(
        self,
        content: Content,
        base: Mapping[str, SnapshotEntry],
        remote: Mapping[str, SnapshotEntry],
    ) -> bytes:
        if content.side is Side.LOCAL:
            try:
                return self.local.read(content.path, content.hash)
            except WorktreeChanged as exc:
                raise Replan(str(exc)) from None
        snapshot = remote if content.side is Side.REMOTE else base
        entry = snapshot.get(content.path)
        if entry is None or entry.sha256 != content.hash:
            raise MirrorError(f"the plan names {content}, which the {content.side.value} snapshot lacks")
        return self.mirror.content(entry.blob)

    def _keep(self, data: bytes) -> None:
        """Store pushed content as a blob, so the new base can name it even if the import fails."""
        sha = hashlib.sha256(data).hexdigest()
        if sha not in self.blobs:
            self.blobs[sha] = self.snaps.store_blob(data)

    # --- store writes ------------------------------------------------------------------------

    def _store_writes(
        self,
        current: Plan,
        base: Mapping[str, SnapshotEntry],
        remote: Mapping[str, SnapshotEntry],
        scan: WorktreeScan,
    ) -> tuple[dict[str, Entry | None], list[CheckoutChange]]:
        pushed: dict[str, Entry | None] = {}
        changes: list[CheckoutChange] = []
        store_id = self.store.id
        for action in current.actions:
            try:
                if isinstance(action, Create):
                    data = self._read(action.content, base, remote)
                    memory = self.client.create_memory(store_id, action.path, data.decode("utf-8"))
                    self._check_stored(action.path, memory.content_sha256, data)
                    self._keep(data)
                    pushed[action.path] = Entry(memory.content_sha256, memory.id)
                    self._pushed(action.path, "create")
                elif isinstance(action, Update):
                    data = self._read(action.content, base, remote)
                    memory = self.client.update_memory(
                        store_id, action.memory_id, data.decode("utf-8"), expected_sha256=action.expected_hash
                    )
                    self._check_stored(action.path, memory.content_sha256, data)
                    self._keep(data)
                    pushed[action.path] = Entry(memory.content_sha256, memory.id)
                    self._pushed(action.path, "update")
                elif isinstance(action, Delete):
                    self._delete(action, pushed)
                elif isinstance(action, Rename):
                    memory = self.client.rename_memory(
                        store_id, action.memory_id, action.new_path, expected_sha256=action.expected_hash
                    )
                    pushed[action.path] = None
                    pushed[action.new_path] = Entry(memory.content_sha256, memory.id)
                    self._pushed(action.path, "rename", to=action.new_path)
                elif isinstance(action, Merge):
                    changes.append(self._merge(action, base, remote, pushed))
                elif isinstance(action, Conflict):
                    changes.append(self._conflict(action, base, remote))
                else:
                    changes.append(self._checkout_change(action, base, remote))
                if isinstance(action, Create | Update | Delete | Rename | Merge):
                    crash_point("push.store_write")
            except (PreconditionFailed, PathConflict) as exc:
                raise Replan(f"{action.path}: {exc}") from None
            except NotFound as exc:
                raise Replan(f"{action.path}: {exc}") from None
            except StoreArchived:
                raise MemsyncError(archived_message(self.store)) from None
        return pushed, changes

    def _check_stored(self, memory_path: str, stored: str, sent: bytes) -> None:
        """A write is reported only for what the store then holds."""
        if stored != (digest := hashlib.sha256(sent).hexdigest()):
            raise MemsyncError(
                f"the store answered the write of {working_tree_path(self.mirror, memory_path)} with"
                f" content {stored[:12]}, not the {digest[:12]} memsync sent; run memsync pull and"
                " compare before pushing again"
            )

    def _pushed(self, memory_path: str, action: str, *, to: str | None = None) -> None:
        entry = {
            "path": working_tree_path(self.mirror, memory_path),
            "memory_path": memory_path,
            "action": action,
        }
        if to is not None:
            entry |= {"to": _encode_path(to), "to_memory_path": to}
        self.report.pushed.append(entry)

    def _delete(self, action: Delete, pushed: dict[str, Entry | None]) -> None:
        if action.moved_to is not None:
            # The content must have reached its new path before its old one goes (create-then-delete).
            there = pushed.get(action.moved_to)
            if there is None or there.hash != action.expected_hash:
                found = self.client.find_memory(self.store.id, action.moved_to)
                if found is None or found.content_sha256 != action.expected_hash:
                    raise Replan(f"{action.moved_to} does not hold the content moved there")
        self.client.delete_memory(self.store.id, action.memory_id, expected_sha256=action.expected_hash)
        pushed[action.path] = None
        if action.moved_to is not None:
            self._pushed(action.path, "delete", to=action.moved_to)
        else:
            self._pushed(action.path, "delete")

    def _merge(
        self,
        action: Merge,
        base: Mapping[str, SnapshotEntry],
        remote: Mapping[str, SnapshotEntry],
        pushed: dict[str, Entry | None],
    ) -> CheckoutChange:
        ancestor = self._read(action.base, base, remote)
        mine = self._read(action.local, base, remote)
        theirs = self._read(action.remote, base, remote)
        merged = self.merger.merge(ancestor, mine, theirs)
        expected_local = action.local.hash if action.local.path == action.path else None
        if not merged.clean:
            return self._record(
                action.path,
                ancestor,
                mine,
                theirs,
                merged.content,
                remote[action.path],
                "changed locally and remotely, and the changes overlap",
                expected_local,
            )
        memory = self.client.update_memory(
            self.store.id,
            action.memory_id,
            merged.content.decode("utf-8"),
            expected_sha256=action.expected_hash,
        )
        self._check_stored(action.path, memory.content_sha256, merged.content)
        self._keep(merged.content)
        pushed[action.path] = Entry(memory.content_sha256, memory.id)
        self._pushed(action.path, "merge")
        return CheckoutChange(action.path, merged.content, expected_local)

    def _conflict(
        self, action: Conflict, base: Mapping[str, SnapshotEntry], remote: Mapping[str, SnapshotEntry]
    ) -> CheckoutChange:
        ancestor = None if action.base is None else self._read(action.base, base, remote)
        mine = self._read(action.local, base, remote)
        theirs = self._read(action.remote, base, remote)
        markers = self.merger.markers(ancestor, mine, theirs)
        expected_local = action.local.hash if action.local.path == action.path else None
        return self._record(
            action.path, ancestor, mine, theirs, markers, remote[action.path], action.reason, expected_local
        )

    def _record(
        self,
        memory_path: str,
        ancestor: bytes | None,
        mine: bytes,
        theirs: bytes,
        markers: bytes,
        against: SnapshotEntry,
        reason: str,
        expected_local: str | None,
    ) -> CheckoutChange:
        self.mirror.conflicts.record(
            memory_path,
            base=ancestor,
            local=mine,
            remote=theirs,
            markers=markers,
            remote_memory_id=against.memory_id,
            reason=reason,
        )
        crash_point("push.conflict_recorded")
        self.conflicted[memory_path] = Entry(against.sha256, against.memory_id)
        self.recorded.add(memory_path)
        change = CheckoutChange(memory_path, markers, expected_local, in_place=True)
        self.conflict_writes[memory_path] = change
        return change

    def _checkout_change(
        self, action: Action, base: Mapping[str, SnapshotEntry], remote: Mapping[str, SnapshotEntry]
    ) -> CheckoutChange:
        if isinstance(action, WriteCheckout):
            data = self._read(action.content, base, remote)
            return CheckoutChange(action.path, data, action.expected_local)
        assert isinstance(action, RemoveCheckout)
        return CheckoutChange(action.path, None, action.expected_local)

    def _pending_markers(self, current: Plan) -> list[CheckoutChange]:
        """Markers of conflicts an interrupted plan recorded: the re-plan holds those paths."""
        planned = {a.path for a in current.actions if isinstance(a, Merge | Conflict)}
        return [change for path, change in self.conflict_writes.items() if path not in planned]

    # --- the checkout and the refs -----------------------------------------------------------

    def _checkout(
        self, changes: list[CheckoutChange], scan: WorktreeScan, stored: Mapping[str, Entry | None]
    ) -> None:
        if not self.in_checkout:
            return  # a commit's files: the clone takes the store's changes by pulling
        # Called without changes too: a memory deleted from the store can change the spelling of
        # another file (a file beside a folder that is now gone loses its %_ suffix).
        if changes:
            self.mirror.worktree.wait_for_index_lock()
        # A file is respelled only once the store holds its content: a rejected or conflicting file,
        # or one whose write failed, stays where its user put it (and still shapes the others' names).
        present = {path: found.tree_path for path, found in scan.files.items()}
        stored_here = {
            path
            for path, found in scan.files.items()
            if found.sha256 is not None
            and (entry := stored.get(path)) is not None
            and entry.hash == found.sha256
        }
        # But a file in the way of a folder the store needs gains its %_ suffix whatever it holds.
        removed = {change.memory_path for change in changes if change.data is None}
        final = (set(present) | {change.memory_path for change in changes}) - removed
        spelled = encode_paths(final)
        stored_here |= {
            path
            for path, old in present.items()
            if path in final
            and FILE_SUFFIX in (spelled[path].removeprefix(old), old.removeprefix(spelled[path]))
        }
        try:
            warnings = self.mirror.worktree.apply(changes, present=present, moving=stored_here)
        except WorktreeChanged as exc:
            raise Replan(str(exc)) from None
        self.report.warnings.extend(warnings)
        for memory_path in sorted(stored_here):
            old, new = present[memory_path], self.mirror.worktree.locate(memory_path)
            if new is not None and new != old:
                self.report.respelled.append({"path": old, "to": new, "reason": respelling_reason(old, new)})
        for change in changes:
            self.report.checkout.append(
                {
                    "path": working_tree_path(self.mirror, change.memory_path),
                    "action": "remove" if change.data is None else "write",
                }
            )

    def _finish(
        self,
        base_ref: str | None,
        base: Mapping[str, SnapshotEntry],
        remote: Mapping[str, SnapshotEntry],
        current: Plan,
        pushed: Mapping[str, Entry | None],
        scan: WorktreeScan,
    ) -> bool:
        agreed = next_base(
            snapshot_entries(base),
            snapshot_entries(remote),
            current,
            pushed=pushed,
            conflicted=self.conflicted,
        )
        tip = self.mirror.tip()
        tip_snapshot = self._snapshot(tip)
        entries: dict[str, SnapshotEntry] = {}
        for path, entry in agreed.items():
            blob = self._blob_for(path, entry, base, remote, tip_snapshot)
            entries[path] = SnapshotEntry(blob, entry.hash, entry.memory_id)
        now = datetime.now(UTC)
        self.snaps.write_base(entries, expected_old=base_ref, tip=tip, tip_snapshot=tip_snapshot, when=now)
        crash_point("push.base_moved")
        # A withheld revert leaves main where the user moved it back to: that is what tells the
        # next cycle these files are a revert (reset to the tip, they would read as plain edits).
        keep_main = any(n.kind is NoticeKind.REVERT_WITHHELD for n in current.notices)
        if tip is not None and not keep_main:
            self.mirror.worktree.wait_for_index_lock()
            self.report.kept_commits = self.mirror.reset_main(tip, when=now) or self.report.kept_commits
        # What waits for the user is the state after the last round, not a sum over rounds.
        self.report.rejected, self.report.withheld, self.report.conflicts = [], [], []
        report_notices(self.mirror, self.report, current, scan)
        _report_conflicts(self.mirror, self.report, self.mirror.conflicts.open(), self.recorded)
        settled = current.held | set(self.conflicted)
        return any(
            entries.get(path) != tip_snapshot.get(path)
            for path in (set(entries) | set(tip_snapshot)) - settled
        )

    def _blob_for(
        self,
        path: str,
        entry: Entry,
        *snapshots: Mapping[str, SnapshotEntry],
    ) -> str:
        for snapshot in snapshots:
            found = snapshot.get(path)
            if found is not None and found.sha256 == entry.hash:
                return found.blob
        blob = self.blobs.get(entry.hash) or self.mirror.blob_for_sha256(entry.hash)
        if blob is None:
            raise MirrorError(
                f"no blob holds the content {entry.hash} the base needs at {path}; run memsync pull"
                " --full-scan, then sync again"
            )
        return blob


def respelling_reason(old: str, new: str) -> str:
    """Why memsync moved a file from ``old`` to ``new``, its spelling of the same memory path."""
    if old.endswith(FILE_SUFFIX) != new.endswith(FILE_SUFFIX):
        if new.endswith(FILE_SUFFIX):
            return "a folder of the same name is beside it: the file's name ends in %_"
        return "the folder of the same name beside it is gone: the file's name no longer ends in %_"
    if Spelling.FOLDED in read_spelling(new)[1]:
        return (
            "another memory beside it differs only in case or Unicode form, and many drives take the"
            " two names for one file: this one's differences are spelled as %XX escapes"
        )
    if Spelling.FOLDED in read_spelling(old)[1]:
        return "the memory beside it that differed only in case or Unicode form is gone"
    return (
        "its name holds what Windows, macOS or git refuse in a file name (a reserved name such as"
        ' NUL, a trailing dot or space, one of < > : " | ? *, a control character): spelled as %XX escapes'
    )


def reconcile(
    client: Client,
    store: Store,
    mirror: Mirror,
    report: PushReport,
    importer: Importer,
    *,
    force: bool = False,
    max_delete_share: float = DEFAULT_MAX_DELETE_SHARE,
    withhold_over_limit: bool = False,
    local: LocalFiles | None = None,
) -> None:
    """Reconcile the checkout (or the files ``local`` names) with the store; the caller holds the store
    lock and has pulled. Errors end up in ``report`` (never raised). ``importer`` imports new versions.
    Creates that would pass the store's memory limit refuse the whole push before any write, or,
    ``withhold_over_limit`` (a sync), are withheld while the other changes go.
    """
    try:
        _Execution(
            client,
            store,
            mirror,
            report,
            importer,
            force=force,
            max_delete_share=max_delete_share,
            withhold_over_limit=withhold_over_limit,
            local=local,
        ).run()
    except MemsyncError as exc:
        report.fail(str(exc), exc.exit_code)
    except OSError as exc:  # a local write no layer below translated: one line, never a traceback
        report.fail(str(storage_fault(exc, "pushing")))


def needs_reconcile(mirror: Mirror) -> bool:
    """Whether the checkout may differ from the imported tip, or the refs disagree (cheap: git status)."""
    tip = mirror.tip()
    base = mirror.base()
    main = mirror.main()
    if tip is None:
        # Nothing imported yet: only files the user created can be there.
        return bool(mirror.local_changes())
    return base != tip or main != tip or bool(mirror.local_changes())


def report_open_conflicts(mirror: Mirror, report: PushReport) -> None:
    """The conflicts still open, for a run that did not need to reconcile."""
    _report_conflicts(mirror, report, mirror.conflicts.open(), ())


# --- dry run -------------------------------------------------------------------------------------


def predict_push(
    client: Client,
    store: Store,
    root: Path,
    *,
    force: bool = False,
    max_delete_share: float = DEFAULT_MAX_DELETE_SHARE,
) -> PushReport:
    """What a push would do, per file: push, merge, conflict, rejected, withheld (or pull, the checkout
    taking a remote change). Reads the store through the API; writes nothing, anywhere."""
    report = PushReport(id=store.id, name=store.name, path=str(mirror_path(root, store.id)), dry_run=True)
    where = mirror_path(root, store.id)
    if not (where / ".git").is_dir():
        report.warnings.append("no mirror yet: run memsync pull (or sync) first")
        return report
    try:
        with Mirror.open(where) as mirror, Merger() as merger:
            _predict(client, store, mirror, merger, report, force=force, max_delete_share=max_delete_share)
    except MemsyncError as exc:
        report.fail(str(exc), exc.exit_code)
    return report


def _predict(
    client: Client,
    store: Store,
    mirror: Mirror,
    merger: Merger,
    report: PushReport,
    *,
    force: bool,
    max_delete_share: float,
) -> None:
    report.blocked = mirror.head_problem()
    if report.blocked is not None:
        return
    snaps = Snapshots(mirror)  # never saved: a dry run writes nothing
    base_ref, base = snaps.base()
    remote = {m.path: Entry(m.content_sha256, m.id) for m in client.list_memories(store.id)}
    scan = mirror.worktree.scan(client.dialect, known=set(base) | set(remote), save_cache=False)
    records = mirror.conflicts.open()
    current = plan(
        snapshot_entries(base),
        local_entries(scan),
        remote,
        dialect=client.dialect,
        open_conflicts=set(records),
        max_delete_share=max_delete_share,
        force=force,
        rewind=rewind_of(base_ref, snaps),
        max_memories=max_memories(client.dialect),
    )
    predicted = report.predicted
    for action in current.actions:
        outcome, what = _predicted_outcome(client, store, mirror, merger, base, remote, action)
        entry = {"path": working_tree_path(mirror, action.path), "outcome": outcome, "action": what}
        if isinstance(action, Rename):
            entry["to"] = _encode_path(action.new_path)
        predicted.append(entry)
    report_notices(mirror, report, current, scan)
    for rejected in report.rejected:
        predicted.append({"path": rejected["path"], "outcome": "rejected", "action": "none"})
    for withheld in report.withheld:
        predicted.append({"path": withheld["path"], "outcome": "withheld", "action": "none"})
    _report_conflicts(mirror, report, records, ())
    for conflict in report.conflicts:
        predicted.append({"path": conflict["path"], "outcome": "conflict", "action": "none"})
    if store.archived and any(p["outcome"] in ("push", "merge") for p in predicted):
        report.fail(archived_message(store))


def _predicted_outcome(
    client: Client,
    store: Store,
    mirror: Mirror,
    merger: Merger,
    base: Mapping[str, SnapshotEntry],
    remote: Mapping[str, Entry],
    action: Action,
) -> tuple[str, str]:
    if isinstance(action, Create):
        return "push", "create"
    if isinstance(action, Update):
        return "push", "update"
    if isinstance(action, Delete):
        return "push", "delete"
    if isinstance(action, Rename):
        return "push", "rename"
    if isinstance(action, Conflict):
        return "conflict", "record"
    if isinstance(action, WriteCheckout):
        return "pull", "write"
    if isinstance(action, RemoveCheckout):
        return "pull", "remove"
    assert isinstance(action, Merge)
    ancestor = mirror.content(base[action.base.path].blob)
    mine = mirror.worktree.read(action.local.path, action.local.hash)
    memory = client.get_memory(store.id, action.memory_id)
    assert memory.content is not None
    if memory.content_sha256 != action.remote.hash:
        # The store moved since it was listed: the push would plan again against the new content.
        return "merge", "merge (the store changed while predicting)"
    merged = merger.merge(ancestor, mine, memory.content.encode("utf-8"))
    return ("merge", "merge") if merged.clean else ("conflict", "record")
