"""The rewind guard of the reconcile planner: after ``main`` was moved back in history, a change that
puts a memory back as it was at the commit ``main`` went back to is withheld, unless forced."""

from __future__ import annotations

from memsync.engine.reconcile import (
    Create,
    Delete,
    Entry,
    LocalEntry,
    NoticeKind,
    Rename,
    Rewind,
    Update,
    next_base,
    plan,
)
from memsync.rules import Dialect, sha256_hex

OLD, NEW, MINE = sha256_hex("old\n"), sha256_hex("new\n"), sha256_hex("mine\n")
OTHER = sha256_hex("other\n")


def test_a_revert_to_the_fork_is_withheld_and_held() -> None:
    base = {"a.md": Entry(NEW, "mem_a"), "d.md": Entry(OTHER, "mem_d"), "c.md": Entry(OLD, "mem_c")}
    local = {"a.md": LocalEntry(OLD), "c.md": LocalEntry(MINE)}  # d.md gone: an agent created it
    rewind = Rewind("0123456789abcdef", 2, {"a.md": OLD, "d.md": None})

    done = plan(base, local, base, dialect=Dialect.FORWARD, open_conflicts=set(), rewind=rewind)

    assert [type(a) for a in done.actions] == [Update]  # only c.md, which the versions did not touch
    assert done.actions[0].path == "c.md"
    withheld = {n.path: n for n in done.notices if n.kind is NoticeKind.REVERT_WITHHELD}
    assert set(withheld) == {"a.md", "d.md"} and done.held == {"a.md", "d.md"}
    assert "moved back 2 version(s) (to 0123456789ab)" in withheld["a.md"].reason
    assert "git reset --hard memstore/main" in withheld["a.md"].reason
    assert done.needs_attention
    # The base keeps the agents' versions for them, so the next plan sees the same revert.
    assert next_base(base, base, done, pushed={"c.md": Entry(MINE, "mem_c")}, conflicted={}) == {
        **base,
        "c.md": Entry(MINE, "mem_c"),
    }


def test_force_pushes_the_revert() -> None:
    base = {"a.md": Entry(NEW, "mem_a")}
    rewind = Rewind("0123456789abcdef", 1, {"a.md": OLD})
    local = {"a.md": LocalEntry(OLD)}
    done = plan(base, local, base, dialect=Dialect.FORWARD, open_conflicts=set(), rewind=rewind, force=True)
    (update,) = done.actions
    assert isinstance(update, Update) and (update.path, update.expected_hash) == ("a.md", NEW)
    assert done.notices == ()


def test_an_edit_after_the_rewind_is_an_edit() -> None:
    base = {"a.md": Entry(NEW, "mem_a")}
    rewind = Rewind("0123456789abcdef", 1, {"a.md": OLD})
    done = plan(
        base, {"a.md": LocalEntry(MINE)}, base, dialect=Dialect.FORWARD, open_conflicts=set(), rewind=rewind
    )
    assert [type(a) for a in done.actions] == [Update] and done.notices == ()


def test_a_withheld_revert_of_creates_is_not_counted_by_the_delete_guard() -> None:
    # Four memories created after the fork, all gone from the checkout: the rewind guard's, not the
    # delete guard's (one reason for the user, naming the rewind).
    base = {f"m{i}.md": Entry(OTHER, f"mem_{i}") for i in range(4)}
    rewind = Rewind(None, 4, dict.fromkeys(base))
    done = plan(base, {}, base, dialect=Dialect.FORWARD, open_conflicts=set(), rewind=rewind)
    assert done.actions == ()
    assert {n.kind for n in done.notices} == {NoticeKind.REVERT_WITHHELD}
    assert "outside the store's history" in done.notices[0].reason


def test_a_renamed_memory_moved_back_is_withheld_whole() -> None:
    # An agent renamed x.md to y.md after the fork; the checkout has x.md back.
    base = {"y.md": Entry(OLD, "mem_x")}
    local = {"x.md": LocalEntry(OLD)}
    rewind = Rewind("0123456789abcdef", 1, {"x.md": OLD, "y.md": None})
    for dialect in (Dialect.FORWARD, Dialect.ANTHROPIC):
        done = plan(base, local, base, dialect=dialect, open_conflicts=set(), rewind=rewind)
        assert not [a for a in done.actions if isinstance(a, Create | Delete | Rename)]
        assert {n.path for n in done.notices} == {"x.md", "y.md"} and done.held == {"x.md", "y.md"}
