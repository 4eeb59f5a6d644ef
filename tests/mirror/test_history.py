"""The history writer: commit format, determinism, resuming, redaction, skipping, and git as the oracle."""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from memsync.errors import MirrorError, UnsafeInput
from memsync.mirror import Mirror, VersionRecord, gitstore
from memsync.mirror.errors import FormatError, RefMoved
from memsync.mirror.fastimport import SCRATCH_REF, Move
from memsync.mirror.gitstore import GEOMETRIC_FROM
from memsync.mirror.history import DEFAULT_AUTHOR_EMAIL, DEFAULT_AUTHOR_NAME
from memsync.mirror.trailers import Trailers, format_message
from tests.mirror.oracle import T0, fsck, git, pack_count, record

NewMirror = Callable[..., Mirror]

HISTORY = [
    record(1, "mem_a", "created", "notes/a.md", b"alpha\n"),
    record(2, "mem_b", "created", "notes", b"a file named like a directory\n"),
    record(3, "mem_c", "created", ".gitmodules", b'[submodule "x"]\n\turl = ../../evil\n'),
    record(4, "mem_a", "updated", "notes/a.md", b"alpha 2\n"),
    record(5, "mem_a", "updated", "notes/moved/a.md", b"alpha 2\n"),  # an Anthropic rename
    record(6, "mem_d", "created", "100%.md", b"percent\n", author=("Ana <ana@x>\n", "ana@example.com")),
    record(7, "mem_a", "updated", None, None, redacted=True, sha="0" * 64),  # content and path gone
    record(8, "mem_e", "created", "skip/me.md", b"x", skipped=True, skip_reason="unsafe-path"),
    record(9, "mem_a", "deleted", "notes/moved/a.md", None),
    record(10, "mem_f", "created", "notes/new.md", b"new\n"),
    record(11, "mem_b", "updated", "notes", b"still a file\n"),
]


def blob_id(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0%s" % (len(content), content)).hexdigest()


def write(mirror: Mirror, records: list[VersionRecord], **options: object) -> str | None:
    with mirror.history_writer(**options) as writer:
        for item in records:
            writer.add(item)
    return mirror.tip()


def tree_listing(mirror: Mirror, rev: str = "refs/remotes/memstore/main") -> dict[str, str]:
    out = git(mirror.path, "ls-tree", "-r", "-z", "--format=%(path)\t%(objectname)", rev)
    return dict(line.split("\t") for line in out.split("\0") if line)


def test_commit_is_exactly_the_documented_format(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    tip = write(mirror, [record(1, "mem_a", "created", "notes/a.md", b"alpha\n")])
    assert tip is not None
    raw = git(mirror.path, "cat-file", "commit", tip)
    seconds = int(T0.timestamp()) + 1
    sha = hashlib.sha256(b"alpha\n").hexdigest()
    assert raw.split("\n", 1)[1] == (
        f"author memsync <memsync@localhost> {seconds} +0000\n"
        f"committer memsync <memsync@localhost> {seconds} +0000\n"
        "\n"
        "created notes/a.md\n"
        "\n"
        "Memory-Id: mem_a\n"
        "Memory-Version: memver_0001\n"
        "Operation: created\n"
        "Memory-Path: notes/a.md\n"
        f"Content-SHA256: {sha}\n"
        "Created-At: 2026-03-01T12:00:01.250000Z\n"
        "Memsync-Format: 1\n"
    )
    # git's own trailer parser reads the same trailers.
    parsed = git(
        mirror.path,
        "interpret-trailers",
        "--parse",
        input=git(mirror.path, "log", "-1", "--format=%B", tip).encode(),
    )
    assert "Memory-Version: memver_0001" in parsed and "Memsync-Format: 1" in parsed
    assert git(mirror.path, "show", f"{tip}:notes/a.md") == "alpha\n"
    fsck(mirror.path)


def test_the_history_reads_back_as_git_and_memsync_see_it(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    tip = write(mirror, HISTORY)
    fsck(mirror.path)
    assert git(mirror.path, "rev-list", "--count", "refs/remotes/memstore/main").strip() == str(len(HISTORY))
    assert mirror.files(tip or "") == {
        "notes": blob_id(b"still a file\n"),
        "notes/new.md": blob_id(b"new\n"),
        ".gitmodules": blob_id(HISTORY[2].content or b""),
        "100%.md": blob_id(b"percent\n"),
    }
    assert sorted(tree_listing(mirror)) == ["%2Egitmodules", "100%25.md", "notes%_", "notes/new.md"]
    assert mirror.paths() == {
        "notes": "mem_b",
        "notes/new.md": "mem_f",
        ".gitmodules": "mem_c",
        "100%.md": "mem_d",
    }
    subjects = git(mirror.path, "log", "--reverse", "--format=%s", "refs/remotes/memstore/main").splitlines()
    assert subjects == [
        "created notes/a.md",
        "created notes",
        "created .gitmodules",
        "updated notes/a.md",
        "updated notes/moved/a.md (moved from notes/a.md)",
        "created 100%.md",
        "updated notes/moved/a.md (redacted)",
        "created skip/me.md (skipped: unsafe-path)",
        "deleted notes/moved/a.md",
        "created notes/new.md",
        "updated notes",
    ]
    # The actor's name cannot break git's ident format; git log shows the cleaned one.
    assert git(
        mirror.path, "log", "--format=%an <%ae>", "-1", "--skip=5", "refs/remotes/memstore/main"
    ).strip() == ("Ana ana@x <ana@example.com>")
    # git log --follow works across the rename.
    assert git(
        mirror.path, "log", "--follow", "--format=%s", "refs/remotes/memstore/main", "--", "notes/moved/a.md"
    )


def test_the_checkpoint_is_the_tips_trailers(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    assert mirror.last_imported() is None
    write(mirror, HISTORY)
    last = mirror.last_imported()
    assert last is not None
    assert (last.version_id, last.memory_id, last.operation, last.memory_path) == (
        "memver_0011",
        "mem_b",
        "updated",
        "notes",
    )
    assert last.created_at == HISTORY[-1].created_at
    assert last.commit == mirror.tip()
    assert [v.version_id for v in mirror.imported_versions()] == [r.version_id for r in reversed(HISTORY)]
    versions = {v.version_id: v for v in mirror.imported_versions()}
    assert versions["memver_0007"].redacted and versions["memver_0007"].memory_path is None
    assert versions["memver_0008"].skipped == "unsafe-path"
    started = time.perf_counter()
    for _ in range(200):
        mirror.last_imported()
    assert (time.perf_counter() - started) / 200 < 0.002  # tens of microseconds when the machine is idle


def test_the_newest_versions_read_without_the_older_history(new_mirror: NewMirror) -> None:
    # A cycle reads its checkpoint from the newest commits: reading the whole history first (a sorted
    # walk) costs every cycle memory and time that grow with each import. The oldest commit removed
    # from the object store shows it: what is read lazily never touches it.
    mirror = new_mirror()
    tip = write(mirror, HISTORY)
    assert tip is not None
    root = git(mirror.path, "rev-list", "--max-parents=0", tip).strip()
    packs = mirror.path / ".git" / "objects" / "pack"
    for pack in sorted(packs.glob("*.pack")):
        kept = pack.with_name(pack.name + ".kept")
        os.replace(pack, kept)
        pack.with_suffix(".idx").unlink()
        with kept.open("rb") as stream:
            subprocess.run(["git", "unpack-objects", "-q"], cwd=mirror.path, stdin=stream, check=True)
        kept.unlink()
    mirror.close()
    (mirror.path / ".git" / "objects" / root[:2] / root[2:]).unlink()

    with Mirror.open(mirror.path) as reopened:
        newest = [v.version_id for _, v in zip(range(3), reopened.imported_versions(), strict=False)]
    assert newest == [r.version_id for r in reversed(HISTORY[-3:])]


def test_two_fresh_mirrors_make_identical_commits(new_mirror: NewMirror) -> None:
    first = write(new_mirror("one"), HISTORY)
    second = write(new_mirror("two"), HISTORY, batch_commits=2)
    assert first == second


def test_an_interrupted_import_resumes_to_the_same_commits(new_mirror: NewMirror) -> None:
    uninterrupted = write(new_mirror("one"), HISTORY)
    mirror = new_mirror("two")
    writer = mirror.history_writer(batch_commits=4)
    for item in HISTORY[:7]:
        writer.add(item)
    del writer  # dropped without flushing: the 7th commit is lost, 4 were checkpointed
    last = mirror.last_imported()
    assert last is not None and last.version_id == "memver_0004"
    done = [r.version_id for r in HISTORY].index(last.version_id) + 1
    assert write(Mirror.open(mirror.path), HISTORY[done:]) == uninterrupted
    fsck(mirror.path)


KILLED_WRITER = """
import sys
from tests.mirror.oracle import record
from memsync.mirror import Mirror
mirror = Mirror.open(sys.argv[1])
writer = mirror.history_writer(batch_commits=5)
for n in range(1, 100_000):
    writer.add(record(n, f"mem_{n % 50}", "updated" if n > 50 else "created", f"d{n % 7}/m{n % 50}.md",
                      f"version {n}\\n".encode()))
    if writer.pending == 0:
        print(n, flush=True)
"""


@pytest.mark.e2e
def test_kill_9_mid_import_leaves_a_consistent_checkpoint(new_mirror: NewMirror) -> None:
    mirror = new_mirror("killed")
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(mirror.path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert child.stdout is not None
    for _ in range(6):  # six batches are behind the ref; the child is busy with the seventh
        assert child.stdout.readline()
    child.send_signal(signal.SIGKILL)
    child.wait()
    fsck(mirror.path)
    resumed = Mirror.open(mirror.path)
    last = resumed.last_imported()
    assert last is not None
    done = int(last.version_id.removeprefix("memver_"))
    assert done >= 30 and done % 5 == 0

    def versions(start: int, stop: int) -> list[VersionRecord]:
        return [
            record(
                n,
                f"mem_{n % 50}",
                "updated" if n > 50 else "created",
                f"d{n % 7}/m{n % 50}.md",
                f"version {n}\n".encode(),
            )
            for n in range(start, stop)
        ]

    end = done + 12
    assert write(resumed, versions(done + 1, end)) == write(new_mirror("clean"), versions(1, end))
    fsck(resumed.path)


def test_unsafe_data_is_refused_before_anything_changes(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    with mirror.history_writer() as writer:
        writer.add(record(1, "mem_a", "created", "a.md", b"a"))
        before = writer.tip
        bad = [
            record(2, "mem_b", "created", "b.md", b"b", sha="f" * 64),  # hash mismatch
            record(2, "mem_b", "created", "x/../../etc/passwd", b"b"),
            record(2, "mem_b", "created", "/abs", b"b"),
            record(2, "mem bad", "created", "b.md", b"b"),
            record(2, "mem_b", "created", "b.md", b"b", skipped=True, skip_reason="Not A Token"),
        ]
        for item in bad:
            with pytest.raises(UnsafeInput, match=r"is not written|not an id"):
                writer.add(item)
            assert writer.tip == before
        # The engine skips the version instead, and the import goes on.
        writer.add(record(2, "mem_b", "created", None, None, skipped=True, skip_reason="hash-mismatch"))
        writer.add(record(3, "mem_c", "created", "c.md", b"c"))
    assert mirror.paths() == {"a.md": "mem_a", "c.md": "mem_c"}
    fsck(mirror.path)


def test_content_is_reused_by_hash_without_being_passed_again(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    write(mirror, [record(1, "mem_a", "created", "a.md", b"shared\n")])
    sha = hashlib.sha256(b"shared\n").hexdigest()
    blob = mirror.blob_for_sha256(sha)
    assert blob == blob_id(b"shared\n")
    assert mirror.blob_for_sha256("0" * 64) is None
    with mirror.history_writer() as writer:
        fresh = hashlib.sha256(b"fresh\n").hexdigest()
        assert writer.has_content(sha) and not writer.has_content(fresh)
        writer.add(record(2, "mem_b", "created", "b.md", None, sha=sha))
        writer.add(record(3, "mem_c", "created", "c.md", b"fresh\n"))
        assert writer.has_content(fresh)  # in the unflushed batch
        writer.add(record(4, "mem_d", "created", "d.md", None, sha=fresh))
    assert mirror.files(mirror.tip() or "")["b.md"] == blob
    assert mirror.files(mirror.tip() or "")["d.md"] == blob_id(b"fresh\n")
    with pytest.raises(MirrorError, match="no content with SHA-256"):
        write(mirror, [record(5, "mem_e", "created", "e.md", None, sha="1" * 64)])


def test_the_content_index_is_rebuilt_and_caught_up_from_history(
    new_mirror: NewMirror, caplog: pytest.LogCaptureFixture
) -> None:
    mirror = new_mirror()
    write(mirror, HISTORY[:4])
    state = mirror.state_dir / "state.sqlite"
    mirror.close()
    kept = state.read_bytes()
    mirror = Mirror.open(mirror.path)
    write(mirror, HISTORY[4:])
    mirror.close()
    state.write_bytes(kept)  # as if killed between the ref update and the index's commit
    with Mirror.open(mirror.path) as reopened:
        assert reopened.blob_for_sha256(hashlib.sha256(b"new\n").hexdigest()) is not None
    every = (b"alpha\n", b"percent\n", b"still a file\n", b"new\n")
    # Missing (beside an older memsync's text index, which goes), or garbage (set aside, and said):
    # each is rebuilt from history.
    legacy = mirror.state_dir / "content-index"
    for damage in (None, b"\0junk" * 99):
        if damage is None:
            state.unlink()
            legacy.write_bytes(b"memsync-content-index 1\n" + b"0" * 64 + b" " + b"1" * 40 + b"\n")
        else:
            state.write_bytes(damage)
        with (
            caplog.at_level(logging.WARNING, logger="memsync.mirror.state"),
            Mirror.open(mirror.path) as reopened,
        ):
            for content in every:
                assert reopened.blob_for_sha256(hashlib.sha256(content).hexdigest()) is not None
            assert reopened.blob_for_sha256("0" * 64) is None
        assert not legacy.exists()
    assert (mirror.state_dir / "state.sqlite.damaged").read_bytes() == b"\0junk" * 99
    assert "state.sqlite.damaged" in caplog.text and "memsync verify" in caplog.text


def test_redacted_versions_keep_or_replace_the_file(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    head = [record(1, "mem_a", "created", "a.md", b"v1\n"), record(2, "mem_a", "updated", "a.md", b"v2\n")]
    write(mirror, head)
    before = tree_listing(mirror)
    # A redacted version without content: the tree stays as it was.
    write(mirror, [record(3, "mem_a", "updated", "a.md", None, redacted=True, sha="2" * 64)])
    assert tree_listing(mirror) == before
    body = git(mirror.path, "log", "-1", "--format=%B", "refs/remotes/memstore/main")
    assert "Redacted: true" in body and "Memory-Path" not in body
    # The engine passes the live memory's content (same hash) for a redacted head version.
    write(mirror, [record(4, "mem_a", "updated", "a.md", b"v4\n", redacted=True)])
    assert git(mirror.path, "show", "refs/remotes/memstore/main:a.md") == "v4\n"
    # A replacement without any path for a memory the mirror never saw cannot be placed.
    with pytest.raises(UnsafeInput, match="no path"):
        write(mirror, [record(5, "mem_new", "created", None, b"lost\n", redacted=True)])
    fsck(mirror.path)


def test_a_file_and_a_directory_of_the_same_name_come_and_go(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    steps = [
        (record(1, "mem_f", "created", "a", b"file a\n"), ["a"]),
        (record(2, "mem_g", "created", "a/b", b"file a/b\n"), ["a%_", "a/b"]),
        (record(3, "mem_h", "created", "a/b/c", b"file a/b/c\n"), ["a%_", "a/b%_", "a/b/c"]),
        (record(4, "mem_h", "deleted", "a/b/c", None), ["a%_", "a/b"]),
        (record(5, "mem_g", "deleted", "a/b", None), ["a"]),
    ]
    for item, expected in steps:
        write(mirror, [item])
        assert sorted(tree_listing(mirror)) == expected
        fsck(mirror.path)
    assert git(mirror.path, "show", "refs/remotes/memstore/main:a") == "file a\n"


def test_the_path_map_is_rebuilt_from_trailers_alone(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    write(mirror, HISTORY)
    expected = mirror.paths()
    mirror.git.state.drop_caches("paths")
    assert Mirror.open(mirror.path).paths() == expected
    # A stale cache (an older tip) is caught up by replaying only the newer commits.
    write(mirror, [record(12, "mem_g", "created", "g.md", b"g\n")])
    fresh = mirror.git.state.get("paths")
    write(mirror, [record(13, "mem_h", "created", "h.md", b"h\n")])
    mirror.git.state.put("paths", fresh)
    assert Mirror.open(mirror.path).paths() == {**expected, "g.md": "mem_g", "h.md": "mem_h"}
    # And the history at an older commit.
    first = git(mirror.path, "rev-list", "--reverse", "refs/remotes/memstore/main").split()[0]
    assert mirror.paths(first) == {"notes/a.md": "mem_a"}


def test_a_memory_that_still_held_a_path_loses_it_to_a_new_one(new_mirror: NewMirror) -> None:
    # Version retention may drop mem_a's delete: mem_b then creates the same path.
    mirror = new_mirror()
    write(
        mirror, [record(1, "mem_a", "created", "p.md", b"a\n"), record(2, "mem_b", "created", "p.md", b"b\n")]
    )
    assert mirror.paths() == {"p.md": "mem_b"}
    write(mirror, [record(3, "mem_a", "deleted", "p.md", None)])  # late: p.md is mem_b's now
    assert mirror.paths() == {"p.md": "mem_b"}
    assert git(mirror.path, "show", "refs/remotes/memstore/main:p.md") == "b\n"


def test_large_directories_are_stored_as_deltas(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    records = [
        record(
            n,
            f"mem_{n % 300}",
            "created" if n < 300 else "updated",
            f"flat/m{n % 300:03d}.md",
            f"{n}\n".encode(),
        )
        for n in range(600)
    ]
    write(mirror, records)
    fsck(mirror.path)
    packs = list((mirror.git.objects_dir / "pack").glob("pack-*.idx"))
    verify = git(mirror.path, "verify-pack", "-v", *map(str, packs))
    assert "chain length = 1:" in verify  # trees stored as deltas, and git reads them
    assert mirror.files(mirror.tip() or "")["flat/m299.md"] == blob_id(b"599\n")


def test_the_ref_moves_only_by_compare_and_swap(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    write(mirror, HISTORY[:2])
    writer = mirror.history_writer()
    writer.add(HISTORY[2])
    first = git(mirror.path, "rev-list", "--reverse", "refs/remotes/memstore/main").split()[0]
    git(mirror.path, "update-ref", "refs/remotes/memstore/main", first)  # someone else moved it
    with pytest.raises(RefMoved, match="moved while memsync was writing"):
        writer.flush()
    assert mirror.tip() == first
    with pytest.raises(MirrorError, match="cannot continue"):
        writer.add(HISTORY[3])
    with pytest.raises(RefMoved):
        mirror.git.set_ref_if_equals(mirror.BASE_REF, first, "0" * 40)
    mirror.git.set_ref_if_equals(mirror.BASE_REF, first, None)
    with pytest.raises(RefMoved):
        mirror.git.set_ref_if_equals(mirror.BASE_REF, first, None)
    mirror.git.delete_ref_if_equals(mirror.BASE_REF, first)
    assert mirror.base() is None


def test_packs_stay_few_however_many_batches(new_mirror: NewMirror) -> None:
    # One pack per batch, and git repack --geometric past GEOMETRIC_FROM of them.
    mirror = new_mirror()
    items = [
        record(n, f"mem_{n % 7}", "created" if n < 7 else "updated", f"m{n % 7}.md", b"v%d\n" % n)
        for n in range(40)
    ]
    for item in items:
        write(mirror, [item])
        assert pack_count(mirror.path) <= GEOMETRIC_FROM
    assert int(git(mirror.path, "count-objects", "-v").split("count: ")[1].split()[0]) == 0  # nothing loose
    fsck(mirror.path)
    fresh = new_mirror("fresh")
    write(fresh, items)
    assert mirror.tip() == fresh.tip()


def test_another_format_is_refused_with_a_clear_message(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    write(mirror, HISTORY[:1])
    tree = git(mirror.path, "rev-parse", "refs/remotes/memstore/main^{tree}").strip()
    message = (
        "created x\n\nMemory-Id: mem_a\nMemory-Version: memver_9\nOperation: created\n"
        "Created-At: 2026-01-01T00:00:00Z\nMemsync-Format: 3\n"
    )
    commit = git(
        mirror.path, "commit-tree", tree, "-p", "refs/remotes/memstore/main", input=message.encode()
    ).strip()
    git(mirror.path, "update-ref", "refs/remotes/memstore/main", commit)
    with pytest.raises(FormatError, match=r"Memsync-Format '3'.*upgrade memsync"):
        mirror.last_imported()
    git(
        mirror.path,
        "update-ref",
        "refs/remotes/memstore/main",
        git(mirror.path, "commit-tree", tree, "-m", "by hand").strip(),
    )
    with pytest.raises(FormatError, match="not written by memsync"):
        mirror.last_imported()


def test_a_path_cannot_forge_trailers(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    forged = "x\n\nMemory-Id: mem_forged\nMemsync-Format: 3"
    write(mirror, [record(1, "mem_a", "created", forged, b"x")])
    last = mirror.last_imported()
    assert last is not None and last.memory_id == "mem_a" and last.memory_path == forged
    trailers = git(
        mirror.path,
        "interpret-trailers",
        "--parse",
        input=git(mirror.path, "log", "-1", "--format=%B", "refs/remotes/memstore/main").encode(),
    )
    assert "mem_forged" not in trailers.replace("\\n", " ").split("Memory-Id: ")[1].split("\n")[0]
    fsck(mirror.path)


def test_writer_and_fast_import_agree_on_every_commit_id(tmp_path: Path, new_mirror: NewMirror) -> None:
    records = [
        record(
            n,
            f"mem_{n % 9}",
            "created" if n < 9 else "updated",
            f"d{n % 9 % 3}/e{n % 9 % 2}/m{n % 9}.md",
            f"v{n}\n".encode(),
        )
        for n in range(30)
    ]
    stream = []
    for mark, item in enumerate(records, start=1):
        assert item.path and item.content is not None
        message = format_message(
            f"{item.operation} {item.path}",
            Trailers(
                item.memory_id,
                item.version_id,
                item.operation,
                item.created_at,
                item.path,
                item.content_sha256,
            ),
        ).encode()
        seconds = int(item.created_at.timestamp())
        ident = f"{DEFAULT_AUTHOR_NAME} <{DEFAULT_AUTHOR_EMAIL}> {seconds} +0000".encode()
        stream.append(b"commit refs/heads/main\nmark :%d\nauthor %s\ncommitter %s\n" % (mark, ident, ident))
        stream.append(b"data %d\n%s\n" % (len(message), message))
        if mark > 1:
            stream.append(b"from :%d\n" % (mark - 1))
        stream.append(
            b"M 100644 inline %s\ndata %d\n%s\n" % (item.path.encode(), len(item.content), item.content)
        )
    repo = tmp_path / "fast-import"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    git(repo, "fast-import", "--quiet", input=b"".join(stream))
    mirror = new_mirror()
    write(mirror, records, batch_commits=7)
    assert (
        git(repo, "rev-list", "main").split()
        == git(mirror.path, "rev-list", "refs/remotes/memstore/main").split()
    )


def test_nothing_is_written_to_the_working_tree_during_import(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    write(mirror, HISTORY)
    assert sorted(os.listdir(mirror.path)) == [".git"]


def test_leftovers_of_a_killed_writer_are_handled(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    write(mirror, HISTORY[:1])
    # What a writer killed mid-stream leaves: fast-import's scratch ref and its crash report.
    tip = mirror.tip()
    assert tip is not None
    git(mirror.path, "update-ref", SCRATCH_REF, tip)
    (mirror.git_dir / "fast_import_crash_4242").write_text("fast-import crash report:\n")
    write(mirror, HISTORY[1:2])
    assert mirror.git.ref_target(SCRATCH_REF) is None
    assert not (mirror.git_dir / "fast_import_crash_4242").exists()
    fsck(mirror.path)
    writer = mirror.history_writer()
    # A ref lock left by a killed git: the error says what to do.
    lock = mirror.git_dir / "refs" / "remotes" / "memstore" / "main.lock"
    lock.write_text("")
    writer.add(HISTORY[1])
    with pytest.raises(MirrorError, match="delete that file and run again"):
        writer.flush()


def test_git_fast_import_refusing_a_stream_is_a_clear_error_and_moves_nothing(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    write(mirror, HISTORY[:2])
    tip = mirror.tip()
    stream = mirror.git.fast_import()
    who = b"t <t@example.com> 0 +0000"
    stream.commit(parent=tip, author=who, committer=who, message=b"m\n", changes=[Move("absent.md", "b.md")])
    refused = r"git fast-import failed writing the mirror's objects: .*absent\.md"
    with pytest.raises(MirrorError, match=refused):
        stream.finish()
    assert mirror.tip() == tip
    assert mirror.git.ref_target(SCRATCH_REF) is None
    fsck(mirror.path)


def test_marks_git_fast_import_did_not_leave_are_a_clear_error_and_move_nothing(
    new_mirror: NewMirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror = new_mirror()
    write(mirror, HISTORY[:2])
    tip = mirror.tip()
    # A fault git itself never makes (it exits non-zero when it cannot write marks): the marks file
    # gone after a fast-import that succeeded, as another program deleting it would leave things.
    real_git = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True, check=True)
    wrapper = tmp_path / "bin" / "git"
    wrapper.parent.mkdir()
    wrapper.write_text(
        "#!/bin/sh\n"
        f'"{real_git.stdout.strip()}" "$@"; status=$?\n'
        'for arg; do case "$arg" in --export-marks=*) rm -f "${arg#--export-marks=}";; esac; done\n'
        'exit "$status"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(
        MirrorError, match=r"without the id of commit :1 in its marks file .*run the command again"
    ):
        write(mirror, HISTORY[2:4])
    assert mirror.tip() == tip
    monkeypatch.undo()
    write(mirror, HISTORY[2:4])
    assert mirror.tip() is not None and mirror.tip() != tip
    fsck(mirror.path)


@pytest.mark.parametrize("sealed_bytes", [1, 1 << 40], ids=["every-merge-seals", "never-sealed"])
def test_merging_packs_keeps_everything_any_ref_reflog_or_the_index_reaches(
    new_mirror: NewMirror, monkeypatch: pytest.MonkeyPatch, sealed_bytes: int
) -> None:
    # Merges leave sealed packs alone and walk only what lies beyond their tips: git fsck (which
    # checks that every object refs, reflogs and the index reach is there) is the oracle, through
    # sealing, a user's commit and staged file, memsync's own refs, and a gc that prunes.
    monkeypatch.setattr(gitstore, "GEOMETRIC_FROM", 2)
    monkeypatch.setattr(gitstore, "SEALED_BYTES", sealed_bytes)
    mirror = new_mirror()
    items = [
        record(n, f"mem_{n % 5}", "created" if n < 5 else "updated", f"m{n % 5}.md", b"v%d\n" % n)
        for n in range(30)
    ]
    for n, item in enumerate(items[:20]):
        write(mirror, [item])
        if n == 6:
            mirror.write_metadata(store={"name": "s"}, memories={"mem_0": {"id": "mem_0"}}, when=T0)
            assert mirror.update_checkout().updated
            (mirror.path / "mine.md").write_text("a user's note\n")
            git(mirror.path, "add", "mine.md")
            git(mirror.path, "commit", "-q", "-m", "mine")
            (mirror.path / "staged.md").write_text("staged, not committed\n")
            git(mirror.path, "add", "staged.md")
        # Open packs never pile up past GEOMETRIC_FROM; sealed ones stay as they were written.
        assert pack_count(mirror.path) <= gitstore.GEOMETRIC_FROM + (n // 3 + 1 if sealed_bytes == 1 else 1)
        fsck(mirror.path)
    if sealed_bytes == 1:
        assert pack_count(mirror.path) > gitstore.GEOMETRIC_FROM + 1  # the sealed packs were left alone
    mirror.git.drop_unreachable()  # git gc: its pack is sealed at the refs as they are
    for item in items[20:]:
        write(mirror, [item])
        fsck(mirror.path)
    assert git(mirror.path, "show", ":staged.md") == "staged, not committed\n"
    assert git(mirror.path, "show", "main:mine.md") == "a user's note\n"
    fresh = new_mirror("fresh")
    write(fresh, items)
    assert mirror.tip() == fresh.tip()
