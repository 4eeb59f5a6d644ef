"""memsync pull against the real reference server, with the real git binary as the oracle."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsync.api import Client, Store, open_client
from memsync.mirror import Mirror
from memsync.rules import Dialect, sha256_hex
from memsync.sync.pull import pull_store
from tests.support.server import ServerProcess


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def commits(repo: Path) -> list[str]:
    return git(repo, "rev-list", "--reverse", "refs/remotes/memstore/main").split()


def trailers(repo: Path, rev: str) -> dict[str, str]:
    body = git(repo, "log", "-1", "--format=%B", rev).strip().split("\n\n")[-1]
    return dict(line.split(": ", 1) for line in body.splitlines())


def files_at(repo: Path, rev: str) -> dict[str, str]:
    names = git(repo, "ls-tree", "-r", "--name-only", rev).splitlines()
    return {name: git(repo, "show", f"{rev}:{name}") for name in names}


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Client]:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as c:
        yield c


@pytest.fixture
def store(client: Client) -> Store:
    return client.create_store(f"pull-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()))


def test_layout_refs_and_one_commit_per_version(client: Client, store: Store, tmp_path: Path) -> None:
    a = client.create_memory(store.id, "notes/a.md", "one\n")
    client.update_memory(store.id, a.id, "two\n", expected_sha256=a.content_sha256)
    b = client.create_memory(store.id, "b.md", "bee\n")
    client.delete_memory(store.id, b.id, expected_sha256=b.content_sha256)
    client.create_memory(store.id, "deep/er/c.md", "sea\n")

    report = pull_store(client, store, tmp_path)
    assert report.ok, report.error
    assert report.imported == 5
    repo = tmp_path / store.id
    history = commits(repo)
    assert len(history) == 5
    ops = [trailers(repo, c)["Operation"] for c in history]
    assert ops == ["created", "updated", "created", "deleted", "created"]
    for commit in history:
        found = trailers(repo, commit)
        assert found["Memsync-Format"] == "1"
        assert found["Memory-Version"].startswith("memver_")
    assert files_at(repo, "memstore/main") == {"notes/a.md": "two\n", "deep/er/c.md": "sea\n"}
    # main is checked out at the tip, with memstore/main as its upstream; the working tree matches.
    assert git(repo, "rev-parse", "HEAD").strip() == history[-1]
    assert git(repo, "rev-parse", "--abbrev-ref", "main@{upstream}").strip() == "memstore/main"
    assert (repo / "notes" / "a.md").read_text() == "two\n"
    assert not (repo / "b.md").exists()
    assert "up to date" in git(repo, "status")
    assert git(repo, "config", "core.autocrlf").strip() == "false"
    git(repo, "fsck", "--strict")
    # Dates are the versions' created_at, in UTC; author and committer are the same fixed identity.
    author = git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%ad|%cd", "--date=iso-strict", history[0])
    name, committer, authored, committed = author.strip().split("|")
    assert name == committer == "memsync <memsync@localhost>"
    assert authored == committed and authored.endswith("+00:00")


def test_two_fresh_mirrors_have_identical_commit_ids(client: Client, store: Store, tmp_path: Path) -> None:
    m = client.create_memory(store.id, "x.md", "1\n")
    client.update_memory(store.id, m.id, "2\n", expected_sha256=m.content_sha256)
    client.create_memory(store.id, "y/z.md", "3\n")
    first = pull_store(client, store, tmp_path / "one")
    second = pull_store(client, store, tmp_path / "two")
    assert first.ok and second.ok
    assert commits(tmp_path / "one" / store.id) == commits(tmp_path / "two" / store.id)


def test_nothing_new_costs_one_request(client: Client, store: Store, tmp_path: Path) -> None:
    client.create_memory(store.id, "a.md", "a\n")
    assert pull_store(client, store, tmp_path).ok
    again = pull_store(client, store, tmp_path)
    assert again.ok and again.imported == 0
    assert again.requests == 1


def test_new_versions_cost_list_pages_plus_unknown_contents(
    client: Client, store: Store, tmp_path: Path
) -> None:
    client.create_memory(store.id, "seed.md", "same content\n")
    assert pull_store(client, store, tmp_path).ok
    # Three versions whose content the mirror already has (by hash), two it does not.
    for name in ("a", "b", "c"):
        client.create_memory(store.id, f"{name}.md", "same content\n")
    client.create_memory(store.id, "d.md", "new 1\n")
    client.create_memory(store.id, "e.md", "new 2\n")
    report = pull_store(client, store, tmp_path)
    assert report.ok and report.imported == 5
    # One listing page (5 new versions and the checkpoint fit in it), two content fetches, and one
    # page of memories for their metadata (fewer requests than reading the five touched memories).
    assert report.requests == 1 + 2 + 1
    assert report.metadata == {"memories": "listed", "requests": 1}


def test_path_reused_after_delete_is_a_new_memory(client: Client, store: Store, tmp_path: Path) -> None:
    first = client.create_memory(store.id, "p.md", "first life\n")
    client.delete_memory(store.id, first.id, expected_sha256=first.content_sha256)
    second = client.create_memory(store.id, "p.md", "second life\n")
    assert pull_store(client, store, tmp_path).ok
    repo = tmp_path / store.id
    history = commits(repo)
    assert [trailers(repo, c)["Memory-Id"] for c in history] == [first.id, first.id, second.id]
    assert (repo / "p.md").read_text() == "second life\n"


def test_redacted_versions_leave_no_content(client: Client, store: Store, tmp_path: Path) -> None:
    m = client.create_memory(store.id, "secret.md", "password=hunter2\n")
    v2 = client.update_memory(store.id, m.id, "password=<removed>\n", expected_sha256=m.content_sha256)
    versions = list(client.iter_versions(store.id))
    created = next(v for v in versions if v.operation.value == "created")
    client.redact_version(store.id, created.id)
    assert pull_store(client, store, tmp_path).ok
    repo = tmp_path / store.id
    first, second = commits(repo)
    assert trailers(repo, first)["Redacted"] == "true"
    # The redacted version's commit leaves the tree as its parent had it: no file, no content.
    assert files_at(repo, first) == {}
    assert files_at(repo, second) == {"secret.md": "password=<removed>\n"}
    blob = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "-e", _blob_id("password=hunter2\n")], capture_output=True
    )
    assert blob.returncode != 0
    assert v2.content_sha256 == sha256_hex("password=<removed>\n")


def test_redacted_head_of_a_live_memory_takes_the_current_content(
    client: Client, store: Store, tmp_path: Path
) -> None:
    m = client.create_memory(store.id, "live.md", "still here\n")
    head = next(iter(client.iter_versions(store.id)))
    client.redact_version(store.id, head.id)  # Forward allows redacting the head of a live memory
    assert pull_store(client, store, tmp_path).ok
    repo = tmp_path / store.id
    (only,) = commits(repo)
    assert trailers(repo, only)["Redacted"] == "true"
    assert files_at(repo, only) == {"live.md": "still here\n"}
    assert m.content_sha256 == trailers(repo, only)["Content-SHA256"]


def test_local_edit_is_never_overwritten(client: Client, store: Store, tmp_path: Path) -> None:
    m = client.create_memory(store.id, "a.md", "v1\n")
    assert pull_store(client, store, tmp_path).ok
    repo = tmp_path / store.id
    base = git(repo, "rev-parse", "refs/memsync/base").strip()
    (repo / "a.md").write_text("my local edit\n")
    client.update_memory(store.id, m.id, "v2 remote\n", expected_sha256=m.content_sha256)
    report = pull_store(client, store, tmp_path)
    assert report.ok and report.imported == 1
    assert report.checkout == "local-changes"
    assert report.local_changes == ["a.md"]
    assert (repo / "a.md").read_text() == "my local edit\n"
    # The import went on; the base did not move past the local edit.
    assert files_at(repo, "memstore/main") == {"a.md": "v2 remote\n"}
    assert git(repo, "rev-parse", "refs/memsync/base").strip() == base


def test_metadata_lives_on_its_own_branch(client: Client, tmp_path: Path) -> None:
    store = client.create_store(
        f"meta-{uuid.uuid4().hex[:6]}", metadata={"team": "backend"}, idempotency_key=str(uuid.uuid4())
    )
    client.create_memory(store.id, "a.md", "a\n", metadata={"owner": "ana"})
    assert pull_store(client, store, tmp_path).ok
    repo = tmp_path / store.id
    assert "memsync/metadata" in git(repo, "branch", "--list", "memsync/metadata")
    documents = git(repo, "ls-tree", "-r", "--name-only", "memsync/metadata").split()
    assert documents
    text = "".join(git(repo, "show", f"memsync/metadata:{doc}") for doc in documents)
    assert '"team"' in text and '"owner"' in text
    # memstore/main holds versions only.
    assert "metadata" not in " ".join(git(repo, "ls-tree", "-r", "--name-only", "memstore/main").split())


def _blob_id(content: str) -> str:
    data = content.encode()
    import hashlib

    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


# --- untrusted input: a real server whose storage was tampered with -----------------------------


def _tamper(db: Path, sql: str, *args: object) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(sql, args)


@pytest.mark.parametrize(
    ("column", "forged"),
    [
        ("content", "forged\n"),
        ("path", "../escape.md"),
        ("path", "/etc/passwd"),
        ("path", "a/../../.git/hooks/x"),
    ],
)
def test_untrusted_version_stops_the_import_just_before_it(
    server_factory: object, tmp_path: Path, column: str, forged: str
) -> None:
    assert callable(server_factory)
    db = tmp_path / "tampered.sqlite3"
    proc = server_factory(db=db)
    with open_client(Dialect.FORWARD, proc.base_url, proc.token) as client:
        store = client.create_store("tampered", idempotency_key=str(uuid.uuid4()))
        client.create_memory(store.id, "ok.md", "fine\n")
        bad = client.create_memory(store.id, "bad.md", "original\n")
        client.create_memory(store.id, "after.md", "later\n")
        bad_version = next(v for v in client.iter_versions(store.id) if v.memory_id == bad.id)
        _tamper(db, f"UPDATE versions SET {column} = ? WHERE id = ?", forged, bad_version.id)

        report = pull_store(client, store, tmp_path / "m")
        assert not report.ok
        assert report.stopped_at_version == bad_version.id
        assert bad_version.id in (report.error or "")
        assert f"--skip-version {bad_version.id}" in (report.error or "")
        repo = tmp_path / "m" / store.id
        # The checkpoint stays just before it; nothing of it was written.
        assert len(commits(repo)) == 1
        assert "forged" not in json.dumps(files_at(repo, "memstore/main"))
        assert not (tmp_path / "escape.md").exists() and not (repo / ".git" / "hooks" / "x").exists()

        skipped = pull_store(client, store, tmp_path / "m", skip_versions=frozenset({bad_version.id}))
        assert skipped.ok, skipped.error
        assert skipped.skipped == [bad_version.id]
        history = commits(repo)
        assert len(history) == 3
        assert "Memsync-Skipped" in trailers(repo, history[1])
        assert set(files_at(repo, "memstore/main")) == {"ok.md", "after.md"}
        git(repo, "fsck", "--strict")


# --- interrupted runs -----------------------------------------------------------------------------


def _run_pull(config: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memsync", "--config", str(config), "pull", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


@pytest.mark.e2e
@pytest.mark.parametrize("crash_at", [1, 4, 7, 12])
def test_kill_9_at_any_point_resumes_to_the_same_commit_ids(
    server: ServerProcess, tmp_path: Path, crash_at: int
) -> None:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        store = client.create_store(f"crash-{uuid.uuid4().hex[:6]}", idempotency_key=str(uuid.uuid4()))
        for i in range(6):
            m = client.create_memory(store.id, f"dir{i % 2}/m{i}.md", f"v1 of {i}\n")
            client.update_memory(store.id, m.id, f"v2 of {i}\n", expected_sha256=m.content_sha256)
        reference = pull_store(client, store, tmp_path / "reference")
    assert reference.ok
    config = tmp_path / "memsync.toml"
    config.write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{server.base_url}"\ntoken_env = "T"\n'
        f'[mirror]\nroot = "crashed"\n[stores]\ninclude = ["{store.id}"]\n'
    )
    env = {"T": server.token, "MEMSYNC_IMPORT_BATCH": "3", "MEMSYNC_CRASH_AT": f"pull.version:{crash_at}"}
    crashed = _run_pull(config, env)
    assert crashed.returncode == -9, crashed.stderr
    resumed = _run_pull(config, {"T": server.token})
    assert resumed.returncode == 0, resumed.stderr
    repo = tmp_path / "crashed" / store.id
    assert commits(repo) == commits(tmp_path / "reference" / store.id)
    git(repo, "fsck", "--strict")
    assert Mirror.open(repo).last_imported() is not None
