"""Redaction propagates (docs/design.md §2): a full scan rewrites the mirror, against the real server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsync.api import Client, Operation, Store, open_client
from memsync.mirror import Mirror
from memsync.rules import Dialect
from memsync.sync.pull import pull_store
from tests.backup.helpers import blob_id, git, has_object, memsync, stores_json, write_config
from tests.support.server import ServerProcess

SECRET = "api_key=sk-live-123456\n"


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Client]:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as c:
        yield c


def leaky_store(client: Client) -> tuple[Store, str]:
    """A store whose second version holds a secret, later replaced; the id of that version."""
    store = client.create_store(f"leaky-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()))
    notes = client.create_memory(store.id, "notes.md", "plain notes\n")
    leak = client.create_memory(store.id, "config.md", SECRET)
    client.update_memory(
        store.id, leak.id, "api_key=<redacted by hand>\n", expected_sha256=leak.content_sha256
    )
    client.update_memory(store.id, notes.id, "more notes\n", expected_sha256=notes.content_sha256)
    created = next(
        v
        for v in client.iter_versions(store.id)
        if v.memory_id == leak.id and v.operation is Operation.CREATED
    )
    return store, created.id


def commits(repo: Path) -> list[str]:
    return git(repo, "rev-list", "--reverse", "refs/remotes/memstore/main").split()


def test_full_scan_rewrites_a_redacted_version_out_of_the_mirror(client: Client, tmp_path: Path) -> None:
    store, version = leaky_store(client)
    assert pull_store(client, store, tmp_path / "m").ok
    repo = tmp_path / "m" / store.id
    assert has_object(repo, blob_id(SECRET))
    client.redact_version(store.id, version)
    # An incremental pull does not notice a redaction: only a full scan lists every version.
    assert pull_store(client, store, tmp_path / "m").rewrite is None
    report = pull_store(client, store, tmp_path / "m", full_scan=True)
    assert report.ok, report.error
    assert report.redacted_since_import == [version]
    assert report.rewrite is not None
    assert report.rewrite["versions"] == [version] and report.rewrite["removed"] == [blob_id(SECRET)]
    assert any("rewrote 3 commit(s)" in w for w in report.warnings)
    assert not has_object(repo, blob_id(SECRET))
    # The same ids as a fresh import made after the redaction; the checkout is on the tip.
    assert pull_store(client, store, tmp_path / "fresh").ok
    assert commits(repo) == commits(tmp_path / "fresh" / store.id)
    assert git(repo, "rev-parse", "HEAD").strip() == commits(repo)[-1]
    assert git(repo, "status", "--porcelain") == ""
    git(repo, "fsck", "--strict")
    # Nothing left to do on the next scan.
    again = pull_store(client, store, tmp_path / "m", full_scan=True)
    assert again.ok and again.rewrite is None and again.redacted_since_import == []


def test_a_redacted_head_keeps_the_live_content_and_matches_a_fresh_import(
    client: Client, tmp_path: Path
) -> None:
    store = client.create_store(f"head-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()))
    client.create_memory(store.id, "live.md", "still served\n")
    assert pull_store(client, store, tmp_path / "m").ok
    head = next(iter(client.iter_versions(store.id)))
    client.redact_version(store.id, head.id)  # Forward: the memory's content stays readable
    report = pull_store(client, store, tmp_path / "m", full_scan=True)
    assert report.ok and report.rewrite is not None
    assert report.rewrite["removed"] == [] and report.rewrite["shared"] == [blob_id("still served\n")]
    assert pull_store(client, store, tmp_path / "fresh").ok
    assert commits(tmp_path / "m" / store.id) == commits(tmp_path / "fresh" / store.id)
    assert (tmp_path / "m" / store.id / "live.md").read_text() == "still served\n"


def test_anthropic_redaction_matches_a_fresh_import(server: ServerProcess, tmp_path: Path) -> None:
    with open_client(Dialect.ANTHROPIC, server.base_url, server.token) as client:
        store = client.create_store(f"anthropic-{uuid.uuid4().hex[:6]}")
        memory = client.create_memory(store.id, "notes/a.md", SECRET)
        client.rename_memory(store.id, memory.id, "notes/b.md", expected_sha256=memory.content_sha256)
        client.update_memory(store.id, memory.id, "clean\n", expected_sha256=memory.content_sha256)
        assert pull_store(client, store, tmp_path / "m").ok
        first = list(client.iter_versions(store.id))[-1]
        client.redact_version(store.id, first.id)
        report = pull_store(client, store, tmp_path / "m", full_scan=True)
        assert report.ok and report.rewrite is not None, report.error
        assert pull_store(client, store, tmp_path / "fresh").ok
    repo = tmp_path / "m" / store.id
    assert commits(repo) == commits(tmp_path / "fresh" / store.id)
    # The rename's commit held the same content: it is the redacted content too, and stays only if
    # a version that is not redacted still writes it.
    assert report.rewrite["shared"] == [blob_id(SECRET)]
    git(repo, "fsck", "--strict")


@pytest.mark.parametrize(
    "crash_at", ["rewrite.history_written", "rewrite.refs_carried", "rewrite.tip_moved", "rewrite.pruned"]
)
@pytest.mark.e2e
def test_a_rewrite_killed_anywhere_is_finished_by_the_next_full_scan(
    client: Client, server: ServerProcess, tmp_path: Path, crash_at: str
) -> None:
    store, version = leaky_store(client)
    config = write_config(tmp_path, server.base_url, include=[store.id])
    token = {"MS_TOKEN": server.token}
    assert memsync("--config", str(config), "pull", env=token).returncode == 0
    repo = tmp_path / "mirrors" / store.id
    (repo / "notes.md").write_text("my unpushed edit\n")  # local work rides along
    client.redact_version(store.id, version)
    killed = memsync(
        "--config", str(config), "pull", "--full-scan", env={**token, "MEMSYNC_CRASH_AT": f"{crash_at}:1"}
    )
    assert killed.returncode == -9, killed.stderr
    done = memsync("--config", str(config), "pull", "--full-scan", "--json", env=token)
    assert done.returncode == 0, done.stderr
    entry = stores_json(done)[store.id]
    assert entry["rewrite"] is not None and entry["rewrite"]["remaining"] == []
    assert not has_object(repo, blob_id(SECRET))
    assert (repo / "notes.md").read_text() == "my unpushed edit\n"
    assert pull_store(client, store, tmp_path / "fresh").ok
    assert commits(repo) == commits(tmp_path / "fresh" / store.id)
    with Mirror.open(repo) as reopened:
        assert reopened.git.state.get("rewrite-pending") is None
        assert reopened.git.ref_target("refs/memsync-rewrite/memstore") is None
    git(repo, "fsck", "--strict")
