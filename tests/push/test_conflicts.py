"""Both sides changed: merges, recorded conflicts, resolve, the defaults table, a 409 at execution."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from memsync.api import Client, Memory
from memsync.rules import Dialect
from memsync.sync.resolve import OURS, THEIRS, Target, find_target, resolve_conflict
from memsync.sync.status import mirror_status
from tests.push.conftest import DIALECTS, Side, git, sha256

MakeSide = Callable[..., Side]
BASE = "line 1\nline 2\nline 3\nline 4\n"


def conflicted(make_side: MakeSide, dialect: Dialect = Dialect.FORWARD) -> Side:
    """A store where notes/p.md was changed on the same line on both sides, then synced."""
    side = make_side(dialect, {"notes/p.md": BASE, "other.md": "other\n"})
    side.write("notes/p.md", BASE.replace("line 2", "line 2 local"))
    side.put("notes/p.md", BASE.replace("line 2", "line 2 remote"))
    return side


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.value)
def test_clean_merge_is_pushed_with_the_remote_hash_and_written_back(
    make_side: MakeSide, dialect: Dialect
) -> None:
    side = make_side(dialect, {"p.md": BASE})
    side.write("p.md", BASE.replace("line 1", "line 1 local"))
    side.put("p.md", BASE.replace("line 4", "line 4 remote"))
    remote_hash = sha256(BASE.replace("line 4", "line 4 remote"))

    report = side.synced()

    merged = BASE.replace("line 1", "line 1 local").replace("line 4", "line 4 remote")
    assert side.remote() == {"p.md": merged}
    assert side.read("p.md") == merged
    assert [(p["action"], p["path"]) for p in report.push.pushed] == [("merge", "p.md")]  # type: ignore[union-attr]
    # The merge was written over the remote version memsync had seen: the one before it in history.
    history = [v.content_sha256 for v in side.client.iter_versions(side.store.id)]
    assert history[:2] == [sha256(merged), remote_hash]
    assert report.exit_code == 0
    side.assert_in_step()


@pytest.mark.parametrize("dialect", [Dialect.FORWARD, Dialect.ANTHROPIC], ids=lambda d: d.value)
def test_overlapping_edits_become_a_recorded_conflict(make_side: MakeSide, dialect: Dialect) -> None:
    side = conflicted(make_side, dialect)
    versions = side.version_count()
    report = side.sync()

    assert report.ok and report.exit_code == 4
    assert report.conflicts == ["notes/p.md"]
    # Nothing was pushed: the store keeps the remote version; the file carries git-style markers.
    assert side.version_count() == versions
    assert side.remote()["notes/p.md"] == BASE.replace("line 2", "line 2 remote")
    text = side.read("notes/p.md")
    assert "<<<<<<< local\nline 2 local\n=======\nline 2 remote\n>>>>>>> remote\n" in text
    # All three sides stay reachable under the conflict's ref.
    (conflict,) = report.push.conflicts  # type: ignore[union-attr]
    ref = conflict["ref"]
    assert ref.startswith("refs/memsync/conflicts/")
    assert git(side.repo, "show", f"{ref}:local") == BASE.replace("line 2", "line 2 local")
    assert git(side.repo, "show", f"{ref}:remote") == BASE.replace("line 2", "line 2 remote")
    assert git(side.repo, "show", f"{ref}:base") == BASE
    git(side.repo, "fsck", "--strict")
    # Status lists it (working-tree path) and says exit 4; a second sync pushes nothing.
    status = mirror_status(side.repo, dialect)
    assert [c["path"] for c in status.conflicts] == ["notes/p.md"] and status.exit_code == 4
    again = side.sync()
    assert again.pushed == 0 and again.conflicts == ["notes/p.md"] and again.exit_code == 4
    assert side.version_count() == versions


def test_markers_in_a_memory_do_not_make_a_conflict(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD, {"git-howto.md": "intro\n"})
    text = "intro\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> branch\n"
    side.write("git-howto.md", text)
    report = side.synced()
    assert report.conflicts == [] and side.remote() == {"git-howto.md": text}


def _resolve(side: Side, choice: str | None) -> None:
    target = find_target("notes/p.md", cwd=side.repo, root=side.root)
    assert target == Target(side.repo, "notes/p.md", "notes/p.md")
    resolve_conflict(target, choice, side.dialect)


def test_resolve_ours_pushes_the_local_side(make_side: MakeSide) -> None:
    side = conflicted(make_side)
    side.sync()
    _resolve(side, OURS)
    assert side.read("notes/p.md") == BASE.replace("line 2", "line 2 local")
    assert mirror_status(side.repo, side.dialect).conflicts == []
    report = side.synced()
    assert report.exit_code == 0
    assert side.remote()["notes/p.md"] == BASE.replace("line 2", "line 2 local")
    assert side.ref("refs/memsync/conflicts/notes%2Fp%2Emd") is None
    assert side.ref("refs/memsync/resolved/notes%2Fp%2Emd") is not None  # the sides stay recoverable
    side.assert_in_step()


def test_resolve_theirs_keeps_the_store_version(make_side: MakeSide) -> None:
    side = conflicted(make_side)
    side.sync()
    versions = side.version_count()
    _resolve(side, THEIRS)
    report = side.synced()
    assert report.exit_code == 0 and report.pushed == 0
    assert side.read("notes/p.md") == BASE.replace("line 2", "line 2 remote")
    assert side.version_count() == versions
    side.assert_in_step()


def test_resolve_after_editing_by_hand(make_side: MakeSide) -> None:
    side = conflicted(make_side)
    side.sync()
    # Unedited markers are refused: resolving would push them.
    with pytest.raises(Exception, match="still holds the conflict markers"):
        _resolve(side, None)
    side.write("notes/p.md", BASE.replace("line 2", "line 2 both"))
    _resolve(side, None)
    side.synced()
    assert side.remote()["notes/p.md"] == BASE.replace("line 2", "line 2 both")
    side.assert_in_step()


def test_resolution_merges_again_when_the_store_moved_on(make_side: MakeSide) -> None:
    side = conflicted(make_side)
    side.sync()
    _resolve(side, OURS)
    # Someone changes another line meanwhile: the resolution is pushed against the conflict's remote
    # version, so the store answers 409 and the resolution is merged with the new change.
    side.put("notes/p.md", BASE.replace("line 2", "line 2 remote").replace("line 4", "line 4 later"))
    report = side.synced()
    assert side.remote()["notes/p.md"] == BASE.replace("line 2", "line 2 local").replace(
        "line 4", "line 4 later"
    )
    assert report.exit_code == 0


def test_resolve_finds_the_mirror_from_an_absolute_path_or_outside(
    make_side: MakeSide, tmp_path: Any
) -> None:
    side = conflicted(make_side)
    side.sync()
    absolute = find_target(str(side.repo / "notes" / "p.md"), cwd=tmp_path, root=side.root)
    from_inside = find_target("p.md", cwd=side.repo / "notes", root=side.root)
    from_outside = find_target("notes/p.md", cwd=tmp_path, root=side.root)
    assert absolute == from_inside == from_outside == Target(side.repo, "notes/p.md", "notes/p.md")
    with pytest.raises(Exception, match="no mirror under"):
        find_target("other.md", cwd=tmp_path, root=side.root)


def test_resolve_needs_store_when_several_mirrors_have_the_path(make_side: MakeSide, tmp_path: Any) -> None:
    one, two = conflicted(make_side), conflicted(make_side)
    two_root = one.root  # both mirrors under one root, as the config's mirror.root has them
    two.root.rename(tmp_path / "elsewhere")
    (tmp_path / "elsewhere" / two.store.id).rename(two_root / two.store.id)
    two.root = two_root
    one.sync()
    two.sync()
    with pytest.raises(Exception, match="add --store ID"):
        find_target("notes/p.md", cwd=tmp_path, root=one.root)
    picked = find_target("notes/p.md", cwd=tmp_path, root=one.root, store=two.store.id)
    assert picked == Target(two.repo, "notes/p.md", "notes/p.md")


# --- the defaults table --------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", [Dialect.FORWARD, Dialect.ANTHROPIC], ids=lambda d: d.value)
def test_local_modify_vs_remote_delete_recreates(make_side: MakeSide, dialect: Dialect) -> None:
    side = make_side(dialect, {"p.md": "base\n"})
    side.write("p.md", "kept locally\n")
    side.drop("p.md")
    report = side.synced()
    assert side.remote() == {"p.md": "kept locally\n"}
    assert [n["kind"] for n in report.push.notices] == ["recreated"]  # type: ignore[union-attr]
    assert report.exit_code == 0
    side.assert_in_step()


def test_local_delete_vs_remote_modify_keeps_the_remote(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD, {"p.md": "base\n"})
    (side.repo / "p.md").unlink()
    side.put("p.md", "changed remotely\n")
    report = side.synced()
    assert side.remote() == {"p.md": "changed remotely\n"}
    assert side.read("p.md") == "changed remotely\n"
    assert [n["kind"] for n in report.push.notices] == ["kept_remote"]  # type: ignore[union-attr]
    side.assert_in_step()


def test_create_vs_create(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD, {"seed.md": "seed\n"})
    side.write("same.md", "identical\n")
    side.put("same.md", "identical\n")
    side.write("differs.md", "mine\n")
    side.put("differs.md", "theirs\n")
    versions = side.version_count()
    report = side.sync()
    assert side.version_count() == versions  # nothing pushed for either
    assert report.conflicts == ["differs.md"] and report.exit_code == 4
    ref = report.push.conflicts[0]["ref"]  # type: ignore[union-attr]
    assert git(side.repo, "ls-tree", "--name-only", ref).split() == ["local", "markers", "remote"]  # no base
    assert side.read("same.md") == "identical\n"
    assert side.read("differs.md") == "<<<<<<< local\nmine\n=======\ntheirs\n>>>>>>> remote\n"


@pytest.mark.parametrize("dialect", [Dialect.FORWARD, Dialect.ANTHROPIC], ids=lambda d: d.value)
def test_rename_vs_modify_applies_both(make_side: MakeSide, dialect: Dialect) -> None:
    side = make_side(dialect, {"old.md": "first\nsecond\n"})
    (side.repo / "old.md").rename(side.repo / "new.md")
    side.put("old.md", "first\nsecond, edited remotely\n")
    side.synced()
    assert side.remote() == {"new.md": "first\nsecond, edited remotely\n"}
    assert side.read("new.md") == "first\nsecond, edited remotely\n"
    assert not (side.repo / "old.md").exists()
    side.assert_in_step()


# --- a 409 while executing -------------------------------------------------------------------------


class RacingClient:
    """The real client; before its first update, another writer changes the same memory (a real 409)."""

    def __init__(self, inner: Client, race: Callable[[], None]) -> None:
        self._inner = inner
        self._race: Callable[[], None] | None = race

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def update_memory(self, *args: Any, **kwargs: Any) -> Memory:
        if self._race is not None:
            race, self._race = self._race, None
            race()
        return self._inner.update_memory(*args, **kwargs)


def test_a_409_at_execution_plans_again(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD, {"p.md": BASE})
    side.write("p.md", BASE.replace("line 1", "line 1 local"))
    racing = RacingClient(side.client, lambda: side.put("p.md", BASE.replace("line 4", "line 4 racing")))

    report = side.sync(client=racing)  # type: ignore[arg-type]

    assert report.ok, report.error
    assert report.push is not None and report.push.attempts == 2
    assert any("planned again" in w for w in report.push.warnings)
    merged = BASE.replace("line 1", "line 1 local").replace("line 4", "line 4 racing")
    assert side.remote() == {"p.md": merged}
    assert side.read("p.md") == merged
    side.assert_in_step()


def test_a_409_that_overlaps_becomes_a_conflict(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD, {"p.md": BASE})
    side.write("p.md", BASE.replace("line 1", "line 1 local"))
    racing = RacingClient(side.client, lambda: side.put("p.md", BASE.replace("line 1", "line 1 racing")))
    report = side.sync(client=racing)  # type: ignore[arg-type]
    assert report.conflicts == ["p.md"] and report.exit_code == 4
    assert side.remote() == {"p.md": BASE.replace("line 1", "line 1 racing")}


def test_a_conflicts_markers_stay_in_the_file_where_the_user_made_it(make_side: MakeSide) -> None:
    """A file under a name memsync spells otherwise (what?.md, spelled what%3F.md) whose content the
    store does not hold (created on both sides, differently) keeps its name: the markers go there."""
    side = make_side(Dialect.FORWARD, {"other.md": "other\n"})
    side.write("what?.md", "mine\n")
    side.put("what?.md", "theirs\n")
    report = side.sync()
    assert report.ok and report.conflicts == ["what?.md"]
    text = side.read("what?.md")
    assert "mine" in text and "theirs" in text
    assert not (side.repo / "what%3F.md").exists()
    assert report.push is not None and report.push.respelled == []
