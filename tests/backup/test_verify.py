"""memsync verify: a clean mirror passes; each kind of hand-made divergence is named precisely."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from memsync.api import Client, Operation, Store, open_client
from memsync.mirror.backups import ImportedCommit
from memsync.rules import Dialect
from memsync.sync.verify import RETENTION, Held, Listed, find_differences
from tests.backup.helpers import git, memsync, stores_json, write_config
from tests.support.server import ServerProcess
from tests.support.tiers import end_to_end


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Client]:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as c:
        yield c


@pytest.fixture
@end_to_end
def pulled(client: Client, server: ServerProcess, tmp_path: Path) -> tuple[Store, Path, dict[str, str]]:
    """A store of four versions, pulled; (store, config file, CLI environment)."""
    store = client.create_store(
        f"verify-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()), description="made by tests"
    )
    a = client.create_memory(store.id, "a.md", "one\n")
    client.create_memory(store.id, "b.md", "bee\n")
    client.update_memory(store.id, a.id, "two\n", expected_sha256=a.content_sha256)
    client.create_memory(store.id, "dir/c.md", "sea\n")
    config = write_config(tmp_path, server.base_url, include=[store.id])
    env = {"MS_TOKEN": server.token}
    assert memsync("--config", str(config), "pull", env=env).returncode == 0
    return store, config, env


def verify(config: Path, env: dict[str, str]) -> tuple[int, dict[str, object]]:
    done = memsync("--config", str(config), "verify", "--json", env=env)
    (entry,) = stores_json(done).values()
    return done.returncode, entry


def kinds(entry: dict[str, object]) -> list[tuple[str, str | None]]:
    differences = entry["differences"]
    assert isinstance(differences, list)
    return [(d["kind"], d["path"]) for d in differences]


def test_a_clean_mirror_verifies(pulled: tuple[Store, Path, dict[str, str]]) -> None:
    store, config, env = pulled
    code, entry = verify(config, env)
    assert code == 0 and entry["ok"] is True and entry["drift"] is False
    assert entry["commits"] == 4 and entry["versions"] == 4 and entry["differences"] == []
    text = memsync("--config", str(config), "verify", env=env)
    assert text.returncode == 0 and f"{store.id} ({store.name}): ok: 4 commit(s)" in text.stdout


def test_a_hand_made_content_change_is_a_mismatch_and_a_tree_difference(
    pulled: tuple[Store, Path, dict[str, str]],
) -> None:
    store, config, env = pulled
    repo = config.parent / "mirrors" / store.id
    # Replace the commit of "created dir/c.md": same message and parent, other content.
    tip = git(repo, "rev-parse", "memstore/main").strip()
    forged = git(repo, "hash-object", "-w", "--stdin", input_text="forged\n").strip()
    tree = git(repo, "mktree", input_text=_tree_with(repo, tip, "dir/c.md", forged)).strip()
    message = git(repo, "log", "-1", "--format=%B", tip)
    fake = git(repo, "commit-tree", tree, "-p", f"{tip}~1", input_text=message).strip()
    git(repo, "update-ref", "refs/remotes/memstore/main", fake, tip)
    code, entry = verify(config, env)
    assert code == 5 and entry["drift"] is True
    assert kinds(entry) == [("mismatch", "dir/c.md"), ("tree", "dir/c.md")]
    differences = entry["differences"]
    assert isinstance(differences, list)
    mismatch = differences[0]
    assert mismatch["commit"] == fake and "hashes to" in mismatch["detail"]
    assert "1 mismatch, 1 tree" in str(entry["error"])


def test_a_dropped_commit_is_missing_and_new_versions_are_behind(
    client: Client, pulled: tuple[Store, Path, dict[str, str]]
) -> None:
    store, config, env = pulled
    repo = config.parent / "mirrors" / store.id
    history = git(repo, "rev-list", "--reverse", "memstore/main").split()
    dropped = git(repo, "log", "-1", "--format=%B", history[1]).split("Memory-Version: ")[1].split()[0]
    # History without its second commit (the files of the others kept as they were).
    parent = history[0]
    for commit in history[2:]:
        message = git(repo, "log", "-1", "--format=%B", commit)
        parent = git(repo, "commit-tree", f"{commit}^{{tree}}", "-p", parent, input_text=message).strip()
    git(repo, "update-ref", "refs/remotes/memstore/main", parent)
    code, entry = verify(config, env)
    assert code == 5
    differences = entry["differences"]
    assert isinstance(differences, list)
    assert [(d["kind"], d["version"]) for d in differences] == [("missing", dropped)]
    client.create_memory(store.id, "new.md", "newer\n")
    code, entry = verify(config, env)
    assert code == 5 and [k for k, _ in kinds(entry)] == ["missing", "behind"]


def test_a_redaction_not_yet_propagated_is_drift_until_a_full_scan(
    client: Client, pulled: tuple[Store, Path, dict[str, str]]
) -> None:
    store, config, env = pulled
    first = list(client.iter_versions(store.id))[-1]
    assert first.operation is Operation.CREATED
    client.redact_version(store.id, first.id)
    code, entry = verify(config, env)
    assert code == 5 and kinds(entry) == [("redacted", "a.md")]
    assert memsync("--config", str(config), "pull", "--full-scan", env=env).returncode == 0
    code, entry = verify(config, env)
    assert code == 0, entry


def test_the_only_mirrored_store_not_listed_is_a_configuration_to_check(
    server: ServerProcess, pulled: tuple[Store, Path, dict[str, str]]
) -> None:
    # Nothing listed shows this is the mirror's API, so no restore is suggested: tests/sync/test_origin.py
    # has the drift (and the restore) where another mirrored store is listed.
    store, config, env = pulled
    httpx.delete(
        f"{server.base_url}/api/v1/forward/memory_stores/{store.id}",
        headers={"Authorization": f"Bearer {server.token}"},
    ).raise_for_status()
    code, entry = verify(config, env)
    assert code == 2 and entry["error"].startswith("not found at") and "restore" not in entry["error"]


NOW = datetime(2026, 9, 1, tzinfo=UTC)


def _tree_with(repo: Path, commit: str, path: str, blob: str) -> str:
    """``git mktree`` input for the root of ``commit`` with ``path`` (one level deep) set to ``blob``."""
    folder, name = path.split("/")
    sub = git(repo, "ls-tree", f"{commit}:{folder}")
    lines = [line for line in sub.splitlines() if not line.endswith(f"\t{name}")]
    lines.append(f"100644 blob {blob}\t{name}")
    new_sub = git(repo, "mktree", input_text="\n".join(lines) + "\n").strip()
    root = [line for line in git(repo, "ls-tree", commit).splitlines() if not line.endswith(f"\t{folder}")]
    root.append(f"040000 tree {new_sub}\t{folder}")
    return "\n".join(root) + "\n"


def commit(n: int, *, days_old: int, sha: str | None = "a" * 64) -> Held:
    made = ImportedCommit(
        commit=f"{n:040x}",
        version_id=f"memver_{n}",
        memory_id="mem_1",
        operation="updated",
        created_at=NOW - timedelta(days=days_old),
        memory_path="a.md",
        content_sha256=sha,
        redacted=False,
        skipped=None,
        blob=f"{n:040x}",
    )
    return Held(made, sha)


def test_unlisted_versions_are_expired_by_the_dialects_retention() -> None:
    held = [commit(1, days_old=40), commit(2, days_old=10), commit(3, days_old=1)]
    live = Listed("memver_3", "updated", "a" * 64, False, NOW - timedelta(days=1))
    anthropic = find_differences(
        held, [live], tip_files=None, memories={}, retention=RETENTION[Dialect.ANTHROPIC], now=NOW
    )
    assert [(d.kind, d.version, d.drift) for d in anthropic] == [
        ("expired", "memver_1", False),
        ("unlisted", "memver_2", True),
    ]
    forward = find_differences(
        held, [live], tip_files=None, memories={}, retention=RETENTION[Dialect.FORWARD], now=NOW
    )
    assert [(d.kind, d.drift) for d in forward] == [("expired", False), ("expired", False)]
