"""History that tells the whole truth, against the real reference server with git as the oracle.

Three ways a mirror could quietly hold less (or more) than the store: a redacted version's content
kept after the memory stopped serving it, history lost to the server's version retention, and memory
metadata that only a full scan refreshed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from memsync.api import Client, Store, open_client
from memsync.rules import Dialect
from memsync.sync.pull import pull_store
from memsync.sync.verify import verify_store
from tests.backup.helpers import blob_id, git, has_object, memsync, stores_json, write_config
from tests.support.server import ServerProcess

SECRET = "api_key=sk-live-123456\n"
Factory = Callable[..., ServerProcess]


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Client]:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as c:
        yield c


def new_store(client: Client, prefix: str) -> Store:
    return client.create_store(f"{prefix}-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()))


def commits(repo: Path) -> list[str]:
    return git(repo, "rev-list", "--reverse", "refs/remotes/memstore/main").split()


def message(repo: Path, rev: str) -> str:
    """The commit message exactly as stored (``git log`` adds a line end of its own)."""
    return git(repo, "cat-file", "commit", rev).split("\n\n", 1)[1]


def trailers(repo: Path, rev: str) -> dict[str, str]:
    body = message(repo, rev).strip().split("\n\n")[-1]
    return dict(line.split(": ", 1) for line in body.splitlines())


def files_at(repo: Path, rev: str) -> dict[str, str]:
    names = git(repo, "ls-tree", "-r", "--name-only", rev).splitlines()
    return {name: git(repo, "show", f"{rev}:{name}") for name in names}


def wait_until(condition: Callable[[], bool], what: str, deadline_s: float = 30.0) -> None:
    """Poll ``condition`` until it holds: the server's retention runs on its own clock."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {deadline_s} s waiting for {what}")
        time.sleep(0.1)


def agent_write(server: ServerProcess, store_id: str, memory_id: str, content: str) -> None:
    """What an agent's own write does on Forward (seed 000): new content, metadata {"source": "agent"}."""
    httpx.post(
        f"{server.base_url}/api/v1/forward/memory_stores/{store_id}/memories/{memory_id}",
        headers={"Authorization": f"Bearer {server.token}"},
        json={"content": content, "metadata": {"source": "agent"}},
    ).raise_for_status()


def redact_head(client: Client, store: Store, memory_id: str) -> str:
    """Redact the head version of a live memory (Forward allows it; the memory keeps serving it)."""
    head = next(v for v in client.iter_versions(store.id) if v.memory_id == memory_id)
    client.redact_version(store.id, head.id)
    return head.id


def leaky_head(client: Client, store: Store, root: Path) -> tuple[str, str, Path]:
    """A mirror whose commit of a redacted head kept the content the memory still served.

    (memory id, the redacted version, the repository).
    """
    client.create_memory(store.id, "notes.md", "plain notes\n")
    leak = client.create_memory(store.id, "config.md", SECRET)
    assert pull_store(client, store, root).ok
    version = redact_head(client, store, leak.id)
    scan = pull_store(client, store, root, full_scan=True)
    assert scan.ok, scan.error
    repo = root / store.id
    commit = next(c for c in commits(repo) if trailers(repo, c)["Memory-Version"] == version)
    assert trailers(repo, commit)["Redacted"] == "true"
    assert files_at(repo, commit)["config.md"] == SECRET, "still served, so still in the mirror"
    return leak.id, version, repo


# --- 6. redacted content whose memory moved on -------------------------------------------------------


@pytest.mark.parametrize("full_scan", [False, True], ids=["pull", "full-scan"])
def test_a_redacted_head_whose_memory_moves_on_leaves_the_mirror(
    client: Client, tmp_path: Path, full_scan: bool
) -> None:
    store = new_store(client, "moved-on")
    memory_id, version, repo = leaky_head(client, store, tmp_path / "m")
    live = client.get_memory(store.id, memory_id)
    client.update_memory(store.id, memory_id, "api_key=<rotated>\n", expected_sha256=live.content_sha256)

    report = pull_store(client, store, tmp_path / "m", full_scan=full_scan)
    assert report.ok, report.error
    assert report.imported == 1
    assert report.rewrite is not None and report.rewrite["versions"] == [version]
    assert report.rewrite["removed"] == [blob_id(SECRET)]
    assert report.warnings[:2] == [
        f"1 redacted version(s) kept the content their memory served then and no longer serves: {version};"
        " that content leaves the mirror",
        f"redaction: rewrote 2 commit(s) of memstore/main from {report.rewrite['first_commit']} (1 redacted"
        " version(s)); 1 redacted content(s) removed from every object; moved refs/heads/main,"
        " refs/memsync/base",
    ]
    assert not has_object(repo, blob_id(SECRET))
    assert pull_store(client, store, tmp_path / "fresh").ok
    assert commits(repo) == commits(tmp_path / "fresh" / store.id)
    git(repo, "fsck", "--strict")
    assert (repo / "config.md").read_text() == "api_key=<rotated>\n"
    checked = verify_store(client, store, tmp_path / "m")
    assert checked.ok and not checked.drift, [d.to_json() for d in checked.differences]
    again = pull_store(client, store, tmp_path / "m", full_scan=True)
    assert again.ok and again.rewrite is None


def test_a_redacted_head_whose_memory_is_deleted_leaves_the_mirror(client: Client, tmp_path: Path) -> None:
    store = new_store(client, "deleted-on")
    memory_id, _, repo = leaky_head(client, store, tmp_path / "m")
    client.delete_memory(store.id, memory_id, expected_sha256=None)
    report = pull_store(client, store, tmp_path / "m")
    assert report.ok, report.error
    assert not has_object(repo, blob_id(SECRET))
    assert pull_store(client, store, tmp_path / "fresh").ok
    assert commits(repo) == commits(tmp_path / "fresh" / store.id)


@pytest.mark.e2e
def test_verify_names_a_redacted_version_whose_content_the_mirror_still_holds(
    client: Client, server: ServerProcess, tmp_path: Path
) -> None:
    store = new_store(client, "verify-leak")
    config = write_config(tmp_path, server.base_url, include=[store.id])
    env = {"MS_TOKEN": server.token}
    client.create_memory(store.id, "notes.md", "plain notes\n")
    leak = client.create_memory(store.id, "config.md", SECRET)
    assert memsync("--config", str(config), "pull", env=env).returncode == 0
    version = redact_head(client, store, leak.id)
    assert memsync("--config", str(config), "pull", "--full-scan", env=env).returncode == 0
    client.update_memory(store.id, leak.id, "rotated\n", expected_sha256=leak.content_sha256)
    # The purge is killed after the new history is written: memstore/main still holds the content.
    killed = memsync(
        "--config", str(config), "pull", env={**env, "MEMSYNC_CRASH_AT": "rewrite.history_written:1"}
    )
    assert killed.returncode == -9, killed.stdout + killed.stderr
    repo = tmp_path / "mirrors" / store.id
    assert has_object(repo, blob_id(SECRET))

    done = memsync("--config", str(config), "verify", "--json", env=env)
    assert done.returncode == 5, done.stdout + done.stderr
    (entry,) = stores_json(done).values()
    found = [(d["kind"], d["version"], d["drift"]) for d in entry["differences"]]
    assert found == [("redacted", version, True)]
    text = memsync("--config", str(config), "verify", env=env)
    assert f"  redacted: {version} config.md: " in text.stdout

    resumed = memsync("--config", str(config), "pull", env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert not has_object(repo, blob_id(SECRET))
    assert pull_store(client, store, tmp_path / "fresh").ok
    assert commits(repo) == commits(tmp_path / "fresh" / store.id)
    assert memsync("--config", str(config), "verify", env=env).returncode == 0


# --- 7. history lost to retention -------------------------------------------------------------------


@pytest.mark.e2e
def test_a_mirror_that_starts_after_expired_versions_says_so(server_factory: Factory, tmp_path: Path) -> None:
    server = server_factory("--version-retention", "2s")
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        store = new_store(client, "truncated")
        a = client.create_memory(store.id, "a.md", "a1\n")
        client.update_memory(store.id, a.id, "a2\n", expected_sha256=a.content_sha256)
        b = client.create_memory(store.id, "b.md", "short-lived\n")
        client.delete_memory(store.id, b.id, expected_sha256=b.content_sha256)
        client.create_memory(store.id, "c.md", "c\n")
        # Only the heads of the live memories outlive the retention: a's update and c's creation.
        wait_until(lambda: len(list(client.iter_versions(store.id))) == 2, "retention to expire 3 versions")

        config = write_config(tmp_path, server.base_url, include=[store.id])
        env = {"MS_TOKEN": server.token}
        done = memsync("--config", str(config), "pull", "--json", env=env)
        assert done.returncode == 0, done.stderr
        entry = stores_json(done)[store.id]
        repo = tmp_path / "mirrors" / store.id
        first = commits(repo)[0]
        assert entry["history_truncated"] == {"commit": first, "memories": 1}
        assert trailers(repo, first)["History-Truncated"] == "1"
        assert trailers(repo, first)["Operation"] == "updated"
        assert trailers(repo, first)["Memsync-Format"] == "1"
        # Everything else is said once, on the first commit only.
        assert all("History-Truncated" not in trailers(repo, c) for c in commits(repo)[1:])
        text = memsync("--config", str(config), "pull", env=env)
        assert text.returncode == 0
        assert pull_store(client, store, tmp_path / "fresh").ok
        assert commits(repo) == commits(tmp_path / "fresh" / store.id)

    warning = next(w for w in entry["warnings"] if "History-Truncated" in w)
    assert warning == (
        "history starts after versions that expired before the first import: 1 memory begins with an"
        " update or a delete instead of its creation (memories created and deleted before then left no"
        f" trace); recorded as History-Truncated: 1 on the first commit {first}"
    )
    shown = memsync("--config", str(config), "status", "--json", env=env)
    (status,) = stores_json(shown).values()
    assert status["history_truncated"] == {"commit": first, "memories": 1}
    shown = memsync("--config", str(config), "status", env=env)
    assert (
        "  history: starts after versions that expired before the first import (1 memory(ies) begin"
        f" without their creation; History-Truncated on {first})"
    ) in shown.stdout.splitlines()
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        checked = verify_store(client, store, tmp_path / "mirrors")
    assert checked.ok and not checked.drift
    assert [(d.kind, d.commit, d.drift) for d in checked.differences] == [("truncated", first, False)]


def test_a_complete_history_carries_no_truncation(client: Client, tmp_path: Path) -> None:
    store = new_store(client, "complete")
    a = client.create_memory(store.id, "a.md", "1\n")
    client.update_memory(store.id, a.id, "2\n", expected_sha256=a.content_sha256)
    report = pull_store(client, store, tmp_path)
    assert report.ok and report.history_truncated is None
    repo = tmp_path / store.id
    assert all(
        set(trailers(repo, c))
        <= {
            "Memory-Id",
            "Memory-Version",
            "Operation",
            "Memory-Path",
            "Content-SHA256",
            "Created-At",
            "Memsync-Format",
        }
        for c in commits(repo)
    )


def test_a_delete_whose_tombstone_expired_is_inferred_by_the_next_full_scan(
    server_factory: Factory, tmp_path: Path
) -> None:
    server = server_factory("--version-retention", "2s")
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        store = new_store(client, "ghost")
        ghost = client.create_memory(store.id, "dir/ghost.md", "boo\n")
        kept = client.create_memory(store.id, "kept.md", "here\n")
        assert pull_store(client, store, tmp_path / "one").ok
        assert pull_store(client, store, tmp_path / "two").ok
        client.delete_memory(store.id, ghost.id, expected_sha256=ghost.content_sha256)
        wait_until(
            lambda: all(v.memory_id != ghost.id for v in client.iter_versions(store.id)),
            "the tombstone to expire",
        )
        plain = pull_store(client, store, tmp_path / "one")
        assert plain.ok and plain.imported == 0 and plain.inferred_deletes == []
        repo = tmp_path / "one" / store.id
        tip_before = commits(repo)[-1]

        scan = pull_store(client, store, tmp_path / "one", full_scan=True)
        assert scan.ok, scan.error
        assert scan.inferred_deletes == [{"memory_id": ghost.id, "path": "dir/ghost.md"}]
        assert (
            "deleted 1 file(s) whose memory the store no longer lists and whose tombstone expired before"
            " it was imported: dir/ghost.md (Memsync-Inferred: tombstone-expired)"
        ) in scan.warnings
        inferred = commits(repo)[-1]
        assert git(repo, "rev-parse", f"{inferred}^").strip() == tip_before
        assert message(repo, inferred) == (
            "deleted dir/ghost.md (inferred: the store no longer lists the memory)\n\n"
            f"Memory-Id: {ghost.id}\n"
            f"Memory-Version: inferred:{ghost.id}\n"
            "Operation: deleted\n"
            "Memory-Path: dir/ghost.md\n"
            f"Created-At: {trailers(repo, tip_before)['Created-At']}\n"
            "Memsync-Inferred: tombstone-expired\n"
            "Memsync-Format: 1\n"
        )
        dates = git(repo, "log", "-1", "--format=%an <%ae> %at %cn <%ce> %ct", inferred).split()
        assert dates == git(repo, "log", "-1", "--format=%an <%ae> %at %cn <%ce> %ct", tip_before).split()
        assert files_at(repo, "memstore/main") == {"kept.md": "here\n"}
        assert not (repo / "dir" / "ghost.md").exists()
        git(repo, "fsck", "--strict")
        # A second mirror of the same history infers the same commit.
        assert pull_store(client, store, tmp_path / "two", full_scan=True).ok
        assert commits(tmp_path / "two" / store.id) == commits(repo)
        checked = verify_store(client, store, tmp_path / "one")
        assert checked.ok and not checked.drift, [d.to_json() for d in checked.differences]
        assert ("inferred", f"inferred:{ghost.id}") in [(d.kind, d.version) for d in checked.differences]
        # Nothing more to infer; the next version imports on top of the inferred commit.
        assert pull_store(client, store, tmp_path / "one", full_scan=True).inferred_deletes == []
        client.update_memory(store.id, kept.id, "still here\n", expected_sha256=kept.content_sha256)
        after = pull_store(client, store, tmp_path / "one")
        # One page of versions and one read of the memory (its metadata, and the new content).
        assert after.ok and after.imported == 1 and after.requests == 2, after
        assert files_at(repo, "memstore/main") == {"kept.md": "still here\n"}


# --- 8. memory metadata after every pull ------------------------------------------------------------


def metadata_documents(repo: Path) -> dict[str, str]:
    names = git(repo, "ls-tree", "-r", "--name-only", "memsync/metadata", "memories").split()
    return {
        name.removeprefix("memories/").removesuffix(".json"): git(repo, "show", f"memsync/metadata:{name}")
        for name in names
    }


def document(path: str, metadata: dict[str, str] | None) -> str:
    import json

    return (
        json.dumps({"metadata": metadata, "path": path}, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    )


def test_metadata_follows_every_pull_that_imports(
    client: Client, server: ServerProcess, tmp_path: Path
) -> None:
    store = new_store(client, "meta")
    a = client.create_memory(store.id, "a.md", "a1\n", metadata={"owner": "ana"})
    c = client.create_memory(store.id, "c.md", "c1\n", metadata={"owner": "cy"})
    assert pull_store(client, store, tmp_path).ok
    repo = tmp_path / store.id
    assert metadata_documents(repo) == {
        a.id: document("a.md", {"owner": "ana"}),
        c.id: document("c.md", {"owner": "cy"}),
    }

    agent_write(server, store.id, a.id, "a2 by the agent\n")
    b = client.create_memory(store.id, "b.md", "b1\n", metadata={"owner": "bo"})
    client.delete_memory(store.id, c.id, expected_sha256=c.content_sha256)
    report = pull_store(client, store, tmp_path)
    assert report.ok and report.imported == 3
    assert metadata_documents(repo) == {
        a.id: document("a.md", {"source": "agent"}),
        b.id: document("b.md", {"owner": "bo"}),
    }
    # One page of versions and a read of a and b, which brings their new contents along: no request
    # beyond what the import alone costs (one page and two contents).
    assert report.requests == 1 + 2
    assert report.metadata == {"memories": "read", "requests": 2}
    nothing = pull_store(client, store, tmp_path)
    assert nothing.requests == 1 and nothing.metadata == {"memories": "unchanged", "requests": 0}


def test_metadata_of_a_few_memories_in_a_large_store_costs_no_listing(
    client: Client, server: ServerProcess, tmp_path: Path
) -> None:
    store = new_store(client, "meta-large")
    memories = [client.create_memory(store.id, f"m/{n:03d}.md", f"{n}\n") for n in range(120)]
    assert pull_store(client, store, tmp_path).ok
    agent_write(server, store.id, memories[7].id, "rewritten by the agent\n")
    store = client.get_store(store.id)
    report = pull_store(client, store, tmp_path)
    assert report.ok and report.imported == 1
    # One page of versions and one read of the memory, which brings its content along with its metadata.
    assert report.requests == 2
    assert report.metadata == {"memories": "read", "requests": 1}
    documents = metadata_documents(tmp_path / store.id)
    assert documents[memories[7].id] == document("m/007.md", {"source": "agent"})
    assert len(documents) == 120
    assert files_at(tmp_path / store.id, "memstore/main")["m/007.md"] == "rewritten by the agent\n"


def test_anthropic_metadata_follows_renames_without_a_request(server: ServerProcess, tmp_path: Path) -> None:
    with open_client(Dialect.ANTHROPIC, server.base_url, server.token) as client:
        store = client.create_store(f"meta-anthropic-{uuid.uuid4().hex[:6]}")
        a = client.create_memory(store.id, "notes/a.md", "a\n")
        gone = client.create_memory(store.id, "gone.md", "g\n")
        assert pull_store(client, store, tmp_path).ok
        client.rename_memory(store.id, a.id, "notes/b.md", expected_sha256=a.content_sha256)
        c = client.create_memory(store.id, "c.md", "c\n")
        client.delete_memory(store.id, gone.id, expected_sha256=gone.content_sha256)
        report = pull_store(client, store, tmp_path)
        assert report.ok and report.imported == 3
        assert report.requests == 1  # the versions come with their contents; the paths with the versions
        assert report.metadata == {"memories": "from-versions", "requests": 0}
        assert metadata_documents(tmp_path / store.id) == {
            a.id: document("notes/b.md", None),
            c.id: document("c.md", None),
        }
        fresh = pull_store(client, store, tmp_path / "fresh")
        assert fresh.ok
    assert metadata_documents(tmp_path / "fresh" / store.id) == metadata_documents(tmp_path / store.id)


@pytest.mark.e2e
def test_metadata_catches_up_after_a_pull_killed_before_its_snapshot(
    client: Client, server: ServerProcess, tmp_path: Path
) -> None:
    store = new_store(client, "meta-killed")
    a = client.create_memory(store.id, "a.md", "a1\n", metadata={"owner": "ana"})
    config = write_config(tmp_path, server.base_url, include=[store.id])
    env = {"MS_TOKEN": server.token}
    assert memsync("--config", str(config), "pull", env=env).returncode == 0
    agent_write(server, store.id, a.id, "a2 by the agent\n")
    b = client.create_memory(store.id, "b.md", "b1\n", metadata={"owner": "bo"})
    # One commit per pack, killed right after the second: both versions are in, the snapshot is not.
    killed = memsync(
        "--config",
        str(config),
        "pull",
        env={**env, "MEMSYNC_IMPORT_BATCH": "1", "MEMSYNC_CRASH_AT": "pull.version:2"},
    )
    assert killed.returncode == -9, killed.stdout + killed.stderr
    repo = tmp_path / "mirrors" / store.id
    assert len(commits(repo)) == 3
    assert metadata_documents(repo) == {a.id: document("a.md", {"owner": "ana"})}

    done = memsync("--config", str(config), "pull", "--json", env=env)
    assert done.returncode == 0, done.stderr
    entry = stores_json(done)[store.id]
    assert entry["imported"] == 0 and entry["metadata"] == {"memories": "listed", "requests": 1}
    assert metadata_documents(repo) == {
        a.id: document("a.md", {"source": "agent"}),
        b.id: document("b.md", {"owner": "bo"}),
    }
    again = stores_json(memsync("--config", str(config), "pull", "--json", env=env))[store.id]
    assert again["requests"] == 1 and again["metadata"] == {"memories": "unchanged", "requests": 0}
