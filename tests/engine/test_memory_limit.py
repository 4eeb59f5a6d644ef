"""A store's memory limit in the planners (docs/api-contract.md §4: an Anthropic store holds at most
2,000 memories): the reconcile planner withholds the creates that would pass it, the restore planner
refuses the whole plan, and both run deletes first when only they make room."""

from __future__ import annotations

from memsync.engine.reconcile import Create, Delete, Entry, LocalEntry, NoticeKind, Update, plan
from memsync.engine.restore_plan import CreateMemory, DeleteMemory, Present, Wanted, plan_restore
from memsync.rules import MAX_ANTHROPIC_MEMORIES, Dialect, max_memories, sha256_hex

ANTHROPIC = Dialect.ANTHROPIC


def _store(count: int) -> dict[str, Entry]:
    return {f"m/{n:04d}.md": Entry(sha256_hex(str(n)), f"mem_{n}") for n in range(count)}


def _checkout(
    store: dict[str, Entry], *, add: int = 0, drop: int = 0, edit: int = 0
) -> dict[str, LocalEntry]:
    local = {path: LocalEntry(entry.hash) for path, entry in store.items()}
    for path in sorted(local)[:drop]:
        del local[path]
    for path in sorted(local)[-edit:] if edit else []:
        local[path] = LocalEntry(sha256_hex("edited " + path))
    for n in range(add):
        local[f"new/{n}.md"] = LocalEntry(sha256_hex(f"new {n}"))
    return local


def test_only_anthropic_has_a_memory_limit() -> None:
    assert max_memories(ANTHROPIC) == MAX_ANTHROPIC_MEMORIES == 2_000
    assert max_memories(Dialect.FORWARD) is None and max_memories(Dialect.CLOUD) is None


def test_creates_past_the_limit_are_withheld_and_the_other_changes_go() -> None:
    store = _store(1_999)
    done = plan(
        store,
        _checkout(store, add=2, edit=1),
        store,
        dialect=ANTHROPIC,
        open_conflicts=set(),
        max_memories=MAX_ANTHROPIC_MEMORIES,
    )
    assert [type(a) for a in done.actions] == [Update]
    over = [n for n in done.notices if n.kind is NoticeKind.OVER_LIMIT]
    assert [n.path for n in over] == ["new/0.md", "new/1.md"]
    assert done.held == {"new/0.md", "new/1.md"} and done.needs_attention
    reason = over[0].reason
    assert "holds 1999 memories" in reason and "create 2, leaving 2001" in reason
    assert "2,000" in reason and "delete at least 1 memories" in reason
    # Without a limit (or one the plan fits) the creates go.
    unlimited = plan(store, _checkout(store, add=2), store, dialect=ANTHROPIC, open_conflicts=set())
    assert sum(isinstance(a, Create) for a in unlimited.actions) == 2


def test_a_plan_that_fills_the_store_exactly_goes_and_one_made_room_for_deletes_first() -> None:
    store = _store(1_999)
    exact = plan(
        store, _checkout(store, add=1), store, dialect=ANTHROPIC, open_conflicts=set(), max_memories=2_000
    )
    assert [type(a) for a in exact.actions] == [Create] and not exact.notices
    full = _store(2_000)
    room = plan(
        full,
        _checkout(full, add=2, drop=2),
        full,
        dialect=ANTHROPIC,
        open_conflicts=set(),
        max_memories=2_000,
    )
    # The store refuses a create while it holds 2,000: the deletes that make room run first.
    assert [type(a) for a in room.actions] == [Delete, Delete, Create, Create]
    assert not room.notices


def test_a_restore_past_the_limit_is_refused_whole_and_deletes_run_first_when_they_make_room() -> None:
    wanted = {f"w/{n:04d}.md": Wanted(f"w/{n:04d}.md", sha256_hex(f"w{n}")) for n in range(2_001)}
    refused = plan_restore(wanted, {}, dialect=ANTHROPIC, delete_others=False, max_memories=2_000)
    assert refused.refused is not None
    assert "2001 memories" in refused.refused and "2,000" in refused.refused and "1 fewer" in refused.refused
    assert plan_restore(
        wanted, {}, dialect=ANTHROPIC, delete_others=False, force=True, max_memories=2_000
    ).refused
    present = {
        f"old/{n}.md": Present(f"old/{n}.md", f"mem_{n}", sha256_hex(f"old {n}")) for n in range(2_000)
    }
    some = dict(list(wanted.items())[:3])
    swap = plan_restore(some, present, dialect=ANTHROPIC, delete_others=True, force=True, max_memories=2_000)
    assert swap.refused is None
    kinds = [type(a) for a in swap.actions]
    assert kinds.index(CreateMemory) > max(i for i, k in enumerate(kinds) if k is DeleteMemory)
