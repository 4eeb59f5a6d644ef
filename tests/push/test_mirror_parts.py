"""The mirror's push support on its own: working-tree scans, checkout writes, merges, conflict records,
base commits. Real repositories in tmp dirs; the real git binary as the oracle."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.errors import MirrorError
from memsync.mirror import Merger, Mirror, Snapshots
from memsync.mirror.conflicts import ref_name, whole_file_markers
from memsync.mirror.snapshots import SnapshotEntry
from memsync.mirror.worktree import CheckoutChange, WorktreeChanged
from memsync.rules import MAX_CONTENT_BYTES, Dialect
from tests.mirror.oracle import fsck, git, record


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def mirror(tmp_path: Path) -> Mirror:
    """A mirror with two imported versions (a.md, notes/b.md), checked out."""
    made = Mirror.init(tmp_path / "store")
    with made.history_writer() as writer:
        writer.add(record(1, "mem_a", "created", "a.md", b"a\n"))
        writer.add(record(2, "mem_b", "created", "notes/b.md", b"b\n"))
    assert made.update_checkout().updated
    return made


# --- scanning the working tree -------------------------------------------------------------------


def test_scan_reads_regular_files_and_never_follows_links(mirror: Mirror, tmp_path: Path) -> None:
    root = mirror.path
    secret = tmp_path / "secret"
    secret.write_bytes(b"secret\n")
    (root / "link.md").symlink_to(secret)
    (root / "dirlink").symlink_to(tmp_path)
    os.mkfifo(root / "pipe.md")
    (root / "big.md").write_bytes(b"x" * (MAX_CONTENT_BYTES + 1))
    (root / "nul.md").write_bytes(b"a\x00b\n")
    (root / "empty.md").write_bytes(b"")
    (root / ".notes.md.swp").write_bytes(b"vim")  # an editor temporary: not a memory
    (root / "100%.md").write_text("stray\n")
    (root / "notes" / "b.md%_").write_text("second spelling\n")

    scan = mirror.worktree.scan(Dialect.FORWARD)

    files = scan.files
    assert (
        files["a.md"].kind == "file" and files["a.md"].sha256 == sha(b"a\n") and files["a.md"].problem is None
    )
    assert files["link.md"].kind == "symlink" and files["link.md"].sha256 is None
    assert files["dirlink"].kind == "symlink"
    assert files["pipe.md"].kind == "fifo"
    assert files["big.md"].problem is not None and "at most 102400" in files["big.md"].problem
    assert files["nul.md"].problem is not None and "U+0000" in files["nul.md"].problem
    assert files["empty.md"].problem is not None and "empty" in files["empty.md"].problem
    assert ".notes.md.swp" not in files
    strays = scan.strays
    assert set(strays) == {"100%.md", "notes/b.md%_"}
    assert "100%25.md" in strays["100%.md"] and "two spellings" in strays["notes/b.md%_"]
    # Empty content is fine on Anthropic; a memory named like a temporary counts when it is known.
    assert mirror.worktree.scan(Dialect.ANTHROPIC).files["empty.md"].problem is None
    assert ".notes.md.swp" in mirror.worktree.scan(Dialect.FORWARD, known={".notes.md.swp"}).files


def test_scans_reuse_hashes_of_files_that_did_not_change(
    mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memsync.mirror import worktree

    root = mirror.path
    for i in range(5):
        (root / f"f{i}.md").write_text(f"file {i}\n")
    old = 1_600_000_000
    for path in root.rglob("*.md"):
        os.utime(path, (old, old))  # long settled: past the racy window
    reads: list[Path] = []
    real = worktree._hash_file

    def counting(full: Path) -> tuple[str, int, bytes | None]:
        reads.append(full)
        return real(full)

    monkeypatch.setattr(worktree, "_hash_file", counting)
    first = mirror.worktree.scan(Dialect.FORWARD)
    assert len(reads) == 7
    reads.clear()
    assert mirror.worktree.scan(Dialect.FORWARD) == first and reads == []
    # An edit changes size or times; a file written just now is read again until it is old enough.
    (root / "f1.md").write_text("file 1, edited\n")
    third = mirror.worktree.scan(Dialect.FORWARD)
    assert reads == [root / "f1.md"] and third.files["f1.md"].sha256 == sha(b"file 1, edited\n")
    reads.clear()
    mirror.worktree.scan(Dialect.FORWARD)
    assert reads == [root / "f1.md"]
    # Another dialect judges contents differently: the cache does not carry over.
    reads.clear()
    mirror.worktree.scan(Dialect.ANTHROPIC, save_cache=False)
    assert len(reads) == 7


# --- writing the checkout ------------------------------------------------------------------------


def test_checkout_writes_check_every_expectation_before_writing(mirror: Mirror) -> None:
    root = mirror.path
    present = {"a.md": "a.md", "notes/b.md": "notes/b.md"}
    changes = [
        CheckoutChange("a.md", b"a2\n", sha(b"a\n")),
        CheckoutChange("notes/b.md", None, sha(b"something else\n")),  # stale: the user edited it
    ]
    with pytest.raises(WorktreeChanged, match=r"notes/b\.md changed"):
        mirror.worktree.apply(changes, present=present)
    assert (root / "a.md").read_bytes() == b"a\n" and (root / "notes/b.md").exists()
    # A file that appeared where the plan expected none is never overwritten either.
    (root / "new.md").write_text("user's\n")
    with pytest.raises(WorktreeChanged):
        mirror.worktree.apply([CheckoutChange("new.md", b"theirs\n", None)], present=present)
    assert (root / "new.md").read_text() == "user's\n"


def test_checkout_respells_files_beside_folders(mirror: Mirror) -> None:
    root = mirror.path
    present = {"a.md": "a.md", "notes/b.md": "notes/b.md"}
    # a.md becomes a folder's sibling: the file moves to a.md%_, the new file goes below a.md/.
    mirror.worktree.apply([CheckoutChange("a.md/c", b"c\n", None)], present=present)
    assert (root / "a.md%_").read_bytes() == b"a\n" and (root / "a.md" / "c").read_bytes() == b"c\n"
    present = {"a.md": "a.md%_", "a.md/c": "a.md/c", "notes/b.md": "notes/b.md"}
    mirror.worktree.apply([CheckoutChange("a.md/c", None, sha(b"c\n"))], present=present)
    assert (root / "a.md").read_bytes() == b"a\n" and not (root / "a.md%_").exists()
    # No memsync temporaries are left behind.
    assert not [p for p in root.rglob(".#memsync-*")]


def test_checkout_refuses_to_write_through_a_foreign_file(mirror: Mirror) -> None:
    root = mirror.path
    (root / "x.swp").write_text("an ignored file where a folder must go\n")
    with pytest.raises(MirrorError, match="in the way"):
        mirror.worktree.apply([CheckoutChange("x.swp/y", b"y\n", None)], present={"a.md": "a.md"})
    assert (root / "x.swp").read_text().startswith("an ignored file")


# --- merging --------------------------------------------------------------------------------------


def test_merges() -> None:
    base = b"1\n2\n3\n4\n"
    with Merger() as merger:
        clean = merger.merge(base, b"1 local\n2\n3\n4\n", b"1\n2\n3\n4 remote\n")
        assert clean.clean and clean.content == b"1 local\n2\n3\n4 remote\n"
        overlap = merger.merge(base, b"1\n2 local\n3\n4\n", b"1\n2 remote\n3\n4\n")
        assert not overlap.clean
        assert overlap.content == b"1\n<<<<<<< local\n2 local\n=======\n2 remote\n>>>>>>> remote\n3\n4\n"
        # Both sides created the memory: always a conflict, even if git could interleave them.
        created = merger.merge(None, b"x\n", b"x\ny\n")
        assert not created.clean and created.content == b"x\n<<<<<<< local\n=======\ny\n>>>>>>> remote\n"
        assert merger.merge(None, b"same\n", b"same\n").clean
        assert merger.markers(base, b"no newline", b"1\n") == whole_file_markers(b"no newline", b"1\n")
    assert whole_file_markers(b"no newline", b"") == b"<<<<<<< local\nno newline\n=======\n>>>>>>> remote\n"


# --- conflict records ---------------------------------------------------------------------------


def test_conflict_records_keep_every_side_and_every_resolution(mirror: Mirror) -> None:
    markers = b"<<<<<<< local\nL\n=======\nR\n>>>>>>> remote\n"
    first = mirror.conflicts.record("notes/b.md", base=b"b\n", local=b"L\n", remote=b"R\n", markers=markers,
        remote_memory_id="mem_b", reason="both changed it",
    )  # fmt: skip
    assert first.ref == "refs/memsync/conflicts/notes%2Fb%2Emd"
    assert mirror.conflicts.open() == {"notes/b.md": first}
    assert first.local_sha256 == sha(b"L\n") and first.base_sha256 == sha(b"b\n")
    assert mirror.conflicts.side(first, "remote") == b"R\n"
    assert git(mirror.path, "show", f"{first.ref}:local") == "L\n"
    resolved = mirror.conflicts.end(first, resolution="ours", replaced=b"hand edit\n")
    assert mirror.conflicts.open() == {}
    second = mirror.conflicts.record("notes/b.md", base=None, local=b"L2\n", remote=b"R2\n", markers=b"m\n",
        remote_memory_id="mem_b", reason="created on both sides",
    )  # fmt: skip
    assert second.base_sha256 is None and mirror.conflicts.side(second, "base") is None
    assert mirror.conflicts.end(second, resolution="theirs") == resolved
    # Every resolution of the path is still reachable from the one ref.
    assert git(mirror.path, "show", f"{resolved}:previous/replaced") == "hand edit\n"
    assert git(mirror.path, "show", f"{resolved}:previous/local") == "L\n"
    assert git(mirror.path, "show", f"{resolved}:local") == "L2\n"
    fsck(mirror.path)


@settings(max_examples=60)
@given(st.text(alphabet=st.characters(exclude_categories=["Cs"]), min_size=1, max_size=400))
def test_conflict_ref_names_are_valid_refs(path: str) -> None:
    name = ref_name(path)
    checked = subprocess.run(["git", "check-ref-format", name], capture_output=True)
    assert checked.returncode == 0, name
    assert len(name) <= len("refs/memsync/conflicts/") + 200
    assert ref_name(path + "x") != name


# --- the base and main ----------------------------------------------------------------------------


def test_base_commits_round_trip_and_collapse_onto_the_tip(mirror: Mirror) -> None:
    snaps = Snapshots(mirror)
    tip = mirror.tip()
    tip_snapshot = snaps.of(tip)
    base_ref, base = snaps.base()
    assert base_ref == tip and base == tip_snapshot
    # A held path keeps an older entry: memsync writes a base commit of its own next to the tip.
    old = mirror.blob_for_sha256(sha(b"a\n"))
    assert old is not None
    held = {**tip_snapshot, "odd\npath.md": SnapshotEntry(old, sha(b"a\n"), "mem_odd")}
    written = snaps.write_base(held, expected_old=base_ref, tip=tip, tip_snapshot=tip_snapshot)
    assert written != tip and mirror.base() == written
    assert git(mirror.path, "rev-parse", f"{written}^").strip() == tip
    assert snaps.base() == (written, held)
    fsck(mirror.path)
    # Entries equal to the tip's snapshot: the base is the tip itself again.
    assert snaps.write_base(tip_snapshot, expected_old=written, tip=tip, tip_snapshot=tip_snapshot) == tip
    snaps.save()
    assert Snapshots(mirror).sha256(tip_snapshot["a.md"].blob) == sha(b"a\n")


def test_blob_hashes_are_noted_in_the_content_index_which_answers_both_ways(
    mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = b"hashed for a snapshot\n"
    blob = mirror.git.create_blob(data)  # no import indexed it
    reader = Snapshots(mirror)
    assert reader.sha256(blob) == sha(data)
    assert mirror.blob_for_sha256(sha(data)) is None, "a reader (status, a dry run) notes nothing"
    reader.save()
    assert mirror.blob_for_sha256(sha(data)) == blob  # SHA-256 -> blob, as an import asks
    fresh = Mirror.open(mirror.path)

    def unread(blob_id: str) -> bytes:
        raise AssertionError(f"{blob_id} was read: its hash is noted")

    monkeypatch.setattr(fresh, "content", unread)
    assert Snapshots(fresh).sha256(blob) == sha(data)  # blob -> SHA-256, as a snapshot asks
    fresh.close()


def test_a_reader_adds_no_content_rows_and_older_state_files_are_retired(mirror: Mirror) -> None:
    path = mirror.path
    blob = mirror.git.create_blob(b"x\n")
    mirror.close()
    state = path / ".git" / "memsync"
    (state / "state.sqlite").unlink()
    x_sha = sha(b"x\n")
    (state / "blob-sha256").write_text(f"{blob} {x_sha}\n")  # an older memsync's caches
    (state / "layout-checked").write_text("an older memsync's layout")
    (state / "content-index").write_text("an older memsync's index")
    with Mirror.open(path) as reopened:
        assert not (state / "blob-sha256").exists() and not (state / "content-index").exists()
        assert Snapshots(reopened).sha256(blob) == x_sha
    with sqlite3.connect(state / "state.sqlite") as db:
        assert db.execute("SELECT count(*) FROM content").fetchone() == (0,)


def test_the_base_ids_are_kept_so_a_lagging_base_needs_no_replay(
    mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    snaps = Snapshots(mirror)
    base = mirror.base()
    assert base == mirror.tip()
    expected = snaps.base()
    Snapshots(mirror).keep_base_ids()
    with mirror.history_writer() as writer:  # the store moves on; the base waits for a reconcile
        writer.add(record(3, "mem_c", "created", "c.md", b"c\n"))
        writer.add(record(4, "mem_a", "updated", "a.md", b"a2\n"))
    assert mirror.tip() != base
    fresh = Mirror.open(mirror.path)
    real = fresh.paths

    def no_replay(commit: str | None = None) -> dict[str, str]:
        assert commit != base, "the base's ids were replayed from history"
        return real(commit)

    monkeypatch.setattr(fresh, "paths", no_replay)
    assert Snapshots(fresh).base() == expected


def test_reset_main_keeps_local_commits(mirror: Mirror) -> None:
    root = mirror.path
    (root / "a.md").write_text("committed locally\n")
    git(root, "commit", "-qam", "local work")
    local = git(root, "rev-parse", "HEAD").strip()
    with mirror.history_writer() as writer:
        writer.add(record(3, "mem_a", "updated", "a.md", b"committed locally\n"))
    tip = mirror.tip()
    assert tip is not None
    from datetime import UTC, datetime

    kept = mirror.reset_main(tip, when=datetime(2026, 5, 1, tzinfo=UTC))
    assert kept == f"refs/memsync/pushed/20260501T000000Z-{local[:12]}"
    assert git(root, "rev-parse", kept).strip() == local
    assert git(root, "rev-parse", "main").strip() == tip
    assert git(root, "status", "--porcelain") == ""
    # Nothing to keep when main is behind the tip.
    assert mirror.reset_main(tip, when=datetime(2026, 5, 2, tzinfo=UTC)) is None
