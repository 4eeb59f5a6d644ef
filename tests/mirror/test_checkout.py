"""Updating the checkout: fast-forward when clean, never over a local edit; git status as the oracle."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from pathlib import Path

import pygit2
import pytest

from memsync.mirror import Mirror, VersionRecord
from tests.mirror.oracle import fsck, git, record

NewMirror = Callable[..., Mirror]


def imported(mirror: Mirror, *records: VersionRecord) -> str:
    with mirror.history_writer() as writer:
        for item in records:
            writer.add(item)
    tip = mirror.tip()
    assert tip is not None
    return tip


def on_disk(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and ".git" not in path.relative_to(root).parts[:1]
    }


def porcelain(mirror: Mirror) -> str:
    return git(mirror.path, "status", "--porcelain=v1", "-uall")


def test_a_clean_checkout_is_fast_forwarded_to_the_tip(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    assert mirror.update_checkout().updated is False  # nothing imported yet
    tip = imported(
        mirror,
        record(1, "mem_a", "created", "notes/a.md", b"a\r\nwindows line ends stay\r\n"),
        record(2, "mem_b", "created", ".gitignore", b"*\n"),
        record(3, "mem_c", "created", "notes", b"file beside a directory\n"),
    )
    result = mirror.update_checkout()
    assert result.updated and result.tip == tip and result.local_changes == ()
    assert on_disk(mirror.path) == {
        "notes/a.md": b"a\r\nwindows line ends stay\r\n",
        "%2Egitignore": b"*\n",
        "notes%_": b"file beside a directory\n",
    }
    assert mirror.main() == tip == mirror.base()
    # No staged reverse change (the trap of moving the branch before checking out).
    assert porcelain(mirror) == ""
    assert "up to date with 'memstore/main'" in git(mirror.path, "status")


def test_remote_changes_arrive_and_leave(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    imported(
        mirror,
        record(1, "mem_a", "created", "deep/er/a.md", b"a\n"),
        record(2, "mem_b", "created", "b", b"b\n"),
    )
    mirror.update_checkout()
    tip = imported(
        mirror,
        record(3, "mem_a", "deleted", "deep/er/a.md", None),
        record(4, "mem_c", "created", "b/c", b"c\n"),  # b becomes b%_ on disk
        record(5, "mem_b", "updated", "b", b"b2\n"),
    )
    assert "behind 'memstore/main' by 3 commits" in git(mirror.path, "status")
    assert mirror.update_checkout().updated
    assert on_disk(mirror.path) == {"b%_": b"b2\n", "b/c": b"c\n"}
    assert not (mirror.path / "deep").exists()  # emptied directories go too
    assert mirror.base() == tip
    assert porcelain(mirror) == ""


# (what main holds, what the user deletes, what the tip then holds): libgit2 alone fails the first
# ("null OID cannot exist") and silently skips d in the second, which main would then lack on disk.
KIND_CHANGES = {
    # The remote renamed d to d/e.md (and x/d to x/d/y.md) while the user deleted d and x.
    "a-deleted-file-becomes-a-folder": (
        {"d": b"d\n", "x/d": b"x\n"},
        ["d", "x"],
        {"d/e.md": b"d\n", "x/d/y.md": b"x\n"},
    ),
    # The remote moved d/e.md to d (and deleted d/f.md) while the user deleted the folder d.
    "an-emptied-folder-becomes-a-file": ({"d/e.md": b"e\n", "d/f.md": b"f\n"}, ["d"], {"d": b"d\n"}),
}


@pytest.mark.parametrize("case", sorted(KIND_CHANGES))
def test_what_the_user_deleted_may_change_kind_at_the_tip(new_mirror: NewMirror, case: str) -> None:
    before, deleted, after = KIND_CHANGES[case]
    mirror = new_mirror()
    ids = {path: f"mem_{n}" for n, path in enumerate(sorted(before | after))}
    imported(
        mirror, *(record(n, ids[p], "created", p, data) for n, (p, data) in enumerate(before.items(), 1))
    )
    mirror.update_checkout()
    for path in deleted:
        target = mirror.path / path
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()
    changes = [record(10 + n, ids[p], "deleted", p, None) for n, p in enumerate(before)]
    changes += [record(20 + n, ids[p], "created", p, data) for n, (p, data) in enumerate(after.items())]
    tip = imported(mirror, *changes)
    result = mirror.update_checkout()
    assert result.updated and result.tip == tip
    assert on_disk(mirror.path) == after
    assert porcelain(mirror) == ""
    fsck(mirror.path)


def test_nothing_is_put_back_through_a_symlinked_folder(new_mirror: NewMirror, tmp_path: Path) -> None:
    # The user replaced the folder x with a link to a folder elsewhere: x/d is not written through it.
    mirror = new_mirror()
    imported(mirror, record(1, "mem_d", "created", "x/d", b"d\n"))
    mirror.update_checkout()
    shutil.rmtree(mirror.path / "x")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (mirror.path / "x").symlink_to(elsewhere)
    tip = imported(
        mirror, record(2, "mem_d", "deleted", "x/d", None), record(3, "mem_e", "created", "x/d/e.md", b"e\n")
    )
    untouched = elsewhere.stat().st_mtime_ns  # a file written there and deleted again changes it
    with contextlib.suppress(pygit2.GitError):
        mirror.git.checkout(mirror.git.tree(tip), strategy=pygit2.enums.CheckoutStrategy.SAFE)
    assert list(elsewhere.iterdir()) == []
    assert elsewhere.stat().st_mtime_ns == untouched


def test_a_refused_checkout_leaves_deleted_files_deleted(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    imported(
        mirror, record(1, "mem_d", "created", "d", b"d\n"), record(2, "mem_a", "created", "a.md", b"a\n")
    )
    mirror.update_checkout()
    (mirror.path / "d").unlink()
    (mirror.path / "a.md").write_bytes(b"my edit\n")
    tip = imported(
        mirror,
        record(3, "mem_d", "deleted", "d", None),
        record(4, "mem_e", "created", "d/e.md", b"d\n"),
        record(5, "mem_a", "updated", "a.md", b"remote a\n"),
    )
    with pytest.raises(pygit2.GitError):
        mirror.git.checkout(mirror.git.tree(tip), strategy=pygit2.enums.CheckoutStrategy.SAFE)
    assert on_disk(mirror.path) == {"a.md": b"my edit\n"}
    assert porcelain(mirror) == " M a.md\n D d\n"


def test_a_local_edit_is_never_overwritten(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    first = imported(
        mirror, record(1, "mem_a", "created", "a.md", b"a\n"), record(2, "mem_b", "created", "b.md", b"b\n")
    )
    mirror.update_checkout()
    (mirror.path / "a.md").write_bytes(b"my edit\n")
    (mirror.path / "new.md").write_bytes(b"a new memory\n")
    (mirror.path / "new.md.swp").write_bytes(b"vim swap: ignored\n")
    imported(
        mirror,
        record(3, "mem_a", "updated", "a.md", b"remote a\n"),
        record(4, "mem_b", "updated", "b.md", b"remote b\n"),
    )
    result = mirror.update_checkout()
    assert not result.updated
    assert result.local_changes == ("a.md", "new.md")
    assert (mirror.path / "a.md").read_bytes() == b"my edit\n"
    assert (mirror.path / "b.md").read_bytes() == b"b\n"  # nothing moves while anything is local
    assert mirror.main() == first == mirror.base()


def test_local_commits_count_as_local_changes(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    base = imported(mirror, record(1, "mem_a", "created", "a.md", b"a\n"))
    mirror.update_checkout()
    (mirror.path / "a.md").write_bytes(b"committed edit\n")
    git(mirror.path, "commit", "-qam", "my edit")
    assert "ahead of 'memstore/main' by 1 commit" in git(mirror.path, "status")
    imported(mirror, record(2, "mem_b", "created", "b.md", b"b\n"))
    result = mirror.update_checkout()
    assert (result.updated, result.local_changes) == (False, ("a.md",))
    assert mirror.base() == base
    assert "have diverged" in git(mirror.path, "status")


def test_a_main_that_cannot_fast_forward_is_reported_as_diverged(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    imported(mirror, record(1, "mem_a", "created", "a.md", b"a\n"))
    mirror.update_checkout()
    git(mirror.path, "commit", "-q", "--allow-empty", "-m", "an empty commit changes nothing")
    mine = mirror.main()
    imported(mirror, record(2, "mem_a", "updated", "a.md", b"a2\n"))
    result = mirror.update_checkout()
    assert (result.updated, result.diverged, result.local_changes) == (False, True, ())
    assert mirror.main() == mine


def test_an_ignored_file_in_the_way_is_not_overwritten(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    imported(mirror, record(1, "mem_a", "created", "a.md", b"a\n"))
    mirror.update_checkout()
    (mirror.path / "x.swp").write_bytes(b"the user's swap file\n")
    tip = imported(mirror, record(2, "mem_x", "created", "x.swp", b"a memory that looks like a swap file\n"))
    result = mirror.update_checkout()
    assert not result.updated and "x.swp" in result.local_changes
    assert (mirror.path / "x.swp").read_bytes() == b"the user's swap file\n"
    (mirror.path / "x.swp").unlink()
    assert mirror.update_checkout().updated
    assert mirror.main() == tip
    assert (mirror.path / "x.swp").read_bytes() == b"a memory that looks like a swap file\n"


def test_contents_stay_plain_bytes_whatever_attributes_say(new_mirror: NewMirror, tmp_path: Path) -> None:
    mirror = new_mirror()
    attributes = tmp_path / "attributes"
    attributes.write_text("* text eol=crlf ident\n")
    git(mirror.path, "config", "core.attributesFile", str(attributes))
    git(mirror.path, "config", "core.autocrlf", "true")
    mirror = Mirror.open(mirror.path)  # opening restores the mirror's settings
    imported(mirror, record(1, "mem_a", "created", "a.md", b"unix\nline $Id$\n"))
    assert mirror.update_checkout().updated
    assert (mirror.path / "a.md").read_bytes() == b"unix\nline $Id$\n"
    assert porcelain(mirror) == ""
    fsck(mirror.path)


def test_a_lost_base_ref_is_recovered_from_where_main_left_the_history(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    imported(mirror, record(1, "mem_a", "created", "a.md", b"a\n"))
    mirror.update_checkout()
    git(mirror.path, "update-ref", "-d", mirror.BASE_REF)
    tip = imported(mirror, record(2, "mem_b", "created", "b.md", b"b\n"))
    assert mirror.local_changes() == ()
    assert mirror.update_checkout().updated
    assert mirror.base() == tip
    git(mirror.path, "update-ref", "-d", mirror.BASE_REF)
    (mirror.path / "a.md").write_bytes(b"edit\n")
    git(mirror.path, "commit", "-qam", "local")
    assert mirror.local_changes() == ("a.md",)


def test_nothing_moves_while_head_is_off_main(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    first = imported(mirror, record(1, "mem_a", "created", "a.md", b"a\n"))
    mirror.update_checkout()
    git(mirror.path, "checkout", "-q", "--detach")
    imported(mirror, record(2, "mem_a", "updated", "a.md", b"a2\n"))
    result = mirror.update_checkout()
    assert result.updated is False and result.reason is not None and "`git switch main`" in result.reason
    assert (mirror.path / "a.md").read_bytes() == b"a\n"
    assert mirror.main() == first
    git(mirror.path, "checkout", "-q", "main")
    assert mirror.update_checkout().updated


def test_a_global_ignore_file_cannot_hide_a_new_memory(new_mirror: NewMirror, tmp_path: Path) -> None:
    mirror = new_mirror()
    ignore = tmp_path / "global-ignore"
    ignore.write_text("*.log\n")
    git(mirror.path, "config", "core.excludesFile", str(ignore))
    mirror = Mirror.open(mirror.path)  # opening restores the mirror's settings
    (mirror.path / "diary.log").write_text("a new memory\n")
    assert mirror.local_changes() == ("diary.log",)
