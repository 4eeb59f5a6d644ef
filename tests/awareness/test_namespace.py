"""The merged namespace, decided purely (memsync.engine.awareness): shadowing, collisions, order."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from memsync.engine.awareness import Collision, Namespace, merged_history, visible_holder


def test_the_first_holder_in_mount_order_wins() -> None:
    assert visible_holder(["default", "early", "late"]) == "default"
    space = Namespace(["default", "early", "late"])
    space.apply("late", {"a.md": "blob-late"})
    space.apply("early", {"a.md": "blob-early"})
    assert space.visible() == {"a.md": ("early", "blob-early")}
    assert space.owner("a.md") == "early"
    assert space.holders("a.md") == ["early", "late"]


def test_a_step_says_what_the_sandbox_sees_change() -> None:
    space = Namespace(["d", "b"])
    first = space.apply("b", {"a.md": "b1"})
    assert first.visible == {"a.md": ("b", "b1")} and first.shadowed == ()
    # The default store takes the path over: visible, and b's copy is hidden from now on.
    taken = space.apply("d", {"a.md": "d1"})
    assert taken.visible == {"a.md": ("d", "d1")} and taken.shadowed == ("b",)
    # A write to a shadowed copy changes nothing an agent sees.
    hidden = space.apply("b", {"a.md": "b2"})
    assert hidden.visible == {} and hidden.shadowed == ("b",)
    # The winner's delete uncovers the next holder's copy.
    uncovered = space.apply("d", {"a.md": None})
    assert uncovered.visible == {"a.md": ("b", "b2")} and uncovered.shadowed == ()
    gone = space.apply("b", {"a.md": None})
    assert gone.visible == {"a.md": None}
    assert space.visible() == {}


def test_collisions_name_every_holder_in_mount_order() -> None:
    space = Namespace(
        ["d", "b", "c"],
        {"d": {"n.md": "1"}, "b": {"n.md": "2", "x.md": "3"}, "c": {"n.md": "4", "x.md": "5", "c.md": "6"}},
    )
    assert [c.to_json() for c in space.collisions()] == [
        {"path": "n.md", "visible_from": "d", "shadowed": ["b", "c"]},
        {"path": "x.md", "visible_from": "b", "shadowed": ["c"]},
    ]


def test_a_file_beside_a_folder_of_another_store_collides() -> None:
    space = Namespace(["d", "b", "c"], {"b": {"topic/x.md": "1"}, "c": {"topic": "2"}})
    # Both stay visible (a view spells them apart); the rule names the first holder.
    assert space.visible() == {"topic/x.md": ("b", "1"), "topic": ("c", "2")}
    assert space.collisions() == [Collision("topic", "b", ("c",), folders=("b",))]


def test_a_file_beside_a_folder_of_the_same_store_is_no_collision() -> None:
    space = Namespace(["d"], {"d": {"a": "1", "a/b": "2"}})
    assert space.collisions() == []


def test_the_merged_history_keeps_each_store_in_order_and_sorts_between_them() -> None:
    def at(second: int) -> datetime:
        return datetime(2026, 1, 1, 0, 0, second, tzinfo=UTC)

    default = [(at(1), "v1", 0), (at(5), "v5", 0)]
    mounted = [(at(2), "v2", 1), (at(3), "v3", 1), (at(1), "v0-late", 1)]
    merged = list(merged_history([default, mounted], key=lambda item: item))
    assert [item[1] for item in merged] == ["v1", "v2", "v3", "v0-late", "v5"]


def every_collision(space: Namespace, order: list[str]) -> list[Collision]:
    files = {store: space.files(store) for store in order}
    found = []
    for path in sorted({path for held in files.values() for path in held}):
        holders = {rank for rank, store in enumerate(order) if path in files[store]}
        under = {
            rank for rank, store in enumerate(order) if any(p.startswith(path + "/") for p in files[store])
        }
        stores = [order[rank] for rank in sorted(holders | under)]
        if len(stores) > 1:
            folders = tuple(order[rank] for rank in sorted(under))
            found.append(Collision(path, stores[0], tuple(stores[1:]), folders))
    return found


paths = st.sampled_from(["a", "a/b", "n.md", "x/y.md", "x", "a/b/c"])
changes = st.lists(
    st.tuples(st.sampled_from(["d", "b", "c"]), paths, st.one_of(st.none(), st.sampled_from(["1", "2"]))),
    max_size=30,
)


@given(changes, st.integers(min_value=0, max_value=30))
def test_resuming_from_file_sets_equals_one_pass(steps: list[tuple[str, str, str | None]], cut: int) -> None:
    order = ["d", "b", "c"]
    whole = Namespace(order)
    for store, path, blob in steps:
        whole.apply(store, {path: blob})
    first = Namespace(order)
    for store, path, blob in steps[:cut]:
        first.apply(store, {path: blob})
    resumed = Namespace(order, {store: first.files(store) for store in order})
    for store, path, blob in steps[cut:]:
        resumed.apply(store, {path: blob})
    assert resumed.visible() == whole.visible()
    assert resumed.collisions() == whole.collisions()
    # Kept as files come and go, the collisions are what a look at every file finds.
    assert whole.collisions() == every_collision(whole, order)
    assert len(whole) == len(whole.visible())
    # What is visible is always the first holder's copy.
    for path, (store, blob) in whole.visible().items():
        assert store == whole.holders(path)[0] and whole.files(store)[path] == blob


def test_cloud_shows_the_first_store_in_the_given_order() -> None:
    from memsync.engine.awareness import cloud_visible_holder

    space = Namespace(["given-first", "given-second"], rule=cloud_visible_holder)
    space.apply("given-second", {"a.md": "2"})
    space.apply("given-first", {"a.md": "1"})
    assert space.visible() == {"a.md": ("given-first", "1")}
    assert space.collisions() == [Collision("a.md", "given-first", ("given-second",))]


def test_stores_are_placed_by_their_mount_path_and_never_guessed() -> None:
    from memsync.engine.awareness import Placement, place_stores

    root = "/mnt/memory"
    placed = place_stores(
        [
            ("s1", "/mnt/memory/user-preferences"),
            ("s2", None),
            ("s3", "/mnt/memory/deep/er/"),
            ("s4", "/mnt/memoryx/a"),
            ("s5", "/mnt/memory/a/../b"),
            ("s6", "/mnt/memory/"),
            ("s7", "/mnt/memory/twin"),
            ("s8", "/mnt/memory/twin"),
            ("s9", "/mnt/memory/a//b"),
        ],
        root,
        unmounted="id",
    )
    assert placed[:3] == [
        Placement("s1", "user-preferences"),
        Placement("s2", "s2"),
        Placement("s3", "deep/er"),
    ]
    reasons = {p.store_id: p.refused for p in placed[3:]}
    assert all(reasons.values()), reasons
    assert "not a folder inside /mnt/memory/" in str(reasons["s4"]) and "'..'" in str(reasons["s5"])
    assert "not a folder" in str(reasons["s6"])
    assert "s7, s8" in str(reasons["s7"]) and "s7, s8" in str(reasons["s8"])
    assert "empty or '.'" in str(reasons["s9"])
    # Cloud: a store without a mount path is flat at the root.
    assert place_stores([("c", None)], "/data/.qoder/awareness", unmounted="flat") == [Placement("c", "")]


def test_the_commit_current_at_an_instant_goes_by_exact_time() -> None:
    from memsync.engine.awareness import current_at

    base = datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC)
    times = [base.replace(microsecond=m) for m in (100, 200, 200, 900)]
    assert current_at(times, base) == -1
    assert current_at(times, base.replace(microsecond=100)) == 0
    assert current_at(times, base.replace(microsecond=199)) == 0
    assert current_at(times, base.replace(microsecond=200)) == 2  # lte: both versions of that instant
    assert current_at(times, base.replace(second=2)) == 3


def test_a_view_before_a_truncated_history_is_not_exact() -> None:
    from memsync.engine.awareness import inexact_reason

    first = datetime(2026, 1, 2, tzinfo=UTC)
    before, after = first.replace(day=1), first.replace(day=3)
    assert inexact_reason({"s": (first, 2)}, after) is None
    assert inexact_reason({"s": (first, None)}, before) is None  # nothing yet, and nothing lost
    reason = inexact_reason({"s": (first, 2)}, before)
    assert reason is not None and "s (2 memories" in reason and "retention" in reason
