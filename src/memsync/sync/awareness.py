"""What an agent sees, as git views: a Forward (identity, template), a list of stores, or a session.

Forward injects every active mount of an (identity, template) into a session's sandbox, merging the
stores' memories by path into one flat namespace (seed 000). ``memsync awareness`` shows it:

1. list the mounts (one request; the API's order is the merge order: default store first, then by
   mount time) and pull every active mounted store into its mirror, selected by ``[stores]`` or not;
2. build the view at ``<mirror root>/awareness/<identity>/<template>/`` from those mirrors alone
   (their imported history, ``memstore/main``): one commit for each version that changes what the
   sandbox shows, in (``created_at``, version id) order, shadowing decided by
   :func:`memsync.engine.awareness.visible_holder`;
3. report the mounts and every collision.

The view's history is a pure function of the active mount list and the mirrors, so views built apart
have the same commit ids. A build appends to the last one when only new versions arrived; a changed
mount list, a store history rewritten by a redaction, or a version older than the view's tip makes it
rebuild the whole history (and say so). The view is read-only: nothing pushes from it, and
:func:`view_statuses` names an edit made there and the store checkout where it belongs.

Every dialect also has views of a list of stores (:func:`refresh_stores`), and Anthropic and Cloud
views of a session (:func:`refresh_session`): each store laid out as the session's API says, the view
commit current when the session began pinned at ``refs/sessions/<id>/start``. These are branches of
one repository, ``<mirror root>/awareness/sessions.git``, each checked out in a linked worktree, so git
compares any two. Any view pins the commit current at an instant under ``refs/at/`` (``--at``); pins
go by the versions' exact ``created_at`` (their ``Created-At`` trailers), not git's whole seconds.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memsync.api import Client, Mount, NotFound, StoreStatus
from memsync.engine.awareness import (
    Collision,
    Namespace,
    Placement,
    Rule,
    cloud_visible_holder,
    current_at,
    inexact_reason,
    merged_history,
    place_stores,
    visible_holder,
)
from memsync.errors import (
    EXIT_ATTENTION,
    EXIT_AUTH,
    EXIT_LOCKED,
    EXIT_OK,
    AuthenticationFailed,
    LockHeld,
    MemsyncError,
    MirrorError,
    UsageError,
    UserError,
)
from memsync.mirror import Mirror, View, decode_path, encode_path, escape_for_terminal
from memsync.mirror.view import VIEWS_FOLDER, StoreCommit, ViewCommit, ViewWriter
from memsync.rules import Dialect
from memsync.sync.locks import held
from memsync.sync.outputs import AwarenessDocument, MountsDocument, ViewOutput
from memsync.sync.pull import PullReport, mirror_path, pull_store
from memsync.sync.push import working_tree_path
from memsync.sync.report import Outcome, Reported

log = logging.getLogger("memsync.awareness")

STATE_FORMAT = 2  # 2: view commits carry Created-At; pins and status read the history

# (created_at, version id, mount rank): the order of the merged history (engine.merged_history).
Key = tuple[datetime, str, int]


def require_mounts(dialect: Dialect) -> None:
    """Refuse (exit 2) on a dialect without mounts."""
    if dialect is not Dialect.FORWARD:
        raise UsageError(
            f"mounts, and views of an identity and template, exist on the Forward dialect only; this config"
            f" speaks {dialect.value}: use memsync awareness --stores ID,... (or --session ID)"
        )


def check_pair(identity: str, template: str) -> None:
    """Refuse (exit 2) an identity or template id that is empty or holds control characters."""
    for what, value in (("IDENTITY", identity), ("TEMPLATE", template)):
        if value == "" or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
            raise UsageError(f"{what} must be a non-empty id without control characters, as the API knows it")
        View.folder_name(value, what.lower())
    if View.folder_name(identity) in RESERVED_FOLDERS:
        raise UsageError(
            f"the identity id {identity!r} names a folder memsync keeps for the views of sessions and store"
            " lists; a Forward view of it cannot be made"
        )


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def mount_entries(mounts: Sequence[Mount]) -> list[dict[str, Any]]:
    """The ``mounts`` array of the JSON output: the API's order, ``order`` counting from 0."""
    return [
        {
            "memory_store_id": mount.store_id,
            "name": mount.name,
            "access": mount.access,
            "system_managed": mount.system_managed,
            "status": mount.status,
            "created_at": _iso(mount.created_at),
            "order": order,
        }
        for order, mount in enumerate(mounts)
    ]


def mounts_document(identity: str, template: str, mounts: Sequence[Mount]) -> MountsDocument:
    """``memsync mounts --json``."""
    return MountsDocument.model_validate(
        {"identity": identity, "template": template, "mounts": mount_entries(mounts)}
    )


def describe_mounts(document: dict[str, Any]) -> str:
    """The text of ``memsync mounts``: one line per mount, in the order sessions merge them."""
    esc = escape_for_terminal
    head = f"mounts of {esc(document['identity'])}/{esc(document['template'])}"
    if not document["mounts"]:
        return f"{head}: none"
    lines = [f"{head}, in the order a session merges them (the first holder of a path wins):"]
    for mount in document["mounts"]:
        kind = "default" if mount["system_managed"] else "mounted"
        name = f"  {esc(mount['name'])}" if mount["name"] else ""
        lines.append(
            f"  {mount['order']}  {mount['memory_store_id']}  {kind}  {mount['access']}"
            f"  {mount['status'] or 'unreadable'}  since {mount['created_at']}{name}"
        )
    return "\n".join(lines)


# --- which view -------------------------------------------------------------------------------------

# The root each dialect's session mounts its stores under (the API's mount paths are absolute).
ANTHROPIC_ROOT = "/mnt/memory"
CLOUD_ROOT = "/data/.qoder/awareness"
# The one repository every --stores and --session view is a branch of, under <root>/awareness/, and
# the folders of their checkouts; a Forward identity folder may not take these names.
SHARED_REPOSITORY = "sessions.git"
SHARED_FOLDERS = {"session": "sessions", "stores": "stores"}
RESERVED_FOLDERS = frozenset({SHARED_REPOSITORY, *SHARED_FOLDERS.values()})
# A session or store id as one component of a ref name (git check-ref-format), kept simple.
_REF_COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def check_ref_id(value: str, what: str) -> str:
    """Refuse (exit 2) an id that cannot name a branch or a ref of the views' repository."""
    if not _REF_COMPONENT.fullmatch(value) or ".." in value or value.endswith((".lock", ".")):
        raise UsageError(
            f"the {what} {escape_for_terminal(value)!r} cannot name a git ref: memsync takes ids of letters,"
            " digits, '_', '-' and '.', as the API gives them"
        )
    return value


def parse_instant(text: str) -> datetime:
    """``--at TIME``: RFC 3339 with its offset (``2026-01-02T03:04:05.123456Z``); refuse anything else."""
    try:
        moment: datetime | None = datetime.fromisoformat(
            text.strip().replace("z", "Z").replace("Z", "+00:00")
        )
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise UsageError(
            f"--at {escape_for_terminal(text)!r} is not an RFC 3339 time with its offset; give one such as"
            " 2026-01-02T03:04:05.123456Z (the versions' own precision is microseconds)"
        )
    return moment.astimezone(UTC)


def instant_name(moment: datetime) -> str:
    """An instant as one ref component (git refuses ':'): ISO 8601's basic form, ``20260102T030405.123456Z``,
    microseconds only when there are any."""
    moment = moment.astimezone(UTC)
    fraction = f".{moment.microsecond:06d}" if moment.microsecond else ""
    return moment.strftime("%Y%m%dT%H%M%S") + fraction + "Z"


@dataclass
class ViewSpec:
    """Which view: a Forward (identity, template), a list of stores, or a session; its stores in merge
    order, each placed (or refused), and the rule that picks a path's visible holder."""

    kind: str  # "forward", "stores" or "session"
    placements: list[Placement]
    rule: Rule = visible_holder
    identity: str | None = None
    template: str | None = None
    session: str | None = None
    stores: list[str] = field(default_factory=list)  # --stores: the ids as given
    start: datetime | None = None  # the session's created_at

    @property
    def name(self) -> str:
        if self.kind == "forward":
            return f"{self.identity}/{self.template}"
        return f"sessions/{self.session}" if self.kind == "session" else "stores/" + ",".join(self.stores)

    def path(self, root: Path) -> Path:
        if self.kind == "forward":
            assert self.identity is not None and self.template is not None
            return View.path_for(root, self.identity, self.template)
        key = self.session if self.kind == "session" else ",".join(self.stores)
        assert key is not None
        return root / VIEWS_FOLDER / SHARED_FOLDERS[self.kind] / View.folder_name(key, f"{self.kind} id")

    @property
    def branch(self) -> str:
        return "refs/heads/main" if self.kind == "forward" else f"refs/heads/{self.name}"

    @property
    def at_prefix(self) -> str:
        return "refs/at/" if self.kind == "forward" else f"refs/at/{self.name}/"

    @property
    def start_ref(self) -> str | None:
        return f"refs/sessions/{self.session}/start" if self.kind == "session" else None

    def lock(self, root: Path) -> contextlib.AbstractContextManager[None]:
        if self.kind == "forward":
            assert self.identity is not None and self.template is not None
            return view_lock(root, self.identity, self.template)
        # One lock for the shared repository: a rebuild prunes it, which another build's objects not
        # yet referenced must not meet.
        lock = root / ".memsync" / "locks" / "awareness" / f"{SHARED_REPOSITORY}.lock"
        return held(lock, "the awareness views of sessions and store lists")

    def open(self, root: Path) -> View:
        if self.kind == "forward":
            return View.open(self.path(root), create=True)
        repository = root / VIEWS_FOLDER / SHARED_REPOSITORY
        known = _ROOTS.get(str(repository)) if repository.is_dir() else None  # a new one lacks the object
        view = View.open_shared(repository, self.path(root), self.branch, known)
        _ROOTS[str(repository)] = view.root or ""
        return view


# The empty-tree commit of each shared repository this process opened: the same object every time.
_ROOTS: dict[str, str] = {}


# --- building the view ------------------------------------------------------------------------------


@dataclass
class AwarenessReport(Outcome, Reported):
    """What ``memsync awareness`` (or the daemon) did to one view."""

    identity: str | None
    template: str | None
    path: str
    kind: str = "forward"
    session: str | None = None
    branch: str = "main"
    tip: str | None = None
    rebuilt: bool = False
    reason: str | None = None  # why the history was rebuilt
    created: bool = False
    commits: int = 0  # written by this build
    files: int = 0
    mounts: list[dict[str, Any]] = field(default_factory=list)
    stores: list[dict[str, Any]] = field(default_factory=list)
    collisions: list[Collision] = field(default_factory=list)
    start: dict[str, Any] | None = None
    at: dict[str, Any] | None = None
    wrote: list[dict[str, Any]] | None = None
    layout: str | None = None  # what the layout cannot know
    pulls: list[PullReport] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    ok: bool = True
    error: str | None = None
    code: int = EXIT_OK

    def exit_code_for(self, *, strict: bool) -> int:
        if not self.ok:
            return self.code
        return EXIT_ATTENTION if strict and self.collisions else EXIT_OK

    def output(self) -> AwarenessDocument:
        return AwarenessDocument.model_validate(
            {
                "kind": self.kind,
                "identity": self.identity,
                "template": self.template,
                "session": self.session,
                "path": self.path,
                "branch": self.branch,
                "tip": self.tip,
                "rebuilt": self.rebuilt,
                "mounts": self.mounts,
                "stores": self.stores,
                "layout": self.layout,
                "collisions": [c.to_json() for c in self.collisions],
                "start": self.start,
                "at": self.at,
                "wrote": self.wrote,
                "warnings": self.warnings,
            }
        )


def view_lock(root: Path, identity: str, template: str) -> contextlib.AbstractContextManager[None]:
    """The lock of one Forward view, shared by the CLI and the daemon."""
    lock = (
        root
        / ".memsync"
        / "locks"
        / "awareness"
        / View.folder_name(identity, "identity id")
        / f"{View.folder_name(template, 'template id')}.lock"
    )
    return held(lock, f"the awareness view of {identity}/{template}")


def _store_entry(order: int, place: Placement, **fields: Any) -> dict[str, Any]:
    """One entry of the JSON's ``stores``: the API's facts of a store of the view, and its folder."""
    entry = {
        "memory_store_id": place.store_id,
        "order": order,
        "name": None,
        "description": None,
        "access": None,
        "instructions": None,
        "mount_path": None,
        "status": None,
        "folder": None if place.refused else place.folder,
        "refused": place.refused,
    }
    entry.update(fields)
    return entry


def refresh_awareness(
    client: Client,
    root: Path,
    identity: str,
    template: str,
    *,
    pull: Callable[[str], bool] = lambda store_id: True,
    at: datetime | None = None,
) -> AwarenessReport:
    """List the mounts, pull the active mounted stores (those ``pull`` says yes to), build the view.

    Errors raise (the CLI prints them with their exit code; the daemon logs them): a failed pull, a
    held lock, a view whose ``main`` holds commits memsync did not write.
    """
    require_mounts(client.dialect)
    check_pair(identity, template)
    mounts = client.list_mounts(identity, template)
    report = AwarenessReport(
        identity=identity,
        template=template,
        path=str(View.path_for(root, identity, template)),
        mounts=mount_entries(mounts),
    )
    if not mounts:
        if not (Path(report.path) / ".git").is_dir():
            # Every identity has its default store mounted: none at all is most likely a mistyped
            # id, and a view made for it would be listed by `status` from then on.
            raise UsageError(
                f"no store is mounted for {identity}/{template}: check the identity and template ids"
                " (`memsync mounts IDENTITY TEMPLATE` lists what is mounted); no view was made"
            )
        report.warnings.append(f"no store is mounted for {identity}/{template}: the view is empty")
    for mount in mounts:
        if not mount.active:
            shown = mount.status or "unreadable"
            report.warnings.append(f"{mount.store_id} is mounted but {shown}: sessions do not see it")
    _pull(client, root, [m.store_id for m in mounts if m.active], pull, report)
    build_view(root, identity, template, mounts, report, at=at)
    return report


def refresh_stores(
    client: Client,
    root: Path,
    store_ids: Sequence[str],
    *,
    pull: Callable[[str], bool] = lambda store_id: True,
    at: datetime | None = None,
) -> AwarenessReport:
    """The view a session given ``store_ids`` (in this order) would see: pull them, build it.

    Forward and Cloud merge the stores flat (the first holder of a path in the given order wins);
    Anthropic mounts each in a folder of its own, named here by the store id, since only a session
    knows the real mount path. An archived store is refused, as a new session refuses it.
    """
    ids = [check_ref_id(store_id, "store id") for store_id in store_ids]
    if not ids or len(set(ids)) != len(ids):
        raise UsageError("--stores takes one or more store ids separated by commas, each once")
    dialect = client.dialect
    stores = []
    for store_id in ids:
        try:
            stores.append(client.get_store(store_id))
        except NotFound:
            raise UsageError(f"the API does not know store {store_id}: check the ids of --stores") from None
    archived = [store.id for store in stores if store.status is not StoreStatus.ACTIVE]
    if archived:
        raise UsageError(
            f"store {', '.join(archived)} is archived: a new session refuses it, so no view of it is"
            " built; leave it out of --stores"
        )
    anthropic = dialect is Dialect.ANTHROPIC
    placements = [Placement(store.id, store.id if anthropic else "") for store in stores]
    rule = cloud_visible_holder if dialect is Dialect.CLOUD else visible_holder
    spec = ViewSpec("stores", placements, rule, stores=ids)
    report = AwarenessReport(identity=None, template=None, path=str(spec.path(root)), kind="stores")
    report.branch = spec.branch.removeprefix("refs/heads/")
    report.stores = [
        _store_entry(order, place, name=store.name, description=store.description, status=store.status.value)
        for order, (place, store) in enumerate(zip(placements, stores, strict=True))
    ]
    if anthropic:
        report.layout = (
            "each store is in a folder named by its id: without a session the real mount path (under"
            f" {ANTHROPIC_ROOT}/) is unknown"
        )
    _pull(client, root, ids, pull, report)
    _build(root, spec, report, at=at)
    return report


class UnknownSession(UsageError):
    """The API does not know the session (exit 2); the daemon keeps its view and warns."""


def session_spec(client: Client, session_id: str) -> tuple[ViewSpec, list[dict[str, Any]]]:
    """The session as the API gives it: its view's spec and the ``stores`` entries of the JSON.
    :class:`UnknownSession` (exit 2) when the API does not know the session."""
    dialect = client.dialect
    if dialect not in (Dialect.ANTHROPIC, Dialect.CLOUD):
        raise UsageError(
            f"sessions with memory stores exist on the anthropic and cloud dialects; this config speaks"
            f" {dialect.value}: use IDENTITY TEMPLATE (or --stores)"
        )
    check_ref_id(session_id, "session id")
    try:
        session = client.get_session(session_id)
    except NotFound:
        raise UnknownSession(
            f"the API does not know session {session_id}: check the id (a view of the stores alone is"
            " `memsync awareness --stores ID,...`)"
        ) from None
    anthropic = dialect is Dialect.ANTHROPIC
    placements = place_stores(
        [(store.memory_store_id, store.mount_path) for store in session.stores],
        ANTHROPIC_ROOT if anthropic else CLOUD_ROOT,
        unmounted="id" if anthropic else "flat",
    )
    entries = [
        _store_entry(
            order,
            place,
            name=store.name,
            description=store.description,
            access=store.access,
            instructions=store.instructions,
            mount_path=store.mount_path,
        )
        for order, (place, store) in enumerate(zip(placements, session.stores, strict=True))
    ]
    rule = visible_holder if anthropic else cloud_visible_holder
    return ViewSpec("session", placements, rule, session=session_id, start=session.created_at), entries


def refresh_session(
    client: Client,
    root: Path,
    session_id: str,
    *,
    pull: Callable[[str], bool] = lambda store_id: True,
    at: datetime | None = None,
    keep_known: bool = False,
) -> AwarenessReport:
    """The view of a session (Anthropic, Cloud): its stores laid out as the API says, its start pinned at
    ``refs/sessions/<id>/start``, and what it wrote. With ``keep_known`` (the daemon), a session the API
    no longer knows keeps the view its build record describes, with a warning."""
    warning = None
    try:
        spec, entries = session_spec(client, session_id)
    except UnknownSession as exc:
        recorded = _recorded_session(root, session_id) if keep_known else None
        if recorded is None:
            raise
        spec, entries = recorded
        warning = f"{exc}; the view is kept as last built"
    report = AwarenessReport(
        identity=None, template=None, path=str(spec.path(root)), kind="session", session=session_id
    )
    report.branch = spec.branch.removeprefix("refs/heads/")
    report.stores = entries
    if warning:
        report.warnings.append(warning)
    report.warnings += [
        f"store {e['memory_store_id']} is left out: {e['refused']}" for e in entries if e["refused"]
    ]
    usable = [place.store_id for place in spec.placements if place.refused is None]
    wrote = None
    if warning is None:
        statuses = _pull(client, root, usable, pull, report)
        for entry in entries:
            entry["status"] = statuses.get(entry["memory_store_id"], entry["status"])

        def wrote(tips: dict[str, str | None]) -> list[dict[str, Any]]:
            return _session_versions(client, root, session_id, tips)

    _build(root, spec, report, at=at, wrote=wrote)
    return report


def _recorded_session(root: Path, session_id: str) -> tuple[ViewSpec, list[dict[str, Any]]] | None:
    """The session as its view's last build recorded it, or None without one."""
    path = root / VIEWS_FOLDER / SHARED_FOLDERS["session"] / View.folder_name(session_id, "session id")
    if not (path / ".git").exists():
        return None
    with View.open(path) as view:
        state = _read_state(view) or {}
    record = state.get("session_record")
    if not isinstance(record, dict):
        return None
    placements = [Placement(str(s), str(f), r) for s, f, r in record["placements"]]
    rule = visible_holder if record["rule"] == "forward" else cloud_visible_holder
    start = datetime.fromisoformat(str(record["start"]).replace("Z", "+00:00"))
    spec = ViewSpec("session", placements, rule, session=session_id, start=start)
    return spec, list(state.get("store_entries", []))


# (mirror root, session, store) → the store's mirror tip when its session_id listing was read, and it:
# a store whose mirror has not moved since holds nothing new the session wrote (the daemon's refreshes).
_LISTED: dict[tuple[str, str, str], tuple[str | None, list[dict[str, Any]]]] = {}


def _session_versions(
    client: Client, root: Path, session_id: str, tips: dict[str, str | None]
) -> list[dict[str, Any]]:
    """What the session wrote, from the API's ``session_id`` filter, oldest first; ``tips``: the
    mirrors' tips the view is built from."""
    found = []
    for store_id, tip in tips.items():
        listed = _LISTED.get((str(root), session_id, store_id))
        if listed is not None and listed[0] == tip:
            found += listed[1]
            continue
        entries = [
            {
                "memory_store_id": store_id,
                "version_id": version.id,
                "memory_id": version.memory_id,
                "operation": version.operation.value,
                "memory_path": version.path,
                "created_at": _iso(version.created_at),
                "moment": version.created_at,
            }
            for version in client.iter_versions(store_id, session_id=session_id)
        ]
        _LISTED[(str(root), session_id, store_id)] = (tip, entries)
        found += entries
    return sorted(found, key=lambda item: (item["moment"], item["version_id"]))


def _pull(
    client: Client, root: Path, store_ids: Sequence[str], pull: Callable[[str], bool], report: AwarenessReport
) -> dict[str, str]:
    """Pull ``store_ids`` (those ``pull`` says yes to); each pulled store's status. A store the API no
    longer knows keeps its mirror, with a warning."""
    failures: list[PullReport] = []
    statuses: dict[str, str] = {}
    for store_id in store_ids:
        if not pull(store_id):
            if not (mirror_path(root, store_id) / ".git").is_dir():
                raise MirrorPending(f"store {store_id} has no mirror yet; the view waits for its first pull")
            continue
        try:
            store = client.get_store(store_id)
        except NotFound:
            if not (mirror_path(root, store_id) / ".git").is_dir():
                raise MirrorError(f"the API does not know store {store_id} and it has no mirror") from None
            report.warnings.append(f"the API no longer knows store {store_id}: its mirror is shown as it is")
            continue
        statuses[store_id] = store.status.value
        pulled = pull_store(client, store, root)
        report.pulls.append(pulled)
        if not pulled.ok:
            failures.append(pulled)
    if failures:
        raise _pull_failure(failures)
    return statuses


def _pull_failure(failures: list[PullReport]) -> MemsyncError:
    message = "; ".join(f"pulling {f.id} failed: {f.error}" for f in failures)
    message += " (the view is left as it was)"
    codes = {f.code for f in failures}
    if EXIT_AUTH in codes:
        return AuthenticationFailed(message)
    if EXIT_LOCKED in codes:
        return LockHeld(message)
    return MemsyncError(message)


class MirrorPending(MirrorError):
    """A mounted store someone else pulls (the daemon's cycle) has no mirror yet: try again later."""


class _Restart(Exception):
    """An incremental build met something only a rebuild can make deterministic."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def build_view(
    root: Path,
    identity: str,
    template: str,
    mounts: Sequence[Mount],
    report: AwarenessReport,
    *,
    at: datetime | None = None,
) -> None:
    """Bring the Forward view of (``identity``, ``template``) up to the mounted stores' mirrors."""
    active = [mount for mount in mounts if mount.active]
    placements = [Placement(mount.store_id, "") for mount in active]
    spec = ViewSpec("forward", placements, identity=identity, template=template)
    report.stores = [
        _store_entry(order, place, name=mount.name, access=mount.access, status=mount.status)
        for order, (place, mount) in enumerate(zip(placements, active, strict=True))
    ]
    _build(root, spec, report, at=at)


def _build(
    root: Path,
    spec: ViewSpec,
    report: AwarenessReport,
    *,
    at: datetime | None = None,
    wrote: Callable[[dict[str, str | None]], list[dict[str, Any]]] | None = None,
) -> None:
    """Bring the view of ``spec`` up to its stores' mirrors and pin its instants (under its lock)."""
    active = [place.store_id for place in spec.placements if place.refused is None]
    folders = {place.store_id: place.folder for place in spec.placements if place.refused is None}
    path = spec.path(root)
    with spec.lock(root), contextlib.ExitStack() as stack:
        report.created = not (path / ".git").exists()
        view = stack.enter_context(spec.open(root))
        problem = view.head_problem()
        if problem is not None:
            raise UserError(f"the awareness view {path}: {problem}")
        mirrors: dict[str, Mirror] = {}
        for store_id in active:
            where = mirror_path(root, store_id)
            if not (where / ".git").is_dir():
                raise MirrorError(f"store {store_id} has no mirror at {where}; pull it first")
            mirrors[store_id] = stack.enter_context(Mirror.open(where))
        tips = {store_id: mirror.tip() for store_id, mirror in mirrors.items()}
        state = _read_state(view)
        instants = sorted({*_instants(state), *([at] if at is not None else [])})
        build = _Build(spec, view, active, folders, mirrors, tips, instants, report)
        reason = _rebuild_reason(view, state, active, folders, mirrors, tips)
        if reason is None:
            assert state is not None
            try:
                build.write(state)
            except _Restart as restart:
                reason = restart.reason
        if reason is not None:
            report.rebuilt = not report.created and (state is not None or view.tip() != view.root)
            report.reason = reason if report.rebuilt else None
            # A pin would keep the history a rebuild replaces (a redacted blob) from being pruned.
            _pin(view, {}, spec.at_prefix)
            if spec.start_ref:
                _pin(view, {}, spec.start_ref)
            build.write(None)
        build.pin(at, None if wrote is None else wrote(tips))


def _pin(view: View, pins: dict[str, str], prefix: str) -> None:
    """Point each ref of ``pins`` at its commit; every other ref under ``prefix`` goes."""
    git = view.git
    for name in sorted(set(git.refs(prefix)) | set(pins)):
        old = git.ref_target(name)
        if name not in pins:
            if old is not None:
                git.delete_ref_if_equals(name, old)
        elif old != pins[name]:
            git.set_ref_if_equals(name, pins[name], old, message="memsync: pinned")


def _instants(state: dict[str, Any] | None) -> list[datetime]:
    raw = (state or {}).get("at", [])
    return [datetime.fromisoformat(str(item).replace("Z", "+00:00")) for item in raw]


def _rebuild_reason(
    view: View,
    state: dict[str, Any] | None,
    active: list[str],
    folders: dict[str, str],
    mirrors: dict[str, Mirror],
    tips: dict[str, str | None],
) -> str | None:
    """Why the view's history must be built again from the start, or None to append to it."""
    tip = view.tip()
    if state is None or state.get("format") != STATE_FORMAT:
        if tip is not None:
            _refuse_foreign(view, view.root, tip)
        return "the view has no build record"
    recorded = state.get("tip")
    if tip != recorded:
        _refuse_foreign(view, recorded or view.root, tip)
        return "the last build was interrupted"
    if state.get("active") != active or state.get("folders") != folders:
        return "the mount list changed" if view.root is None else "the store list changed"
    for store_id in active:
        before = state.get("stores", {}).get(store_id)
        now = tips[store_id]
        if before is None:
            continue
        if now is None or not mirrors[store_id].git.is_ancestor(before, now):
            return f"the history of {store_id} was rewritten (a redaction)"
    return None


def _refuse_foreign(view: View, since: str | None, tip: str | None) -> None:
    """Refuse to replace commits on the view's branch that memsync did not write."""
    if tip is None:
        return
    foreign = view.foreign_commits(since, tip)
    if foreign:
        raise UserError(
            f"the awareness view {view.path} has {len(foreign)} commit(s) on"
            f" {view.branch.removeprefix('refs/heads/')} that memsync did not write ({foreign[0][:12]}...);"
            " the view is read-only and edits there are never pushed: make them in the stores' checkouts,"
            f" then delete {view.path} (memsync awareness makes it again)"
        )


def _key(commit: StoreCommit, rank: int) -> Key:
    return (commit.version.created_at, commit.version.version_id, rank)


def _key_json(key: Key | None) -> list[Any] | None:
    return None if key is None else [_iso(key[0]), key[1], key[2]]


def _key_from(raw: Any) -> Key | None:
    if raw is None:
        return None
    moment = datetime.fromisoformat(str(raw[0]).replace("Z", "+00:00"))
    return (moment, str(raw[1]), int(raw[2]))


def _placed(folder: str, path: str) -> str:
    """A memory path of a store as the view holds it: under the store's folder, if any."""
    return f"{folder}/{path}" if folder else path


@dataclass
class _Warm:
    """What one build leaves for the next in the same process (the daemon): the namespace and the
    writer's path map at the tip, which a fresh start rebuilds from every file of the view."""

    tip: str | None
    stores: dict[str, str | None]
    namespace: Namespace
    paths: Any


# The warm state of each view built in this process, by git folder; taken (popped) by a build and put
# back only when it succeeds, so a failed build never leaves a map that disagrees with the tip.
_WARM: dict[str, _Warm] = {}


@dataclass
class _Build:
    """One build of one view: its commits written (:meth:`write`), then its instants pinned (:meth:`pin`)."""

    spec: ViewSpec
    view: View
    active: list[str]
    folders: dict[str, str]
    mirrors: dict[str, Mirror]
    tips: dict[str, str | None]
    instants: list[datetime]
    report: AwarenessReport
    since: datetime | None = None  # None: every pin is computed again; else only those at or after it

    def write(self, state: dict[str, Any] | None) -> None:
        """Write the view's commits (appending when ``state`` is given, else from the start)."""
        view, mirrors, folders, report = self.view, self.mirrors, self.folders, self.report
        incremental = state is not None
        since: dict[str, str | None] = dict.fromkeys(self.active)
        warm = _WARM.pop(str(view.git.git_dir), None)
        last: Key | None = None
        if state is not None:
            since = {sid: state["stores"].get(sid) for sid in self.active}
            last = _key_from(state.get("last_key"))
        if state is None or warm is None or warm.tip != view.tip() or warm.stores != since:
            warm = None
            start_files = {
                sid: {_placed(folders[sid], p): blob for p, blob in mirrors[sid].files(c).items()}
                for sid, c in since.items()
                if c is not None
            }
            namespace = Namespace(self.active, start_files, self.spec.rule)
        else:
            namespace = warm.namespace
        writer = ViewWriter(view, rebuild=not incremental, paths=warm.paths if warm else None)
        readers = {sid: mirror.content for sid, mirror in mirrors.items()}

        def history(rank: int, store_id: str) -> Iterator[tuple[Key, str, StoreCommit]]:
            if self.tips[store_id] is None or since[store_id] == self.tips[store_id]:
                return
            for commit in View.store_history(mirrors[store_id], since[store_id], self.tips[store_id]):
                yield _key(commit, rank), store_id, commit

        streams = [history(rank, store_id) for rank, store_id in enumerate(self.active)]
        first: datetime | None = None
        for key, store_id, commit in merged_history(streams, key=lambda item: item[0]):
            if incremental and last is not None and key <= last:
                raise _Restart(
                    f"{store_id} has version {commit.version.version_id}, older than the view's tip"
                    " (imported late)"
                )
            last = key
            folder = folders[store_id]
            changes = {_placed(folder, path): blob for path, blob in commit.changes.items()}
            step = namespace.apply(store_id, changes)
            if not step.visible:
                continue
            first = first or key[0]
            visible = {
                path: None if shown is None else (shown[1], readers[shown[0]])
                for path, shown in step.visible.items()
            }
            placed = StoreCommit(commit.version, commit.author, commit.committer, changes)
            writer.add(visible, ViewCommit(store_id, placed, step.shadowed))
        report.tip = writer.finish()
        report.commits = len(writer.ids)
        # An append moves the pins at or after its first commit only; a rebuild moves them all.
        self.since = None if not incremental else (first or datetime.max.replace(tzinfo=UTC))
        report.collisions = namespace.collisions()
        report.files = len(namespace)
        view.git.state.put(
            "view",
            {
                "format": STATE_FORMAT,
                "kind": self.spec.kind,
                "identity": report.identity,
                "template": report.template,
                "session": self.spec.session,
                "branch": self.spec.branch,
                "active": self.active,
                "folders": folders,
                "rule": "cloud" if self.spec.rule is cloud_visible_holder else "forward",
                "mounts": report.mounts,
                "stores": self.tips,
                "store_entries": report.stores,
                "last_key": _key_json(last),
                "tip": report.tip,
                "collisions": [c.to_json() for c in report.collisions],
                "at": [_iso(moment) for moment in self.instants],
                "session_record": self._session_record(),
                "built_at": _iso(datetime.now(UTC)),
            },
        )
        _WARM[str(view.git.git_dir)] = _Warm(report.tip, dict(self.tips), namespace, writer.paths)

    def _session_record(self) -> dict[str, Any] | None:
        spec = self.spec
        if spec.kind != "session" or spec.start is None:
            return None
        return {
            "start": _iso(spec.start),
            "rule": "cloud" if spec.rule is cloud_visible_holder else "forward",
            "placements": [[p.store_id, p.folder, p.refused] for p in spec.placements],
        }

    def pin(self, at: datetime | None, wrote: list[dict[str, Any]] | None) -> None:
        """Point the start and every ``at`` ref at the commit current at its instant (by the versions'
        exact ``created_at``), at the empty commit when nothing was visible yet; report them."""
        spec, view, report = self.spec, self.view, self.report
        wanted: dict[str, datetime] = {f"{spec.at_prefix}{instant_name(m)}": m for m in self.instants}
        if spec.start_ref and spec.start is not None:
            wanted[spec.start_ref] = spec.start
        current = {ref: view.git.ref_target(ref) for ref in wanted}
        # Pins before this build's first commit stay where they are (an old pin far back is a long walk).
        moving = {
            ref: m
            for ref, m in wanted.items()
            if current[ref] is None or self.since is None or m >= self.since
        }
        floor = min([*moving.values(), *(item["moment"] for item in wrote or [])], default=None)
        history = _history_since(view, floor) if floor is not None else []
        commits = {ref: current[ref] or "" for ref in wanted}
        commits.update({ref: _current_at(view, history, m) for ref, m in moving.items()})
        _pin(view, {ref: c for ref, c in commits.items() if ref != spec.start_ref}, spec.at_prefix)
        if spec.start_ref and spec.start is not None:
            _pin(view, {spec.start_ref: commits[spec.start_ref]}, spec.start_ref)
        firsts = self._firsts() if wanted else {}

        def pinned(ref: str) -> dict[str, Any]:
            reason = inexact_reason(firsts, wanted[ref])
            instant = _iso(wanted[ref])
            return {
                "ref": ref,
                "instant": instant,
                "commit": commits[ref],
                "exact": reason is None,
                "reason": reason,
            }

        if at is not None:
            report.at = pinned(f"{spec.at_prefix}{instant_name(at)}")
        if spec.start_ref and spec.start is not None:
            report.start = pinned(spec.start_ref)
        if wrote is not None:
            by_version = {version: commit for _, version, commit in history}
            report.wrote = []
            for item in wrote:
                folder = self.folders.get(item["memory_store_id"], "")
                entry = {k: v for k, v in item.items() if k != "moment"}
                entry.update(
                    path=_placed(folder, item["memory_path"]) if item["memory_path"] else None,
                    commit=by_version.get(item["version_id"]) or _current_at(view, history, item["moment"]),
                    visible=item["version_id"] in by_version,
                )
                report.wrote.append(entry)

    def _firsts(self) -> dict[str, tuple[datetime, int | None]]:
        """Each store whose history is truncated: its first version's ``created_at``, and the count
        (what a mirror says of its root holds until its tip moves)."""
        firsts: dict[str, tuple[datetime, int | None]] = {}
        for store_id, mirror in self.mirrors.items():
            key = (str(mirror.path), self.tips[store_id])
            if key not in _FIRSTS:
                facts = mirror.facts(save=False)
                first = None
                if facts.truncated and facts.root is not None:
                    root = next(View.store_history(mirror, None, facts.root))
                    first = (root.version.created_at, facts.truncated)
                _FIRSTS[key] = first
            if (found := _FIRSTS[key]) is not None:
                firsts[store_id] = found
        return firsts


# (mirror, tip) → its first version's created_at and History-Truncated count when truncated, else None.
_FIRSTS: dict[tuple[str, str | None], tuple[datetime, int | None] | None] = {}


def _history_since(view: View, floor: datetime) -> list[tuple[datetime, str, str]]:
    """``(created_at, version id, commit)`` of the view's commits, newest first, back to the first one
    created at or before ``floor`` (its ``Created-At`` trailer), or to the view's first commit."""
    found: list[tuple[datetime, str, str]] = []
    tip = view.tip()
    if tip is None:
        return found
    for commit in view.git.walk(tip, since=view.root):
        trailers = dict(
            line.split(": ", 1)
            for line in commit.message.rstrip("\n").split("\n\n")[-1].split("\n")
            if ": " in line
        )
        moment = datetime.fromisoformat(trailers["Created-At"].replace("Z", "+00:00"))
        found.append((moment, trailers["Memory-Version"], str(commit.id)))
        if moment <= floor:
            break
    return found


def _current_at(view: View, history: list[tuple[datetime, str, str]], instant: datetime) -> str:
    """The view commit current at ``instant`` (``history``, newest first, reaches back to it), or the
    empty commit when nothing was visible yet."""
    oldest_first = history[::-1]
    index = current_at([moment for moment, _, _ in oldest_first], instant)
    return oldest_first[index][2] if index >= 0 else view.empty_commit()


# --- status: edits made in a view -------------------------------------------------------------------


@dataclass
class ViewStatus(Outcome, Reported):
    """A view as ``memsync status`` shows it, from its build record: its stores, pins and collisions,
    and edits nobody will push."""

    id: str
    kind: str = "forward"
    identity: str | None = None
    template: str | None = None
    session: str | None = None
    path: str = ""
    branch: str = "main"
    tip: str | None = None
    built_at: str | None = None
    mounts: list[dict[str, Any]] = field(default_factory=list)
    stores: list[dict[str, Any]] = field(default_factory=list)
    pins: list[dict[str, Any]] = field(default_factory=list)
    collisions: list[dict[str, Any]] = field(default_factory=list)
    edits: list[dict[str, Any]] = field(default_factory=list)
    ok: bool = True
    error: str | None = None
    code: int = EXIT_OK

    @property
    def exit_code(self) -> int:
        if not self.ok:
            return self.code
        return EXIT_ATTENTION if self.edits else EXIT_OK

    def output(self) -> ViewOutput:
        return ViewOutput.model_validate(
            {
                "id": self.id,
                "ok": self.ok,
                "error": self.error,
                "view": True,
                "kind": self.kind,
                "identity": self.identity,
                "template": self.template,
                "session": self.session,
                "path": self.path,
                "branch": self.branch,
                "tip": self.tip,
                "built_at": self.built_at,
                "mounts": self.mounts,
                "stores": self.stores,
                "pins": self.pins,
                "collisions": self.collisions,
                "edits": self.edits,
            }
        )


def view_statuses(root: Path) -> list[ViewStatus]:
    """Every view under ``root``: read without the lock or the network, like the mirrors' status.
    Forward's are ``awareness/*/*`` holding a git folder; the others linked worktrees of the shared
    repository, ``awareness/sessions/*`` and ``awareness/stores/*`` holding a ``.git`` file."""
    base = root / VIEWS_FOLDER
    found = []
    for folder in sorted(base.iterdir()) if base.is_dir() else []:
        for path in sorted(folder.iterdir()) if folder.is_dir() else []:
            shared = folder.name in SHARED_FOLDERS.values()
            if (path / ".git").is_file() if shared else (path / ".git").is_dir():
                found.append(view_status(root, path))
    return found


def _read_state(view: View) -> dict[str, Any] | None:
    """The record of the view's last build (the state's ``view`` cache: without it the view is rebuilt)."""
    loaded = view.git.state.get("view")
    return loaded if isinstance(loaded, dict) else None


def view_status(root: Path, path: Path) -> ViewStatus:
    report = ViewStatus(id=f"awareness/{path.parent.name}/{path.name}", path=str(path))
    try:
        with View.open(path) as view:
            state = _read_state(view) or {}
            report.kind = str(state.get("kind", "forward"))
            view.branch = str(state.get("branch", view.branch))
            report.branch = view.branch.removeprefix("refs/heads/")
            if report.kind == "forward":
                report.identity = str(state.get("identity", path.parent.name))
                report.template = str(state.get("template", path.name))
                report.id = f"awareness/{report.identity}/{report.template}"
            else:
                report.session = state.get("session")
                report.id = f"awareness/{report.branch}"
            report.tip = view.tip()
            report.built_at = state.get("built_at")
            report.mounts = list(state.get("mounts", []))
            report.stores = list(state.get("store_entries", []))
            report.collisions = list(state.get("collisions", []))
            prefixes = (
                ("refs/at/", "refs/sessions/")
                if report.kind == "forward"
                else (
                    f"refs/at/{report.branch}/",
                    f"refs/sessions/{report.session}/",
                )
            )
            report.pins = [
                {"ref": name, "commit": view.git.ref_target(name)}
                for prefix in prefixes
                if report.kind != "stores" or prefix.startswith("refs/at/")
                for name in view.git.refs(prefix)
            ]
            for tree_path, change in view.edits():
                report.edits.append(_edit_entry(root, tree_path, change, state))
    except MemsyncError as exc:
        report.fail(str(exc), exc.exit_code)
    return report


def _edit_entry(root: Path, tree_path: str, change: str, state: dict[str, Any]) -> dict[str, Any]:
    """One edit made in a view, with the store whose copy of its path the view shows (read from the
    stores' mirrors at the build's tips) and where the edit belongs: that store's checkout, the
    store's folder in the view stripped. A new file in a store's folder belongs to that store."""
    entry: dict[str, Any] = {"path": tree_path, "change": change, "store": None, "checkout": None}
    try:
        view_path = decode_path(tree_path)
    except MemsyncError:
        return entry
    folders: dict[str, str] = dict(state.get("folders", {}))
    tips: dict[str, str | None] = dict(state.get("stores", {}))
    # Both rules show the first holder in the view's order: the order of `active`.
    candidates = [
        (store, view_path[len(folder) + 1 :] if folder else view_path)
        for store in state.get("active", [])
        if not (folder := folders.get(store, "")) or view_path.startswith(f"{folder}/")
    ]
    found = None
    for store, memory_path in candidates:
        tip = tips.get(store)
        try:
            with Mirror.open(mirror_path(root, store)) as mirror:
                if tip is not None and memory_path in mirror.files(tip):
                    found = (store, memory_path)
                    break
        except MemsyncError:
            continue
    if found is None and len(candidates) == 1 and folders.get(candidates[0][0]):
        found = candidates[0]
    if found is None:
        return entry
    store, memory_path = found
    entry["store"] = store
    checkout = mirror_path(root, store)
    try:
        with Mirror.open(checkout) as mirror:
            entry["checkout"] = str(checkout / working_tree_path(mirror, memory_path))
    except MemsyncError:
        entry["checkout"] = str(checkout / encode_path(memory_path))
    return entry


def _pin_text(label: str, pin: dict[str, Any]) -> str:
    commit = pin["commit"][:12] if pin.get("commit") else "none"
    exact = "" if pin.get("exact", True) else f" (not exact: {escape_for_terminal(pin['reason'])})"
    instant = f" at {pin['instant']}" if pin.get("instant") else ""
    return f"  {label} {pin['ref']} -> {commit}{instant}{exact}"


def describe_view_status(report: dict[str, Any]) -> str:
    """The text of ``memsync status`` for a view."""
    esc = escape_for_terminal
    lines = [
        f"{esc(report['id'])} (awareness view, read-only): {len(report['collisions'])} collision(s),"
        f" {len(report['edits'])} edit(s) that are never pushed -> {report['path']}"
    ]
    for store in report.get("stores") or []:
        if report.get("kind", "forward") != "forward":
            lines.append(_store_text(store))
    for pin in report.get("pins") or []:
        lines.append(_pin_text("pinned", pin))
    for item in report["collisions"]:
        lines.append(f"  collision: {_collision_text(item)}")
    for item in report["edits"]:
        where = (
            f"make it in the checkout of {item['store']}, which holds this path: {esc(item['checkout'])}"
            if item["store"]
            else "no store of the view holds this path: create it in the checkout of the store it belongs in"
        )
        lines.append(f"  edited in the view ({item['change']}): {esc(item['path'])}; {where}")
    if report["error"]:
        lines.append(f"  error: {esc(report['error'])}")
    return "\n".join(lines)


def _store_text(store: dict[str, Any]) -> str:
    """One store of a --stores or session view, without its instructions (the JSON has them)."""
    esc = escape_for_terminal
    name = f" ({esc(store['name'])})" if store.get("name") else ""
    if store.get("refused"):
        return f"  {store['order']}  {store['memory_store_id']}{name}  left out: {esc(store['refused'])}"
    where = f"{esc(store['folder'])}/" if store.get("folder") else "the root, flat"
    flags = [flag for flag in (store.get("access"), store.get("status")) if flag]
    shown = f"  [{', '.join(flags)}]" if flags else ""
    return f"  {store['order']}  {store['memory_store_id']}{name} at {where}{shown}"


def _collision_text(item: dict[str, Any]) -> str:
    shadowed = ", ".join(item["shadowed"])
    return f"{escape_for_terminal(item['path'])}: visible from {item['visible_from']}; shadows {shadowed}"


def describe_awareness(report: AwarenessReport) -> str:
    """The text of ``memsync awareness``."""
    esc = escape_for_terminal
    if report.kind == "forward":
        what = f"{esc(report.identity or '')}/{esc(report.template or '')}"
    elif report.kind == "session":
        what = f"session {esc(report.session or '')}"
    else:
        what = "stores " + ", ".join(store["memory_store_id"] for store in report.stores)
    lines = [f"awareness view of {what} -> {report.path}"]
    if report.kind != "forward":
        lines[0] += f" (branch {report.branch})"
    for mount in report.mounts:
        flags = ["default" if mount["system_managed"] else mount["access"]]
        if mount["status"] != "active":
            flags.append(f"{mount['status'] or 'unreadable'}: not in the view")
        name = f" ({esc(mount['name'])})" if mount["name"] else ""
        lines.append(f"  {mount['order']}  {mount['memory_store_id']}{name}  [{', '.join(flags)}]")
    if report.kind != "forward":
        lines += [_store_text(store) for store in report.stores]
    if report.layout:
        lines.append(f"  note: {report.layout}")
    for pulled in report.pulls:
        if pulled.imported:
            lines.append(f"  pulled {pulled.id}: {pulled.imported} new version(s)")
    if report.rebuilt:
        lines.append(f"  history rebuilt: {report.reason}")
    elif report.created:
        lines.append("  view created")
    tip = report.tip[:12] if report.tip else "no commits"
    lines.append(
        f"  tip {tip}: {report.files} file(s), {report.commits} new commit(s),"
        f" {len(report.collisions)} collision(s)"
    )
    if report.start:
        lines.append(_pin_text("session start", report.start))
    if report.at:
        lines.append(_pin_text("at", report.at))
    if report.wrote is not None:
        lines.append(f"  the session wrote {len(report.wrote)} version(s)")
        for item in report.wrote:
            commit = item["commit"][:12] if item["commit"] else "none"
            path = esc(item["path"]) if item["path"] else f"memory {item['memory_id']}"
            store = item["memory_store_id"]
            lines.append(f"    {item['created_at']}  {item['operation']} {path} in {store} -> {commit}")
    for collision in report.collisions:
        lines.append(f"  collision: {_collision_text(collision.to_json())}")
        if collision.folders:
            holders = ", ".join(collision.folders)
            lines.append(f"    a folder {esc(collision.path)}/ in {holders}: the view keeps both")
    lines += [f"  warning: {esc(w)}" for w in report.warnings]
    return "\n".join(lines)
