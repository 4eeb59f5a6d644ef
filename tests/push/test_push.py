"""Pushing local edits to the real reference server, each dialect, with git as the oracle."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

from memsync.rules import Dialect
from memsync.sync.cycle import run_cycle
from tests.push.conftest import DIALECTS, Side, git, sha256

MakeSide = Callable[..., Side]


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.value)
def test_create_update_delete_reach_the_store(make_side: MakeSide, dialect: Dialect) -> None:
    side = make_side(dialect, {"a.md": "one\n", "gone.md": "bye\n", "keep.md": "same\n"})
    versions = side.version_count()
    side.write("a.md", "one, edited\n")
    side.write("notes/new.md", "brand new\n")
    (side.repo / "gone.md").unlink()

    report = side.synced()

    assert side.remote() == {"a.md": "one, edited\n", "notes/new.md": "brand new\n", "keep.md": "same\n"}
    assert side.version_count() == versions + 3
    assert sorted((p["action"], p["path"]) for p in report.push.pushed) == [  # type: ignore[union-attr]
        ("create", "notes/new.md"),
        ("delete", "gone.md"),
        ("update", "a.md"),
    ]
    assert report.exit_code == 0
    # The push was imported: one commit per new version, main reset onto it, nothing left local.
    side.assert_in_step()
    assert git(side.repo, "log", "-1", "--format=%s", "memstore/main").strip() in {
        "deleted gone.md",
        "created notes/new.md",
        "updated a.md",
    }
    assert "up to date" in git(side.repo, "status")
    # A second sync has nothing to do and costs a single request (the newest version).
    before = side.client.request_count
    again = side.synced()
    assert again.pushed == 0 and side.client.request_count - before <= 2


def test_a_push_costs_one_request_per_write_and_fetches_nothing_back(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD, {"a.md": "a\n"})
    side.write("a.md", "a, edited\n")
    side.write("b.md", "new b\n")
    side.write("c.md", "new c\n")
    store = side.client.get_store(side.store.id)
    before = side.client.request_count
    report = run_cycle(side.client, store, side.root)
    assert report.ok and report.pushed == 3
    # The pull (one listing), three writes, the import of the three versions they made (one listing):
    # their contents are the ones just sent, so none is fetched back; the memories' metadata follows
    # the import with one page of the memory listing (cheaper than reading the three memories).
    assert side.client.request_count - before == 1 + 3 + 1 + 1


def test_first_push_into_an_empty_store(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD)
    assert side.ref("refs/remotes/memstore/main") is None
    side.write("first.md", "the very first memory\n")
    side.synced()
    assert side.remote() == {"first.md": "the very first memory\n"}
    side.assert_in_step()


def test_update_carries_the_base_hash_as_precondition(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD, {"p.md": "base\n"})
    side.write("p.md", "mine\n")
    # The remote moves after memsync's pull and before its write: the precondition (the base's
    # hash) must fail rather than overwrite the remote version; see test_conflicts for the re-plan.
    report = side.synced()
    assert side.remote() == {"p.md": "mine\n"}
    versions = list(side.client.iter_versions(side.store.id))
    assert [v.content_sha256 for v in versions][:2] == [sha256("mine\n"), sha256("base\n")]
    assert report.push is not None and report.push.attempts == 1


@pytest.mark.parametrize("dialect", [Dialect.FORWARD, Dialect.ANTHROPIC], ids=lambda d: d.value)
def test_rename_is_native_on_anthropic_and_create_then_delete_elsewhere(
    make_side: MakeSide, dialect: Dialect
) -> None:
    side = make_side(dialect, {"old/name.md": "content that moves\n"})
    before = side.memory_id("old/name.md")
    (side.repo / "new").mkdir()
    (side.repo / "old" / "name.md").rename(side.repo / "new" / "name.md")

    report = side.synced()

    assert side.remote() == {"new/name.md": "content that moves\n"}
    after = side.memory_id("new/name.md")
    pushed = {(p["action"], p["path"]) for p in report.push.pushed}  # type: ignore[union-attr]
    if dialect is Dialect.ANTHROPIC:
        assert after == before
        assert pushed == {("rename", "old/name.md")}
    else:
        assert after != before
        assert pushed == {("create", "new/name.md"), ("delete", "old/name.md")}
    side.assert_in_step()


def test_a_push_names_each_memory_path_beside_its_spelling(make_side: MakeSide) -> None:
    # Names Windows cannot hold are spelled escaped on every filesystem: the report says both.
    side = make_side(Dialect.ANTHROPIC, {"a:b.md": "one\n", "old/con.md": "moves\n", "plain.md": "p\n"})
    side.write("a%3Ab.md", "two\n")
    (side.repo / "new").mkdir()
    (side.repo / "old" / "%63on.md").rename(side.repo / "new" / "%63on.md")
    side.write("plain.md", "q\n")

    report = side.synced()

    assert side.remote() == {"a:b.md": "two\n", "new/con.md": "moves\n", "plain.md": "q\n"}
    document = report.output().to_json()
    expected = [
        {"path": "a%3Ab.md", "memory_path": "a:b.md", "action": "update"},
        {
            "path": "old/%63on.md",
            "memory_path": "old/con.md",
            "action": "rename",
            "to": "new/%63on.md",
            "to_memory_path": "new/con.md",
        },
        {"path": "plain.md", "memory_path": "plain.md", "action": "update"},
    ]
    key = lambda entry: entry["path"]  # noqa: E731
    # One list, the same objects, in sync's entry and in its push.
    assert sorted(document["pushed"], key=key) == expected
    assert sorted(document["push"]["pushed"], key=key) == expected


def test_local_commits_are_pushed_and_kept_under_refs_memsync_pushed(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD, {"a.md": "a\n"})
    side.write("a.md", "a, committed\n")
    side.write("c.md", "committed file\n")
    git(side.repo, "add", "-A")
    git(side.repo, "commit", "-q", "-m", "my local commit")
    local_tip = side.ref("refs/heads/main")
    side.write("d.md", "uncommitted file\n")

    report = side.synced()

    assert side.remote() == {
        "a.md": "a, committed\n",
        "c.md": "committed file\n",
        "d.md": "uncommitted file\n",
    }
    kept = report.to_json()["kept_commits"]
    assert kept is not None and kept.startswith("refs/memsync/pushed/")
    assert side.ref(kept) == local_tip
    assert git(side.repo, "log", "-1", "--format=%s", kept).strip() == "my local commit"
    side.assert_in_step()
    # A plain git push is refused with a hint (the memstore remote is not a place git can push to).
    refused = subprocess_git(side, "push")
    assert refused.returncode != 0 and "memsync sync" in refused.stderr


def test_remote_changes_reach_the_checkout_without_touching_local_edits(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD, {"mine.md": "mine\n", "theirs.md": "theirs\n", "gone.md": "gone\n"})
    side.write("mine.md", "mine, edited\n")
    side.put("theirs.md", "theirs, edited remotely\n")
    side.put("fresh.md", "created remotely\n")
    side.drop("gone.md")

    side.synced()

    assert side.read("mine.md") == "mine, edited\n"
    assert side.read("theirs.md") == "theirs, edited remotely\n"
    assert side.read("fresh.md") == "created remotely\n"
    assert not (side.repo / "gone.md").exists()
    assert side.remote() == {
        "mine.md": "mine, edited\n",
        "theirs.md": "theirs, edited remotely\n",
        "fresh.md": "created remotely\n",
    }
    side.assert_in_step()


def test_a_file_that_becomes_a_folder_sibling_is_respelt(make_side: MakeSide) -> None:
    # Forward allows "a" beside "a/b": the file "a" is then spelt "a%_" in the working tree.
    side = make_side(Dialect.FORWARD, {"a": "file a\n"})
    side.write("x.md", "local edit, so the reconcile (not the pull) moves the checkout\n")
    side.put("a/b", "below a\n")

    side.synced()

    assert side.local() == {
        "a%_": b"file a\n",
        "a/b": b"below a\n",
        "x.md": b"local edit, so the reconcile (not the pull) moves the checkout\n",
    }
    side.assert_in_step()
    # And back: the folder goes, the suffix goes.
    (side.repo / "a" / "b").unlink()
    side.synced()
    assert side.remote() == {"a": "file a\n", "x.md": side.read("x.md")}
    assert (side.repo / "a").is_file() and not (side.repo / "a%_").exists()
    side.assert_in_step()


def test_editor_temporaries_and_ignored_files_are_not_memories(make_side: MakeSide) -> None:
    # ...unless the store has a memory of that name: then it is a memory like any other.
    side = make_side(Dialect.FORWARD, {"a.md": "a\n", ".#memsync-notes": "named like a temporary\n"})
    side.write(".a.md.swp", b"\x00vim swap")
    side.write("a.md~", "backup copy\n")
    side.write("real.md", "a memory\n")
    side.write(".#memsync-notes", "edited\n")
    report = side.synced()
    assert side.remote() == {"a.md": "a\n", "real.md": "a memory\n", ".#memsync-notes": "edited\n"}
    assert report.rejected == [] and report.exit_code == 0


def subprocess_git(side: Side, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(side.repo), *args], capture_output=True, text=True)
