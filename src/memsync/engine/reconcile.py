"""The push/reconcile planner: three snapshots in, an ordered list of actions out. No I/O.

The *base* is the commit the checkout was last reconciled with. Local changes are diff(base,
checkout) — commits on ``main`` and uncommitted files alike — and remote changes are diff(base,
``memstore/main``). :func:`plan` looks at one path at a time (memory paths in their canonical
relative form), after pairing renames, and returns a :class:`Plan`: the actions for the executor,
in the order they must run, the notices to report, and the paths whose base must not move.

Decision table
--------------

B = base, L = local (the checkout), R = remote (``memstore/main``); "–" absent; "=" and "≠" compare
content hashes (a memory recreated remotely with the same content counts as unchanged, but the write
goes to the remote's memory id). Rows are tried top to bottom; the first that matches wins.

=====  ============================  ==========  ============  ==========================================
 row    B / L / R                     local Δ     remote Δ      plan (actions; notice)
=====  ============================  ==========  ============  ==========================================
  1     path has an open conflict     any         any           nothing; ``conflict_open``; held
  2     L invalid or not a regular    any         any           nothing, file untouched; ``rejected``;
        file                                                    held
  3     L = B, R = B                  no          no            nothing
  4     – / L / –                     created     no            ``Create(L)``
  5     B / L / B                     modified    no            ``Update(R.id, L, expected=B)``
  6     B / – / B                     deleted     no            ``Delete(R.id, expected=B)`` (delete guard)
  7     B / B / R   or  – / – / R     no          changed       ``WriteCheckout(R, expected_local=L)``
  8     B / B / –                     no          deleted       ``RemoveCheckout(expected_local=B)``
  9     L = R (both sides)            yes         yes           nothing: both made the same change
 10     B / L / R                     modified    modified      ``Merge(R.id, B, L, R)``: clean → push
                                                                with expected=R and write the checkout;
                                                                not clean → conflict markers, recorded
 11     B / L / –                     modified    deleted       ``Create(L)``; ``recreated``
 12     B / – / R                     deleted     modified      ``WriteCheckout(R, expected_local=–)``;
                                                                ``kept_remote``
 13     – / L / R                     created     created       ``Conflict(base=–, L, R)``
=====  ============================  ==========  ============  ==========================================

Renames are paired before the table, and each pair is decided as one unit:

* **Local rename** p → q: B[p] present, L[p] absent, R[p] the same memory (id) as B[p], B[q] absent,
  L[q] valid with L[q] = B[p] (exact renames only; pairs are made in path order), and R[q] absent —
  or R[q] = R[p], which is what an interrupted create-then-delete rename leaves behind, so a re-run
  finishes it instead of conflicting. On
  Anthropic: ``Rename(p → q, R[p].id, expected=R[p])``, the id is kept. On Forward and Cloud:
  ``Create(q)`` then ``Delete(p, moved_to=q)``; creates precede deletes, so an interruption never
  leaves the content nowhere. If the remote modified p meanwhile (rename vs modify), q gets the
  remote content (the three-way merge of an exact rename against a modification is the
  modification): the create takes R[p]'s content, or the native rename leaves it untouched, and
  ``WriteCheckout(q, R[p])`` brings it into the checkout. A rename's delete half is not counted by the
  delete guard: no content leaves the store.
* **Remote rename** p → q (the memory id moved: Anthropic renames natively; a Forward/Cloud move
  gets a new id and is seen as a delete and a create): B[p] present, R[p] absent, L[p] valid and
  modified, R[q] has B[p]'s memory id, B[q] and L[q] absent. The local modification follows the
  memory: ``Update(q, L[p], expected=R[q])`` if R[q] = B[p], ``Merge`` at q if the remote also changed
  the content, nothing to push if L[p] = R[q]; then the checkout file moves from p to q
  (``WriteCheckout(q)`` or the merge's own write, then ``RemoveCheckout(p)``).

Anything else is decided path by path with the table: a rename against a remote delete becomes a
create of q (nothing is lost), a rename on both sides to different paths keeps both paths.

Safety rules applied to the whole plan:

* **Delete guard.** If the plan deletes at least 3 memories (rename halves excluded) *and* more than
  ``max_delete_share`` of the store (the memories in R), and ``force`` is false, every such delete is
  withheld: no ``Delete``, a ``withheld`` notice naming ``--force``, the path held. The other changes
  still go.
* **Rewind guard.** When ``main`` was moved back in history (``git reset --hard HEAD~2``: the commit
  last reconciled is no longer in ``main``), the checkout holds older contents of memories the store
  has moved on from since. A unit whose store writes would put such a path back as it was at the
  commit ``main`` went back to (the :class:`Rewind`'s ``before``) undoes those versions: unless
  ``force``, it is withheld whole (a ``revert_withheld`` notice, its paths held). Edits made after the
  rewind, and paths the versions since did not touch, still go. Applied before the delete guard, so
  a withheld revert of a create is not counted as a delete.
* **Memory limit.** When the store holds at most ``max_memories`` memories (Anthropic: 2,000) and
  the plan would leave it with more, every unit that creates a memory is withheld (an
  ``over_limit`` notice naming the limit, the count and what to do, its paths held); the other
  changes still go. When the plan stays within the limit only because it also deletes, its
  deletes run before its creates, since the store refuses a create while it is full.
* **Paths.** Every path a write would create (``Create``, the target of ``Rename``) must pass
  :func:`memsync.rules.check_path` for the dialect, and on Anthropic may not be an ancestor or a
  descendant of another memory's path once the plan has run (the store would answer 409 on every
  re-run). A unit that fails is dropped whole and each of its paths gets a ``rejected`` notice.

Order. Store writes run before checkout writes, so a 409 stops the executor before the checkout
changes: ``Create``, then ``Update``/``Rename``, ``Merge``, ``Delete``, ``Conflict``,
``WriteCheckout``, ``RemoveCheckout``; paths in byte order within a kind. On Anthropic a write that
frees a path (``Delete``, the source of a ``Rename``) moves ahead of a write that occupies a path
clashing with it (ancestor/descendant), since the store refuses the clash; Anthropic renames are
native, so this never splits a create-then-delete rename.

Moving the base. Only reconciling moves the base, once every action has run. The new base is the
remote snapshot the plan was made from, except: held paths keep their old base entry (a rejected
file, a withheld delete or an open conflict still differ from the base next time, so nothing is
forgotten); a path where a conflict was recorded gets the remote entry the conflict was made against
(its resolution will be pushed with that hash as precondition); a path that was pushed gets what the
store answered. :func:`next_base` computes exactly that.

A 409 and re-planning. The planner is a pure function of (base, checkout, store) and the base does
not move until a plan ran to its end, so the executor handles a 409 (a precondition failed, a path
was taken, an Anthropic path clash) by stopping, pulling, and calling :func:`plan` again with the same
base, a fresh local snapshot and the new remote snapshot. Actions that already ran now show as
identical changes (L = R) and are not repeated. The path whose write was refused now has a remote
change, so the 409 maps back into the table: a refused ``Update`` becomes row 10 (``Merge`` against
the new remote content, clean or a conflict); a refused ``Create`` (path taken) becomes row 13
(nothing if the contents are equal, else a conflict with an empty base); a refused ``Delete`` becomes
row 12 (keep the remote version); a refused ``Rename`` becomes rename vs modify, or row 13 at the
target. A conflict recorded before the 409 shows as an open conflict in the re-plan; report it to
:func:`next_base` through ``conflicted``.

Every store write carries the hash the planner saw: ``expected_hash`` of ``Update``, ``Delete`` and
``Rename``, and ``Merge.remote.hash``, always equal R[path] — which is B[path] when the remote did not
change it — and a ``Create`` only targets a path absent from R. Every checkout write carries
``expected_local``: the executor must re-check it before touching the file and re-plan on a
mismatch (the user edited the file meanwhile), so a remote change never overwrites an unseen local
edit either.
"""

from __future__ import annotations

import bisect
import enum
import hashlib
import heapq
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field

from memsync.errors import RuleViolation
from memsync.rules import Dialect, check_path, decode_content, to_absolute

# --- inputs ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """A memory in the base or in the remote snapshot: its content hash and its memory id."""

    hash: str
    memory_id: str


@dataclass(frozen=True)
class LocalEntry:
    """A file in the checkout: the sha256 of its bytes, or why it cannot be pushed.

    ``hash`` is ``None`` only for a non-regular file (never read, never followed). A file with a
    ``problem`` is rejected whatever its hash.
    """

    hash: str | None
    problem: str | None = None

    def __post_init__(self) -> None:
        if self.hash is None and self.problem is None:
            raise ValueError("a LocalEntry without a hash must say why (problem)")

    @property
    def valid(self) -> bool:
        return self.problem is None

    @classmethod
    def from_bytes(cls, data: bytes, dialect: Dialect) -> LocalEntry:
        """A regular file's entry: its hash, and the rule its content breaks for ``dialect``, if any."""
        digest = hashlib.sha256(data).hexdigest()
        try:
            decode_content(data, dialect)
        except RuleViolation as exc:
            return cls(digest, problem=str(exc))
        return cls(digest)

    @classmethod
    def not_regular(cls, kind: str) -> LocalEntry:
        """The entry for a symlink, fifo, socket or device file (``kind`` names it)."""
        return cls(
            None,
            problem=f"is a {kind}, not a regular file; memsync syncs regular files only and never"
            " follows links",
        )


# --- actions ---------------------------------------------------------------------------------------


class Side(enum.StrEnum):
    """Which snapshot holds some content: the base tree, the checkout, or ``memstore/main``."""

    BASE = "base"
    LOCAL = "local"
    REMOTE = "remote"


@dataclass(frozen=True)
class Content:
    """The bytes at ``path`` in the ``side`` snapshot, whose sha256 is ``hash``.

    The executor reads them from there and checks the hash, so content changed since the snapshot is
    never sent by mistake (a mismatch means: re-plan).
    """

    side: Side
    path: str
    hash: str


@dataclass(frozen=True)
class Create:
    """Create a memory at ``path`` with ``content``. R had no memory at ``path``."""

    path: str
    content: Content


@dataclass(frozen=True)
class Update:
    """Replace the content of ``memory_id`` (at ``path``) if its hash is still ``expected_hash``."""

    path: str
    memory_id: str
    content: Content
    expected_hash: str


@dataclass(frozen=True)
class Delete:
    """Delete ``memory_id`` (at ``path``) if its hash is still ``expected_hash``.

    ``moved_to`` names the path a create-then-delete rename already created (Forward and Cloud):
    such a delete moves content rather than removing it, and the delete guard does not count it.
    The executor checks that ``moved_to`` holds ``expected_hash`` before deleting, and re-plans if
    not. Forward and Cloud have no conditional delete: the executor reads the memory and compares
    its hash just before deleting (Anthropic takes ``expected_content_sha256``).
    """

    path: str
    memory_id: str
    expected_hash: str
    moved_to: str | None = None


@dataclass(frozen=True)
class Rename:
    """Anthropic's native rename: move ``memory_id`` from ``path`` to ``new_path``, content unchanged,
    if its hash is still ``expected_hash``."""

    path: str
    new_path: str
    memory_id: str
    expected_hash: str


@dataclass(frozen=True)
class Merge:
    """Three-way merge ``base``, ``local`` and ``remote`` with git's merge machinery.

    Clean: update ``memory_id`` with the result, precondition ``remote.hash``, then write the result
    to the checkout at ``path`` (the file there must still be absent or hold ``local.hash``; when
    ``local.path`` differs, a ``RemoveCheckout`` of it follows). Not clean: push nothing, write
    git-style markers to ``path``, record the conflict with all three contents kept reachable.
    """

    path: str
    memory_id: str
    base: Content
    local: Content
    remote: Content

    @property
    def expected_hash(self) -> str:
        return self.remote.hash


@dataclass(frozen=True)
class Conflict:
    """Push nothing; write git-style markers for ``local`` and ``remote`` (over ``base``, empty when
    ``None``) to ``path`` in the checkout and record the conflict with the three contents kept."""

    path: str
    base: Content | None
    local: Content
    remote: Content
    reason: str


@dataclass(frozen=True)
class WriteCheckout:
    """Write ``content`` to the checkout at ``path``; the file there must still hash to
    ``expected_local`` (``None``: must still be absent)."""

    path: str
    content: Content
    expected_local: str | None


@dataclass(frozen=True)
class RemoveCheckout:
    """Remove the checkout file at ``path``; it must still hash to ``expected_local``."""

    path: str
    expected_local: str


Action = Create | Update | Delete | Rename | Merge | Conflict | WriteCheckout | RemoveCheckout
StoreWrite = Create | Update | Delete | Rename | Merge


class NoticeKind(enum.StrEnum):
    REJECTED = "rejected"  # not pushed: the file breaks a rule, or its path cannot be created
    WITHHELD = "withheld"  # a delete refused by the delete guard; --force overrides
    REVERT_WITHHELD = "revert_withheld"  # would undo versions since main was moved back; --force
    OVER_LIMIT = "over_limit"  # a create that would pass the store's memory limit; no --force
    CONFLICT_OPEN = "conflict_open"  # not pushed until `memsync resolve`
    RECREATED = "recreated"  # deleted remotely, modified locally: recreated from the checkout
    KEPT_REMOTE = "kept_remote"  # deleted locally, modified remotely: the remote version restored


_ATTENTION = frozenset(
    {
        NoticeKind.REJECTED,
        NoticeKind.WITHHELD,
        NoticeKind.REVERT_WITHHELD,
        NoticeKind.OVER_LIMIT,
        NoticeKind.CONFLICT_OPEN,
    }
)
_HOLDING = frozenset(
    {NoticeKind.REJECTED, NoticeKind.WITHHELD, NoticeKind.REVERT_WITHHELD, NoticeKind.OVER_LIMIT}
)


@dataclass(frozen=True)
class Notice:
    """Something to report about ``path``; ``reason`` is the sentence for the user."""

    path: str
    kind: NoticeKind
    reason: str

    @property
    def needs_attention(self) -> bool:
        """Whether the user must act (exit code 4) rather than merely be told."""
        return self.kind in _ATTENTION


@dataclass(frozen=True)
class Rewind:
    """``main`` was moved back in history: ``versions`` imported versions lie between ``fork`` (the
    newest imported commit ``main`` still contains; None when it contains none) and the commit last
    reconciled. ``before`` maps each memory path those versions changed to its content hash at
    ``fork`` (None: absent there)."""

    fork: str | None
    versions: int
    before: Mapping[str, str | None]

    def reason(self) -> str:
        where = f"to {self.fork[:12]}" if self.fork else "to a commit outside the store's history"
        return (
            f"not pushed: main was moved back {self.versions} version(s) ({where}), and this would undo"
            " what the store holds since; to keep the store's versions run `git reset --hard"
            " memstore/main` (it discards your local changes), to undo them in the store too run"
            " `memsync push --force`"
        )


@dataclass(frozen=True)
class Plan:
    """What to do, in order; what to report; which paths keep their old base entry."""

    actions: tuple[Action, ...]
    notices: tuple[Notice, ...]
    held: frozenset[str]

    @property
    def needs_attention(self) -> bool:
        """Conflicts or rejected/withheld files wait for the user (a merge may add a conflict later)."""
        return any(n.needs_attention for n in self.notices) or any(
            isinstance(a, Conflict) for a in self.actions
        )


# --- planning --------------------------------------------------------------------------------------


@dataclass
class _Unit:
    """The actions decided together for one path, or for the two paths of a rename.

    Safety rules drop or reject whole units, so a rename is never half pushed by the planner.
    """

    paths: tuple[str, ...]
    actions: list[Action] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)


_KEEP_NOTE = "the checkout copy is left as it is"


def plan(
    base: Mapping[str, Entry],
    local: Mapping[str, LocalEntry],
    remote: Mapping[str, Entry],
    *,
    dialect: Dialect,
    open_conflicts: Set[str],
    max_delete_share: float = 0.5,
    force: bool = False,
    rewind: Rewind | None = None,
    max_memories: int | None = None,
) -> Plan:
    """Plan the reconciliation of the checkout (``local``) with the store (``remote``) since ``base``.

    ``rewind``: ``main`` was moved back in history (the rewind guard). ``max_memories``: the most
    memories the store holds (:func:`memsync.rules.max_memories`; None: no limit). Deterministic:
    the same snapshots give the same plan, whatever the mappings' order.
    """
    if not 0.0 <= max_delete_share <= 1.0:
        raise ValueError(f"max_delete_share must be between 0 and 1, not {max_delete_share!r}")
    notices: list[Notice] = []
    held: set[str] = set()

    blocked = set(open_conflicts)
    for path in sorted(blocked):
        notices.append(
            Notice(
                path,
                NoticeKind.CONFLICT_OPEN,
                "not pushed: a conflict is recorded for this path; edit the file, then run"
                f" `memsync resolve {path}`",
            )
        )
    held |= blocked

    rejected = sorted(p for p, e in local.items() if not e.valid and p not in blocked)
    for path in rejected:
        notices.append(Notice(path, NoticeKind.REJECTED, f"not pushed: {local[path].problem}; {_KEEP_NOTE}"))
    held.update(rejected)
    settled = blocked | set(rejected)

    units: list[_Unit] = []
    local_moves = _pair_local_renames(base, local, remote, settled)
    for old, new in local_moves:
        units.append(_local_rename(old, new, local, remote, dialect))
    settled |= {p for pair in local_moves for p in pair}
    remote_moves = _pair_remote_renames(base, local, remote, settled)
    for old, new in remote_moves:
        units.append(_remote_rename(old, new, base, local, remote))
    settled |= {p for pair in remote_moves for p in pair}

    for path in sorted((set(base) | set(local) | set(remote)) - settled):
        unit = _decide(path, base.get(path), local.get(path), remote.get(path))
        if unit.actions or unit.notices:
            units.append(unit)

    if rewind is not None and not force:
        _guard_rewind(units, local, rewind)
    _guard_deletes(units, len(remote), max_delete_share, force)
    _check_created_paths(units, remote, dialect)
    deletes_first = False
    if max_memories is not None:
        deletes_first = _guard_limit(units, len(remote), max_memories, dialect)

    for unit in units:
        notices.extend(unit.notices)
        if any(n.kind in _HOLDING for n in unit.notices):
            held.update(unit.paths)
    actions = _order([a for u in units for a in u.actions], dialect, deletes_first=deletes_first)
    notices.sort(key=lambda n: (n.path, n.kind.value))
    return Plan(actions=actions, notices=tuple(notices), held=frozenset(held))


def _hash(entry: Entry | LocalEntry | None) -> str | None:
    return None if entry is None else entry.hash


def _decide(path: str, b: Entry | None, lo: LocalEntry | None, r: Entry | None) -> _Unit:
    """Rows 3-13 of the decision table for one path whose local side is valid or absent."""
    unit = _Unit((path,))
    bh, lh, rh = _hash(b), _hash(lo), _hash(r)
    act = unit.actions
    if lh == bh and rh == bh:
        return unit
    if rh == bh:
        # Only the checkout changed. R is B here, so R's id is current and B's hash the precondition.
        if lh is None:
            assert b is not None and r is not None
            act.append(Delete(path, r.memory_id, b.hash))
        elif b is None:
            act.append(Create(path, Content(Side.LOCAL, path, lh)))
        else:
            assert r is not None
            act.append(Update(path, r.memory_id, Content(Side.LOCAL, path, lh), b.hash))
        return unit
    if lh == bh:
        if rh is None:
            assert lh is not None
            act.append(RemoveCheckout(path, lh))
        else:
            act.append(WriteCheckout(path, Content(Side.REMOTE, path, rh), lh))
        return unit
    if lh == rh:
        return unit
    # Both sides changed, differently.
    if lh is None:
        assert rh is not None
        act.append(WriteCheckout(path, Content(Side.REMOTE, path, rh), None))
        unit.notices.append(
            Notice(
                path,
                NoticeKind.KEPT_REMOTE,
                "deleted locally but changed remotely: the remote version is back in the checkout;"
                " delete it again to delete it from the store",
            )
        )
    elif r is None:
        act.append(Create(path, Content(Side.LOCAL, path, lh)))
        unit.notices.append(
            Notice(
                path,
                NoticeKind.RECREATED,
                "deleted remotely but changed locally: recreated in the store from the checkout",
            )
        )
    elif b is None:
        act.append(
            Conflict(
                path,
                None,
                Content(Side.LOCAL, path, lh),
                Content(Side.REMOTE, path, r.hash),
                "created locally and remotely with different contents",
            )
        )
    else:
        act.append(
            Merge(
                path,
                r.memory_id,
                Content(Side.BASE, path, b.hash),
                Content(Side.LOCAL, path, lh),
                Content(Side.REMOTE, path, r.hash),
            )
        )
    return unit


def _pair_local_renames(
    base: Mapping[str, Entry],
    local: Mapping[str, LocalEntry],
    remote: Mapping[str, Entry],
    settled: Set[str],
) -> list[tuple[str, str]]:
    """Exact local renames (old, new), paired in path order so the pairing is deterministic."""
    # The old path must still hold the same memory: a memory someone recreated there is theirs, not
    # the one the user moved, so that case is left to the table (kept remote, plus a create).
    sources = [
        p
        for p in sorted(base)
        if p not in settled and p not in local and p in remote and remote[p].memory_id == base[p].memory_id
    ]
    targets: dict[str, list[str]] = {}
    for q in sorted(local):
        entry = local[q]
        if q in settled or q in base or entry.hash is None:
            continue
        targets.setdefault(entry.hash, []).append(q)
    pairs: list[tuple[str, str]] = []
    for p in sources:
        candidates = targets.get(base[p].hash, [])
        for q in candidates:
            there = remote.get(q)
            # A target the store already holds with p's current content is a rename half done.
            if there is None or there.hash == remote[p].hash:
                candidates.remove(q)
                pairs.append((p, q))
                break
    return pairs


def _local_rename(
    old: str, new: str, local: Mapping[str, LocalEntry], remote: Mapping[str, Entry], dialect: Dialect
) -> _Unit:
    unit = _Unit((old, new))
    source = remote[old]
    moved = local[new].hash
    assert moved is not None
    if new in remote:
        unit.actions.append(Delete(old, source.memory_id, source.hash, moved_to=new))
    elif dialect is Dialect.ANTHROPIC:
        unit.actions.append(Rename(old, new, source.memory_id, source.hash))
    else:
        # If the remote modified the old path, the merge of an exact rename with that
        # modification is the modification itself: the new path gets the remote content.
        side, at = (Side.LOCAL, new) if source.hash == moved else (Side.REMOTE, old)
        unit.actions.append(Create(new, Content(side, at, source.hash)))
        unit.actions.append(Delete(old, source.memory_id, source.hash, moved_to=new))
    if source.hash != moved:
        there = new if new in remote else old
        unit.actions.append(WriteCheckout(new, Content(Side.REMOTE, there, source.hash), moved))
    return unit


def _pair_remote_renames(
    base: Mapping[str, Entry],
    local: Mapping[str, LocalEntry],
    remote: Mapping[str, Entry],
    settled: Set[str],
) -> list[tuple[str, str]]:
    """Remote renames (old, new) of memories modified locally at their old path, found by memory id."""
    by_id = {entry.memory_id: path for path, entry in remote.items()}
    pairs: list[tuple[str, str]] = []
    claimed: set[str] = set()
    for p in sorted(base):
        lo = local.get(p)
        if p in settled or p in remote or lo is None or lo.hash == base[p].hash:
            continue
        q = by_id.get(base[p].memory_id)
        # Two base paths can share an id: a held path keeps its old entry while the memory moved on
        # (a rejected file whose memory was renamed remotely). The first in path order gets it.
        if q is None or q in settled or q in base or q in local or q in claimed:
            continue
        claimed.add(q)
        pairs.append((p, q))
    return pairs


def _remote_rename(
    old: str,
    new: str,
    base: Mapping[str, Entry],
    local: Mapping[str, LocalEntry],
    remote: Mapping[str, Entry],
) -> _Unit:
    unit = _Unit((old, new))
    edited = local[old].hash
    assert edited is not None
    target = remote[new]
    mine = Content(Side.LOCAL, old, edited)
    if target.hash == base[old].hash:
        unit.actions.append(Update(new, target.memory_id, mine, target.hash))
    elif target.hash != edited:
        unit.actions.append(
            Merge(
                new,
                target.memory_id,
                Content(Side.BASE, old, base[old].hash),
                mine,
                Content(Side.REMOTE, new, target.hash),
            )
        )
    if not any(isinstance(a, Merge) for a in unit.actions):
        unit.actions.append(WriteCheckout(new, mine, None))
    unit.actions.append(RemoveCheckout(old, edited))
    return unit


def _guard_deletes(units: list[_Unit], store_size: int, share: float, force: bool) -> None:
    """Withhold every plain delete when the plan would delete too much of the store (no --force)."""
    deleting = [u for u in units if any(isinstance(a, Delete) and a.moved_to is None for a in u.actions)]
    count = len(deleting)
    if force or count < 3 or count <= share * store_size:
        return
    reason = (
        f"not deleted: this push would delete {count} of the store's {store_size} memories, more than"
        f" {share:.0%} of it; nothing was deleted. If that is what you want, run again with --force"
    )
    for unit in deleting:
        unit.actions.clear()
        unit.notices.append(Notice(unit.paths[0], NoticeKind.WITHHELD, reason))


def _guard_limit(units: list[_Unit], store_size: int, limit: int, dialect: Dialect) -> bool:
    """Withhold every unit that creates a memory when the plan would leave more than ``limit``
    memories; True when the plan fits only if its deletes run before its creates."""
    creates = sum(isinstance(a, Create) for u in units for a in u.actions)
    deletes = sum(isinstance(a, Delete) for u in units for a in u.actions)
    after = store_size + creates - deletes
    if after > limit:
        reason = over_limit_reason(store_size, creates, after, limit, dialect)
        for unit in units:
            if any(isinstance(a, Create) for a in unit.actions):
                unit.actions.clear()
                unit.notices.clear()
                unit.notices.extend(Notice(path, NoticeKind.OVER_LIMIT, reason) for path in unit.paths)
        return False
    return store_size + creates > limit


def over_limit_reason(holds: int, creates: int, after: int, limit: int, dialect: Dialect) -> str:
    """The sentence for a push whose creates would pass the store's memory limit."""
    return (
        f"not created: the store holds {holds} memories and this push would create {creates}, leaving"
        f" {after}, more than the {limit:,} a store can hold on the {dialect.value} dialect; delete at least"
        f" {after - limit} memories (remove their files) or move the new files to another store, then"
        " push again"
    )


def _written_paths(action: Action) -> tuple[str, ...]:
    """The memory paths a store write changes in the store (none for a checkout action)."""
    if isinstance(action, Rename):
        return (action.path, action.new_path)
    if isinstance(action, Create | Update | Delete | Merge):
        return (action.path,)
    return ()


def _guard_rewind(units: list[_Unit], local: Mapping[str, LocalEntry], rewind: Rewind) -> None:
    """Withhold every unit whose store writes would put a path back as it was before the rewind."""
    reason = rewind.reason()
    for unit in units:
        written = {path for action in unit.actions for path in _written_paths(action)}
        if not any(p in rewind.before and _hash(local.get(p)) == rewind.before[p] for p in written):
            continue
        # Whatever else the unit meant to do or report (a recreate, a checkout write) waits with it.
        unit.actions.clear()
        unit.notices.clear()
        for path in unit.paths:
            unit.notices.append(Notice(path, NoticeKind.REVERT_WITHHELD, reason))


def _occupies(action: Action) -> str | None:
    """The path a store write makes appear, if any."""
    if isinstance(action, Create):
        return action.path
    if isinstance(action, Rename):
        return action.new_path
    return None


def _frees(action: Action) -> str | None:
    """The path a store write makes disappear, if any."""
    if isinstance(action, Delete | Rename):
        return action.path
    return None


def _reject(unit: _Unit, target: str, why: str) -> None:
    # Whatever the unit meant to report (a recreate, say) did not happen.
    unit.actions.clear()
    unit.notices.clear()
    for path in unit.paths:
        if path == target:
            reason = f"not pushed: {why}; {_KEEP_NOTE}"
        else:
            reason = f"not deleted: it was renamed to {target!r}, which cannot be pushed: {why}"
        unit.notices.append(Notice(path, NoticeKind.REJECTED, reason))


def _check_created_paths(units: list[_Unit], remote: Mapping[str, Entry], dialect: Dialect) -> None:
    """Reject units that would create a path the store must refuse (a 409 would recur on every re-run)."""
    for unit in units:
        for action in list(unit.actions):
            target = _occupies(action)
            if target is None:
                continue
            try:
                check_path(to_absolute(target) if dialect is Dialect.ANTHROPIC else target, dialect)
            except RuleViolation as exc:
                _reject(unit, target, f"the path is not allowed on the {dialect.value} dialect: {exc}")
                break
    if dialect is not Dialect.ANTHROPIC:
        return
    # Rejections only ever grow, so this reaches a fixed point; a rejected rename stops freeing its
    # source, which can make another unit clash in the next round.
    while True:
        writes = [(u, a) for u in units for a in u.actions]
        freed = {p for _, a in writes if (p := _frees(a)) is not None}
        occupied = {p: u for u, a in writes if (p := _occupies(a)) is not None}
        present = (set(remote) - freed) | set(occupied)
        index = _PathIndex(present)
        changed = False
        for target, unit in sorted(occupied.items()):
            if not unit.actions:
                continue
            other = index.clash(target)
            if other is not None:
                relation = "an ancestor" if target.startswith(other + "/") else "a descendant"
                _reject(
                    unit,
                    target,
                    f"on the anthropic dialect a memory path cannot sit inside another one, and"
                    f" {other!r} is {relation} of it",
                )
                changed = True
        if not changed:
            return


class _PathIndex:
    """Answers "is some other path an ancestor or a descendant of this one?" in O(log n)."""

    def __init__(self, paths: Iterable[str]) -> None:
        self._set = set(paths)
        self._sorted = sorted(self._set)

    def clash(self, path: str) -> str | None:
        for cut in range(len(path)):
            if path[cut] == "/" and path[:cut] in self._set:
                return path[:cut]
        for other in self.descendants(path):
            return other
        return None

    def descendants(self, path: str) -> list[str]:
        prefix = path + "/"
        start = bisect.bisect_left(self._sorted, prefix)
        found = []
        for other in self._sorted[start:]:
            if not other.startswith(prefix):
                break
            found.append(other)
        return found


_PHASE: dict[type, int] = {
    Create: 1,
    Update: 2,
    Rename: 2,
    Merge: 3,
    Delete: 4,
    Conflict: 5,
    WriteCheckout: 6,
    RemoveCheckout: 7,
}


def _order(actions: list[Action], dialect: Dialect, *, deletes_first: bool = False) -> tuple[Action, ...]:
    def key(action: Action) -> tuple[int, str]:
        # A create-then-delete rename keeps its order: its delete frees no room.
        early = deletes_first and isinstance(action, Delete) and action.moved_to is None
        return (0 if early else _PHASE[type(action)], action.path)

    ordered = sorted(actions, key=key)
    if dialect is Dialect.ANTHROPIC:
        # Store writes sort first; only they are reordered, so checkout writes stay at the end.
        writes = sum(isinstance(a, Create | Update | Delete | Rename | Merge) for a in ordered)
        ordered = _free_before_occupy(ordered[:writes]) + ordered[writes:]
    return tuple(ordered)


def _free_before_occupy(ordered: list[Action]) -> list[Action]:
    """A stable topological sort: a write freeing path Y runs before a write occupying a path that
    is Y's ancestor or descendant. Without such pairs the order is unchanged."""
    occupiers: dict[str, int] = {}
    for i, action in enumerate(ordered):
        if (p := _occupies(action)) is not None:
            occupiers[p] = i
    if not occupiers:
        return ordered
    index = _PathIndex(occupiers)
    after: dict[int, list[int]] = {}
    waiting = [0] * len(ordered)
    for i, action in enumerate(ordered):
        freed = _frees(action)
        if freed is None:
            continue
        clashing = [freed[:cut] for cut in range(len(freed)) if freed[cut] == "/"]
        clashing += index.descendants(freed)
        for other in clashing:
            j = occupiers.get(other)
            if j is not None and j != i:
                after.setdefault(i, []).append(j)
                waiting[j] += 1
    if not after:
        return ordered
    ready = [i for i in range(len(ordered)) if waiting[i] == 0]
    heapq.heapify(ready)
    result: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        result.append(i)
        for j in after.get(i, ()):
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    # A cycle (renames swapping into each other's subtrees) cannot be ordered; keep the default order
    # for what remains: the store answers 409 and the user sees the paths named in the error.
    done = set(result)
    result.extend(i for i in range(len(ordered)) if i not in done)
    return [ordered[i] for i in result]


# --- moving the base -------------------------------------------------------------------------------


def next_base(
    base: Mapping[str, Entry],
    remote: Mapping[str, Entry],
    finished: Plan,
    *,
    pushed: Mapping[str, Entry | None],
    conflicted: Mapping[str, Entry],
) -> dict[str, Entry]:
    """The base after ``finished`` (planned from ``base`` and ``remote``) ran to its end.

    ``pushed`` maps each path a store write touched to what the store now holds there (``None``:
    nothing, after a delete or the source of a rename). ``conflicted`` maps each path where a
    conflict was recorded during this reconcile — by this plan, or by an earlier plan of the same
    run that a 409 interrupted — to the remote entry the conflict was made against.
    """
    result = dict(remote)
    for path in finished.held:
        if path in base:
            result[path] = base[path]
        else:
            result.pop(path, None)
    for path, entry in conflicted.items():
        result[path] = entry
    for path, pushed_entry in pushed.items():
        if pushed_entry is None:
            result.pop(path, None)
        else:
            result[path] = pushed_entry
    return dict(sorted(result.items()))


__all__ = [
    "Action",
    "Conflict",
    "Content",
    "Create",
    "Delete",
    "Entry",
    "LocalEntry",
    "Merge",
    "Notice",
    "NoticeKind",
    "Plan",
    "RemoveCheckout",
    "Rename",
    "Rewind",
    "Side",
    "StoreWrite",
    "Update",
    "WriteCheckout",
    "next_base",
    "over_limit_reason",
    "plan",
]
