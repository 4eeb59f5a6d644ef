"""``memsync restore``: make a store equal to a commit of a mirror or a bare backup.

The store is written with the fewest preconditioned writes (:mod:`memsync.engine.restore_plan`):
into an existing store (``--into-store``, which may delete, under the mass-delete guard) or into a
new one (``--new-store NAME``). Memory metadata comes back where the target dialect has it (Forward,
Cloud), and a new store gets the name's description and metadata from the metadata branch. Paths
travel in their canonical relative form, so a store of one dialect restores into another (a
migration path); what the target cannot hold is reported, not written.

History cannot be recreated: the API writes versions only as they happen, so the restored store's
history starts with this restore's writes. The mirror or backup keeps the old history.

**Reruns.** A restore interrupted anywhere is finished by running the same command again: the plan
is made again from what the store then holds. A new store is made only once: its id is recorded
under ``<mirror root>/.memsync/restores/`` right after it is created; its creation carries an
``Idempotency-Key`` derived from the source, the commit and the name (Forward deduplicates on it);
and it carries the metadata marker ``memsync-restore: <key>``, by which a rerun finds it on Cloud
and Anthropic (which have no idempotency keys) even if the record was lost.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memsync.api import ApiError, Client, NotFound, PreconditionFailed, Store
from memsync.crashpoints import crash_point
from memsync.engine.restore_plan import (
    Action,
    CreateMemory,
    Present,
    RenameMemory,
    RestorePlan,
    UpdateMemory,
    Wanted,
    plan_restore,
)
from memsync.errors import EXIT_OK, MemsyncError, RuleViolation, UsageError
from memsync.mirror import BackupRepository, escape_for_terminal
from memsync.rules import (
    RESERVED_STORE_METADATA_KEY,
    Dialect,
    check_memory_metadata,
    check_store_metadata,
    check_store_name,
    decode_content,
    max_memories,
)
from memsync.sync.outputs import RestoreOutput
from memsync.sync.report import Outcome, Reported

MARKER_KEY = "memsync-restore"
HISTORY_NOTE = (
    "history cannot be recreated: the store's versions start with this restore's writes; the full"
    " history stays in the mirror or backup restored from"
)
# Into a store that exists, its own versions stay: the restore's writes follow them.
INTO_STORE_NOTE = (
    "the store keeps its own history: this restore's writes are new versions after it; the source's"
    " history is not copied, it stays in the mirror or backup restored from"
)


@dataclass
class RestoreReport(Outcome, Reported):
    """What a restore did (or, with ``--dry-run``, would do); ``to_json`` is its ``--json`` entry."""

    id: str | None
    name: str = ""
    ok: bool = True
    error: str | None = None
    code: int = EXIT_OK
    source: str = ""
    commit: str = ""
    new_store: bool = False
    dry_run: bool = False
    planned: dict[str, int] = field(default_factory=dict)
    done: dict[str, int] = field(default_factory=dict)
    writes: list[dict[str, str]] = field(default_factory=list)
    rejected: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def output(self) -> RestoreOutput:
        return RestoreOutput.model_validate(
            {
                "id": self.id,
                "name": self.name,
                "ok": self.ok,
                "error": self.error,
                "source": self.source,
                "commit": self.commit,
                "new_store": self.new_store,
                "dry_run": self.dry_run,
                "planned": self.planned,
                "done": self.done,
                "writes": self.writes,
                "rejected": self.rejected,
                "warnings": self.warnings,
            }
        )


def restore(
    client: Client,
    source: Path,
    *,
    state_dir: Path,
    into_store: str | None = None,
    new_store: str | None = None,
    at: str | None = None,
    dry_run: bool = False,
    force: bool = False,
    max_delete_share: float = 0.5,
) -> RestoreReport:
    """Restore ``source`` (at ``at``, default its imported tip) into a store; errors in the report."""
    if (into_store is None) == (new_store is None):
        raise UsageError("restore needs exactly one of --into-store ID or --new-store NAME")
    report = RestoreReport(id=into_store, name=new_store or "", source=str(source), dry_run=dry_run)
    report.new_store = new_store is not None
    try:
        with BackupRepository.open(source) as repo:
            _restore(client, repo, report, state_dir, new_store, at, force, max_delete_share)
    except PreconditionFailed as exc:
        report.fail(
            f"the store changed while the restore was writing ({exc}); run the same command again to"
            " finish against what it holds now"
        )
    except MemsyncError as exc:
        report.fail(str(exc), exc.exit_code)
    if report.planned:  # a run stopped before its plan has no history to speak of
        report.warnings.append(HISTORY_NOTE if report.new_store else INTO_STORE_NOTE)
    return report


def _restore(
    client: Client,
    repo: BackupRepository,
    report: RestoreReport,
    state_dir: Path,
    new_name: str | None,
    at: str | None,
    force: bool,
    share: float,
) -> None:
    dialect = client.dialect
    commit = repo.resolve(at)
    report.commit = commit
    wanted, blobs = _wanted(repo, commit, dialect, report)
    store_document, _ = repo.metadata()
    store: Store | None
    key = ""
    if new_name is not None:
        # Cloud keeps names trimmed and at most 64 characters: refused here, before anything is written.
        try:
            new_name = check_store_name(new_name, dialect)
        except RuleViolation as exc:
            raise UsageError(
                f"--new-store {new_name!r}: the {exc.field} {exc.detail}; choose another"
            ) from None
        report.name = new_name
        key = _restore_key(repo, store_document, commit, new_name, dialect)
        store = _find_restored_store(client, state_dir, key, new_name)
    else:
        assert report.id is not None
        try:
            store = client.get_store(report.id)
        except NotFound:
            raise UsageError(f"no store {report.id} for this token; `memsync stores` lists them") from None
    if store is not None:
        report.id = store.id
        report.name = store.name
        if store.archived:
            raise UsageError(
                f"{store.id} is archived, and archived stores are read-only: restore into another store"
                " (--new-store NAME)"
            )
    present = {}
    if store is not None:
        present = {m.path: Present(m.path, m.id, m.content_sha256) for m in client.list_memories(store.id)}
    plan = plan_restore(
        wanted,
        present,
        dialect=dialect,
        delete_others=new_name is None,
        max_delete_share=share,
        force=force,
        max_memories=max_memories(dialect),
    )
    report.planned = plan.counts
    report.rejected += [{"path": r.path, "reason": r.reason} for r in plan.rejected]
    report.writes = [_describe_action(action) for action in plan.actions]
    if plan.refused is not None:
        report.fail(plan.refused)
        return
    if report.dry_run:
        return
    if store is None:
        # Only once the plan holds: a refused restore leaves no empty store behind.
        assert new_name is not None
        store = _create_store(client, state_dir, key, new_name, store_document, commit, report)
        report.id, report.name = store.id, store.name
    _execute(client, store, plan, blobs, repo, dialect, report)
    if new_name is not None:
        _record(state_dir, key, store, done=True)
    if report.rejected:
        report.fail(f"{len(report.rejected)} memory(s) could not be restored into this {dialect.value} store")


def _wanted(
    repo: BackupRepository, commit: str, dialect: Dialect, report: RestoreReport
) -> tuple[dict[str, Wanted], dict[str, str]]:
    """The commit's memories as the planner wants them, and their blobs by path."""
    tree = repo.files(commit)
    for tree_path, why in tree.problems.items():
        report.rejected.append({"path": tree_path, "reason": why})
    ids = repo.memory_ids(commit)
    _, documents = repo.metadata()
    by_path: dict[str, dict[str, Any]] = {}
    if ids is not None:
        by_path = {path: documents[memory] for path, memory in ids.items() if memory in documents}
    else:
        # Not imported history (a commit of the user's): match the metadata by the memories' paths.
        by_path = {doc["path"]: doc for doc in documents.values() if isinstance(doc.get("path"), str)}
    wanted: dict[str, Wanted] = {}
    dropped_metadata = 0
    for path, blob in tree.files.items():
        data = repo.content(blob)
        problem = None
        try:
            decode_content(data, dialect)
        except RuleViolation as exc:
            problem = f"the content cannot be a memory on the {dialect.value} dialect: {exc.detail}"
        metadata = by_path.get(path, {}).get("metadata")
        if metadata:
            try:
                metadata = {
                    k: v for k, v in check_memory_metadata(metadata, dialect).items() if v is not None
                }
            except RuleViolation:
                dropped_metadata += 1
                metadata = None
        wanted[path] = Wanted(path, hashlib.sha256(data).hexdigest(), problem, metadata or None)
    if dropped_metadata:
        report.warnings.append(
            f"the metadata of {dropped_metadata} memory(s) is not restored: the {dialect.value} dialect"
            f" {'has no memory metadata' if dialect is Dialect.ANTHROPIC else 'refuses it'}"
        )
    return wanted, tree.files


def _restore_key(
    repo: BackupRepository, store_document: dict[str, Any] | None, commit: str, name: str, dialect: Dialect
) -> str:
    """The same for every run of one restore: source store (or first commit), commit, name, dialect."""
    source = store_document.get("id") if store_document else None
    if not isinstance(source, str):
        source = next(iter(reversed(list(c.commit for c in repo.imported()))), "")
    material = "\0".join(["memsync-restore-1", source, commit, name, dialect.value])
    return hashlib.sha256(material.encode("utf-8")).hexdigest()[:32]


def _state_file(state_dir: Path, key: str) -> Path:
    return state_dir / "restores" / f"{key}.json"


def _record(state_dir: Path, key: str, store: Store, *, done: bool) -> None:
    path = _state_file(state_dir, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"store_id": store.id, "name": store.name, "done": done}), encoding="utf-8")
    os.replace(tmp, path)


def _find_restored_store(client: Client, state_dir: Path, key: str, name: str) -> Store | None:
    """The store an earlier run of this restore made, if any: by the recorded id, else by the marker."""
    try:
        recorded = json.loads(_state_file(state_dir, key).read_text(encoding="utf-8"))
        store_id = recorded.get("store_id")
    except (OSError, ValueError):
        store_id = None
    if isinstance(store_id, str):
        try:
            return client.get_store(store_id)
        except NotFound:
            pass  # deleted since: look for another, or make a new one
    for store in client.list_stores(include_archived=True):
        if store.name == name and store.metadata.get(MARKER_KEY) == key:
            return store
    return None


def _create_store(
    client: Client,
    state_dir: Path,
    key: str,
    name: str,
    document: dict[str, Any] | None,
    commit: str,
    report: RestoreReport,
) -> Store:
    dialect = client.dialect
    description = document.get("description") if document else None
    if dialect is Dialect.CLOUD and not (isinstance(description, str) and description.strip()):
        # Cloud requires a description; the source's is kept, and only a source without one gets this.
        description = _restored_from(document, commit)
    metadata = dict(document.get("metadata") or {}) if document else {}
    # created_by is set by a Forward server, never by a caller: it is not the store's own metadata.
    metadata.pop(RESERVED_STORE_METADATA_KEY, None)
    metadata = _with_marker(metadata, key, dialect, report)
    store = client.create_store(
        name,
        description=description if isinstance(description, str) else "",
        metadata=metadata,
        request_id=f"memsync-restore:{key}",
    )
    crash_point("restore.store_created")
    _record(state_dir, key, store, done=False)
    return store


def _restored_from(document: dict[str, Any] | None, commit: str) -> str:
    """A description that says where a restored store came from."""
    source = ""
    if document:
        name, store_id = document.get("name"), document.get("id")
        if isinstance(name, str) and name.strip():
            source = f" {name.strip()}"
        if isinstance(store_id, str):
            source += f" ({store_id})" if source else f" {store_id}"
    return f"Restored by memsync from store{source or ' history'} at commit {commit[:12]}"


def _with_marker(
    metadata: dict[str, str], key: str, dialect: Dialect, report: RestoreReport
) -> dict[str, str]:
    """The store's metadata with the restore marker; the marker yields when the metadata is full."""
    marked = {**metadata, MARKER_KEY: key}
    for candidate, note in (
        (marked, None),
        (
            metadata,
            "the store's metadata leaves no room for the restore marker: a rerun finds the new store by"
            " the record under the mirror root (and, on Forward, by its Idempotency-Key)",
        ),
        ({MARKER_KEY: key}, "the store's metadata is not allowed on this dialect; it is not restored"),
    ):
        try:
            check_store_metadata(candidate, dialect)
        except RuleViolation:
            continue
        if note:
            report.warnings.append(note)
        return candidate
    return {}


def _execute(
    client: Client,
    store: Store,
    plan: RestorePlan,
    blobs: dict[str, str],
    repo: BackupRepository,
    dialect: Dialect,
    report: RestoreReport,
) -> None:
    done = {"create": 0, "update": 0, "rename": 0, "delete": 0}
    report.done = done
    for index, action in enumerate(plan.actions):
        try:
            _write(client, store.id, action, blobs, repo, dialect)
        except PreconditionFailed:
            raise
        except ApiError as exc:
            raise MemsyncError(
                f"{exc} (after {index} of {len(plan.actions)} writes); run the same command again to"
                " finish the restore"
            ) from None
        done[_kind(action)] += 1
        crash_point("restore.write")


def _content(repo: BackupRepository, blobs: dict[str, str], path: str, dialect: Dialect) -> str:
    return decode_content(repo.content(blobs[path]), dialect)


def _write(
    client: Client,
    store_id: str,
    action: Action,
    blobs: dict[str, str],
    repo: BackupRepository,
    dialect: Dialect,
) -> None:
    if isinstance(action, CreateMemory):
        metadata = dict(action.metadata) if action.metadata and dialect is not Dialect.ANTHROPIC else None
        client.create_memory(
            store_id, action.path, _content(repo, blobs, action.path, dialect), metadata=metadata
        )
    elif isinstance(action, UpdateMemory):
        content = _content(repo, blobs, action.path, dialect)
        client.update_memory(store_id, action.memory_id, content, expected_sha256=action.expected_sha256)
    elif isinstance(action, RenameMemory):
        client.rename_memory(
            store_id, action.memory_id, action.new_path, expected_sha256=action.expected_sha256
        )
    else:
        client.delete_memory(store_id, action.memory_id, expected_sha256=action.expected_sha256)


def _kind(action: Action) -> str:
    if isinstance(action, CreateMemory):
        return "create"
    if isinstance(action, UpdateMemory):
        return "update"
    if isinstance(action, RenameMemory):
        return "rename"
    return "delete"


def _describe_action(action: Action) -> dict[str, str]:
    described = {"op": _kind(action), "path": action.path}
    if isinstance(action, RenameMemory):
        described["to"] = action.new_path
    return described


def describe(report: dict[str, Any]) -> str:
    """The human-readable lines of a restore (untrusted paths escaped)."""
    target = report["id"] or f"a new store {escape_for_terminal(report['name'])!r}"
    verb = "would restore" if report["dry_run"] else "restored"
    planned = report["planned"]
    counts = ", ".join(
        f"{planned.get(k, 0)} {k}" for k in ("create", "update", "rename", "delete", "unchanged")
    )
    if planned:
        lines = [f"{verb} {report['source']} at {report['commit'][:12] or '?'} into {target}: {counts}"]
    else:  # stopped before a plan (no such store or commit): no counts to show
        lines = [f"cannot restore {report['source']} into {target}"]
    if report["dry_run"]:
        for write in report["writes"]:
            to = f" -> {escape_for_terminal(write['to'])}" if "to" in write else ""
            lines.append(f"  {write['op']} {escape_for_terminal(write['path'])}{to}")
    for rejected in report["rejected"]:
        lines.append(f"  not restored: {escape_for_terminal(rejected['path'])}: {rejected['reason']}")
    lines += [f"  note: {w}" for w in report["warnings"]]
    if report["error"]:
        lines.append(f"  error: {report['error']}")
    return "\n".join(lines)
