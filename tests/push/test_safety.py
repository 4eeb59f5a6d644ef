"""What a push refuses: invalid files, links, mass deletes, archived stores; and what a dry run leaves."""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from memsync.rules import MAX_CONTENT_BYTES, Dialect
from memsync.sync.pull import store_lock
from memsync.sync.push import predict_push
from memsync.sync.status import mirror_status
from tests.push.conftest import Side, git

MakeSide = Callable[..., Side]


def test_invalid_files_are_rejected_left_alone_and_the_rest_still_goes(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD, {"a.md": "a\n"})
    bad = {
        "latin1.md": "caf\xe9\n".encode("latin-1"),
        "huge.md": b"x" * (MAX_CONTENT_BYTES + 1),
        "bell.md": b"ding \x07\n",
        "empty.md": b"",  # Forward refuses empty content
    }
    for path, data in bad.items():
        side.write(path, data)
    side.write("good.md", "fine\n")
    mtimes = {p: (side.repo / p).stat().st_mtime_ns for p in bad}

    report = side.sync()

    assert report.ok and report.exit_code == 4
    assert side.remote() == {"a.md": "a\n", "good.md": "fine\n"}
    reasons = {r["path"]: r["reason"] for r in report.rejected}
    assert set(reasons) == set(bad)
    assert "UTF-8" in reasons["latin1.md"]
    assert "102400" in reasons["huge.md"]
    assert "U+0007" in reasons["bell.md"]
    assert "empty" in reasons["empty.md"]
    for path, data in bad.items():  # untouched
        assert (side.repo / path).read_bytes() == data
        assert (side.repo / path).stat().st_mtime_ns == mtimes[path]
    # main follows the store; the rejected files stay as local (untracked) files for the user.
    assert side.ref("refs/heads/main") == side.ref("refs/remotes/memstore/main")
    assert sorted(line[3:] for line in side.status().splitlines()) == sorted(bad)
    status = mirror_status(side.repo, Dialect.FORWARD)
    assert {r["path"] for r in status.rejected} == set(bad) and status.exit_code == 4
    # Fixed, it goes with the next sync.
    side.write("latin1.md", "café\n")
    again = side.sync()
    assert side.remote()["latin1.md"] == "café\n"
    assert {r["path"] for r in again.rejected} == set(bad) - {"latin1.md"}


def test_empty_content_is_a_memory_on_anthropic(make_side: MakeSide) -> None:
    side = make_side(Dialect.ANTHROPIC, {"a.md": "a\n"})
    side.write("empty.md", b"")
    report = side.synced()
    assert report.rejected == [] and side.remote() == {"a.md": "a\n", "empty.md": ""}


def test_a_symlink_is_never_followed(make_side: MakeSide, tmp_path: Path) -> None:
    side = make_side(Dialect.FORWARD, {"a.md": "a\n"})
    secret = tmp_path / "private.txt"
    secret.write_text("token=do-not-leak\n")
    secret.chmod(0o600)
    (side.repo / "link.md").symlink_to(secret)
    (side.repo / "a.md").unlink()
    (side.repo / "a.md").symlink_to(secret)  # a memory's file replaced by a link

    report = side.sync()

    assert report.exit_code == 4
    reasons = {r["path"]: r["reason"] for r in report.rejected}
    assert set(reasons) == {"link.md", "a.md"}
    assert all("symlink" in reason and "never" in reason for reason in reasons.values())
    # Neither the store nor any git object has the linked file's content; the memory was not deleted.
    assert side.remote() == {"a.md": "a\n"}
    leaked = hashlib.sha1(b"blob %d\0" % len(secret.read_bytes()) + secret.read_bytes()).hexdigest()
    probe = git(side.repo, "cat-file", "-e", leaked, check=False)
    assert probe == "" and not _object_exists(side.repo, leaked)
    assert (side.repo / "link.md").is_symlink() and (side.repo / "a.md").is_symlink()


def _object_exists(repo: Path, oid: str) -> bool:
    import subprocess

    return (
        subprocess.run(["git", "-C", str(repo), "cat-file", "-e", oid], capture_output=True).returncode == 0
    )


def test_undecodable_file_names_are_reported(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD, {"a.md": "a\n"})
    side.write("100%.md", "percent\n")
    report = side.sync()
    (rejected,) = report.rejected
    assert rejected["path"] == "100%.md" and "100%25.md" in rejected["reason"]
    assert side.remote() == {"a.md": "a\n"}


def test_mass_delete_is_withheld_unless_forced(make_side: MakeSide) -> None:
    seed = {f"m{i}.md": f"memory {i}\n" for i in range(5)}
    side = make_side(Dialect.FORWARD, seed)
    for i in range(4):
        (side.repo / f"m{i}.md").unlink()
    side.write("m4.md", "memory 4, edited\n")

    report = side.sync()

    assert report.ok and report.exit_code == 4
    withheld = report.to_json()["withheld"]
    assert {w["path"] for w in withheld} == {f"m{i}.md" for i in range(4)}
    assert all("--force" in w["reason"] and "4 of the store's 5" in w["reason"] for w in withheld)
    # The other change of the same push went through; nothing was deleted.
    assert side.remote() == {**seed, "m4.md": "memory 4, edited\n"}
    assert mirror_status(side.repo, Dialect.FORWARD).exit_code == 4

    forced = side.sync(force=True)
    assert forced.ok and forced.exit_code == 0
    assert side.remote() == {"m4.md": "memory 4, edited\n"}
    side.assert_in_step()


def test_an_archived_store_refuses_the_push_and_the_edits_stay(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD, {"a.md": "a\n"})
    side.write("a.md", "edited\n")
    side.write("b.md", "new\n")
    side.client.archive_store(side.store.id)
    versions = side.version_count()

    report = side.sync()

    assert not report.ok and report.exit_code == 1
    assert report.error is not None and "archived" in report.error and "stay" in report.error
    assert side.version_count() == versions
    assert side.read("a.md") == "edited\n" and side.read("b.md") == "new\n"
    assert side.ref("refs/memsync/base") == side.ref("refs/remotes/memstore/main")


def _fingerprint(repo: Path) -> dict[str, str]:
    """Every file under the mirror (``.git`` included) and every ref, hashed. The state database by
    what it holds: SQLite moves its write-ahead log into the file whenever the last connection
    closes, and every reader writes to its shared-memory index, so its bytes say nothing."""
    found: dict[str, str] = {}
    for folder, _, files in os.walk(repo):
        for name in files:
            full = Path(folder) / name
            if name.endswith((".sqlite-shm", ".sqlite-wal")):
                continue
            if name.endswith(".sqlite"):
                with contextlib.closing(sqlite3.connect(f"file:{full}?mode=ro", uri=True)) as db:
                    dump = "\n".join(db.iterdump())
                found[full.relative_to(repo).as_posix()] = hashlib.sha256(dump.encode()).hexdigest()
                continue
            rel = full.relative_to(repo).as_posix()
            found[rel] = "link" if full.is_symlink() else hashlib.sha256(full.read_bytes()).hexdigest()
    found["<refs>"] = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    return found


def test_dry_run_predicts_and_writes_nothing(make_side: MakeSide) -> None:
    side = make_side(
        Dialect.FORWARD,
        {"push.md": "p\n", "merge.md": "1\n2\n3\n4\n", "conflict.md": "1\n2\n3\n", "incoming.md": "i\n"},
    )
    side.write("push.md", "p, edited\n")
    side.write("merge.md", "1 local\n2\n3\n4\n")
    side.put("merge.md", "1\n2\n3\n4 remote\n")
    side.write("conflict.md", "1\n2 local\n3\n")
    side.put("conflict.md", "1\n2 remote\n3\n")
    side.write("bad.md", b"\xff\n")
    side.put("incoming.md", "i, remote\n")
    before, versions = _fingerprint(side.repo), side.version_count()

    report = predict_push(side.client, side.client.get_store(side.store.id), side.root)

    assert report.ok, report.error
    outcomes = {p["path"]: p["outcome"] for p in report.predicted}
    assert outcomes == {
        "push.md": "push",
        "merge.md": "merge",
        "conflict.md": "conflict",
        "bad.md": "rejected",
        "incoming.md": "pull",
    }
    assert report.exit_code == 4
    assert _fingerprint(side.repo) == before
    assert side.version_count() == versions
    # A predicted conflict alone is worth exit 4 too.
    (side.repo / "bad.md").unlink()
    (side.repo / "push.md").write_text("p\n")
    (side.repo / "merge.md").write_text("1\n2\n3\n4\n")
    alone = predict_push(side.client, side.client.get_store(side.store.id), side.root)
    assert {p["outcome"] for p in alone.predicted} == {"conflict", "pull"} and alone.exit_code == 4


def test_git_index_lock_is_waited_for_then_reported(
    make_side: MakeSide, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memsync.mirror import worktree

    monkeypatch.setattr(worktree, "INDEX_LOCK_WAIT_S", 0.2)
    side = make_side(Dialect.FORWARD, {"a.md": "a\n"})
    side.write("a.md", "edited\n")
    lock = side.repo / ".git" / "index.lock"
    lock.write_bytes(b"")
    versions = side.version_count()

    report = side.sync()

    assert not report.ok and report.error is not None and "index.lock" in report.error
    assert side.version_count() == versions and side.read("a.md") == "edited\n"
    lock.unlink()
    side.synced()
    assert side.remote() == {"a.md": "edited\n"}


def test_head_off_main_is_refused(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD, {"a.md": "a\n"})
    git(side.repo, "switch", "-q", "-c", "elsewhere")
    side.write("a.md", "edited\n")
    report = side.sync()
    # Not a failure: the checkout waits for the user (exit 6), who is told how to go back.
    assert report.ok and report.exit_code == 6
    assert report.blocked is not None and "`git switch main`" in report.blocked
    assert side.remote() == {"a.md": "a\n"}


def test_the_store_lock_is_shared_and_status_does_not_need_it(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD, {"a.md": "a\n"})
    side.write("a.md", "edited\n")
    with store_lock(side.root, side.store.id):
        report = side.sync()
        assert report.exit_code == 75 and not report.ok
        status = mirror_status(side.repo, Dialect.FORWARD)
        assert status.ok and status.pending == [{"path": "a.md", "action": "update"}]
    assert side.remote() == {"a.md": "a\n"}
    side.synced()
    assert side.remote() == {"a.md": "edited\n"}
