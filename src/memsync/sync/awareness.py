"""What an agent sees: the mounts of an (identity, template), and their merged namespace as a git view.

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
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memsync.api import Client, Mount
from memsync.engine.awareness import Collision, Namespace, merged_history
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
from memsync.mirror.view import StoreCommit, ViewCommit
from memsync.rules import Dialect
from memsync.sync.locks import held
from memsync.sync.outputs import AwarenessDocument, MountsDocument, ViewOutput
from memsync.sync.pull import PullReport, mirror_path, pull_store
from memsync.sync.push import working_tree_path
from memsync.sync.report import Outcome, Reported

log = logging.getLogger("memsync.awareness")

STATE_FORMAT = 1

# (created_at, version id, mount rank): the order of the merged history (engine.merged_history).
Key = tuple[datetime, str, int]


def require_mounts(dialect: Dialect) -> None:
    """Refuse (exit 2) on a dialect without mounts."""
    if dialect is not Dialect.FORWARD:
        raise UsageError(
            f"mounts and awareness views exist on the Forward dialect only; this config speaks"
            f" {dialect.value}, whose stores are not mounted into sessions"
        )


def check_pair(identity: str, template: str) -> None:
    """Refuse (exit 2) an identity or template id that is empty or holds control characters."""
    for what, value in (("IDENTITY", identity), ("TEMPLATE", template)):
        if value == "" or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
            raise UsageError(f"{what} must be a non-empty id without control characters, as the API knows it")
        View.folder_name(value, what.lower())


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


# --- building the view ------------------------------------------------------------------------------


@dataclass
class AwarenessReport(Outcome, Reported):
    """What ``memsync awareness`` (or the daemon) did to one view."""

    identity: str
    template: str
    path: str
    tip: str | None = None
    rebuilt: bool = False
    reason: str | None = None  # why the history was rebuilt
    created: bool = False
    commits: int = 0  # written by this build
    files: int = 0
    mounts: list[dict[str, Any]] = field(default_factory=list)
    collisions: list[Collision] = field(default_factory=list)
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
                "identity": self.identity,
                "template": self.template,
                "path": self.path,
                "tip": self.tip,
                "rebuilt": self.rebuilt,
                "mounts": self.mounts,
                "collisions": [c.to_json() for c in self.collisions],
            }
        )


def view_lock(root: Path, identity: str, template: str) -> contextlib.AbstractContextManager[None]:
    """The lock of one view, shared by the CLI and the daemon."""
    lock = (
        root
        / ".memsync"
        / "locks"
        / "awareness"
        / View.folder_name(identity, "identity id")
        / f"{View.folder_name(template, 'template id')}.lock"
    )
    return held(lock, f"the awareness view of {identity}/{template}")


def refresh_awareness(
    client: Client,
    root: Path,
    identity: str,
    template: str,
    *,
    pull: Callable[[str], bool] = lambda store_id: True,
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
    failures: list[PullReport] = []
    for mount in mounts:
        if not mount.active:
            continue
        if not pull(mount.store_id):
            if not (mirror_path(root, mount.store_id) / ".git").is_dir():
                raise MirrorPending(
                    f"store {mount.store_id} has no mirror yet; the view waits for its first pull"
                )
            continue
        store = client.get_store(mount.store_id)
        pulled = pull_store(client, store, root)
        report.pulls.append(pulled)
        if not pulled.ok:
            failures.append(pulled)
    if failures:
        raise _pull_failure(failures)
    build_view(root, identity, template, mounts, report)
    return report


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
    root: Path, identity: str, template: str, mounts: Sequence[Mount], report: AwarenessReport
) -> None:
    """Bring the view of (``identity``, ``template``) up to the mounted stores' mirrors (under lock)."""
    active = [m.store_id for m in mounts if m.active]
    path = View.path_for(root, identity, template)
    with view_lock(root, identity, template), contextlib.ExitStack() as stack:
        report.created = not (path / ".git").is_dir()
        view = stack.enter_context(View.open(path, create=True))
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
        state = view.read_state()
        reason = _rebuild_reason(view, state, active, mirrors, tips)
        if reason is None:
            assert state is not None
            try:
                _write(view, active, mirrors, tips, state, report)
                return
            except _Restart as restart:
                reason = restart.reason
        report.rebuilt = not report.created and (state is not None or view.tip() is not None)
        report.reason = reason if report.rebuilt else None
        _write(view, active, mirrors, tips, None, report)


def _rebuild_reason(
    view: View,
    state: dict[str, Any] | None,
    active: list[str],
    mirrors: dict[str, Mirror],
    tips: dict[str, str | None],
) -> str | None:
    """Why the view's history must be built again from the start, or None to append to it."""
    tip = view.tip()
    if state is None or state.get("format") != STATE_FORMAT:
        if tip is not None:
            _refuse_foreign(view, None, tip)
        return "the view has no build record"
    recorded = state.get("tip")
    if tip != recorded:
        _refuse_foreign(view, recorded, tip)
        return "the last build was interrupted"
    if state.get("active") != active:
        return "the mount list changed"
    for store_id in active:
        before = state.get("stores", {}).get(store_id)
        now = tips[store_id]
        if before is None:
            continue
        if now is None or not mirrors[store_id].git.is_ancestor(before, now):
            return f"the history of {store_id} was rewritten (a redaction)"
    return None


def _refuse_foreign(view: View, since: str | None, tip: str | None) -> None:
    """Refuse to replace commits on the view's ``main`` that memsync did not write."""
    if tip is None:
        return
    foreign = view.foreign_commits(since, tip)
    if foreign:
        raise UserError(
            f"the awareness view {view.path} has {len(foreign)} commit(s) on main that memsync did not"
            f" write ({foreign[0][:12]}...); the view is read-only and edits there are never pushed:"
            f" make them in the stores' checkouts, then delete {view.path} (memsync awareness makes it again)"
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


def _write(
    view: View,
    active: list[str],
    mirrors: dict[str, Mirror],
    tips: dict[str, str | None],
    state: dict[str, Any] | None,
    report: AwarenessReport,
) -> None:
    """Write the view's commits (appending when ``state`` is given, else from the start)."""
    incremental = state is not None
    since: dict[str, str | None] = {sid: None for sid in active}
    start_files = None
    last: Key | None = None
    if state is not None:
        since = {sid: state["stores"].get(sid) for sid in active}
        start_files = {sid: mirrors[sid].files(c) for sid, c in since.items() if c is not None}
        last = _key_from(state.get("last_key"))
    namespace = Namespace(active, start_files)
    writer = view.writer(rebuild=not incremental)
    readers = {sid: mirror.content for sid, mirror in mirrors.items()}

    def history(rank: int, store_id: str) -> Iterator[tuple[Key, str, StoreCommit]]:
        if tips[store_id] is None or since[store_id] == tips[store_id]:
            return
        for commit in View.store_history(mirrors[store_id], since[store_id], tips[store_id]):
            yield _key(commit, rank), store_id, commit

    streams = [history(rank, store_id) for rank, store_id in enumerate(active)]
    for key, store_id, commit in merged_history(streams, key=lambda item: item[0]):
        if incremental and last is not None and key <= last:
            raise _Restart(
                f"{store_id} has version {commit.version.version_id}, older than the view's tip"
                " (imported late)"
            )
        last = key
        step = namespace.apply(store_id, commit.changes)
        if not step.visible:
            continue
        visible = {
            path: None if shown is None else (shown[1], readers[shown[0]])
            for path, shown in step.visible.items()
        }
        writer.add(visible, ViewCommit(store_id, commit, step.shadowed))
    report.tip = writer.finish()
    report.commits = writer.commits
    report.collisions = namespace.collisions()
    shown_now = namespace.visible()
    report.files = len(shown_now)
    view.write_state(
        {
            "format": STATE_FORMAT,
            "identity": report.identity,
            "template": report.template,
            "active": active,
            "mounts": report.mounts,
            "stores": tips,
            "last_key": _key_json(last),
            "tip": report.tip,
            "collisions": [c.to_json() for c in report.collisions],
            "owners": {path: store for path, (store, _) in sorted(shown_now.items())},
            "built_at": _iso(datetime.now(UTC)),
        }
    )


# --- status: edits made in a view -------------------------------------------------------------------


@dataclass
class ViewStatus(Outcome, Reported):
    """A view as ``memsync status`` shows it: its collisions, and edits nobody will push."""

    id: str
    identity: str = ""
    template: str = ""
    path: str = ""
    tip: str | None = None
    built_at: str | None = None
    mounts: list[dict[str, Any]] = field(default_factory=list)
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
                "identity": self.identity,
                "template": self.template,
                "path": self.path,
                "tip": self.tip,
                "built_at": self.built_at,
                "mounts": self.mounts,
                "collisions": self.collisions,
                "edits": self.edits,
            }
        )


def view_statuses(root: Path) -> list[ViewStatus]:
    """Every view under ``root``: read without the lock or the network, like the mirrors' status."""
    return [view_status(root, path) for path in View.find(root)]


def view_status(root: Path, path: Path) -> ViewStatus:
    report = ViewStatus(id=f"awareness/{path.parent.name}/{path.name}", path=str(path))
    try:
        with View.open(path) as view:
            state = view.read_state() or {}
            report.identity = str(state.get("identity", path.parent.name))
            report.template = str(state.get("template", path.name))
            report.id = f"awareness/{report.identity}/{report.template}"
            report.tip = view.tip()
            report.built_at = state.get("built_at")
            report.mounts = list(state.get("mounts", []))
            report.collisions = list(state.get("collisions", []))
            owners: dict[str, str] = dict(state.get("owners", {}))
            for tree_path, change in view.edits():
                report.edits.append(_edit_entry(root, tree_path, change, owners))
    except MemsyncError as exc:
        report.fail(str(exc), exc.exit_code)
    return report


def _edit_entry(root: Path, tree_path: str, change: str, owners: dict[str, str]) -> dict[str, Any]:
    """One edit made in a view, with the store that owns its path and where the edit belongs."""
    entry: dict[str, Any] = {"path": tree_path, "change": change, "store": None, "checkout": None}
    try:
        memory_path = decode_path(tree_path)
    except MemsyncError:
        return entry
    store = owners.get(memory_path)
    if store is None:
        return entry
    entry["store"] = store
    checkout = mirror_path(root, store)
    try:
        with Mirror.open(checkout) as mirror:
            entry["checkout"] = str(checkout / working_tree_path(mirror, memory_path))
    except MemsyncError:
        entry["checkout"] = str(checkout / encode_path(memory_path))
    return entry


def describe_view_status(report: dict[str, Any]) -> str:
    """The text of ``memsync status`` for a view."""
    esc = escape_for_terminal
    lines = [
        f"{esc(report['id'])} (awareness view, read-only): {len(report['collisions'])} collision(s),"
        f" {len(report['edits'])} edit(s) that are never pushed -> {report['path']}"
    ]
    for item in report["collisions"]:
        lines.append(f"  collision: {_collision_text(item)}")
    for item in report["edits"]:
        where = (
            f"make it in the checkout of {item['store']}, which holds this path: {esc(item['checkout'])}"
            if item["store"]
            else "no mounted store holds this path: create it in the checkout of the store it belongs in"
        )
        lines.append(f"  edited in the view ({item['change']}): {esc(item['path'])}; {where}")
    if report["error"]:
        lines.append(f"  error: {esc(report['error'])}")
    return "\n".join(lines)


def _collision_text(item: dict[str, Any]) -> str:
    shadowed = ", ".join(item["shadowed"])
    return f"{escape_for_terminal(item['path'])}: visible from {item['visible_from']}; shadows {shadowed}"


def describe_awareness(report: AwarenessReport) -> str:
    """The text of ``memsync awareness``."""
    esc = escape_for_terminal
    head = f"awareness view of {esc(report.identity)}/{esc(report.template)} -> {report.path}"
    lines = [head]
    for mount in report.mounts:
        flags = ["default" if mount["system_managed"] else mount["access"]]
        if mount["status"] != "active":
            flags.append(f"{mount['status'] or 'unreadable'}: not in the view")
        name = f" ({esc(mount['name'])})" if mount["name"] else ""
        lines.append(f"  {mount['order']}  {mount['memory_store_id']}{name}  [{', '.join(flags)}]")
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
    for collision in report.collisions:
        lines.append(f"  collision: {_collision_text(collision.to_json())}")
        if collision.folders:
            holders = ", ".join(collision.folders)
            lines.append(f"    a folder {esc(collision.path)}/ in {holders}: the view keeps both")
    lines += [f"  warning: {esc(w)}" for w in report.warnings]
    return "\n".join(lines)
