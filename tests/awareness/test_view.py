"""The awareness view against the reference server: tree, winner, collisions, history and determinism."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from memsync.errors import MirrorError, UsageError, UserError
from memsync.mirror import Mirror, View
from memsync.sync.awareness import AwarenessReport, build_view, refresh_awareness
from memsync.sync.pull import pull_store
from memsync.sync.stores import existing_mirrors
from tests.awareness.conftest import DEFAULT_FILES, Pair, git, trailers, tree_files


def build(pair: Pair, root: Path) -> AwarenessReport:
    report = refresh_awareness(pair.client, root, pair.identity, pair.template)
    git(Path(report.path), "fsck", "--strict", "--no-progress")
    return report


def commits(repo: Path) -> list[str]:
    return git(repo, "rev-list", "--reverse", "main").split()


def test_a_default_store_and_two_mounts_give_one_namespace(pair: Pair, tmp_path: Path) -> None:
    early = pair.store({"notes/a.md": "a, from early\n", "b.md": "b, from early\n", "topic/x.md": "x\n"})
    late = pair.store({"notes/a.md": "a, from late\n", "b.md": "b, from late\n", "c.md": "c\n"})
    pair.client.mount_store(pair.identity, pair.template, early.id)
    pair.client.mount_store(pair.identity, pair.template, late.id)

    report = build(pair, tmp_path / "mirrors")

    view = tmp_path / "mirrors" / "awareness" / pair.identity / pair.template
    assert report.path == str(view) and not report.rebuilt
    assert [m["memory_store_id"] for m in report.mounts] == [pair.default.id, early.id, late.id]
    assert [m["order"] for m in report.mounts] == [0, 1, 2]
    assert tree_files(view) == {
        "notes/a.md": DEFAULT_FILES["notes/a.md"],
        "shared.md": DEFAULT_FILES["shared.md"],
        "b.md": "b, from early\n",
        "topic/x.md": "x\n",
        "c.md": "c\n",
    }
    assert git(view, "status", "--porcelain") == ""  # main is checked out, nothing else there
    assert report.to_json()["collisions"] == [
        {"path": "b.md", "visible_from": early.id, "shadowed": [late.id]},
        {"path": "notes/a.md", "visible_from": pair.default.id, "shadowed": [early.id, late.id]},
    ]
    # One commit per version that changed what a session sees: the shadowed writes made none.
    history = commits(view)
    assert len(history) == 5
    stores = [trailers(view, c)["Memory-Store-Id"] for c in history]
    assert stores == [[pair.default.id]] * 2 + [[early.id]] * 2 + [[late.id]]
    # Author and dates are the version's, as in the store's own mirror.
    store_mirror = tmp_path / "mirrors" / late.id
    assert git(view, "log", "-1", "--format=%an <%ae> %ad %cd", "main") == git(
        store_mirror, "log", "-1", "--format=%an <%ae> %ad %cd", "memstore/main"
    )
    assert trailers(view)["Memory-Version"] == trailers(store_mirror, "memstore/main")["Memory-Version"]


def test_a_new_version_appends_and_a_mount_change_rebuilds(pair: Pair, tmp_path: Path) -> None:
    root = tmp_path / "mirrors"
    other = pair.store({"notes/a.md": "a, from other\n", "o.md": "o\n"})
    pair.client.mount_store(pair.identity, pair.template, other.id)
    first = build(pair, root)
    view = Path(first.path)
    assert first.created and first.tip == commits(view)[-1]

    # A new version of the winning copy: one commit on top, naming whom it shadows.
    version = pair.write(pair.default, "notes/a.md", "a, edited in the default store\n")
    appended = build(pair, root)
    assert not appended.rebuilt and appended.commits == 1
    assert git(view, "rev-parse", "main~1").strip() == first.tip
    assert trailers(view) == {
        "Memory-Store-Id": [pair.default.id],
        "Memory-Version": [version],
        "Memory-Id": trailers(view)["Memory-Id"],
        # The version's exact time, as its commit in the store's mirror has it: pins go by it.
        "Created-At": trailers(root / pair.default.id, "memstore/main")["Created-At"],
        "Operation": ["updated"],
        "Memory-Path": ["notes/a.md"],
        "Shadowed-Store-Id": [other.id],
        "Memsync-View-Format": ["1"],
    }
    assert (view / "notes" / "a.md").read_text() == "a, edited in the default store\n"

    # A new version of a shadowed copy changes nothing a session sees: no commit.
    pair.write(other, "notes/a.md", "a, edited in other\n")
    hidden = build(pair, root)
    assert hidden.tip == appended.tip and hidden.commits == 0 and not hidden.rebuilt

    # Mounting a store rebuilds the history, and says so.
    third = pair.store({"t.md": "t\n", "o.md": "o, from third\n"})
    pair.client.mount_store(pair.identity, pair.template, third.id)
    mounted = build(pair, root)
    assert (
        mounted.rebuilt
        and mounted.to_json()["rebuilt"] is True
        and mounted.reason == "the mount list changed"
    )
    assert (view / "t.md").read_text() == "t\n" and (view / "o.md").read_text() == "o\n"
    assert mounted.to_json()["collisions"][-1] == {
        "path": "o.md",
        "visible_from": other.id,
        "shadowed": [third.id],
    }

    # Unmounting one: its files leave, the next holder's copy shows.
    pair.client.unmount_store(pair.identity, pair.template, other.id)
    detached = build(pair, root)
    assert detached.rebuilt
    assert tree_files(view) == {
        "notes/a.md": "a, edited in the default store\n",
        "shared.md": DEFAULT_FILES["shared.md"],
        "t.md": "t\n",
        "o.md": "o, from third\n",
    }
    assert detached.collisions == [] and git(view, "status", "--porcelain") == ""
    assert not any(other.id in trailers(view, c).get("Memory-Store-Id", []) for c in commits(view))


def test_views_built_apart_have_the_same_commit_ids(pair: Pair, tmp_path: Path) -> None:
    one = pair.store({"notes/a.md": "one\n", "topic": "a file\n", "x.md": "x\n"})
    two = pair.store({"topic/inner.md": "a folder\n", "x.md": "x from two\n"})
    for store in (one, two):
        pair.client.mount_store(pair.identity, pair.template, store.id)
    early = build(pair, tmp_path / "first")
    pair.write(two, "x.md", "x from two, again\n")
    pair.write(one, "x.md", "x, again\n")
    pair.write(pair.default, "topic/inner.md", "now the default has the folder too\n")
    appended = build(pair, tmp_path / "first")  # incremental in the first root
    assert not appended.rebuilt and appended.commits == 2

    fresh = build(pair, tmp_path / "second")  # a separate mirror of every store, a view from scratch
    first_view, second_view = Path(appended.path), Path(fresh.path)
    assert git(first_view, "rev-parse", "main") == git(second_view, "rev-parse", "main")
    assert commits(first_view) == commits(second_view) and fresh.tip == appended.tip
    assert commits(first_view)[: len(commits(Path(early.path)))] == commits(Path(early.path))
    # `topic` is a file in one store and a folder in others: both kept, spelt as in one store.
    files = tree_files(first_view)
    assert (
        files["topic%_"] == "a file\n" and files["topic/inner.md"] == "now the default has the folder too\n"
    )
    assert (first_view / "topic%_").read_text() == "a file\n"
    assert [c for c in fresh.to_json()["collisions"] if c["path"] == "topic"] == [
        {
            "path": "topic",
            "visible_from": pair.default.id,
            "shadowed": [one.id, two.id],
        }
    ]


def test_a_redaction_rewritten_in_a_store_rebuilds_the_view_without_the_content(
    pair: Pair, tmp_path: Path
) -> None:
    root = tmp_path / "mirrors"
    secret = "a secret that gets redacted\n"
    store = pair.store({"s.md": secret})
    first_version = next(iter(pair.client.iter_versions(store.id))).id
    pair.write(store, "s.md", "public now\n")
    pair.client.mount_store(pair.identity, pair.template, store.id)
    view = Path(build(pair, root).path)
    blob = hashlib.sha1(b"blob %d\0%s" % (len(secret), secret.encode()), usedforsecurity=False).hexdigest()
    assert git(view, "cat-file", "-t", blob).strip() == "blob"

    pair.client.redact_version(store.id, first_version)
    assert pull_store(pair.client, store, root, full_scan=True).ok  # rewrites the store's mirror
    rebuilt = build(pair, root)
    assert rebuilt.rebuilt and rebuilt.reason is not None and "rewritten" in rebuilt.reason
    assert subprocess.run(["git", "-C", str(view), "cat-file", "-e", blob], check=False).returncode != 0
    assert (view / "s.md").read_text() == "public now\n"


def test_a_commit_made_in_the_view_is_never_overwritten(pair: Pair, tmp_path: Path) -> None:
    root = tmp_path / "mirrors"
    view = Path(build(pair, root).path)
    (view / "mine.md").write_text("written in the view\n")
    git(view, "add", "mine.md")
    git(view, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q", "-m", "mine")
    with pytest.raises(UserError, match="did not write"):
        build(pair, root)
    assert (view / "mine.md").exists()


def test_the_mirrors_are_read_for_the_view_not_the_checkouts(pair: Pair, tmp_path: Path) -> None:
    root = tmp_path / "mirrors"
    store = pair.store({"m.md": "from the store\n"})
    pair.client.mount_store(pair.identity, pair.template, store.id)
    build(pair, root)
    (root / store.id / "m.md").write_text("an unpushed edit in the store's checkout\n")
    report = build(pair, root)
    assert (Path(report.path) / "m.md").read_text() == "from the store\n"
    with Mirror.open(root / store.id) as mirror:
        assert mirror.local_changes() == ("m.md",)


def test_ids_become_safe_folder_names() -> None:
    assert View.folder_name("idn_63ee28747a35cff93771c491") == "idn_63ee28747a35cff93771c491"
    assert View.folder_name("a/b c") == "a%2Fb%20c"
    assert View.folder_name("..") == "%2E."
    assert View.folder_name(".git") == "%2Egit"
    assert View.folder_name("100%") == "100%25"
    assert View.path_for(Path("/r"), "i", "t") == Path("/r/awareness/i/t")
    with pytest.raises(UsageError):
        View.folder_name("")


def test_a_version_that_arrives_late_rebuilds_to_the_same_ids(pair: Pair, tmp_path: Path) -> None:
    root = tmp_path / "mirrors"
    early, late = pair.store({"e.md": "e\n"}), pair.store({"l.md": "l\n"})
    for store in (early, late):
        pair.client.mount_store(pair.identity, pair.template, store.id)
    build(pair, root)
    pair.write(late, "l.md", "written first\n")
    pair.write(early, "e.md", "written second\n")
    # Only `early` is pulled: the view takes its newer version first...
    assert pull_store(pair.client, early, root).ok
    mounts = pair.client.list_mounts(pair.identity, pair.template)
    partial = AwarenessReport(identity=pair.identity, template=pair.template, path="")
    build_view(root, pair.identity, pair.template, mounts, partial)
    assert not partial.rebuilt and partial.commits == 1
    # ...so `late`'s older version, pulled after, can only be placed by rebuilding.
    caught_up = build(pair, root)
    assert caught_up.rebuilt and caught_up.reason is not None and "imported late" in caught_up.reason
    fresh = build(pair, tmp_path / "elsewhere")
    assert fresh.tip == caught_up.tip and not fresh.rebuilt


def test_an_edit_in_the_view_survives_an_update_of_the_same_file(pair: Pair, tmp_path: Path) -> None:
    root = tmp_path / "mirrors"
    view = Path(build(pair, root).path)
    (view / "shared.md").write_text("my edit, in the wrong place\n")
    pair.write(pair.default, "shared.md", "the store moved on\n")
    pair.write(pair.default, "notes/a.md", "and another file too\n")
    report = build(pair, root)
    assert report.commits == 2 and git(view, "show", "main:shared.md") == "the store moved on\n"
    assert (view / "shared.md").read_text() == "my edit, in the wrong place\n"
    assert (view / "notes" / "a.md").read_text() == "and another file too\n"
    assert git(view, "status", "--porcelain") == " M shared.md\n"


def test_only_active_mounts_take_part(pair: Pair, tmp_path: Path) -> None:
    # The reference server refuses to archive a mounted store; the API's mount object can still say
    # "archived" (or "" when the store is unreadable), so such a mount is fed to the build directly.
    root = tmp_path / "mirrors"
    archived = pair.store({"gone.md": "from an archived store\n"})
    assert pull_store(pair.client, archived, root).ok
    assert pull_store(pair.client, pair.default, root).ok
    (default,) = pair.client.list_mounts(pair.identity, pair.template)
    mounts = [
        default,
        default.model_copy(update={"store_id": archived.id, "status": "archived", "system_managed": False}),
    ]
    report = AwarenessReport(identity=pair.identity, template=pair.template, path="")
    build_view(root, pair.identity, pair.template, mounts, report)
    assert tree_files(View.path_for(root, pair.identity, pair.template)) == DEFAULT_FILES


def test_a_view_is_never_taken_for_a_mirror(pair: Pair, tmp_path: Path) -> None:
    root = tmp_path / "mirrors"
    view = Path(build(pair, root).path)
    assert [p.name for p in existing_mirrors(root)] == [pair.default.id]
    with pytest.raises(MirrorError, match="not a memsync mirror"):
        Mirror.open(view)
    assert git(view, "config", "memsync.viewformat").strip() == "1"


def test_a_respelled_file_is_no_change_of_its_memory(pair: Pair, tmp_path: Path) -> None:
    store = pair.store({"x": "a file named x\n", "x/y.md": "a file under a folder named x\n"})
    pair.client.mount_store(pair.identity, pair.template, store.id)
    view = Path(build(pair, tmp_path / "mirrors").path)
    # Creating x/y.md respelt the store's x as x%_: the view's commit names x/y.md alone.
    assert trailers(view)["Memory-Path"] == ["x/y.md"]
    assert tree_files(view)["x%_"] == "a file named x\n"
    assert git(view, "status", "--porcelain") == ""
