"""The restore planner: the memories a commit holds and a store's live memories in, the fewest
preconditioned writes that make the store equal to the commit out. No I/O.

Per path (memory paths in their canonical relative form, whatever the dialect):

===========================  ======================================================================
commit / store                plan
===========================  ======================================================================
same content                  nothing (``unchanged``)
both, other content           ``UpdateMemory`` with the store's hash as precondition
commit only                   ``CreateMemory`` (a create needs the path free, which is its precondition)
store only, ``delete_others`` ``DeleteMemory`` with the store's hash as precondition
store only, otherwise         nothing: a new store's rerun never deletes what appeared in it meanwhile
===========================  ======================================================================

On Anthropic, where a rename keeps the memory and costs one write, a create and a delete of the same
content are paired into ``RenameMemory`` (paths in byte order, so the pairing is deterministic).
Forward and Cloud rename by create-then-delete, so pairing would save nothing there.

A memory the target dialect cannot hold is ``Rejected`` with the reason, never written: a path its
rules refuse, content it refuses (the caller checks the bytes and passes the problem), or, on
Anthropic, a path that is an ancestor of another memory's path (``a`` beside ``a/b``): the ancestor
goes, since the deeper files are the ones a directory tree holds. A store memory at a rejected path
is left alone rather than deleted.

**Delete guard** (docs/design.md §2, "Destructive work waits for ``--force``"): at least 3 deletes
and more than ``max_delete_share`` of the store's memories refuse the plan (``refused`` says why and
names ``--force``) unless ``force``.

**Memory limit**: a plan that would leave the store with more than ``max_memories`` memories
(Anthropic: 2,000) is refused whole (``refused`` names the limit, the count and what to do);
``--force`` does not lift it. A plan that fits only because it also deletes runs its deletes first,
since the store refuses a create while it is full.

**Order.** On Anthropic, a write that frees a path (a delete, a rename's source) runs before a write
that occupies a path clashing with it, since the store refuses the clash. Otherwise: renames,
creates, updates, then deletes, so an interrupted restore has added before it removed. Within a kind,
paths in byte order. A rerun plans again from what the store then holds and finishes the job.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field

from memsync.errors import RuleViolation
from memsync.rules import Dialect, check_path, to_absolute


@dataclass(frozen=True)
class Wanted:
    """A memory of the commit: its content's SHA-256, why the target cannot take it (if so), metadata."""

    path: str
    sha256: str
    problem: str | None = None
    metadata: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Present:
    """A live memory of the target store."""

    path: str
    memory_id: str
    sha256: str


@dataclass(frozen=True)
class CreateMemory:
    path: str
    sha256: str
    metadata: Mapping[str, str] | None = None


@dataclass(frozen=True)
class UpdateMemory:
    path: str
    memory_id: str
    expected_sha256: str
    sha256: str


@dataclass(frozen=True)
class RenameMemory:
    path: str
    new_path: str
    memory_id: str
    expected_sha256: str


@dataclass(frozen=True)
class DeleteMemory:
    path: str
    memory_id: str
    expected_sha256: str


Action = CreateMemory | UpdateMemory | RenameMemory | DeleteMemory


@dataclass(frozen=True)
class Rejected:
    path: str
    reason: str


@dataclass(frozen=True)
class RestorePlan:
    """The writes in the order they must run; ``refused`` is set when the delete guard holds."""

    actions: tuple[Action, ...]
    rejected: tuple[Rejected, ...] = ()
    unchanged: int = 0
    refused: str | None = None
    counts: dict[str, int] = field(default_factory=dict)


def plan_restore(
    wanted: Mapping[str, Wanted],
    present: Mapping[str, Present],
    *,
    dialect: Dialect,
    delete_others: bool,
    max_delete_share: float = 0.5,
    force: bool = False,
    max_memories: int | None = None,
) -> RestorePlan:
    """The fewest writes that make ``present`` equal to ``wanted`` (see the module docstring);
    ``max_memories`` is the most the store holds (:func:`memsync.rules.max_memories`)."""
    if not 0.0 <= max_delete_share <= 1.0:
        raise ValueError(f"max_delete_share must be between 0 and 1, not {max_delete_share!r}")
    rejected = _rejections(wanted, dialect)
    keep = {path: item for path, item in wanted.items() if path not in rejected}
    creates: dict[str, CreateMemory] = {}
    updates: list[UpdateMemory] = []
    unchanged = 0
    for path in sorted(keep):
        item = keep[path]
        there = present.get(path)
        if there is None:
            creates[path] = CreateMemory(path, item.sha256, item.metadata)
        elif there.sha256 == item.sha256:
            unchanged += 1
        else:
            updates.append(UpdateMemory(path, there.memory_id, there.sha256, item.sha256))
    deletes: dict[str, DeleteMemory] = {}
    if delete_others:
        for path in sorted(present):
            if path not in wanted:
                there = present[path]
                deletes[path] = DeleteMemory(path, there.memory_id, there.sha256)
    renames: list[RenameMemory] = []
    if dialect is Dialect.ANTHROPIC:
        renames = _pair_renames(creates, deletes)
    refused = None
    if not force and len(deletes) >= 3 and len(deletes) > max_delete_share * len(present):
        refused = (
            f"this restore would delete {len(deletes)} of the store's {len(present)} memories, more than"
            f" {max_delete_share:.0%} of it (push.max_delete_share); nothing was written. If that is what"
            " you want, run again with --force"
        )
    after = len(present) + len(creates) - len(deletes)
    if max_memories is not None and after > max_memories:
        refused = (
            f"this restore would leave the store with {after} memories, more than the {max_memories:,}"
            f" a store can hold on the {dialect.value} dialect; nothing was written. Restore a commit that"
            f" holds at most {max_memories:,} memories (this one needs {after - max_memories} fewer), or"
            " restore into a store of a dialect without this limit"
        )
    deletes_first = max_memories is not None and len(present) + len(creates) > max_memories
    actions = _order(
        renames, list(creates.values()), updates, list(deletes.values()), dialect, deletes_first=deletes_first
    )
    counts = {
        "create": len(creates),
        "update": len(updates),
        "rename": len(renames),
        "delete": len(deletes),
        "unchanged": unchanged,
        "rejected": len(rejected),
    }
    return RestorePlan(
        actions=actions,
        rejected=tuple(Rejected(path, rejected[path]) for path in sorted(rejected)),
        unchanged=unchanged,
        refused=refused,
        counts=counts,
    )


def _rejections(wanted: Mapping[str, Wanted], dialect: Dialect) -> dict[str, str]:
    rejected: dict[str, str] = {}
    for path, item in wanted.items():
        if item.problem is not None:
            rejected[path] = item.problem
            continue
        try:
            check_path(to_absolute(path) if dialect is Dialect.ANTHROPIC else path, dialect)
        except RuleViolation as exc:
            rejected[path] = f"the path is not allowed on the {dialect.value} dialect: {exc.detail}"
    if dialect is Dialect.ANTHROPIC:
        valid = sorted(path for path in wanted if path not in rejected)
        for path in valid:
            child = _first_descendant(valid, path)
            if child is not None:
                rejected[path] = (
                    f"on the anthropic dialect a memory path cannot be the folder of another: {path!r}"
                    f" holds {child!r}"
                )
    return rejected


def _first_descendant(ordered: list[str], path: str) -> str | None:
    prefix = path + "/"
    at = bisect.bisect_left(ordered, prefix)
    return ordered[at] if at < len(ordered) and ordered[at].startswith(prefix) else None


def _pair_renames(creates: dict[str, CreateMemory], deletes: dict[str, DeleteMemory]) -> list[RenameMemory]:
    """Creates and deletes of the same content become renames (removed from both), in path order."""
    leaving: dict[str, list[DeleteMemory]] = {}
    for delete in deletes.values():
        leaving.setdefault(delete.expected_sha256, []).append(delete)
    renames = []
    for path in sorted(creates):
        create = creates[path]
        candidates = leaving.get(create.sha256)
        if not candidates:
            continue
        source = candidates.pop(0)
        renames.append(RenameMemory(source.path, path, source.memory_id, source.expected_sha256))
        del creates[path]
        del deletes[source.path]
    return renames


def _clashes_with(path: str, occupied: set[str], ordered: list[str]) -> bool:
    """Whether ``path`` equals, lies inside, or holds one of the ``occupied`` paths."""
    if path in occupied or _first_descendant(ordered, path) is not None:
        return True
    return any(path[:cut] in occupied for cut in range(len(path)) if path[cut] == "/")


def _order(
    renames: list[RenameMemory],
    creates: list[CreateMemory],
    updates: list[UpdateMemory],
    deletes: list[DeleteMemory],
    dialect: Dialect,
    *,
    deletes_first: bool = False,
) -> tuple[Action, ...]:
    first: list[DeleteMemory] = []
    last = deletes
    if deletes_first:
        first, last = deletes, []
    elif dialect is Dialect.ANTHROPIC:
        occupied = {c.path for c in creates} | {r.new_path for r in renames}
        occupied_sorted = sorted(occupied)
        first = [d for d in deletes if _clashes_with(d.path, occupied, occupied_sorted)]
        early = set(first)
        last = [d for d in deletes if d not in early]
    ordered: list[Action] = [*first, *renames, *creates, *updates, *last]
    return tuple(ordered)
