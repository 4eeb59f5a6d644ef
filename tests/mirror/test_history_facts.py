"""What a history says about itself: inferred deletes, History-Truncated, and the facts the writer keeps.

Real repositories, the real git binary as the oracle; the pull that decides when to write these is
tested against the server in tests/sync/test_history_truth.py.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memsync.errors import UnsafeInput
from memsync.mirror import Mirror, Rewriter, VersionRecord
from memsync.mirror.errors import FormatError
from memsync.mirror.history import HistoryFacts, RedactedCommit
from memsync.mirror.trailers import Trailers, format_message, parse_message
from tests.mirror.oracle import T0, fsck, git, record

SECRET = b"api_key=sk-live\n"


def write(path: Path, records: list[VersionRecord], *, batch: int = 2) -> Mirror:
    mirror = Mirror.init(path) if not path.exists() else Mirror.open(path)
    with mirror.history_writer(batch_commits=batch) as writer:
        for item in records:
            writer.add(item)
    mirror.update_checkout()
    return mirror


def blob(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0%s" % (len(content), content), usedforsecurity=False).hexdigest()


def exists(repo: Path, obj: str) -> bool:
    return (
        subprocess.run(["git", "-C", str(repo), "cat-file", "-e", obj], capture_output=True).returncode == 0
    )


def inferred(memory: str, path: str, at: int) -> VersionRecord:
    return VersionRecord.inferred_delete(
        memory, path, record(at, memory, "deleted", path, None).created_at, "tombstone-expired"
    )


# --- the trailers -----------------------------------------------------------------------------------


def test_the_new_trailers_round_trip_and_sit_before_the_format() -> None:
    trailers = Trailers(
        memory_id="mem_1",
        version_id="inferred:mem_1",
        operation="deleted",
        created_at=T0,
        memory_path="a.md",
        inferred="tombstone-expired",
        history_truncated=3,
    )
    text = format_message("deleted a.md", trailers)
    assert text.endswith("Memsync-Inferred: tombstone-expired\nHistory-Truncated: 3\nMemsync-Format: 1\n")
    assert parse_message(text) == trailers


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        (("History-Truncated: 3", "History-Truncated: 0"), "positive count"),
        (("History-Truncated: 3", "History-Truncated: three"), "positive count"),
        (("Memsync-Inferred: tombstone-expired", "Memsync-Inferred: Tombstone"), "reason token"),
        (("Operation: deleted", "Operation: updated"), "only on a delete"),
        (("Memory-Version: inferred:mem_1", "Memory-Version: memver_1"), "only on a delete"),
    ],
)
def test_malformed_new_trailers_are_refused(change: tuple[str, str], complaint: str) -> None:
    good = format_message(
        "deleted a.md",
        Trailers(
            memory_id="mem_1",
            version_id="inferred:mem_1",
            operation="deleted",
            created_at=T0,
            memory_path="a.md",
            inferred="tombstone-expired",
            history_truncated=3,
        ),
    )
    with pytest.raises(FormatError, match=complaint):
        parse_message(good.replace(*change))


def test_an_overlong_memory_id_gets_a_digest_for_its_inferred_version() -> None:
    long_id = "m" * 250

    def version_id(memory_id: str) -> str:
        return VersionRecord.inferred_delete(
            memory_id, "a.md", datetime.now(UTC), "tombstone-expired"
        ).version_id

    assert version_id("mem_1") == "inferred:mem_1"
    assert version_id(long_id) == "inferred:" + hashlib.sha256(long_id.encode()).hexdigest()


# --- the writer -------------------------------------------------------------------------------------


def test_an_inferred_delete_removes_the_file_with_a_deterministic_commit(tmp_path: Path) -> None:
    history = [record(1, "mem_a", "created", "a.md", b"a\n"), record(2, "mem_g", "created", "d/g.md", b"g\n")]
    one = write(tmp_path / "one", [*history, inferred("mem_g", "d/g.md", 2)])
    two = write(tmp_path / "two", [*history, inferred("mem_g", "d/g.md", 2)], batch=1)
    assert one.tip() == two.tip()
    tip = one.tip()
    assert tip is not None
    assert git(one.path, "ls-tree", "-r", "--name-only", tip).split() == ["a.md"]
    message = git(one.path, "cat-file", "commit", tip).split("\n\n", 1)[1]
    assert message.startswith("deleted d/g.md (inferred: the store no longer lists the memory)\n\n")
    assert one.paths() == {"a.md": "mem_a"}
    fsck(one.path)


@pytest.mark.parametrize(
    "bad",
    [
        lambda r: replace(r, operation="updated", content=b"x"),
        lambda r: replace(r, version_id="memver_9"),
        lambda r: replace(r, inferred="Not A Token"),
    ],
)
def test_an_inferred_record_is_only_a_delete_named_after_its_memory(tmp_path: Path, bad: object) -> None:
    assert callable(bad)
    mirror = write(tmp_path / "m", [record(1, "mem_g", "created", "g.md", b"g\n")])
    with mirror.history_writer() as writer, pytest.raises(UnsafeInput):
        writer.add(bad(inferred("mem_g", "g.md", 2)))


def test_history_truncated_goes_on_the_first_commit_only(tmp_path: Path) -> None:
    first = replace(record(1, "mem_a", "updated", "a.md", b"a2\n"), history_truncated=2)
    mirror = write(tmp_path / "m", [first, record(2, "mem_b", "created", "b.md", b"b\n")])
    root = git(mirror.path, "rev-list", "--max-parents=0", "refs/remotes/memstore/main").strip()
    assert "History-Truncated: 2\n" in git(mirror.path, "log", "-1", "--format=%B", root)
    with mirror.history_writer() as writer, pytest.raises(UnsafeInput, match="first commit only"):
        writer.add(replace(record(3, "mem_b", "updated", "b.md", b"b2\n"), history_truncated=1))


# --- the facts --------------------------------------------------------------------------------------


def test_the_facts_the_writer_keeps_equal_a_walk_of_the_history(tmp_path: Path) -> None:
    history = [
        replace(record(1, "mem_a", "updated", "a.md", b"a\n"), history_truncated=1),
        record(2, "mem_s", "created", "s.md", SECRET, redacted=True),
        record(3, "mem_b", "created", "b.md", b"b\n"),
        record(4, "mem_b", "updated", "b.md", None, redacted=True, sha="c" * 64),
        record(5, "mem_c", "created", "c.md", b"c\n"),
    ]
    mirror = write(tmp_path / "m", history)
    kept = mirror.facts()
    root = git(mirror.path, "rev-list", "--max-parents=0", "refs/remotes/memstore/main").strip()
    assert kept.root == root and kept.truncated == 1
    assert [(r.version_id, r.memory_id, r.wrote) for r in kept.redacted] == [
        ("memver_0002", "mem_s", True),
        ("memver_0004", "mem_b", False),
    ]
    mirror.git.state.put("history-facts", None)
    walked = mirror.facts(save=False)
    assert walked == kept
    assert mirror.git.state.get("history-facts") is None, "save=False writes nothing"
    # A mirror whose facts were never cached gets them from one walk, then extends them batch by batch.
    write(mirror.path, [record(6, "mem_s", "updated", "s.md", b"clean\n")])
    assert mirror.facts() == walked
    assert Mirror.open(mirror.path).facts() == HistoryFacts(root=root, truncated=1, redacted=walked.redacted)


# --- rewriting a redacted commit's content ----------------------------------------------------------


def test_a_redacted_commit_loses_content_its_memory_no_longer_serves(tmp_path: Path) -> None:
    # mem_s's head was redacted while live: its commit kept the content the memory served then.
    leaky = record(2, "mem_s", "created", "s.md", SECRET, redacted=True)
    rotated = record(3, "mem_s", "updated", "s.md", b"rotated\n")
    first = replace(record(1, "mem_a", "updated", "a.md", b"a\n"), history_truncated=1)
    mirror = write(tmp_path / "m", [first, leaky, rotated])
    assert exists(mirror.path, blob(SECRET))
    report = Rewriter(mirror).redact([], recontent={"memver_0002": None})
    assert report is not None and report.removed == (blob(SECRET),)
    assert not exists(mirror.path, blob(SECRET))
    fresh = write(tmp_path / "fresh", [first, replace(leaky, content=None), rotated])
    assert mirror.tip() == fresh.tip()
    assert mirror.facts().redacted == [
        RedactedCommit(
            git(mirror.path, "rev-parse", "refs/remotes/memstore/main~1").strip(),
            "memver_0002",
            "mem_s",
            hashlib.sha256(SECRET).hexdigest(),
            False,
        )
    ]
    fsck(mirror.path)
    # Nothing more to do; and serving the content again brings it back, as a fresh import would write it.
    assert Rewriter(mirror).redact([], recontent={"memver_0002": None}) is None
    back = Rewriter(mirror).redact([], recontent={"memver_0002": SECRET})
    assert back is not None
    assert mirror.tip() == write(tmp_path / "again", [first, leaky, rotated]).tip()


def test_a_rewrite_from_the_first_commit_keeps_what_it_says_about_the_history(tmp_path: Path) -> None:
    first = replace(record(1, "mem_s", "updated", "s.md", SECRET), history_truncated=4)
    later = [record(2, "mem_s", "updated", "s.md", b"clean\n"), inferred("mem_x", "x.md", 2)]
    mirror = write(tmp_path / "m", [first, record(2, "mem_x", "created", "x.md", b"x\n"), *later])
    redacted = replace(record(1, "mem_s", "updated", "s.md", None, sha=first.content_sha256), redacted=True)
    report = Rewriter(mirror).redact([redacted])
    assert report is not None and report.commits == 4
    fresh = write(
        tmp_path / "fresh",
        [replace(redacted, history_truncated=4), record(2, "mem_x", "created", "x.md", b"x\n"), *later],
    )
    assert mirror.tip() == fresh.tip()
    assert mirror.facts().truncated == 4
