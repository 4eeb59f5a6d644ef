"""Pull on Cloud and Anthropic: the same promises, with each dialect's own shapes."""

from __future__ import annotations

import uuid
from pathlib import Path

from memsync.api import open_client
from memsync.rules import Dialect
from memsync.sync.pull import pull_store
from tests.support.server import ServerProcess
from tests.sync.test_pull import commits, files_at, git, trailers


def test_anthropic_rename_moves_the_file_and_actor_is_the_author(
    server: ServerProcess, tmp_path: Path
) -> None:
    with open_client(Dialect.ANTHROPIC, server.base_url, server.token) as client:
        store = client.create_store(f"anthropic-{uuid.uuid4().hex[:6]}", description="made by tests")
        m = client.create_memory(store.id, "notes/a.md", "alpha\n")
        client.rename_memory(store.id, m.id, "archive/a.md", expected_sha256=m.content_sha256)
        client.create_memory(store.id, "empty.md", "")  # Anthropic allows empty content
        report = pull_store(client, store, tmp_path)
        assert report.ok, report.error
        # Contents come with the listing (view=full): no request per version.
        assert report.requests <= 3
    repo = tmp_path / store.id
    history = commits(repo)
    assert len(history) == 3
    assert files_at(repo, history[0]) == {"notes/a.md": "alpha\n"}
    assert files_at(repo, history[1]) == {"archive/a.md": "alpha\n"}
    assert trailers(repo, history[1])["Operation"] == "updated"
    assert files_at(repo, "memstore/main") == {"archive/a.md": "alpha\n", "empty.md": ""}
    author = git(repo, "log", "-1", "--format=%an|%ae", history[0]).strip()
    name, email = author.split("|")
    assert email.endswith("@api.memsync.invalid"), author
    assert name.startswith("api_actor ")
    git(repo, "fsck", "--strict")


def test_cloud_pull_with_integer_versions(server: ServerProcess, tmp_path: Path) -> None:
    with open_client(Dialect.CLOUD, server.base_url, server.token) as client:
        store = client.create_store(f"cloud-{uuid.uuid4().hex[:6]}", description="made by tests")
        m = client.create_memory(store.id, "decisions/arch.md", "v1\n")
        m2 = client.update_memory(store.id, m.id, "v2\n", expected_sha256=m.content_sha256)
        assert m2.version == 2
        client.delete_memory(store.id, m.id, expected_sha256=m2.content_sha256)
        report = pull_store(client, store, tmp_path)
        assert report.ok, report.error
    repo = tmp_path / store.id
    assert [trailers(repo, c)["Operation"] for c in commits(repo)] == ["created", "updated", "deleted"]
    assert files_at(repo, "memstore/main") == {}


def test_retention_makes_versions_vanish_without_breaking_or_repeating(
    server_factory: object, tmp_path: Path
) -> None:
    assert callable(server_factory)
    db = tmp_path / "retention.sqlite3"
    seed = tmp_path / "seed.json"
    seed.write_text(
        """{"stores": [{"dialect": "forward", "name": "old", "created_at": "2026-01-01T00:00:00Z",
        "memories": [
          {"path": "a.md", "history": [
            {"op": "create", "content": "a1", "at": "2026-01-02T00:00:00Z"},
            {"op": "update", "content": "a2", "at": "2026-01-03T00:00:00Z"}]},
          {"path": "gone.md", "history": [
            {"op": "create", "content": "g", "at": "2026-01-04T00:00:00Z"},
            {"op": "delete", "at": "2026-01-05T00:00:00Z"}]}]}]}"""
    )
    first = server_factory("--seed", str(seed), db=db)
    with open_client(Dialect.FORWARD, first.base_url, first.token) as client:
        (store,) = [s for s in client.list_stores() if s.name == "old"]
        assert pull_store(client, store, tmp_path / "m").ok
    first.stop()
    repo = tmp_path / "m" / store.id
    before = commits(repo)
    assert len(before) == 4
    # The same database behind a server with retention: every old version but a live head vanishes.
    again = server_factory("--version-retention", "1d", db=db)
    with open_client(Dialect.FORWARD, again.base_url, again.token) as client:
        assert len(list(client.iter_versions(store.id))) == 1
        noop = pull_store(client, store, tmp_path / "m")
        assert noop.ok and noop.imported == 0, noop.error
        scan = pull_store(client, store, tmp_path / "m", full_scan=True)
        assert scan.ok and scan.imported == 0 and scan.expired == 3
        (memory,) = list(client.list_memories(store.id))
        client.update_memory(store.id, memory.id, "a3", expected_sha256=memory.content_sha256)
        after = pull_store(client, store, tmp_path / "m")
        assert after.ok and after.imported == 1
    assert commits(repo)[:4] == before
    assert files_at(repo, "memstore/main") == {"a.md": "a3"}
