"""The redaction rewrite on real repositories: fresh-import ids, no object left, local work carried over."""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.mirror import Mirror, Rewriter, VersionRecord
from tests.mirror.oracle import fsck, git, record
from tests.mirror.test_history_model import operations, play

SECRET = b"password=hunter2\n"

HISTORY = [
    record(1, "mem_a", "created", "notes/a.md", b"alpha\n"),
    record(2, "mem_s", "created", "secret.md", SECRET),
    record(3, "mem_a", "updated", "notes/a.md", b"alpha 2\n"),
    record(4, "mem_s", "updated", "secret.md", b"password=<removed>\n"),
    record(5, "mem_b", "created", "b.md", b"bee\n"),
]


def write(path: Path, records: list[VersionRecord]) -> Mirror:
    mirror = Mirror.init(path) if not path.exists() else Mirror.open(path)
    with mirror.history_writer(batch_commits=3) as writer:
        for item in records:
            writer.add(item)
    mirror.update_checkout()
    return mirror


def forward_redacted(item: VersionRecord) -> VersionRecord:
    """The version as a fresh import sees it after a Forward/Cloud redaction: path and hash kept."""
    return replace(item, content=None, redacted=True)


def anthropic_redacted(item: VersionRecord) -> VersionRecord:
    """As Anthropic serves a redacted version: no content, no path, no hash."""
    return replace(item, content=None, path=None, content_sha256=None, redacted=True)


def exists(repo: Path, obj: str) -> bool:
    found = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", obj], capture_output=True)
    return found.returncode == 0


def blob(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0%s" % (len(content), content), usedforsecurity=False).hexdigest()


def test_the_rewritten_mirror_equals_a_fresh_import_and_holds_no_redacted_object(tmp_path: Path) -> None:
    mirror = write(tmp_path / "m", HISTORY)
    old_tip = mirror.tip()
    assert exists(mirror.path, blob(SECRET))
    redacted = forward_redacted(HISTORY[1])
    report = Rewriter(mirror).redact([redacted])
    assert report is not None
    fresh = write(tmp_path / "fresh", [HISTORY[0], redacted, *HISTORY[2:]])
    assert mirror.tip() == fresh.tip() != old_tip
    assert report.versions == ("memver_0002",)
    assert report.commits == 4 and report.first_commit is not None
    assert report.removed == (blob(SECRET),) and not report.kept and not report.remaining
    assert not exists(mirror.path, blob(SECRET))
    # The checkout follows: main and the base are on the new tip, nothing is pending.
    assert git(mirror.path, "rev-parse", "main", "refs/memsync/base").split() == [fresh.tip()] * 2
    assert git(mirror.path, "status", "--porcelain") == ""
    assert mirror.local_changes() == ()
    # No reflog keeps the old history; the old ids are remembered for the next backup.
    assert git(mirror.path, "reflog", "show", "--all") == ""
    assert old_tip in Rewriter(mirror).superseded()
    fsck(mirror.path)
    # A second run has nothing to do.
    assert Rewriter(Mirror.open(mirror.path)).redact([redacted]) is None


def test_redacting_the_content_the_checkout_shows_updates_the_working_tree(tmp_path: Path) -> None:
    mirror = write(tmp_path / "m", HISTORY[:2])
    assert (mirror.path / "secret.md").read_bytes() == SECRET
    report = Rewriter(mirror).redact([forward_redacted(HISTORY[1])])
    assert report is not None and report.removed == (blob(SECRET),)
    # The redacted version never wrote the file: in the new history it does not exist.
    assert not (mirror.path / "secret.md").exists()
    assert git(mirror.path, "status", "--porcelain") == ""
    assert not exists(mirror.path, blob(SECRET))
    fsck(mirror.path)


def test_a_blob_another_version_uses_stays(tmp_path: Path) -> None:
    history = [*HISTORY, record(6, "mem_c", "created", "copy.md", SECRET)]
    mirror = write(tmp_path / "m", history)
    report = Rewriter(mirror).redact([forward_redacted(history[1])])
    assert report is not None
    assert report.shared == (blob(SECRET),) and report.removed == ()
    assert exists(mirror.path, blob(SECRET))
    assert git(mirror.path, "show", "memstore/main:copy.md").encode() == SECRET


def test_anthropic_redaction_of_a_rename_equals_a_fresh_import(tmp_path: Path) -> None:
    history = [
        record(1, "mem_a", "created", "a.md", b"first\n"),
        record(2, "mem_a", "updated", "moved/a.md", b"second\n"),  # a rename with new content
        record(3, "mem_a", "updated", None, None, redacted=True),  # redacted before the import
        record(4, "mem_a", "updated", "moved/a.md", b"third\n"),
        record(5, "mem_a", "deleted", "moved/a.md", None),
    ]
    mirror = write(tmp_path / "m", history)
    redacted = anthropic_redacted(history[1])
    Rewriter(mirror).redact([redacted])
    fresh = write(tmp_path / "fresh", [history[0], redacted, *history[2:]])
    assert mirror.tip() == fresh.tip()
    assert not exists(mirror.path, blob(b"second\n"))


def test_unpushed_work_is_carried_over_and_redacted_bytes_in_it_are_reported(tmp_path: Path) -> None:
    mirror = write(tmp_path / "m", HISTORY)
    repo = mirror.path
    old_tip = mirror.tip()
    assert old_tip is not None
    # A local commit on main, an uncommitted edit, a staged edit holding the secret, two stashes,
    # a conflict record on top of an old commit and ORIG_HEAD naming one.
    (repo / "b.md").write_text("bee, edited and committed\n")
    git(repo, "commit", "-qam", "local edit")
    local_commit = git(repo, "rev-parse", "HEAD").strip()
    (repo / "notes" / "a.md").write_text("stash one\n")
    git(repo, "stash", "-q")
    (repo / "notes" / "a.md").write_text("stash two\n")
    git(repo, "stash", "-q")
    (repo / "leak.md").write_bytes(b"I copied it: " + SECRET)
    git(repo, "add", "leak.md")
    (repo / "notes" / "a.md").write_text("uncommitted\n")
    conflict_tree = git(repo, "rev-parse", f"{old_tip}^{{tree}}").strip()
    record_commit = git(repo, "commit-tree", conflict_tree, "-p", old_tip, "-m", "conflict record").strip()
    git(repo, "update-ref", "refs/memsync/conflicts/notes-a", record_commit)
    (repo / ".git" / "ORIG_HEAD").write_text(old_tip + "\n")

    report = Rewriter(mirror).redact([forward_redacted(HISTORY[1])])
    assert report is not None
    new_tip = mirror.tip()
    assert new_tip != old_tip
    assert set(report.refs) >= {
        "refs/heads/main",
        "refs/memsync/base",
        "refs/memsync/conflicts/notes-a",
        "refs/stash",
        "ORIG_HEAD",
    }
    # main: the local commit, now on the new tip, with its own change.
    assert git(repo, "rev-parse", "main~1").strip() == new_tip
    assert git(repo, "log", "-1", "--format=%s", "main").strip() == "local edit"
    assert git(repo, "rev-parse", "main").strip() != local_commit
    assert git(repo, "show", "main:b.md") == "bee, edited and committed\n"
    assert git(repo, "show", "main:secret.md") == "password=<removed>\n"
    # Uncommitted and staged work is where it was.
    assert (repo / "notes" / "a.md").read_text() == "uncommitted\n"
    assert (repo / "leak.md").read_bytes() == b"I copied it: " + SECRET
    assert "A  leak.md" in git(repo, "status", "--porcelain")
    # Both stashes survive, on the new history.
    stashes = git(repo, "stash", "list").splitlines()
    assert len(stashes) == 2
    assert git(repo, "show", "stash@{1}:notes/a.md") == "stash one\n"
    assert git(repo, "show", "stash@{0}:notes/a.md") == "stash two\n"
    assert git(repo, "merge-base", "--is-ancestor", new_tip, "stash@{1}^1", check=False) == ""
    assert git(repo, "rev-parse", "refs/memsync/conflicts/notes-a~1").strip() == new_tip
    assert (repo / ".git" / "ORIG_HEAD").read_text().strip() == new_tip
    # The secret itself is gone; the staged copy of it is kept and reported.
    assert not exists(repo, blob(SECRET))
    assert [(k.where, k.path) for k in report.kept] == [("index", "leak.md"), ("working tree", "leak.md")]
    assert "leak.md" in report.summary()
    fsck(repo)


def test_a_ref_to_commits_unrelated_to_the_rewrite_stays(tmp_path: Path) -> None:
    mirror = write(tmp_path / "m", HISTORY)
    metadata_before = mirror.git.ref_target(mirror.METADATA_REF)
    first = git(mirror.path, "rev-list", "--reverse", "memstore/main").split()[0]
    git(mirror.path, "update-ref", "refs/memsync/old", first)
    report = Rewriter(mirror).redact([forward_redacted(HISTORY[1])])
    assert report is not None and "refs/memsync/old" not in report.refs
    assert mirror.git.ref_target("refs/memsync/old") == first  # before the first rewritten commit
    assert mirror.git.ref_target(mirror.METADATA_REF) == metadata_before


def as_served(records: list[VersionRecord], anthropic: bool) -> list[VersionRecord]:
    """The model's versions redacted before the import, as a dialect serves them: Forward and Cloud
    keep a redacted version's path and hash, Anthropic drops both."""
    paths: dict[str, str] = {}
    served = []
    for item in records:
        if item.redacted:
            if anthropic:
                item = replace(item, path=None, content_sha256=None)
            else:
                item = replace(item, path=paths.get(item.memory_id))
        elif item.operation == "deleted":
            paths.pop(item.memory_id, None)
        elif item.path is not None and not item.skipped:
            paths[item.memory_id] = item.path
        served.append(item)
    return served


@settings(max_examples=20)
@given(operations, st.data())
def test_any_redaction_of_any_history_equals_a_fresh_import(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int, int]], data: st.DataObject
) -> None:
    anthropic = data.draw(st.booleans())
    records = as_served(play(ops)[0], anthropic)
    candidates = [
        i for i, r in enumerate(records) if r.content is not None and not r.skipped and not r.redacted
    ]
    chosen = data.draw(st.sets(st.sampled_from(candidates), min_size=1) if candidates else st.just(set()))
    after = [
        (anthropic_redacted(r) if anthropic else forward_redacted(r)) if i in chosen else r
        for i, r in enumerate(records)
    ]
    base = tmp_path_factory.mktemp("rewrite")
    mirror = write(base / "m", records)
    gone = {blob(records[i].content or b"") for i in chosen}
    Rewriter(mirror).redact([after[i] for i in sorted(chosen)])
    fresh = write(base / "fresh", after)
    assert mirror.tip() == fresh.tip()
    still_written = {blob(r.content) for r in after if r.content is not None and not r.skipped}
    for obj in gone - still_written:
        assert not exists(mirror.path, obj)
    assert git(mirror.path, "status", "--porcelain") == ""
    fsck(mirror.path)


def test_a_conflict_record_loses_its_redacted_side_and_keeps_the_users(tmp_path: Path) -> None:
    mirror = write(tmp_path / "m", HISTORY)
    repo = mirror.path
    sides = {
        "local": b"my own text\n",
        "remote": SECRET,
        "markers": b"<<<<<<< local\nmy own text\n=======\n" + SECRET + b">>>>>>> remote\n",
    }
    entries = "".join(
        f"100644 blob {git(repo, 'hash-object', '-w', '--stdin', input=data).strip()}\t{name}\n"
        for name, data in sorted(sides.items())
    )
    tree = git(repo, "mktree", input=entries.encode()).strip()
    record_commit = git(repo, "commit-tree", tree, "-m", "conflict at secret.md").strip()
    git(repo, "update-ref", "refs/memsync/conflicts/secret.md", record_commit)

    report = Rewriter(mirror).redact([forward_redacted(HISTORY[1])])
    assert report is not None
    assert "refs/memsync/conflicts/secret.md" in report.refs
    names = git(repo, "ls-tree", "--name-only", "refs/memsync/conflicts/secret.md").split()
    assert names == ["local", "markers"]
    assert git(repo, "log", "-1", "--format=%s", "refs/memsync/conflicts/secret.md").strip() == (
        "conflict at secret.md"
    )
    assert [(k.where, k.path) for k in report.kept] == [("refs/memsync/conflicts/secret.md", "markers")]
    assert not exists(repo, blob(SECRET))
    fsck(repo)
