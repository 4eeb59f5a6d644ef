"""An in-memory store and checkout that run reconcile plans, and a state machine over them.

The world is pure Python: a store that enforces the API's preconditions (409 as :class:`Refused`), a
checkout of byte files, a base, recorded conflicts, and a toy executor that carries out a
:class:`~memsync.engine.reconcile.Plan` the way docs/design.md §3 says the real one does (re-plan after
a 409, move the base only at the end). The state machine mixes local edits, remote edits, syncs (some
with a remote write racing the push) and conflict resolutions, and checks the invariant of
docs/design.md §2 ("Nothing is lost"):

* every local edit is in the store, or in a recorded conflict, or still on disk and reported —
  its content stays recoverable;
* no remote write is overwritten without having been seen: a push that replaces content must come
  from a file whose lineage held that content, or from a merge against it.

``pytest`` runs it with the CI budget (tests/engine/test_reconcile.py). For a soak:
``python -m tests.engine.reconcile_world --examples 2000 --steps 40``, or set
``MEMSYNC_MACHINE_EXAMPLES`` / ``MEMSYNC_MACHINE_STEPS`` (``HYPOTHESIS_PROFILE=soak`` raises both).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from memsync.engine.reconcile import (
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
    Side,
    Update,
    WriteCheckout,
    next_base,
    plan,
)
from memsync.errors import RuleViolation
from memsync.rules import Dialect, check_path, sha256_hex, to_absolute

# "d" beside "d/e" exercises Anthropic's ancestor rule; "x " (trailing space) is illegal on Forward only.
PATHS = ("a", "b", "c", "d", "d/e", "d/f", "x ")
LINES = 4


class Refused(Exception):
    """The store answered 409."""


def clashes(path: str, others: Iterable[str]) -> bool:
    """Whether another path is an ancestor or a descendant of ``path`` (Anthropic refuses that)."""
    return any(o != path and (o.startswith(path + "/") or path.startswith(o + "/")) for o in others)


def pushable(text: str, dialect: Dialect) -> bool:
    return LocalEntry.from_bytes(text.encode(), dialect).valid


def legal(path: str, dialect: Dialect) -> bool:
    try:
        check_path(to_absolute(path) if dialect is Dialect.ANTHROPIC else path, dialect)
    except RuleViolation:
        return False
    return True


def three_way(base: str, local: str, remote: str) -> str | None:
    """A small but real three-way merge: line by line when all sides have as many lines; else only
    the trivial cases. ``None`` means "not clean"."""
    if local == remote or remote == base:
        return local
    if local == base:
        return remote
    b, lo, r = base.splitlines(True), local.splitlines(True), remote.splitlines(True)
    if not len(b) == len(lo) == len(r):
        return None
    merged = []
    for bl, ll, rl in zip(b, lo, r, strict=True):
        if ll == rl or rl == bl:
            merged.append(ll)
        elif ll == bl:
            merged.append(rl)
        else:
            return None
    return "".join(merged)


def markers(local: str, remote: str) -> str:
    return f"<<<<<<< local\n{local}=======\n{remote}>>>>>>> remote\n"


@dataclass
class Store:
    """The remote: enforces preconditions, path uniqueness and (Anthropic) the ancestor rule."""

    dialect: Dialect
    memories: dict[str, tuple[str, str]] = field(default_factory=dict)  # path -> (memory id, content)
    history: set[str] = field(default_factory=set)  # every content a version ever held
    ids: itertools.count[int] = field(default_factory=itertools.count)

    def snapshot(self) -> dict[str, Entry]:
        return {p: Entry(sha256_hex(c), m) for p, (m, c) in sorted(self.memories.items())}

    def hash_at(self, path: str) -> str | None:
        found = self.memories.get(path)
        return None if found is None else sha256_hex(found[1])

    def _check_free(self, path: str, moving: str | None = None) -> None:
        if path in self.memories:
            raise Refused(f"{path} exists")
        if self.dialect is Dialect.ANTHROPIC and clashes(path, set(self.memories) - {moving}):
            raise Refused(f"{path} clashes")

    def _check(self, path: str, memory_id: str, expected: str) -> None:
        found = self.memories.get(path)
        if found is None or found[0] != memory_id or sha256_hex(found[1]) != expected:
            raise Refused(f"precondition failed at {path}")

    def create(self, path: str, content: str) -> Entry:
        self._check_free(path)
        memory_id = f"mem_{next(self.ids)}"
        self.memories[path] = (memory_id, content)
        self.history.add(content)
        return Entry(sha256_hex(content), memory_id)

    def update(self, path: str, memory_id: str, content: str, expected: str) -> Entry:
        self._check(path, memory_id, expected)
        self.memories[path] = (memory_id, content)
        self.history.add(content)
        return Entry(sha256_hex(content), memory_id)

    def delete(self, path: str, memory_id: str, expected: str) -> None:
        self._check(path, memory_id, expected)
        del self.memories[path]

    def rename(self, path: str, new_path: str, memory_id: str, expected: str) -> Entry:
        assert self.dialect is Dialect.ANTHROPIC, "native renames exist on Anthropic only"
        self._check(path, memory_id, expected)
        self._check_free(new_path, moving=path)
        self.memories[new_path] = self.memories.pop(path)
        return Entry(expected, memory_id)


@dataclass
class File:
    data: bytes | None  # None: a symlink, never read
    seen: frozenset[str]  # hashes of every content this file held or was reconciled against

    def __post_init__(self) -> None:
        # Whatever a file holds, its owner has seen.
        if self.data is not None:
            self.seen = self.seen | {hashlib.sha256(self.data).hexdigest()}


@dataclass
class Record:
    base: str | None
    local: str
    remote: str


@dataclass
class Outcome:
    plan: Plan
    remote: dict[str, Entry]  # the snapshot the final plan was made from
    locally_deleted: frozenset[str]
    attempts: int


class World:
    """One store, one checkout, the base, recorded conflicts; and the bookkeeping for the invariants."""

    def __init__(self, dialect: Dialect, initial: Mapping[str, str]) -> None:
        self.dialect = dialect
        self.store = Store(dialect)
        self.tokens = itertools.count()
        self.blobs: dict[str, str] = {}
        self.checkout: dict[str, File] = {}
        self.tombstones: dict[str, frozenset[str]] = {}  # seen sets of files the user deleted
        self.conflicts: dict[str, Record] = {}
        self.tracked: set[str] = set()  # user-written contents that must stay recoverable
        self.merged: dict[str, str] = {}  # a local content -> the merge result it went into
        for path, content in initial.items():
            self.store.create(path, content)
        self.mirror = self.pull()
        self.base = dict(self.mirror)
        for path, entry in self.base.items():
            self.checkout[path] = File(self.blobs[entry.hash].encode(), frozenset({entry.hash}))

    # --- helpers ----------------------------------------------------------------------------------

    def token(self, prefix: str) -> str:
        return f"{prefix}{next(self.tokens)}\n"

    def pull(self) -> dict[str, Entry]:
        for _, content in self.store.memories.values():
            self.blobs[sha256_hex(content)] = content
        self.mirror = self.store.snapshot()
        return self.mirror

    def local_snapshot(self) -> dict[str, LocalEntry]:
        return {
            p: LocalEntry.not_regular("symlink")
            if f.data is None
            else LocalEntry.from_bytes(f.data, self.dialect)
            for p, f in sorted(self.checkout.items())
        }

    def text(self, path: str) -> str | None:
        found = self.checkout.get(path)
        if found is None or found.data is None:
            return None
        try:
            return found.data.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def recoverable(self, content: str) -> bool:
        if content in self.store.history:
            return True
        if any(f.data is not None and f.data == content.encode() for f in self.checkout.values()):
            return True
        if any(content in (r.base, r.local, r.remote) for r in self.conflicts.values()):
            return True
        merged = self.merged.get(content)
        return merged is not None and merged != content and self.recoverable(merged)

    # --- the user ---------------------------------------------------------------------------------

    def user_write(self, path: str, data: bytes | None) -> None:
        old = self.checkout.get(path)
        if old is not None:
            self._forget(old)
        seen = old.seen if old is not None else self.tombstones.pop(path, frozenset())
        if data is not None:
            seen |= {hashlib.sha256(data).hexdigest()}
            if _is_text(data):
                self.tracked.add(data.decode())
        self.checkout[path] = File(data, seen)

    def user_edit(self, path: str, line: int) -> None:
        current = self.text(path)
        if current is None or len(current.splitlines(True)) != LINES:
            lines = [self.token("u") for _ in range(LINES)]
        else:
            lines = current.splitlines(True)
            lines[line] = self.token("u")
        self.user_write(path, "".join(lines).encode())

    def user_delete(self, path: str) -> None:
        old = self.checkout.pop(path)
        self._forget(old)
        self.tombstones[path] = old.seen

    def user_rename(self, path: str, new_path: str) -> None:
        moved = self.checkout.pop(path)
        self.tombstones[path] = moved.seen
        self.checkout[new_path] = File(moved.data, moved.seen | self.tombstones.pop(new_path, frozenset()))

    def resolve(self, path: str, pick: str) -> None:
        record = self.conflicts.pop(path)
        for content in (record.base, record.local, record.remote):
            if content is not None:
                self.tracked.discard(content)
        chosen = {"local": record.local, "remote": record.remote}.get(pick) or self.token("resolved") * LINES
        sides = {sha256_hex(c) for c in (record.base, record.local, record.remote) if c is not None}
        old = self.checkout.get(path)
        if old is not None:
            self._forget(old)
        self.checkout[path] = File(chosen.encode(), frozenset(sides | {sha256_hex(chosen)}))
        self.tracked.add(chosen)

    def _forget(self, file: File) -> None:
        # The user overwrote or deleted their own file: that content is theirs to drop.
        if file.data is not None and _is_text(file.data):
            self.tracked.discard(file.data.decode())

    # --- the remote -------------------------------------------------------------------------------

    def remote_write(self, path: str, content: str) -> None:
        found = self.store.memories.get(path)
        try:
            if found is None:
                self.store.create(path, content)
            else:
                self.store.update(path, found[0], content, sha256_hex(found[1]))
        except Refused:
            pass  # the other writer hit the ancestor rule; it writes nothing

    def remote_edit(self, path: str, line: int) -> None:
        found = self.store.memories.get(path)
        if found is None or len(found[1].splitlines(True)) != LINES:
            self.remote_write(path, "".join(self.token("r") for _ in range(LINES)))
        else:
            lines = found[1].splitlines(True)
            lines[line] = self.token("r")
            self.remote_write(path, "".join(lines))

    def remote_delete(self, path: str) -> None:
        memory_id, content = self.store.memories[path]
        self.store.delete(path, memory_id, sha256_hex(content))

    def remote_rename(self, path: str, new_path: str) -> None:
        memory_id, content = self.store.memories[path]
        try:
            if self.dialect is Dialect.ANTHROPIC:
                self.store.rename(path, new_path, memory_id, sha256_hex(content))
            else:
                # Forward and Cloud move by create-then-delete: the memory gets a new id.
                self.store.create(new_path, content)
                self.store.delete(path, memory_id, sha256_hex(content))
        except Refused:
            pass

    # --- reconciling ------------------------------------------------------------------------------

    def sync(self, *, force: bool, race: tuple[str, int] | None) -> Outcome:
        """Pull, plan, execute; on a 409 pull and re-plan from the same base; then move the base."""
        conflicted: dict[str, Entry] = {}
        locally_deleted = frozenset(p for p in self.base if p not in self.checkout)
        for attempt in range(1, 4):
            remote = self.pull()
            current = plan(
                self.base,
                self.local_snapshot(),
                remote,
                dialect=self.dialect,
                open_conflicts=set(self.conflicts),
                force=force,
            )
            if race is not None and attempt == 1:
                self.remote_edit(*race)
            try:
                pushed = self.execute(current, remote, conflicted)
            except Refused:
                continue
            self.base = next_base(self.base, remote, current, pushed=pushed, conflicted=conflicted)
            return Outcome(current, remote, locally_deleted, attempt)
        raise AssertionError("re-planning after a 409 did not converge in 3 rounds")

    def read(self, content: Content, remote: Mapping[str, Entry]) -> str:
        if content.side is Side.LOCAL:
            text = self.text(content.path)
            assert text is not None and sha256_hex(text) == content.hash, f"checkout changed at {content}"
            return text
        snapshot = remote if content.side is Side.REMOTE else self.base
        assert snapshot[content.path].hash == content.hash, f"{content} is not what the snapshot holds"
        return self.blobs[content.hash]

    def _check_seen(self, path: str, seen: frozenset[str], expected: str) -> None:
        """A precondition that passes must not replace a remote version the user never had."""
        if self.store.hash_at(path) == expected:
            assert expected in seen, f"{path}: the push would overwrite a remote version nobody saw"

    def _expect_local(self, path: str, expected: str | None) -> None:
        found = self.local_snapshot().get(path)
        assert (found.hash if found else None) == expected, f"{path}: the checkout changed under the plan"

    def execute(
        self, todo: Plan, remote: Mapping[str, Entry], conflicted: dict[str, Entry]
    ) -> dict[str, Entry | None]:
        pushed: dict[str, Entry | None] = {}
        for action in todo.actions:
            if isinstance(action, Create):
                content = self.read(action.content, remote)
                pushed[action.path] = self.store.create(action.path, content)
                self.blobs[sha256_hex(content)] = content
            elif isinstance(action, Update):
                content = self.read(action.content, remote)
                assert action.content.side is Side.LOCAL
                self._check_seen(action.path, self.checkout[action.content.path].seen, action.expected_hash)
                pushed[action.path] = self.store.update(
                    action.path, action.memory_id, content, action.expected_hash
                )
                self.blobs[sha256_hex(content)] = content
            elif isinstance(action, Delete):
                moved_to = action.moved_to
                if moved_to is not None and self.store.hash_at(moved_to) != action.expected_hash:
                    # The executor checks the content reached its new path before deleting the old
                    # one; a writer changed it meanwhile, so re-plan rather than guess.
                    raise Refused(f"{moved_to} changed under a move")
                if action.moved_to is None:
                    self._check_seen(
                        action.path, self.tombstones.get(action.path, frozenset()), action.expected_hash
                    )
                self.store.delete(action.path, action.memory_id, action.expected_hash)
                self.tombstones.pop(action.path, None)
                pushed[action.path] = None
            elif isinstance(action, Rename):
                pushed[action.new_path] = self.store.rename(
                    action.path, action.new_path, action.memory_id, action.expected_hash
                )
                pushed[action.path] = None
            elif isinstance(action, Merge):
                self._merge(action, remote, pushed, conflicted)
            elif isinstance(action, Conflict):
                base = None if action.base is None else self.read(action.base, remote)
                self._record(
                    action.path,
                    Record(base, self.read(action.local, remote), self.read(action.remote, remote)),
                    remote[action.path],
                    conflicted,
                )
            elif isinstance(action, WriteCheckout):
                self._expect_local(action.path, action.expected_local)
                content = self.read(action.content, remote)
                lineage = (
                    self.checkout[action.content.path].seen
                    if action.content.side is Side.LOCAL
                    else frozenset()
                )
                old = self.checkout.get(action.path)
                seen = (old.seen if old else frozenset()) | lineage | {action.content.hash}
                self.checkout[action.path] = File(content.encode(), seen)
                self.tombstones.pop(action.path, None)
            else:
                assert isinstance(action, RemoveCheckout)
                self._expect_local(action.path, action.expected_local)
                del self.checkout[action.path]
        return pushed

    def _merge(
        self,
        action: Merge,
        remote: Mapping[str, Entry],
        pushed: dict[str, Entry | None],
        conflicted: dict[str, Entry],
    ) -> None:
        base, local, theirs = (self.read(c, remote) for c in (action.base, action.local, action.remote))
        at = self.checkout.get(action.path)
        if action.local.path == action.path:
            self._expect_local(action.path, action.local.hash)
        else:
            assert at is None, f"{action.path}: the merge target is taken in the checkout"
        result = three_way(base, local, theirs)
        if result is None:
            self._record(action.path, Record(base, local, theirs), remote[action.path], conflicted)
            return
        # The merge saw the remote content: replacing it is not an unseen overwrite.
        pushed[action.path] = self.store.update(action.path, action.memory_id, result, action.expected_hash)
        self.blobs[sha256_hex(result)] = result
        self.merged[local] = result
        lineage = self.checkout[action.local.path].seen
        hashes = {sha256_hex(result), action.remote.hash, action.base.hash, action.local.hash}
        self.checkout[action.path] = File(result.encode(), lineage | hashes)

    def _record(self, path: str, record: Record, against: Entry, conflicted: dict[str, Entry]) -> None:
        at = self.checkout.get(path)
        if at is not None and at.data is not None and at.data != record.local.encode():
            raise AssertionError(f"{path}: conflict markers would overwrite an unrecorded local edit")
        self.checkout[path] = File(markers(record.local, record.remote).encode(), frozenset())
        self.conflicts[path] = record
        conflicted[path] = against


def pushed_paths(done: Plan) -> set[str]:
    """The paths whose store content a plan's writes set."""
    found: set[str] = set()
    for action in done.actions:
        if isinstance(action, Create | Update | Delete | Merge):
            found.add(action.path)
        elif isinstance(action, Rename):
            found |= {action.path, action.new_path}
    return found


def _is_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# --- the state machine ---------------------------------------------------------------------------

paths = st.sampled_from(PATHS)
lines = st.integers(min_value=0, max_value=LINES - 1)
# Ops name an existing file by a number taken modulo the files there are, so that edits, renames
# and deletes on both sides keep meeting on the same few paths (where the interesting cases are).
picks = st.integers(min_value=0, max_value=15)
# Invalid UTF-8, a control character, empty content (invalid on Forward only), a symlink (None).
unpushable = st.sampled_from([b"\xff\xfe not utf-8\n", b"nul \x00 byte\n", b"", None])
Op = tuple[str, int, object]
local_ops = st.one_of(
    st.tuples(st.just("edit"), picks, lines),
    st.tuples(st.just("edit"), picks, lines),
    st.tuples(st.just("create"), picks, paths),
    st.tuples(st.just("unpushable"), picks, unpushable),
    st.tuples(st.just("delete"), picks, st.none()),
    st.tuples(st.just("rename"), picks, paths),
    st.tuples(st.just("wipe"), picks, st.none()),
)
remote_ops = st.one_of(
    st.tuples(st.just("edit"), picks, lines),
    st.tuples(st.just("create"), picks, paths),
    st.tuples(st.just("delete"), picks, st.none()),
    st.tuples(st.just("rename"), picks, paths),
    st.tuples(st.just("same"), picks, st.none()),
)


def _pick(pick: int, existing: Iterable[str]) -> str | None:
    found = sorted(existing)
    return found[pick % len(found)] if found else None


class ReconcileMachine(RuleBasedStateMachine):
    """Cycles of local and remote edits followed by a sync (sometimes racing a remote write), and
    conflict resolutions. Each step is a whole cycle, so a small budget still exercises merges,
    conflicts, renames, rejections, the delete guard and re-planning after a 409."""

    dialect: Dialect = Dialect.FORWARD

    def __init__(self) -> None:
        super().__init__()
        initial = {p: "".join(f"{p}:{i}\n" for i in range(LINES)) for p in ("a", "b", "c", "d/e")}
        self.world = World(self.dialect, initial)

    def local_op(self, op: Op) -> None:
        kind, pick, arg = op
        world = self.world
        path = _pick(pick, world.checkout)
        if kind == "create":
            assert isinstance(arg, str)
            if arg not in world.checkout:
                world.user_edit(arg, 0)
        elif kind == "wipe":
            # The accident the delete guard is for: every file gone at once.
            for gone in sorted(world.checkout):
                world.user_delete(gone)
        elif path is None:
            return
        elif kind == "edit":
            assert isinstance(arg, int)
            world.user_edit(path, arg)
        elif kind == "unpushable":
            assert arg is None or isinstance(arg, bytes)
            world.user_write(path, arg)
        elif kind == "delete":
            world.user_delete(path)
        elif kind == "rename":
            assert isinstance(arg, str)
            if arg not in world.checkout:
                world.user_rename(path, arg)

    def remote_op(self, op: Op) -> None:
        kind, pick, arg = op
        world, store = self.world, self.world.store.memories
        path = _pick(pick, store)
        if kind == "create":
            assert isinstance(arg, str)
            if arg not in store and legal(arg, self.dialect):
                world.remote_edit(arg, 0)
        elif kind == "same":
            # Someone else pushes exactly what the checkout holds: an identical change on both sides.
            mine = _pick(pick, world.checkout)
            text = None if mine is None else world.text(mine)
            ok = mine is not None and text is not None and legal(mine, self.dialect)
            if ok and mine is not None and text is not None and pushable(text, self.dialect):
                world.remote_write(mine, text)
        elif path is None:
            return
        elif kind == "edit":
            assert isinstance(arg, int)
            world.remote_edit(path, arg)
        elif kind == "delete":
            world.remote_delete(path)
        elif kind == "rename":
            assert isinstance(arg, str)
            if arg not in store and legal(arg, self.dialect):
                world.remote_rename(path, arg)

    @rule(
        mine=st.lists(local_ops, max_size=4),
        theirs=st.lists(remote_ops, max_size=3),
        force=st.booleans(),
        race=st.none() | st.none() | st.tuples(paths, lines),
    )
    def cycle(self, mine: list[Op], theirs: list[Op], force: bool, race: tuple[str, int] | None) -> None:
        for op in mine:
            self.local_op(op)
        for op in theirs:
            self.remote_op(op)
        self.sync(force, race)

    @precondition(lambda self: bool(self.world.conflicts))
    @rule(data=st.data(), pick=st.sampled_from(["local", "remote", "new"]))
    def resolve(self, data: st.DataObject, pick: str) -> None:
        path = data.draw(st.sampled_from(sorted(self.world.conflicts)))
        self.world.resolve(path, pick)

    def sync(self, force: bool, race: tuple[str, int] | None) -> None:
        world = self.world
        if race is not None and not legal(race[0], self.dialect):
            race = None
        outcome = world.sync(force=force, race=race)
        done = outcome.plan
        # Plans never trip a 409 by themselves (ordering, path rules); only a racing writer does.
        assert outcome.attempts == 1 or race is not None
        noticed = {n.path for n in done.notices}
        withheld = {n.path for n in done.notices if n.kind is NoticeKind.WITHHELD}
        # What the store held once the sync was done, as far as the sync saw (a racing write may have
        # landed since): the snapshot of the final plan, with what that plan pushed.
        pushed = pushed_paths(done)
        seen = {p: e for p, e in outcome.remote.items() if p not in pushed}
        seen |= {p: world.base[p] for p in pushed if p in world.base}
        # A local delete either reached the store or was reported.
        for path in outcome.locally_deleted:
            assert path not in seen or path in noticed, f"{path}: local delete dropped"
        # The checkout now equals the base everywhere but on held and conflicted paths ...
        local = world.local_snapshot()
        for path in set(world.base) | set(local):
            if path in done.held or path in world.conflicts:
                continue
            mine, agreed = local.get(path), world.base.get(path)
            assert (mine.hash if mine else None) == (agreed.hash if agreed else None), path
        # ... and planning again is a fixed point: nothing left to do, only the same reports. The one
        # exception: withheld deletes may pass the guard now if pushed creates grew the store.
        again = plan(
            world.base,
            local,
            seen,
            dialect=world.dialect,
            open_conflicts=set(world.conflicts),
            force=force,
        )
        assert all(isinstance(a, Delete) and a.path in withheld for a in again.actions), again.actions
        assert {n.path for n in again.notices} <= noticed | set(world.conflicts)

    @invariant()
    def local_edits_are_recoverable(self) -> None:
        lost = [c for c in self.world.tracked if not self.world.recoverable(c)]
        assert not lost, f"local edits lost: {lost}"

    @invariant()
    def conflicts_keep_three_sides(self) -> None:
        for path, record in self.world.conflicts.items():
            assert record.local != record.remote, path


class AnthropicReconcileMachine(ReconcileMachine):
    dialect = Dialect.ANTHROPIC


def machine_settings(examples: int | None = None, steps: int | None = None) -> settings:
    """The CI budget (about 20 examples of 15 steps), raised by env vars or the soak profile."""
    soak = os.environ.get("HYPOTHESIS_PROFILE") == "soak"
    return settings(
        max_examples=examples or int(os.environ.get("MEMSYNC_MACHINE_EXAMPLES", 500 if soak else 20)),
        stateful_step_count=steps or int(os.environ.get("MEMSYNC_MACHINE_STEPS", 40 if soak else 15)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


def soak(
    examples: int, steps: int, dialects: tuple[Dialect, ...] = (Dialect.FORWARD, Dialect.ANTHROPIC)
) -> None:
    """Run the state machines with a bigger budget (for a soak script); raises on the first failure."""
    for dialect in dialects:
        machine = AnthropicReconcileMachine if dialect is Dialect.ANTHROPIC else ReconcileMachine
        run_state_machine_as_test(machine, settings=machine_settings(examples, steps))


def main() -> None:
    parser = argparse.ArgumentParser(description="Soak the reconcile state machines.")
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    soak(args.examples, args.steps)
    print(f"ok: {args.examples} examples x {args.steps} steps, forward and anthropic")


if __name__ == "__main__":
    main()
