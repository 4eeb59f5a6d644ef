"""The same work against a clean server and a faulty one ends the same, with no write done twice.

The faulty server (``--fault-rate``) answers a seeded share of requests with a 500, a 429 with
``Retry-After: 1``, a 1 s delay, a connection dropped before the request is applied, or one dropped
after the write was applied (its answer lost). The client retries what is safe to retry and settles
the writes whose outcome it cannot know; counting the versions afterwards shows nothing was doubled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from memsync.api import Client, open_client
from memsync.rules import Dialect, sha256_hex
from tests.api.peers import FAST_RETRY
from tests.support.server import ServerProcess

FAULT_KINDS = ("server_error", "rate_limited", "slow", "drop_before_write", "drop_after_write")
# Seeds chosen so that each dialect's run meets every kind of fault at least once.
SEEDS = {Dialect.FORWARD: 11, Dialect.CLOUD: 11, Dialect.ANTHROPIC: 6}
FAULT_RATE = "0.3"


def scenario(client: Client) -> dict[str, Any]:
    """Every kind of write once or more, then what the store holds, without ids (they differ per run)."""
    store = client.create_store("faulty", description="fault run", metadata={"k": "v"}, request_id="run-1")
    memories = {}
    for n in range(5):
        memories[n] = client.create_memory(store.id, f"notes/{n}.md", f"first {n}")
    for n in range(4):
        memories[n] = client.update_memory(
            store.id, memories[n].id, f"second {n}", expected_sha256=memories[n].content_sha256
        )
    client.update_memory(store.id, memories[0].id, "third 0", expected_sha256=memories[0].content_sha256)
    client.rename_memory(store.id, memories[4].id, "moved/4.md", expected_sha256=sha256_hex("first 4"))
    client.delete_memory(store.id, memories[3].id, expected_sha256=sha256_hex("second 3"))
    versions = list(reversed(list(client.iter_versions(store.id))))
    contents = [content for _, content in client.fetch_contents(store.id, versions, concurrency=1)]
    client.redact_version(store.id, versions[0].id)
    client.archive_store(store.id)

    memory_numbers: dict[str, int] = {}
    history = []
    for version in reversed(list(client.iter_versions(store.id))):
        number = memory_numbers.setdefault(version.memory_id, len(memory_numbers))
        history.append((number, version.operation.value, version.path, version.redacted))
    return {
        "stores": [s.description for s in client.list_stores(include_archived=True) if s.name == "faulty"],
        "memories": sorted((m.path, m.content_sha256) for m in client.list_memories(store.id)),
        "history": history,
        "contents": contents,
    }


def fault_counts(server: ServerProcess) -> dict[str, int]:
    answer = httpx.get(f"{server.base_url}/debug/faults", headers={"Authorization": f"Bearer {server.token}"})
    answer.raise_for_status()
    counts: dict[str, int] = answer.json()["faults"]
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("dialect", list(Dialect), ids=lambda d: d.value)
def test_faults_change_nothing_but_time(
    dialect: Dialect, server_factory: Callable[..., ServerProcess]
) -> None:
    clean = server_factory()
    with open_client(dialect, clean.base_url, clean.token, retry=FAST_RETRY) as client:
        expected = scenario(client)
        clean_requests = client.request_count

    faulty = server_factory("--fault-rate", FAULT_RATE, "--fault-seed", str(SEEDS[dialect]))
    with open_client(dialect, faulty.base_url, faulty.token, retry=FAST_RETRY) as client:
        assert scenario(client) == expected
        assert client.retry_count > 0 and client.request_count > clean_requests

    counts = fault_counts(faulty)
    assert all(counts[kind] >= 1 for kind in FAULT_KINDS), counts
    assert expected["stores"] == ["fault run"]
    # 5 created, 5 updated, 1 deleted; a rename is one version on Anthropic, a copy and a delete elsewhere.
    assert len(expected["history"]) == (12 if dialect is Dialect.ANTHROPIC else 13)
