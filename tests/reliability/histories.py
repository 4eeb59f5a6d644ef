"""Store histories built through the real API, and the checks that nothing of them was lost or doubled.

A history is a seeded random walk of creates, updates, deletes (and Anthropic renames) over a small
pool of paths, so that paths are reused after a delete and directories come and go. Its ledger
counts the versions each write must have produced; :func:`assert_versions_match` then compares the
store's own version listing with the ledger, which is how a write duplicated by a retry (or lost to
a dropped answer) shows up.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from memsync.api import Client, MemoryVersion, Store
from memsync.mirror import decode_path
from memsync.rules import Dialect, sha256_hex
from tests.reliability.harness import GitOracle


@dataclass
class History:
    """What was written to one store: the live files, and one ledger line per version expected."""

    store: Store
    dialect: Dialect
    seed: int
    live: dict[str, str] = field(default_factory=dict)
    """path → content of every live memory."""
    ledger: list[tuple[str, str, str | None]] = field(default_factory=list)
    """(operation, path, content sha256) per version, in write order."""
    ids: dict[str, str] = field(default_factory=dict)
    """path → memory id of every live memory."""
    rng: random.Random = field(default_factory=random.Random)

    @property
    def versions(self) -> int:
        return len(self.ledger)


def _paths(dialect: Dialect, count: int) -> list[str]:
    # Anthropic forbids a path beside its own directory (a vs a/b): keep files and folders apart there.
    pool = [f"notes/n{i}.md" if i % 3 else f"deep/er/d{i}.md" for i in range(count)]
    if dialect is not Dialect.ANTHROPIC:
        pool += ["deep", "notes"]  # a file that is also a directory elsewhere: the %_ suffix
    return pool


def build_history(client: Client, store: Store, *, versions: int, seed: int, pool: int = 10) -> History:
    """Write ``versions`` versions into ``store`` (a seeded walk); the ledger of what must exist."""
    history = History(store, client.dialect, seed, rng=random.Random(seed))
    grow_history(client, history, versions, pool=pool)
    return history


def grow_history(client: Client, history: History, more: int, *, pool: int = 10) -> None:
    """Write ``more`` versions into the history's store, continuing its walk."""
    rng = history.rng
    paths = _paths(client.dialect, pool)
    store_id = history.store.id
    target_count = history.versions + more
    while history.versions < target_count:
        serial = history.versions + 1
        path = rng.choice(paths)
        content = f"{path} #{serial} seed {history.seed}\n" + "line\r\n" * rng.randrange(3) + "é ✓\n"
        roll = rng.random()
        if path not in history.live:
            memory = client.create_memory(store_id, path, content)
            history.ids[path] = memory.id
            history.live[path] = content
            history.ledger.append(("created", path, sha256_hex(content)))
        elif roll < 0.55:
            old = history.live[path]
            client.update_memory(store_id, history.ids[path], content, expected_sha256=sha256_hex(old))
            history.live[path] = content
            history.ledger.append(("updated", path, sha256_hex(content)))
        elif roll < 0.85 or client.dialect is not Dialect.ANTHROPIC:
            old = history.live.pop(path)
            client.delete_memory(store_id, history.ids.pop(path), expected_sha256=sha256_hex(old))
            history.ledger.append(("deleted", path, sha256_hex(old)))
        else:
            target = f"moved/{serial}.md"
            old = history.live.pop(path)
            memory_id = history.ids.pop(path)
            moved = client.rename_memory(store_id, memory_id, target, expected_sha256=sha256_hex(old))
            history.ids[target] = moved.id
            history.live[target] = old
            history.ledger.append(("updated", target, sha256_hex(old)))


def listed_oldest_first(client: Client, store_id: str) -> list[MemoryVersion]:
    return list(reversed(list(client.iter_versions(store_id))))


def assert_versions_match(history: History, listed: list[MemoryVersion]) -> None:
    """The store holds exactly the ledger's versions, in order: none lost, none doubled."""
    found = [(v.operation.value, v.path, v.content_sha256) for v in listed]
    assert len(found) == history.versions, (
        f"store {history.store.id}: {len(found)} versions listed, {history.versions} written"
        f" ({'duplicated' if len(found) > history.versions else 'lost'} writes)"
    )
    # Anthropic tombstones carry no hash: compare what the dialect keeps.
    if history.dialect is Dialect.ANTHROPIC:
        expected = [(op, path, None if op == "deleted" else sha) for op, path, sha in history.ledger]
    else:
        expected = history.ledger
    assert found == expected


def decoded_worktree(repo: Path) -> dict[str, str]:
    """The checkout as memory paths and contents (paths decoded strictly, bytes as UTF-8)."""
    return {decode_path(path): data.decode("utf-8") for path, data in GitOracle(repo).worktree().items()}


def assert_mirror_holds(repo: Path, history: History) -> None:
    """One commit per version, a clean fsck, and a checkout that is exactly the live store."""
    oracle = GitOracle(repo)
    assert len(oracle.commits()) == history.versions
    assert decoded_worktree(repo) == history.live
    oracle.fsck()
