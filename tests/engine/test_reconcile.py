"""The reconcile planner: the decision table row by row, renames, the delete guard, ordering, the
path rules, moving the base; then properties over random snapshots and a state machine
(tests/engine/reconcile_world.py) that runs plans against an in-memory store and checkout."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memsync.engine.reconcile import (
    Action,
    Conflict,
    Content,
    Create,
    Delete,
    Entry,
    LocalEntry,
    Merge,
    Notice,
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
from tests.engine.reconcile_world import AnthropicReconcileMachine, ReconcileMachine, machine_settings

FORWARD, CLOUD, ANTHROPIC = Dialect.FORWARD, Dialect.CLOUD, Dialect.ANTHROPIC
P = "notes/p.md"
Q = "notes/q.md"
TEXT = {"b": "base\n", "l": "local\n", "r": "remote\n"}
H = {k: sha256_hex(v) for k, v in TEXT.items()}
ID = "mem_1"


def entry(symbol: str, memory_id: str = ID) -> Entry:
    return Entry(H[symbol], memory_id)


def local_entry(symbol: str) -> LocalEntry:
    if symbol == "x":
        return LocalEntry.from_bytes(b"\xff not utf-8", FORWARD)
    if symbol == "s":
        return LocalEntry.not_regular("symlink")
    return LocalEntry(H[symbol])


def base_c(symbol: str = "b", path: str = P) -> Content:
    return Content(Side.BASE, path, H[symbol])


def local_c(symbol: str, path: str = P) -> Content:
    return Content(Side.LOCAL, path, H[symbol])


def remote_c(symbol: str, path: str = P) -> Content:
    return Content(Side.REMOTE, path, H[symbol])


def run(
    base: Mapping[str, Entry],
    local: Mapping[str, LocalEntry],
    remote: Mapping[str, Entry],
    *,
    dialect: Dialect = FORWARD,
    open_conflicts: frozenset[str] = frozenset(),
    max_delete_share: float = 0.5,
    force: bool = False,
) -> Plan:
    return plan(
        base,
        local,
        remote,
        dialect=dialect,
        open_conflicts=open_conflicts,
        max_delete_share=max_delete_share,
        force=force,
    )


def kinds(result: Plan) -> list[tuple[str, NoticeKind]]:
    return [(n.path, n.kind) for n in result.notices]


# --- the decision table, one row per (base, local, remote) ------------------------------------------

# Symbols: "-" absent, "b" the base content, "l" a local content, "r" the remote content (local "r"
# is a change identical to the remote one), "x" invalid local content, "s" a symlink.


@dataclass(frozen=True)
class Row:
    actions: tuple[Action, ...]
    notice: NoticeKind | None = None


KEEP = NoticeKind.KEPT_REMOTE
MERGE_P = Merge(P, ID, base_c(), local_c("l"), remote_c("r"))
TABLE: dict[tuple[str, str, str], Row] = {
    # base present
    ("b", "-", "-"): Row(()),  # deleted on both sides
    ("b", "-", "b"): Row((Delete(P, ID, H["b"]),)),  # local delete, base hash as precondition
    ("b", "-", "r"): Row((WriteCheckout(P, remote_c("r"), None),), KEEP),  # delete vs modify
    ("b", "b", "-"): Row((RemoveCheckout(P, H["b"]),)),  # remote delete
    ("b", "b", "b"): Row(()),  # nothing changed
    ("b", "b", "r"): Row((WriteCheckout(P, remote_c("r"), H["b"]),)),  # remote modify
    ("b", "l", "-"): Row((Create(P, local_c("l")),), NoticeKind.RECREATED),  # modify vs delete
    ("b", "l", "b"): Row((Update(P, ID, local_c("l"), H["b"]),)),  # local modify
    ("b", "l", "r"): Row((MERGE_P,)),  # both modified differently
    ("b", "r", "-"): Row((Create(P, local_c("r")),), NoticeKind.RECREATED),
    ("b", "r", "b"): Row((Update(P, ID, local_c("r"), H["b"]),)),
    ("b", "r", "r"): Row(()),  # both modified identically
    ("b", "x", "-"): Row((), NoticeKind.REJECTED),
    ("b", "x", "b"): Row((), NoticeKind.REJECTED),
    ("b", "x", "r"): Row((), NoticeKind.REJECTED),
    ("b", "s", "-"): Row((), NoticeKind.REJECTED),
    ("b", "s", "b"): Row((), NoticeKind.REJECTED),
    ("b", "s", "r"): Row((), NoticeKind.REJECTED),
    # base absent
    ("-", "-", "-"): Row(()),
    ("-", "-", "r"): Row((WriteCheckout(P, remote_c("r"), None),)),  # remote create
    ("-", "l", "-"): Row((Create(P, local_c("l")),)),  # local create
    ("-", "l", "r"): Row((Conflict(P, None, local_c("l"), remote_c("r"), "created locally and remotely"),)),
    ("-", "r", "-"): Row((Create(P, local_c("r")),)),
    ("-", "r", "r"): Row(()),  # created identically on both sides
    ("-", "x", "-"): Row((), NoticeKind.REJECTED),
    ("-", "x", "r"): Row((), NoticeKind.REJECTED),
    ("-", "s", "-"): Row((), NoticeKind.REJECTED),
    ("-", "s", "r"): Row((), NoticeKind.REJECTED),
}
HELD = {NoticeKind.REJECTED}


def snapshots(
    key: tuple[str, str, str],
) -> tuple[dict[str, Entry], dict[str, LocalEntry], dict[str, Entry]]:
    b, lo, r = key
    return (
        {} if b == "-" else {P: entry(b)},
        {} if lo == "-" else {P: local_entry(lo)},
        {} if r == "-" else {P: entry(r)},
    )


def test_table_covers_every_combination() -> None:
    with_base = set(itertools.product("b", "-blrxs", "-br"))
    without_base = set(itertools.product("-", "-lrxs", "-r"))
    assert set(TABLE) == with_base | without_base


def _same(actual: tuple[Action, ...], expected: tuple[Action, ...]) -> bool:
    # A conflict's reason is prose; compare its prefix so the table stays readable.
    if len(actual) != len(expected):
        return False
    for a, e in zip(actual, expected, strict=True):
        if isinstance(a, Conflict) and isinstance(e, Conflict):
            if (a.path, a.base, a.local, a.remote) != (e.path, e.base, e.local, e.remote):
                return False
            if not a.reason.startswith(e.reason):
                return False
        elif a != e:
            return False
    return True


@pytest.mark.parametrize("dialect", [FORWARD, CLOUD, ANTHROPIC])
@pytest.mark.parametrize("key", sorted(TABLE), ids="".join)
def test_decision_table(key: tuple[str, str, str], dialect: Dialect) -> None:
    row = TABLE[key]
    result = run(*snapshots(key), dialect=dialect)
    assert _same(result.actions, row.actions), result.actions
    assert kinds(result) == ([] if row.notice is None else [(P, row.notice)])
    assert result.held == ({P} if row.notice in HELD else set())


@pytest.mark.parametrize("key", sorted(TABLE), ids="".join)
def test_open_conflict_blocks_every_row(key: tuple[str, str, str]) -> None:
    result = run(*snapshots(key), open_conflicts=frozenset({P}))
    assert result.actions == ()
    assert kinds(result) == [(P, NoticeKind.CONFLICT_OPEN)]
    assert "memsync resolve" in result.notices[0].reason
    assert result.held == {P}


def test_what_needs_the_users_attention() -> None:
    # Told, not asked: a recreate or a restored remote version. Asked: conflicts, rejects, withholds.
    assert not run(*snapshots(("b", "l", "-"))).needs_attention
    assert not run(*snapshots(("b", "-", "r"))).needs_attention
    assert run(*snapshots(("-", "l", "r"))).needs_attention
    assert run(*snapshots(("b", "x", "b"))).needs_attention
    assert run(*snapshots(("b", "b", "b")), open_conflicts=frozenset({P})).needs_attention


def test_remote_recreated_with_same_content_updates_the_current_memory() -> None:
    # The remote deleted and recreated P with the base content: not a change, but a new id.
    result = run({P: entry("b", "mem_old")}, {P: local_entry("l")}, {P: entry("b", "mem_new")})
    assert result.actions == (Update(P, "mem_new", local_c("l"), H["b"]),)


def test_rejected_file_reason_names_the_rule() -> None:
    result = run({}, {P: LocalEntry.from_bytes(b"a\x00b", FORWARD)}, {})
    (notice,) = result.notices
    assert notice.kind is NoticeKind.REJECTED and notice.needs_attention
    assert "control character U+0000" in notice.reason and "left as it is" in notice.reason


def test_empty_file_is_rejected_on_forward_and_pushed_on_anthropic() -> None:
    forward = run({}, {P: LocalEntry.from_bytes(b"", FORWARD)}, {}, dialect=FORWARD)
    assert kinds(forward) == [(P, NoticeKind.REJECTED)]
    anthropic = run({}, {P: LocalEntry.from_bytes(b"", ANTHROPIC)}, {}, dialect=ANTHROPIC)
    assert anthropic.actions == (Create(P, Content(Side.LOCAL, P, sha256_hex(""))),)


def test_illegal_path_is_rejected_per_dialect() -> None:
    # A trailing space in a segment is illegal on Forward and Cloud, legal on Anthropic.
    odd = "notes /a.md"
    for dialect in (FORWARD, CLOUD):
        result = run({}, {odd: local_entry("l")}, {}, dialect=dialect)
        assert result.actions == () and result.held == {odd}
        assert "white space" in result.notices[0].reason
    assert run({}, {odd: local_entry("l")}, {}, dialect=ANTHROPIC).actions == (
        Create(odd, local_c("l", odd)),
    )


# --- LocalEntry --------------------------------------------------------------------------------


def test_local_entry_from_bytes() -> None:
    ok = LocalEntry.from_bytes("héllo\n".encode(), FORWARD)
    assert ok == LocalEntry(sha256_hex("héllo\n")) and ok.valid
    too_big = LocalEntry.from_bytes(b"x" * 102_401, ANTHROPIC)
    assert not too_big.valid and "102401 bytes" in (too_big.problem or "")
    link = LocalEntry.not_regular("symlink")
    assert link.hash is None and "symlink" in (link.problem or "")
    with pytest.raises(ValueError, match="must say why"):
        LocalEntry(None)


def test_delete_share_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        run({}, {}, {}, max_delete_share=1.5)


# --- renames ---------------------------------------------------------------------------------------


def test_local_rename_on_forward_is_create_then_delete() -> None:
    for dialect in (FORWARD, CLOUD):
        result = run({P: entry("b")}, {Q: local_entry("b")}, {P: entry("b")}, dialect=dialect)
        assert result.actions == (
            Create(Q, local_c("b", Q)),
            Delete(P, ID, H["b"], moved_to=Q),
        )


def test_local_rename_on_anthropic_is_native() -> None:
    result = run({P: entry("b")}, {Q: local_entry("b")}, {P: entry("b")}, dialect=ANTHROPIC)
    assert result.actions == (Rename(P, Q, ID, H["b"]),)


def test_local_rename_vs_remote_modify_takes_the_remote_content() -> None:
    snap = ({P: entry("b")}, {Q: local_entry("b")}, {P: entry("r")})
    assert run(*snap, dialect=FORWARD).actions == (
        Create(Q, remote_c("r", P)),
        Delete(P, ID, H["r"], moved_to=Q),
        WriteCheckout(Q, remote_c("r", P), H["b"]),
    )
    assert run(*snap, dialect=ANTHROPIC).actions == (
        Rename(P, Q, ID, H["r"]),
        WriteCheckout(Q, remote_c("r", P), H["b"]),
    )


def test_interrupted_forward_rename_is_finished_not_conflicted() -> None:
    # The create landed, the delete did not: the re-run only deletes, and the guard ignores it.
    result = run({P: entry("b")}, {Q: local_entry("b")}, {P: entry("b"), Q: entry("b", "mem_2")})
    assert result.actions == (Delete(P, ID, H["b"], moved_to=Q),)


def test_local_rename_of_a_memory_recreated_remotely_is_not_a_rename() -> None:
    # Someone deleted mem_1 and made mem_2 at p: the user's move must not carry mem_2 away.
    result = run({P: entry("b")}, {Q: local_entry("b")}, {P: entry("r", "mem_2")}, dialect=ANTHROPIC)
    assert result.actions == (Create(Q, local_c("b", Q)), WriteCheckout(P, remote_c("r"), None))
    assert kinds(result) == [(P, NoticeKind.KEPT_REMOTE)]


def test_local_rename_vs_remote_delete_creates_the_new_path() -> None:
    result = run({P: entry("b")}, {Q: local_entry("b")}, {}, dialect=ANTHROPIC)
    assert result.actions == (Create(Q, local_c("b", Q)),)


def test_local_rename_onto_a_path_created_remotely_conflicts_there() -> None:
    result = run({P: entry("b")}, {Q: local_entry("b")}, {P: entry("b"), Q: entry("r", "mem_2")})
    assert [type(a) for a in result.actions] == [Delete, Conflict]
    assert result.actions[1].path == Q


def test_two_identical_files_renamed_pair_in_path_order() -> None:
    base = {"a": entry("b", "mem_a"), "b": entry("b", "mem_b")}
    local = {"y": local_entry("b"), "z": local_entry("b")}
    result = run(base, local, base, dialect=ANTHROPIC)
    assert result.actions == (Rename("a", "y", "mem_a", H["b"]), Rename("b", "z", "mem_b", H["b"]))


def test_renamed_then_edited_is_a_create_and_a_delete() -> None:
    # Only exact renames are detected; an edited move is a new file and a deleted one.
    result = run({P: entry("b")}, {Q: local_entry("l")}, {P: entry("b")}, dialect=ANTHROPIC)
    assert result.actions == (Create(Q, local_c("l", Q)), Delete(P, ID, H["b"]))


def test_rename_to_an_illegal_path_rejects_both_halves() -> None:
    odd = "notes /q.md"
    result = run({P: entry("b")}, {odd: local_entry("b")}, {P: entry("b")}, dialect=FORWARD)
    assert result.actions == ()
    assert kinds(result) == [(odd, NoticeKind.REJECTED), (P, NoticeKind.REJECTED)]
    assert result.held == {P, odd}
    assert "renamed to" in result.notices[1].reason


def test_remote_rename_carries_the_local_modification() -> None:
    result = run({P: entry("b")}, {P: local_entry("l")}, {Q: entry("b")}, dialect=ANTHROPIC)
    assert result.actions == (
        Update(Q, ID, local_c("l", P), H["b"]),
        WriteCheckout(Q, local_c("l", P), None),
        RemoveCheckout(P, H["l"]),
    )


def test_remote_rename_and_modify_vs_local_modify_merges_at_the_new_path() -> None:
    result = run({P: entry("b")}, {P: local_entry("l")}, {Q: entry("r")}, dialect=ANTHROPIC)
    assert result.actions == (
        Merge(Q, ID, base_c("b", P), local_c("l", P), remote_c("r", Q)),
        RemoveCheckout(P, H["l"]),
    )


def test_remote_rename_already_carrying_the_local_content_only_moves_the_file() -> None:
    result = run({P: entry("b")}, {P: local_entry("l")}, {Q: entry("l")}, dialect=ANTHROPIC)
    assert result.actions == (WriteCheckout(Q, local_c("l", P), None), RemoveCheckout(P, H["l"]))


def test_remote_rename_of_an_unchanged_file_moves_it_in_the_checkout() -> None:
    result = run({P: entry("b")}, {P: local_entry("b")}, {Q: entry("b")}, dialect=ANTHROPIC)
    assert result.actions == (WriteCheckout(Q, remote_c("b", Q), None), RemoveCheckout(P, H["b"]))


def test_forward_remote_move_has_a_new_id_so_the_local_edit_is_recreated() -> None:
    result = run({P: entry("b")}, {P: local_entry("l")}, {Q: entry("b", "mem_2")}, dialect=FORWARD)
    assert result.actions == (Create(P, local_c("l")), WriteCheckout(Q, remote_c("b", Q), None))
    assert kinds(result) == [(P, NoticeKind.RECREATED)]


# --- the delete guard --------------------------------------------------------------------------


def store(n: int) -> dict[str, Entry]:
    return {f"m{i}": Entry(H["b"], f"mem_{i}") for i in range(n)}


def test_two_deletes_go_through() -> None:
    result = run(store(2), {}, store(2))
    assert [type(a) for a in result.actions] == [Delete, Delete]


def test_three_deletes_of_four_are_withheld_but_other_changes_go() -> None:
    base = store(4)
    local = {"m3": local_entry("l")}
    result = run(base, local, base)
    assert result.actions == (Update("m3", "mem_3", local_c("l", "m3"), H["b"]),)
    assert kinds(result) == [(f"m{i}", NoticeKind.WITHHELD) for i in range(3)]
    assert result.held == {"m0", "m1", "m2"}
    reason = result.notices[0].reason
    assert "3 of the store's 4" in reason and "50%" in reason and "--force" in reason
    assert result.needs_attention


def test_force_lets_the_deletes_through() -> None:
    base = store(4)
    result = run(base, {"m3": local_entry("b")}, base, force=True)
    assert result.actions == tuple(Delete(f"m{i}", f"mem_{i}", H["b"]) for i in range(3))
    assert result.notices == ()


def test_half_of_the_store_is_not_more_than_half() -> None:
    base = store(6)
    result = run(base, {f"m{i}": local_entry("b") for i in range(3, 6)}, base)
    assert [type(a) for a in result.actions] == [Delete] * 3


def test_delete_share_is_configurable() -> None:
    base = store(10)
    local = {f"m{i}": local_entry("b") for i in range(3, 10)}
    assert kinds(run(base, local, base, max_delete_share=0.2)) == [
        (f"m{i}", NoticeKind.WITHHELD) for i in range(3)
    ]
    assert len(run(base, local, base, max_delete_share=0.5).actions) == 3


def test_rename_halves_are_not_counted() -> None:
    base = store(4)
    local = {f"n{i}": local_entry("b") for i in range(3)} | {"m3": local_entry("b")}
    result = run(base, local, base, dialect=FORWARD)
    assert sum(isinstance(a, Delete) for a in result.actions) == 3
    assert result.notices == ()


# --- ordering ----------------------------------------------------------------------------------


def test_forward_creates_precede_deletes_and_store_writes_precede_checkout_writes() -> None:
    base = {"a": entry("b", "mem_a"), "c": entry("b", "mem_c"), "m": entry("b", "mem_m")}
    local = {"b": local_entry("b"), "m": local_entry("l"), "z": local_entry("l"), "w": local_entry("r")}
    remote = dict(base) | {"w": entry("r", "mem_w"), "v": entry("r", "mem_v")}
    result = run(base, local, remote, dialect=FORWARD)
    assert result.actions == (
        Create("b", local_c("b", "b")),
        Create("z", local_c("l", "z")),
        Update("m", "mem_m", local_c("l", "m"), H["b"]),
        Delete("a", "mem_a", H["b"], moved_to="b"),
        Delete("c", "mem_c", H["b"]),
        WriteCheckout("v", remote_c("r", "v"), None),
    )


def test_anthropic_deletes_a_file_before_creating_inside_its_path() -> None:
    # The user replaced the file "notes" with a folder "notes/": the store refuses both at once.
    base = {"notes": entry("b"), "z": entry("b", "mem_z")}
    local = {"notes/a.md": local_entry("l"), "z": local_entry("b")}
    result = run(base, local, base, dialect=ANTHROPIC)
    assert result.actions == (Delete("notes", ID, H["b"]), Create("notes/a.md", local_c("l", "notes/a.md")))


def test_anthropic_rename_frees_a_path_before_a_create_inside_it() -> None:
    base = {"a": entry("b"), "z": entry("l", "mem_z")}
    local = {"b": local_entry("b"), "a/x": local_entry("r"), "z": local_entry("l")}
    result = run(base, local, base, dialect=ANTHROPIC)
    assert result.actions == (Rename("a", "b", ID, H["b"]), Create("a/x", local_c("r", "a/x")))


def test_anthropic_rejects_a_create_inside_a_memory_that_stays() -> None:
    base = {"a": entry("b")}
    result = run(base, {"a": local_entry("b"), "a/x": local_entry("l")}, base, dialect=ANTHROPIC)
    assert result.actions == ()
    assert kinds(result) == [("a/x", NoticeKind.REJECTED)]
    assert "'a' is an ancestor" in result.notices[0].reason
    # Forward and Cloud allow "a" beside "a/x".
    assert run(base, {"a": local_entry("b"), "a/x": local_entry("l")}, base).actions == (
        Create("a/x", local_c("l", "a/x")),
    )


def test_anthropic_rejects_two_new_paths_that_clash_with_each_other() -> None:
    result = run({}, {"a": local_entry("l"), "a/x": local_entry("r")}, {}, dialect=ANTHROPIC)
    assert result.actions == ()
    assert kinds(result) == [("a", NoticeKind.REJECTED), ("a/x", NoticeKind.REJECTED)]
    assert "'a/x' is a descendant" in result.notices[0].reason


def test_withheld_delete_no_longer_frees_its_path() -> None:
    # Deleting m0, m1, m2 of 4 is withheld, so m0 stays and m0/y cannot be created inside it.
    base = store(4)
    result = run(base, {"m3": local_entry("b"), "m0/y": local_entry("l")}, base, dialect=ANTHROPIC)
    assert result.actions == ()
    assert kinds(result) == [
        ("m0", NoticeKind.WITHHELD),
        ("m0/y", NoticeKind.REJECTED),
        ("m1", NoticeKind.WITHHELD),
        ("m2", NoticeKind.WITHHELD),
    ]


def test_anthropic_recreate_clashing_with_a_remote_create_is_rejected() -> None:
    result = run({"a": entry("b")}, {"a": local_entry("l")}, {"a/x": entry("r", "mem_2")}, dialect=ANTHROPIC)
    assert [type(a) for a in result.actions] == [WriteCheckout]
    assert kinds(result) == [("a", NoticeKind.REJECTED)]
    assert result.held == {"a"}


# --- moving the base ---------------------------------------------------------------------------


def test_next_base_takes_remote_except_held_conflicted_and_pushed() -> None:
    # "c" was conflicted against "l" by an earlier plan that a 409 cut short; the final plan saw the
    # remote move on to "r" and held "c" as an open conflict. "x" is held but has no base entry.
    base = {"held": entry("b"), "gone": entry("b", "mem_g"), "c": entry("b", "mem_c"), "same": entry("b")}
    remote = {"held": entry("r"), "c": entry("r", "mem_c"), "new": entry("r", "mem_n"), "x": entry("r")}
    notices = (Notice("held", NoticeKind.REJECTED, "x"), Notice("c", NoticeKind.CONFLICT_OPEN, "c"))
    done = Plan(actions=(), notices=notices, held=frozenset({"held", "x", "c"}))
    pushed: dict[str, Entry | None] = {"new": None, "p": Entry(H["l"], "mem_p")}
    conflicted = {"c": entry("l", "mem_c")}
    assert next_base(base, remote, done, pushed=pushed, conflicted=conflicted) == {
        "c": entry("l", "mem_c"),
        "held": entry("b"),
        "p": Entry(H["l"], "mem_p"),
    }


# --- properties over random snapshots ----------------------------------------------------------

PATHS = ["a", "b", "c", "d", "e", "a/x", "a/y", "b/z", "x "]
HASHES = ["h0", "h1", "h2", "h3"]
LOCAL_CHANGES = ["same", "same", "same", "modified", "deleted", "as_remote", "invalid", "link"]


def _drop_clashes(snapshot: dict[str, Entry]) -> dict[str, Entry]:
    # Anthropic never holds a path inside another memory's path: keep ancestors, drop descendants.
    return {p: e for p, e in snapshot.items() if not any(p.startswith(o + "/") for o in snapshot)}


@dataclass(frozen=True)
class World:
    base: dict[str, Entry]
    local: dict[str, LocalEntry]
    remote: dict[str, Entry]
    dialect: Dialect
    open_conflicts: frozenset[str]
    max_delete_share: float
    force: bool

    def plan(self) -> Plan:
        return plan(
            self.base,
            self.local,
            self.remote,
            dialect=self.dialect,
            open_conflicts=self.open_conflicts,
            max_delete_share=self.max_delete_share,
            force=self.force,
        )


@st.composite
def worlds(draw: st.DrawFn) -> World:
    """Three snapshots that mostly agree, so that changes meet on the same few paths: both sides
    start from the base and change some paths; some moves are made on purpose (renames need two
    paths to line up), and sometimes many local files go at once (for the delete guard)."""
    dialect = draw(st.sampled_from([FORWARD, CLOUD, ANTHROPIC]))
    legal = [p for p in PATHS if _legal(p, dialect)]
    hashes = st.sampled_from(HASHES)
    base = {p: Entry(draw(hashes), f"mem_b{i}") for i, p in enumerate(legal) if draw(st.integers(0, 3))}
    if dialect is ANTHROPIC:
        base = _drop_clashes(base)
    remote: dict[str, Entry] = {}
    for i, path in enumerate(legal):
        if path in base:
            change = draw(st.sampled_from(["same", "same", "same", "modified", "deleted", "recreated"]))
        else:
            change = draw(st.sampled_from(["absent", "absent", "absent", "created"]))
        if change == "same":
            remote[path] = base[path]
        elif change == "modified":
            remote[path] = Entry(draw(hashes), base[path].memory_id)
        elif change in ("recreated", "created"):
            remote[path] = Entry(draw(hashes), f"mem_r{i}")
    remote_moves: list[tuple[str, str]] = []
    for _ in range(draw(st.integers(0, 2))):
        # A remote rename: the memory keeps its id (Anthropic), maybe with new content.
        moved = [p for p in sorted(base) if remote.get(p) == base[p]]
        free = [q for q in legal if q not in base and q not in remote]
        if not moved or not free:
            break
        source, target = draw(st.sampled_from(moved)), draw(st.sampled_from(free))
        was = base[source]
        remote[target] = Entry(draw(st.sampled_from([was.hash, _other(was.hash)])), was.memory_id)
        del remote[source]
        remote_moves.append((source, target))
    if dialect is ANTHROPIC:
        remote = _drop_clashes(remote)
    local: dict[str, LocalEntry] = {}
    for path in PATHS:
        if path in base:
            change = draw(st.sampled_from(LOCAL_CHANGES))
        else:
            change = draw(st.sampled_from(["absent", "absent", "absent", "created", "as_remote", "invalid"]))
        if change == "same":
            local[path] = LocalEntry(base[path].hash)
        elif change in ("modified", "created"):
            local[path] = LocalEntry(draw(hashes))
        elif change == "as_remote" and path in remote:
            local[path] = LocalEntry(remote[path].hash)
        elif change == "invalid":
            local[path] = LocalEntry(draw(hashes), problem="content: is not valid UTF-8")
        elif change == "link":
            local[path] = LocalEntry.not_regular("symlink")
    for source, target in remote_moves:
        if draw(st.booleans()):
            # Edited here while moved there: the edit should follow the memory.
            local[source] = LocalEntry(draw(hashes))
            local.pop(target, None)
    for _ in range(draw(st.integers(0, 2))):
        # A local rename of a base file (exact: same content).
        moved = [p for p in sorted(base) if p in local]
        free = [q for q in legal if q not in base and q not in local]
        if not moved or not free:
            break
        source, target = draw(st.sampled_from(moved)), draw(st.sampled_from(free))
        local[target] = LocalEntry(base[source].hash)
        del local[source]
        if remote.get(source) == base[source] and draw(st.booleans()):
            # Renamed here while modified there.
            remote[source] = Entry(_other(base[source].hash), base[source].memory_id)
    quiet = [p for p in sorted(base) if remote.get(p) == base[p]]
    if len(quiet) >= 3 and draw(st.booleans()):
        # Many files deleted locally at once (the delete guard's case).
        for gone in draw(st.sets(st.sampled_from(quiet), min_size=3)):
            local.pop(gone, None)
    return World(
        base=base,
        local=local,
        remote=remote,
        dialect=dialect,
        open_conflicts=frozenset(draw(st.sets(st.sampled_from(PATHS), max_size=1))),
        max_delete_share=draw(st.sampled_from([0.5, 0.0, 0.25, 1.0])),
        force=draw(st.integers(0, 3)) == 0,
    )


def _other(hash_: str) -> str:
    """A content hash that is not ``hash_``."""
    return HASHES[(HASHES.index(hash_) + 1) % len(HASHES)]


def _legal(path: str, dialect: Dialect) -> bool:
    try:
        check_path(to_absolute(path) if dialect is ANTHROPIC else path, dialect)
    except RuleViolation:
        return False
    return True


def _hash(entry: Entry | LocalEntry | None) -> str | None:
    return None if entry is None else entry.hash


def _touched(action: Action) -> set[str]:
    """Every path an action reads from or writes to."""
    paths = {action.path}
    if isinstance(action, Rename):
        paths.add(action.new_path)
    if isinstance(action, Delete) and action.moved_to:
        paths.add(action.moved_to)
    for name in ("content", "base", "local", "remote"):
        content = getattr(action, name, None)
        if isinstance(content, Content):
            paths.add(content.path)
    return paths


def _local_sources(actions: tuple[Action, ...]) -> set[str]:
    """Paths whose local content some action carries onward (pushed, merged, moved, recorded)."""
    found = set()
    for action in actions:
        for name in ("content", "local"):
            content = getattr(action, name, None)
            if isinstance(content, Content) and content.side is Side.LOCAL:
                found.add(content.path)
    return found


def _moves(actions: tuple[Action, ...]) -> dict[str, str]:
    """New path -> old path of the local renames in a plan."""
    found = {}
    for action in actions:
        if isinstance(action, Rename):
            found[action.new_path] = action.path
        elif isinstance(action, Delete) and action.moved_to is not None:
            found[action.moved_to] = action.path
    return found


@given(worlds())
def test_plan_is_deterministic_whatever_the_mapping_order(w: World) -> None:
    first = w.plan()
    assert w.plan() == first
    flipped = World(
        base=dict(reversed(list(w.base.items()))),
        local=dict(reversed(list(w.local.items()))),
        remote=dict(reversed(list(w.remote.items()))),
        dialect=w.dialect,
        open_conflicts=w.open_conflicts,
        max_delete_share=w.max_delete_share,
        force=w.force,
    )
    assert flipped.plan() == first


@given(worlds())
def test_every_local_change_is_pushed_merged_conflicted_rejected_or_withheld(w: World) -> None:
    result = w.plan()
    noticed = {n.path for n in result.notices}
    acted = set().union(
        *(_touched(a) for a in result.actions if not isinstance(a, WriteCheckout | RemoveCheckout))
    )
    carried = _local_sources(result.actions)
    for path in set(w.base) | set(w.local):
        mine = w.local.get(path)
        valid = mine is None or mine.valid
        if valid and _hash(mine) == _hash(w.base.get(path)):
            continue
        already_there = valid and _hash(mine) == _hash(w.remote.get(path))
        assert path in acted or path in noticed or path in carried or already_there, (
            f"local change at {path!r} dropped"
        )


@given(worlds())
def test_checkout_writes_never_clobber_an_unpushed_local_edit(w: World) -> None:
    result = w.plan()
    carried = _local_sources(result.actions)
    moves = _moves(result.actions)
    for action in result.actions:
        if not isinstance(action, WriteCheckout | RemoveCheckout):
            continue
        mine = w.local.get(action.path)
        assert action.expected_local == _hash(mine)
        if mine is None or _hash(mine) == _hash(w.base.get(action.path)) or action.path in carried:
            continue
        # The target of an exact rename holds the base content of its source, which the rename
        # (merged with the remote's modification) carries to the store.
        source = moves.get(action.path)
        assert source is not None and w.base[source].hash == mine.hash, f"{action} overwrites a local edit"


@given(worlds())
def test_every_store_write_names_what_the_planner_saw(w: World) -> None:
    result = w.plan()
    for action in result.actions:
        if isinstance(action, Create):
            assert action.path not in w.remote
        elif isinstance(action, Update | Delete | Rename | Merge):
            assert w.remote[action.path] == Entry(action.expected_hash, action.memory_id)
        if isinstance(action, Merge):
            assert action.base.hash != action.expected_hash  # else it would not be a merge
        was = w.base.get(action.path)
        unchanged_remotely = was is not None and was.hash == _hash(w.remote.get(action.path))
        if isinstance(action, Update | Delete) and unchanged_remotely:
            # The remote did not change it: the precondition is the base's hash (the same value).
            assert action.expected_hash == w.base[action.path].hash
        for name in ("content", "base", "local", "remote"):
            content = getattr(action, name, None)
            if isinstance(content, Content):
                found: Entry | LocalEntry | None = w.local.get(content.path)
                if content.side is Side.BASE:
                    found = w.base.get(content.path)
                elif content.side is Side.REMOTE:
                    found = w.remote.get(content.path)
                assert _hash(found) == content.hash


@given(worlds())
def test_no_write_replaces_content_the_local_edit_was_not_made_on(w: World) -> None:
    # The planner's form of "no remote write is overwritten unseen": an update replaces exactly the
    # content its local edit started from (the base of the file it comes from); anything else that
    # replaces remote content is a Merge, which reads it.
    result = w.plan()
    arriving = {a.path: a.content.hash for a in result.actions if isinstance(a, Create)}
    for action in result.actions:
        if isinstance(action, Update):
            assert action.expected_hash == w.base[action.content.path].hash
        elif isinstance(action, Delete) and action.moved_to is None:
            assert action.expected_hash == w.base[action.path].hash
        elif isinstance(action, Delete) and action.moved_to is not None:
            # A move deletes only once the content is at its new path: the store loses nothing.
            target = action.moved_to
            assert action.expected_hash == (arriving.get(target) or _hash(w.remote.get(target)))


@given(worlds())
def test_held_rejected_and_blocked_paths_are_left_alone(w: World) -> None:
    result = w.plan()
    invalid = {p for p, e in w.local.items() if not e.valid}
    assert w.open_conflicts | invalid <= result.held
    for action in result.actions:
        assert not (_touched(action) & result.held), action
    reported = {(n.path, n.kind) for n in result.notices}
    attention = (NoticeKind.CONFLICT_OPEN, NoticeKind.REJECTED, NoticeKind.WITHHELD)
    for path in result.held:
        assert any((path, kind) in reported for kind in attention), path


@given(worlds())
def test_delete_guard(w: World) -> None:
    result = w.plan()
    deletes = sum(isinstance(a, Delete) and a.moved_to is None for a in result.actions)
    withheld = sum(n.kind is NoticeKind.WITHHELD for n in result.notices)
    assert deletes == 0 or withheld == 0
    if withheld:
        assert not w.force and withheld >= 3 and withheld > w.max_delete_share * len(w.remote)
    else:
        assert w.force or deletes < 3 or deletes <= w.max_delete_share * len(w.remote)


@given(worlds())
def test_order(w: World) -> None:
    actions = w.plan().actions
    stores = [i for i, a in enumerate(actions) if isinstance(a, Create | Update | Delete | Rename | Merge)]
    checkouts = [i for i, a in enumerate(actions) if isinstance(a, Conflict | WriteCheckout | RemoveCheckout)]
    assert not stores or not checkouts or max(stores) < min(checkouts)
    creates = {a.path: i for i, a in enumerate(actions) if isinstance(a, Create)}
    for i, action in enumerate(actions):
        if isinstance(action, Delete) and action.moved_to in creates:
            assert creates[action.moved_to] < i
    if w.dialect is not ANTHROPIC:
        deletes = [i for i, a in enumerate(actions) if isinstance(a, Delete)]
        assert not creates or not deletes or max(creates.values()) < min(deletes)


@given(worlds())
def test_anthropic_store_stays_free_of_nested_paths_at_every_step(w: World) -> None:
    if w.dialect is not ANTHROPIC:
        return
    present = set(w.remote)
    for action in w.plan().actions:
        if isinstance(action, Delete | Rename):
            present.discard(action.path)
        if isinstance(action, Create | Rename):
            target = action.path if isinstance(action, Create) else action.new_path
            clash = [o for o in present if target.startswith(o + "/") or o.startswith(target + "/")]
            assert not clash, f"{target} clashes with {clash}"
            present.add(target)


@given(worlds())
def test_created_paths_are_legal_for_the_dialect(w: World) -> None:
    for action in w.plan().actions:
        if isinstance(action, Create | Rename):
            target = action.path if isinstance(action, Create) else action.new_path
            assert _legal(target, w.dialect)


# --- the state machine over a simulated store and checkout ---------------------------------------

TestForwardReconcileMachine = ReconcileMachine.TestCase
TestForwardReconcileMachine.settings = machine_settings()
TestAnthropicReconcileMachine = AnthropicReconcileMachine.TestCase
TestAnthropicReconcileMachine.settings = machine_settings()
