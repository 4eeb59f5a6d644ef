"""Updating the checkout: fast-forward when clean, never over a local edit; git status as the oracle."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path

import pygit2
import pytest

from memsync.mirror import Mirror, VersionRecord, checkout
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
    assert mirror.ref_target(mirror.MAIN_REF) == tip == mirror.ref_target(mirror.BASE_REF)
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
    assert mirror.ref_target(mirror.BASE_REF) == tip
    assert porcelain(mirror) == ""


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
    assert mirror.ref_target(mirror.MAIN_REF) == first == mirror.ref_target(mirror.BASE_REF)


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
    assert mirror.ref_target(mirror.BASE_REF) == base
    assert "have diverged" in git(mirror.path, "status")


def test_a_main_that_cannot_fast_forward_is_reported_as_diverged(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    imported(mirror, record(1, "mem_a", "created", "a.md", b"a\n"))
    mirror.update_checkout()
    git(mirror.path, "commit", "-q", "--allow-empty", "-m", "an empty commit changes nothing")
    mine = mirror.ref_target(mirror.MAIN_REF)
    imported(mirror, record(2, "mem_a", "updated", "a.md", b"a2\n"))
    result = mirror.update_checkout()
    assert (result.updated, result.diverged, result.local_changes) == (False, True, ())
    assert mirror.ref_target(mirror.MAIN_REF) == mine


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
    assert mirror.ref_target(mirror.MAIN_REF) == tip
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
    assert mirror.ref_target(mirror.BASE_REF) == tip
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
    assert mirror.ref_target(mirror.MAIN_REF) == first
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


# --- which pack indexes libgit2 keeps mapped (issue 6: they are the import's peak memory) ---------

needs_proc_maps = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps")


def mapped_indexes(mirror: Mirror) -> set[str]:
    """The mirror's pack indexes mapped in this process (libgit2 maps each whole while it is open)."""
    pack_dir = str((mirror.objects_dir / "pack").resolve())
    lines = Path("/proc/self/maps").read_text().splitlines()
    return {Path(line.split()[-1]).name for line in lines if line.endswith(".idx") and pack_dir in line}


def pack_objects(mirror: Mirror, index: str) -> set[str]:
    listing = git(mirror.path, "show-index", input=(mirror.objects_dir / "pack" / index).read_bytes())
    return {line.split()[1] for line in listing.splitlines()}


def tip_objects(mirror: Mirror, tip: str) -> set[str]:
    return {
        line.split()[0] for line in git(mirror.path, "rev-list", "--objects", "--no-walk", tip).splitlines()
    }


def backdate_packs(mirror: Mirror) -> None:
    """Make the packs written so far look older, as those of an import that took more than a second
    do: libgit2 searches packs newest first and orders those of the same second arbitrarily."""
    for path in (mirror.objects_dir / "pack").iterdir():
        stat = path.stat()
        os.utime(path, (stat.st_atime - 60, stat.st_mtime - 60))


def many_files(count: int, start: int = 1) -> list[VersionRecord]:
    return [
        record(start + n, f"mem_{n:03d}", "created", f"d{n % 3}/n{n:03d}.md", b"note %d\n" % n)
        for n in range(count)
    ]


def batched(new_mirror: NewMirror, files: int) -> tuple[Mirror, str]:
    """A mirror with ``files`` memories imported three to a pack, and its tip."""
    mirror = new_mirror()
    with mirror.history_writer(batch_commits=3) as writer:
        for item in many_files(files):
            writer.add(item)
    tip = mirror.tip()
    assert tip is not None
    return mirror, tip


@needs_proc_maps
def test_batch_packs_leave_no_index_mapped_behind(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    items = many_files(12)
    for start in range(0, 12, 2):  # six imports of a pack each, a second apart as far as git sees
        backdate_packs(mirror)
        imported(mirror, *items[start : start + 2])
    assert mirror.pack_count() == 6
    # Each import's ref move looks its commit up. Had libgit2 learned of the new pack by missing in
    # every older one, all of their indexes would stay mapped; it lists the directory afresh instead.
    assert len(mapped_indexes(mirror)) == 1


@needs_proc_maps
def test_a_large_checkout_reads_one_pack_of_what_it_writes(
    new_mirror: NewMirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkout, "GATHER_FROM_FILES", 8)
    mirror, tip = batched(new_mirror, 12)
    backdate_packs(mirror)
    before = {path.name for path in (mirror.objects_dir / "pack").glob("*.idx")}
    assert len(before) == 4
    seen: dict[str, object] = {}
    real_checkout = pygit2.Repository.checkout_tree

    def observed(repo: pygit2.Repository, *args: object, **kwargs: object) -> None:
        real_checkout(repo, *args, **kwargs)
        (gathered,) = {path.name for path in (mirror.objects_dir / "pack").glob("*.idx")} - before
        seen["objects"] = pack_objects(mirror, gathered)
        seen["mapped"] = mapped_indexes(mirror) == {gathered}

    monkeypatch.setattr(pygit2.Repository, "checkout_tree", observed)
    assert mirror.update_checkout().updated
    # During the checkout: one more pack, exactly the tip's trees and files, and the only index read.
    objects = tip_objects(mirror, tip)
    objects.remove(tip)
    assert seen == {"objects": objects, "mapped": True}
    # After it the copies are gone again; the checkout is the tip's.
    assert {path.name for path in (mirror.objects_dir / "pack").iterdir()} == {
        name for path in before for name in (path, path.replace(".idx", ".pack"))
    }
    assert on_disk(mirror.path) == {f"d{n % 3}/n{n:03d}.md": b"note %d\n" % n for n in range(12)}
    assert porcelain(mirror) == ""
    fsck(mirror.path)


def test_a_small_checkout_gathers_nothing(new_mirror: NewMirror, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkout, "GATHER_FROM_FILES", 8)
    mirror, _ = batched(new_mirror, 12)
    gathered: list[int] = []
    real_gathered = Mirror.gathered

    def counted(self: Mirror, object_ids: Iterable[str]) -> AbstractContextManager[None]:
        gathered.append(len(list(object_ids)))
        return real_gathered(self, object_ids)

    monkeypatch.setattr(Mirror, "gathered", counted)
    assert mirror.update_checkout().updated
    assert gathered == [12 + 4]  # the 12 files, 3 directories and the root
    # Seven files change (one deleted, six created): under the threshold, nothing is gathered.
    tip = imported(
        mirror,
        record(20, "mem_000", "deleted", "d0/n000.md", None),
        *[record(21 + n, f"mem_new{n}", "created", f"e/{n}.md", b"%d\n" % n) for n in range(6)],
    )
    assert mirror.update_checkout().updated
    assert gathered == [16]
    assert mirror.ref_target(mirror.MAIN_REF) == tip
    assert porcelain(mirror) == ""


@pytest.mark.parametrize("packed", [False, True], ids=["all-loose", "only-the-file-loose"])
def test_a_tip_with_loose_objects_is_checked_out_without_gathering(
    new_mirror: NewMirror, monkeypatch: pytest.MonkeyPatch, packed: bool
) -> None:
    # libgit2 writes loose objects (a commit made on main, a push's blobs). The gathering reads packs
    # only: when what the checkout needs is not all there (found by the listing, or only by the copy
    # when the trees are packed and a file is not), it steps aside and libgit2 reads as ever.
    monkeypatch.setattr(checkout, "GATHER_FROM_FILES", 1)
    mirror, packed_tip = batched(new_mirror, 6)
    repo = pygit2.Repository(str(mirror.path))
    builder = repo.TreeBuilder(repo[packed_tip].peel(pygit2.Tree))
    builder.insert("loose.md", repo.create_blob(b"written by libgit2\n"), pygit2.GIT_FILEMODE_BLOB)
    tree = builder.write()
    signature = pygit2.Signature("t", "t@example.com", 0, 0)
    tip = str(repo.create_commit(None, signature, signature, "loose\n", tree, [packed_tip]))
    repo.free()
    if packed:
        base_name = str(mirror.objects_dir / "pack" / "pack")
        git(mirror.path, "pack-objects", "-q", base_name, input=f"{tip}\n{tree}\n".encode())
        git(mirror.path, "prune-packed")
    mirror.set_ref_if_equals(mirror.MEMSTORE_REF, tip, packed_tip)

    assert mirror.update_checkout().updated
    assert (mirror.path / "loose.md").read_bytes() == b"written by libgit2\n"
    assert len(on_disk(mirror.path)) == 7
    assert porcelain(mirror) == ""
