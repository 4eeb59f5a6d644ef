"""Merging packs by concatenation: git's own index-pack, verify-pack and fsck are the oracles."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pygit2
import pytest

from memsync.crashpoints import ENV as CRASH_ENV
from memsync.errors import MirrorError
from memsync.mirror import Mirror
from memsync.mirror.packfiles import (
    PackFile,
    SharedObjects,
    checkout_objects,
    copy_objects,
    finish_merge,
    merge_packs,
    packs_to_merge,
    read_pack_file,
)
from tests.mirror.oracle import fsck, git, record

NewMirror = Callable[..., Mirror]


def packs(mirror: Mirror) -> list[PackFile]:
    found = [read_pack_file(path) for path in sorted((mirror.objects_dir / "pack").glob("pack-*.pack"))]
    return [pack for pack in found if pack is not None]


def all_objects(mirror: Mirror) -> set[str]:
    listing = git(mirror.path, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)")
    return set(listing.splitlines())


def index_by_git(pack: Path, tmp_path: Path, *options: str) -> bytes:
    """The index git's index-pack writes for ``pack`` (in a scratch copy, so the mirror is untouched)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    copy = scratch / pack.name
    shutil.copyfile(pack, copy)
    subprocess.run(
        ["git", "index-pack", *options, "-o", str(copy.with_suffix(".idx")), str(copy)],
        check=True,
        capture_output=True,
    )
    return copy.with_suffix(".idx").read_bytes()


def with_history(mirror: Mirror, versions: int, batch: int) -> None:
    """Versions of a few memories, so the batch packs hold offset deltas (newest whole)."""
    line = b"a line that stays the same in every version of the note\n" * 8
    with mirror.history_writer(batch_commits=batch) as writer:
        for n in range(versions):
            memory = n % 4
            operation = "created" if n < 4 else "updated"
            writer.add(record(n + 1, f"mem_{memory}", operation, f"d{memory}/note.md", line + b"v%d\n" % n))


def with_git_pack(mirror: Mirror) -> None:
    """A pack written by git pack-objects without --delta-base-offset: reference deltas."""
    body = b"text git deltifies against its sibling\n" * 20
    ids = [
        git(mirror.path, "hash-object", "-w", "--stdin", input=body + b"%d\n" % n).strip() for n in range(6)
    ]
    listing = "".join(f"{oid}\n" for oid in ids).encode()
    git(mirror.path, "pack-objects", "-q", str(mirror.objects_dir / "pack" / "pack"), input=listing)
    git(mirror.path, "prune-packed")
    verbose = git(mirror.path, "verify-pack", "-v", *map(str, (mirror.objects_dir / "pack").glob("*.idx")))
    assert " blob " in verbose and "chain length = 1" in verbose  # deltas really are there


def test_a_merge_keeps_every_object_and_writes_the_index_git_writes(
    new_mirror: NewMirror, tmp_path: Path
) -> None:
    mirror = new_mirror()
    with_history(mirror, versions=40, batch=7)
    with_git_pack(mirror)
    before = all_objects(mirror)
    sources = packs(mirror)
    assert len(sources) == 7

    merged = merge_packs(sources, mirror.state_dir / "pack-merge")

    assert [pack.pack for pack in packs(mirror)] == [merged]
    assert merged.with_suffix(".idx").read_bytes() == index_by_git(merged, tmp_path)
    assert all_objects(mirror) == before
    git(mirror.path, "verify-pack", str(merged.with_suffix(".idx")))
    fsck(mirror.path)
    assert not (mirror.state_dir / "pack-merge").exists()
    assert not list((mirror.objects_dir / "pack").glob("tmp_*"))
    # libgit2 reads through it: every object of the history, deltas resolved.
    repo = pygit2.Repository(str(mirror.path))
    for line in before:
        oid, kind = line.split()
        assert repo[oid].type_str == kind
        repo[oid].read_raw()
    repo.free()


def test_offsets_past_the_32_bit_table_are_read_and_written(new_mirror: NewMirror, tmp_path: Path) -> None:
    # git writes 64-bit offsets only past 2 GiB; index-pack's test option moves the threshold, and so
    # does large_from, so both tables are exercised on a small pack.
    mirror = new_mirror()
    with_history(mirror, versions=30, batch=10)
    for source in packs(mirror):
        source.index.chmod(0o644)
        subprocess.run(
            ["git", "index-pack", "--index-version=2,200", "-o", str(source.index), str(source.pack)],
            check=True,
            capture_output=True,
        )
    assert all(source.large_offsets > 0 for source in packs(mirror))
    before = all_objects(mirror)

    merged = merge_packs(packs(mirror), mirror.state_dir / "pack-merge", large_from=201)

    assert merged.with_suffix(".idx").read_bytes() == index_by_git(merged, tmp_path, "--index-version=2,200")
    assert all_objects(mirror) == before
    fsck(mirror.path)


def test_packs_that_share_an_object_are_merged_by_git(new_mirror: NewMirror) -> None:
    # A tree made again (a memory deleted, then recreated as it was) can be in two batch packs.
    # Concatenated, the object would be in one pack twice, which git verify-pack rejects.
    mirror = new_mirror()
    with_history(mirror, versions=12, batch=6)
    first = packs(mirror)[0]
    copy = first.pack.with_name("pack-" + "0" * 40 + ".pack")
    shutil.copyfile(first.pack, copy)
    shutil.copyfile(first.index, copy.with_suffix(".idx"))
    before = all_objects(mirror)
    names = sorted(path.name for path in (mirror.objects_dir / "pack").iterdir())

    with pytest.raises(SharedObjects, match="share object"):
        merge_packs(packs(mirror), mirror.state_dir / "pack-merge")
    assert sorted(path.name for path in (mirror.objects_dir / "pack").iterdir()) == names  # untouched

    assert mirror.consolidate_packs(limit=1)
    (merged,) = packs(mirror)
    assert merged.objects == len(before)
    git(mirror.path, "verify-pack", str(merged.index))
    assert all_objects(mirror) == before
    fsck(mirror.path)


@pytest.mark.parametrize("crash_at", ["mirror.merged_pack_renamed", "mirror.merged_pack_written"])
def test_a_merge_killed_midway_loses_nothing_and_copies_nothing_twice(
    new_mirror: NewMirror, crash_at: str
) -> None:
    mirror = new_mirror()
    with_history(mirror, versions=30, batch=6)
    before = all_objects(mirror)
    mirror.close()
    script = (
        "import sys; from memsync.mirror import Mirror; Mirror.open(sys.argv[1]).consolidate_packs(limit=1)"
    )
    killed = subprocess.run(
        [sys.executable, "-c", script, str(mirror.path)],
        env={**os.environ, CRASH_ENV: f"{crash_at}:1"},
        capture_output=True,
        check=False,
    )
    assert killed.returncode == -9, killed.stderr
    assert all_objects(Mirror.open(mirror.path)) == before
    fsck(mirror.path)
    finish_merge(mirror.state_dir / "pack-merge", mirror.objects_dir / "pack")
    # Every pack left has its index: nothing half-merged is left behind.
    pack_files = list((mirror.objects_dir / "pack").glob("pack-*.pack"))
    assert all(pack.with_suffix(".idx").exists() for pack in pack_files)
    if crash_at == "mirror.merged_pack_renamed":
        assert len(pack_files) == 5  # the sources, as before
    else:
        assert len(pack_files) == 1  # the merged pack, its sources deleted

    resumed = Mirror.open(mirror.path)
    resumed.consolidate_packs(limit=1)

    (merged,) = packs(resumed)
    assert merged.objects == len(before)  # each object once: the journal finished the first merge
    assert all_objects(resumed) == before
    assert not (resumed.state_dir / "pack-merge").exists()
    fsck(resumed.path)


def test_a_journal_without_its_merged_pack_deletes_nothing(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    with_history(mirror, versions=12, batch=6)
    names = [pack.pack.name for pack in packs(mirror)]
    journal = mirror.state_dir / "pack-merge"
    journal.write_text(json.dumps({"merged": f"pack-{'1' * 40}.pack", "sources": names}))

    finish_merge(journal, mirror.objects_dir / "pack")

    assert [pack.pack.name for pack in packs(mirror)] == names
    assert not journal.exists()


def test_an_unreadable_journal_is_reported_not_guessed_at(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    journal = mirror.state_dir / "pack-merge"
    journal.write_text("{not json")
    with pytest.raises(MirrorError, match=r"pack-merge.*move it away"):
        finish_merge(journal, mirror.objects_dir / "pack")
    assert journal.exists()


def test_kept_and_unknown_indexes_are_left_alone(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    with_history(mirror, versions=12, batch=4)
    kept, odd, plain = sorted((mirror.objects_dir / "pack").glob("pack-*.pack"))
    kept.with_suffix(".keep").write_text("")
    odd_index = odd.with_suffix(".idx")
    odd_index.chmod(0o644)
    odd_index.write_bytes(odd_index.read_bytes()[:-1])  # a size that does not add up
    assert [pack.pack for pack in packs(mirror)] == [plain]


def sized(*counts: int) -> list[PackFile]:
    return [
        PackFile(Path(f"pack-{n:040x}.pack"), count, (0,) * 255 + (count,), 0)
        for n, count in enumerate(counts)
    ]


@pytest.mark.parametrize(
    ("counts", "merged"),
    [
        ((5, 5, 5, 5), [5, 5, 5, 5]),  # equal batches: all of them
        ((1000, 5, 5, 5), [5, 5, 5]),  # the large pack stays
        ((1000, 40, 1, 1), [1, 1]),
        ((1, 2, 4, 8, 16), []),  # already a progression
        ((30, 10, 10), [10, 10, 30]),  # the merged 20 would break the progression below 30
        ((7,), []),
    ],
)
def test_which_packs_are_merged_follows_the_geometric_rule(
    counts: tuple[int, ...], merged: list[int]
) -> None:
    assert [pack.objects for pack in packs_to_merge(sized(*counts))] == merged


def test_a_pack_gone_midway_is_a_clear_error_and_nothing_else_changes(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    with_history(mirror, versions=12, batch=4)
    sources = packs(mirror)
    sources[1].pack.unlink()  # as if a git gc run by hand took it away meanwhile
    with pytest.raises(MirrorError, match=r"merging the packs of .*nothing was lost"):
        merge_packs(sources, mirror.state_dir / "pack-merge")
    left = sorted(path.name for path in (mirror.objects_dir / "pack").iterdir())
    assert left == sorted(
        name
        for source in sources
        for name in (source.pack.name, source.index.name)
        if name != sources[1].pack.name
    )


# --- reading packs without maps: the objects a large checkout reads ---------------------------------


def test_objects_are_copied_whole_from_every_kind_of_pack(new_mirror: NewMirror, tmp_path: Path) -> None:
    mirror = new_mirror()
    with_history(mirror, versions=30, batch=7)  # offset deltas, newest whole
    with_git_pack(mirror)  # reference deltas
    first = packs(mirror)[0]
    first.index.chmod(0o644)
    subprocess.run(  # one index with 64-bit offsets
        ["git", "index-pack", "--index-version=2,100", "-o", str(first.index), str(first.pack)],
        check=True,
        capture_output=True,
    )
    everything = {line.split()[0] for line in all_objects(mirror)}

    copied = copy_objects(mirror.objects_dir / "pack", everything)

    # git checks every object against its id; all are there, none of them a delta.
    listing = git(mirror.path, "verify-pack", "-v", str(copied.with_suffix(".idx")))
    assert {line.split()[0] for line in listing.splitlines() if len(line.split()) == 5} == everything
    assert "chain length" not in listing
    assert pack_objects_of(mirror, copied) == everything
    fsck(mirror.path)


def pack_objects_of(mirror: Mirror, pack: Path) -> set[str]:
    listing = git(mirror.path, "show-index", input=pack.with_suffix(".idx").read_bytes())
    return {line.split()[1] for line in listing.splitlines()}


def test_gathering_an_object_no_pack_has_is_an_error_that_writes_nothing(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    with_history(mirror, versions=6, batch=3)
    before = sorted(path.name for path in (mirror.objects_dir / "pack").iterdir())
    with pytest.raises(MirrorError, match=r"1 objects to gather are in no pack.*git fsck"):
        copy_objects(mirror.objects_dir / "pack", ["ab" * 20])
    assert sorted(path.name for path in (mirror.objects_dir / "pack").iterdir()) == before


def test_what_a_checkout_reads_is_what_git_diff_tree_lists(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    with_history(mirror, versions=12, batch=5)
    middle = mirror.tip()
    assert middle is not None
    with mirror.history_writer(batch_commits=5) as writer:
        writer.add(record(50, "mem_9", "created", "new/deeper/file.md", b"new\n"))
        writer.add(record(51, "mem_1", "updated", "d1/note.md", b"changed\n"))
        writer.add(record(52, "mem_2", "deleted", "d2/note.md", None))
    tip = mirror.tip()
    assert tip is not None
    pack_dir = mirror.objects_dir / "pack"

    for head in (None, middle):
        base = head or "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
        changes = git(mirror.path, "diff-tree", "-r", "-t", "--no-renames", base, tip).splitlines()
        expected = {line.split()[3] for line in changes if line.split()[4] != "D"}
        files = sum(1 for line in changes if line.split()[4] != "D" and line.split()[1] != "040000")
        wanted, counted = checkout_objects(pack_dir, tip, head)
        root = git(mirror.path, "rev-parse", f"{tip}^{{tree}}").strip()
        assert sorted(wanted) == sorted(expected | {root})
        assert counted == files
    assert counted == 2  # the new file and the changed one
