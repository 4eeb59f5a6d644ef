"""What every command prints with ``--json``: pydantic models, the contract's one definition.

A report is built while a command runs (the dataclasses of pull, push, status…); its ``output()`` is
one of the models here, validated strictly (no key the model does not declare, no value of another
type), and ``--json`` prints that model's serialisation. ``memsync schema`` prints the JSON Schema
these models make, and ``docs/json-schema/`` publishes it; a key added to a report without its model
fails the tests, not a user's parser.

Keys that only some runs print (``predicted`` of a push --dry-run, ``to`` of a rename, ``shard`` of a
sharded ``stores``) are optional in the schema and absent, not null, when they do not apply:
serialisation leaves out what a report did not set.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Output(BaseModel):
    """One object of ``--json`` output."""

    model_config = ConfigDict(extra="forbid", strict=True)

    def to_json(self) -> dict[str, Any]:
        """The JSON object (keys the report did not set left out)."""
        return self.model_dump(mode="json", exclude_unset=True)


# --- entries shared by several commands -------------------------------------------------------------


class PathReason(Output):
    """A file memsync did not push, and why (rejected, withheld)."""

    path: str
    reason: str


class PathAction(Output):
    """A file and what was (or would be) done to it; ``to`` for a rename."""

    path: str
    action: str
    to: str = Field(default="", description="the new path of a rename")


class Respelled(Output):
    """A file memsync moved to its spelling of the memory's path, once the store held its content."""

    path: str
    to: str
    reason: str


class PushedChange(Output):
    """A change a push wrote to the store: the file (its working-tree spelling), the memory path it
    stands for, and the operation; ``to`` and ``to_memory_path`` for a rename."""

    path: str
    memory_path: str
    action: Literal["create", "update", "delete", "rename", "merge"]
    to: str = Field(default="", description="the new path of a rename, as spelled in the working tree")
    to_memory_path: str = Field(default="", description="the new memory path of a rename")


class PathOnly(Output):
    path: str


class Notice(Output):
    path: str
    reason: str
    kind: str


class ConflictEntry(Output):
    """An open conflict: where, why, its ref under refs/memsync/conflicts/, when it was recorded."""

    path: str
    reason: str
    ref: str
    recorded_at: str
    new: bool = Field(default=False, description="recorded by this run (push and sync only)")


class Predicted(Output):
    """One file of ``push --dry-run``: what would happen to it."""

    path: str
    outcome: str
    action: str
    to: str = Field(default="", description="the new path of a rename")


class InferredDelete(Output):
    memory_id: str
    path: str


class HistoryTruncated(Output):
    """What the first commit's ``History-Truncated`` trailer says: its commit and the memories then."""

    commit: str | None
    memories: int | None


class MetadataRefresh(Output):
    """How the memories' metadata snapshot was refreshed, at how many requests."""

    memories: Literal["unchanged", "listed", "read", "from-versions"]
    requests: int


class KeptContent(Output):
    where: str
    path: str | None
    blob: str | None


class Rewrite(Output):
    """What a history rewrite (a redaction, a respelling) did to the mirror."""

    versions: list[str]
    first_commit: str | None
    old_tip: str | None
    new_tip: str | None
    commits: int
    refs: list[str]
    removed: list[str]
    shared: list[str]
    kept: list[KeptContent]
    remaining: list[str]
    pruned: bool
    warnings: list[str]
    reason: Literal["redaction", "spelling"]


# --- per-store reports ---------------------------------------------------------------------------------


class StoreOutput(Output):
    """What every store's entry has: the store, and whether its run succeeded."""

    id: str
    ok: bool
    error: str | None


class PullOutput(StoreOutput):
    name: str
    path: str
    imported: int
    skipped: list[str]
    late: int
    requests: int
    tip: str | None
    checkout: Literal["updated", "local-changes", "diverged", "unchanged"]
    local_changes: list[str]
    stopped_at_version: str | None
    redacted_since_import: list[str]
    expired: int
    deleted_remotely: bool
    not_found_at: str | None
    warnings: list[str]
    rewrite: Rewrite | None
    history_truncated: HistoryTruncated | None
    inferred_deletes: list[InferredDelete]
    metadata: MetadataRefresh


class PushOutput(StoreOutput):
    name: str
    path: str
    dry_run: bool
    pushed: list[PushedChange]
    checkout: list[PathAction]
    conflicts: list[ConflictEntry]
    rejected: list[PathReason]
    withheld: list[PathReason]
    notices: list[Notice]
    respelled: list[Respelled] = Field(default_factory=list)
    kept_commits: str | None
    attempts: int
    warnings: list[str]
    blocked: str | None
    predicted: list[Predicted] = Field(default_factory=list, description="push --dry-run only")


class CycleOutput(PullOutput):
    """One cycle (``sync``, ``push``, ``daemon --once``): the pull's keys, then what the push did."""

    pushed: list[PushedChange]
    conflicts: list[PathOnly]
    rejected: list[PathReason]
    withheld: list[PathReason]
    kept_commits: str | None
    blocked: str | None
    push: PushOutput | None


class DaemonLive(Output):
    """The daemon's live state of a store, from its state file."""

    running: bool
    status: str
    last_success: str | None
    lag_seconds: float | None
    paused: bool
    pause_reason: str | None
    next_run: str | None
    consecutive_failures: int
    last_result: str | None
    last_error: str | None
    updated_at: str | None


class StatusOutput(StoreOutput):
    name: str
    path: str
    conflicts: list[ConflictEntry]
    rejected: list[PathReason]
    withheld: list[PathReason]
    pending: list[PathAction]
    incoming: int
    kept_commits: list[str]
    tip: str | None
    daemon: DaemonLive | None
    history_truncated: HistoryTruncated | None
    blocked: str | None


class MountEntry(Output):
    memory_store_id: str
    name: str
    access: str
    system_managed: bool
    status: str
    created_at: str | None
    order: int


class CollisionEntry(Output):
    """A path two mounted stores both hold: the store a session sees it from, and the shadowed ones."""

    path: str
    visible_from: str
    shadowed: list[str]


class ViewEdit(Output):
    """An edit made in a read-only view, with the store whose checkout it belongs in."""

    path: str
    change: str
    store: str | None
    checkout: str | None


class ViewStore(Output):
    """A store of a view, as the API gave it (null where it does not say), and where it is shown:
    ``folder`` ("" for flat at the view's root), or ``refused`` saying why it is left out."""

    memory_store_id: str
    order: int
    name: str | None
    description: str | None
    access: str | None
    instructions: str | None
    mount_path: str | None
    status: str | None
    folder: str | None
    refused: str | None


class Pin(Output):
    """A ref naming the view commit current at an instant (by the versions' exact ``created_at``)."""

    ref: str
    instant: str
    commit: str
    exact: bool
    reason: str | None


class PinnedRef(Output):
    """A pin as ``status`` lists it, from the view's repository."""

    ref: str
    commit: str | None


class SessionWrite(Output):
    """A version the session wrote (the API's ``session_id`` filter), where the view shows it and the
    view commit holding it (``visible`` false: its write changed nothing the view shows)."""

    memory_store_id: str
    version_id: str
    memory_id: str
    operation: str
    memory_path: str | None
    path: str | None
    created_at: str
    commit: str | None
    visible: bool


class ViewOutput(StoreOutput):
    """An awareness view in ``status``: ``view`` is always true, telling it from a mirror."""

    view: Literal[True]
    kind: Literal["forward", "stores", "session"]
    identity: str | None
    template: str | None
    session: str | None
    path: str
    branch: str
    tip: str | None
    built_at: str | None
    mounts: list[MountEntry]
    stores: list[ViewStore]
    pins: list[PinnedRef]
    collisions: list[CollisionEntry]
    edits: list[ViewEdit]


class ResolveOutput(StoreOutput):
    path: str
    resolution: Literal["ours", "theirs", "edited", "deleted"]
    resolved_ref: str


class RefPushed(Output):
    """One ref of a backup push, as git reported it."""

    local: str | None
    remote: str
    old: str | None
    new: str | None
    status: str
    message: str | None


class RemoteOutput(Output):
    url: str
    ok: bool
    error: str | None
    created: bool
    pushed: int
    refs: list[RefPushed]
    pruned: bool
    warnings: list[str]


class BackupOutput(StoreOutput):
    name: str
    imported: int
    archived: bool
    deleted_remotely: bool
    refs_pushed: int
    remotes: list[RemoteOutput]
    rewrite: Rewrite | None
    warnings: list[str]


class Difference(Output):
    kind: str
    drift: bool
    version: str | None
    commit: str | None
    path: str | None
    detail: str


class VerifyOutput(StoreOutput):
    name: str
    path: str
    tip: str | None
    commits: int
    versions: int
    drift: bool
    differences: list[Difference]


class RestoreWrite(Output):
    op: str
    path: str
    to: str = Field(default="", description="the new path of a rename")


class RestoreOutput(Output):
    id: str | None = Field(description="the store restored into; null for a new store not created yet")
    ok: bool
    error: str | None
    name: str
    source: str
    commit: str
    new_store: bool
    dry_run: bool
    planned: dict[str, int]
    done: dict[str, int]
    writes: list[RestoreWrite]
    rejected: list[PathReason]
    warnings: list[str]


class StoreRow(StoreOutput):
    """One store of ``memsync stores``."""

    name: str
    archived: bool
    system_managed: bool
    selected: bool
    mirror: str
    shard: int = Field(default=0, description="the owning shard, when a shard is in force")


# --- whole documents -------------------------------------------------------------------------------------


class StoresDocument(Output):
    """The object most commands print: one entry per store."""

    stores: list[Any]


class PullDocument(StoresDocument):
    stores: list[PullOutput]


class PushDocument(StoresDocument):
    stores: list[CycleOutput | PushOutput]


class CycleDocument(StoresDocument):
    stores: list[CycleOutput]


class StatusDocument(StoresDocument):
    stores: list[StatusOutput | ViewOutput]


class ResolveDocument(StoresDocument):
    stores: list[ResolveOutput]


class BackupDocument(StoresDocument):
    stores: list[BackupOutput]


class VerifyDocument(StoresDocument):
    stores: list[VerifyOutput]


class RestoreDocument(StoresDocument):
    stores: list[RestoreOutput]


class StoresListDocument(StoresDocument):
    stores: list[StoreRow]


class MountsDocument(Output):
    """``mounts``, ``mount`` and ``unmount``: the mounts of an (identity, template), in merge order."""

    identity: str
    template: str
    mounts: list[MountEntry]


class AwarenessDocument(Output):
    """``awareness``: the view built, its stores (and Forward mounts), every collision, its pins."""

    kind: Literal["forward", "stores", "session"]
    identity: str | None
    template: str | None
    session: str | None
    path: str
    branch: str
    tip: str | None
    rebuilt: bool
    mounts: list[MountEntry]
    stores: list[ViewStore]
    layout: str | None
    collisions: list[CollisionEntry]
    start: Pin | None
    at: Pin | None
    wrote: list[SessionWrite] | None
    warnings: list[str]


class FailedRun(Output):
    """What any command prints when the whole run fails before a store's entry exists."""

    error: str
    exit_code: int
    stores: list[Any] = Field(max_length=0)


# The document each command prints with --json (a FailedRun instead when the whole run fails).
DOCUMENTS: dict[str, type[Output]] = {
    "pull": PullDocument,
    "push": PushDocument,
    "sync": CycleDocument,
    "daemon-once": CycleDocument,
    "status": StatusDocument,
    "resolve": ResolveDocument,
    "backup": BackupDocument,
    "verify": VerifyDocument,
    "restore": RestoreDocument,
    "stores": StoresListDocument,
    "mounts": MountsDocument,
    "mount": MountsDocument,
    "unmount": MountsDocument,
    "awareness": AwarenessDocument,
    "failed-run": FailedRun,
}


def json_schema(name: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a document of :data:`DOCUMENTS` (``daemon-once``: what
    ``daemon --once --json`` prints; ``failed-run``: what any command prints when its run fails)."""
    schema = DOCUMENTS[name].model_json_schema(mode="serialization")
    title = {
        "daemon-once": "memsync daemon --once --json",
        "failed-run": "memsync --json, a run that failed as a whole",
    }.get(name, f"memsync {name} --json")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **schema,
        "title": title,
    }
