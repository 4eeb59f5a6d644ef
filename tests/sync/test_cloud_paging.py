"""A Cloud service that pages only by ``next_page`` (as the official Qoder SDK expects) gives the same
mirror as one that pages only by ``after_id`` (the seeds' generation): the same commit ids, every
version, and the same number of requests.

One database is served twice by the real reference server: first with ``--cloud-paging after-id``
(no ``next_page``; ``page`` refused), then with ``--cloud-paging next-page`` (neither ``first_id`` nor
``last_id``; ``after_id`` refused).
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import httpx

from memsync.api import open_client
from memsync.rules import Dialect
from memsync.sync.pull import pull_store
from tests.support.server import ServerProcess

MEMORIES = 60
UPDATES = 2  # versions per memory beyond its creation: 180 versions, two pages of 100 and more


def tip(repo: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "refs/remotes/memstore/main"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def fsck(repo: Path) -> None:
    subprocess.run(["git", "-C", str(repo), "fsck", "--strict"], capture_output=True, check=True)


def test_a_pull_paged_by_next_page_alone_equals_one_paged_by_after_id(
    server_factory: object, tmp_path: Path
) -> None:
    assert callable(server_factory)
    db = tmp_path / "cloud.sqlite3"
    by_ids: ServerProcess = server_factory("--cloud-paging", "after-id", db=db)
    auth = {"Authorization": f"Bearer {by_ids.token}"}
    with open_client(Dialect.CLOUD, by_ids.base_url, by_ids.token) as client:
        store = client.create_store(f"paging-{uuid.uuid4().hex[:6]}", description="made by tests")
        for n in range(MEMORIES):
            memory = client.create_memory(store.id, f"notes/{n:03d}.md", f"note {n}\n")
            for update in range(UPDATES):
                memory = client.update_memory(
                    store.id, memory.id, f"note {n}, edit {update}\n", expected_sha256=memory.content_sha256
                )
        client.delete_memory(store.id, memory.id, expected_sha256=memory.content_sha256)
        by_after_id = pull_store(client, store, tmp_path / "by-after-id")
        assert by_after_id.ok, by_after_id.error
    # The switch is in force: no next_page, and a page token is refused.
    listing = f"{by_ids.base_url}/api/v1/cloud/memory_stores/{store.id}/versions"
    first = httpx.get(listing, params={"limit": "100"}, headers=auth).json()
    assert first["has_more"] and first["last_id"] and "next_page" not in first
    refused = httpx.get(listing, params={"page": f"id:{first['last_id']}"}, headers=auth)
    assert refused.status_code == 400 and "page" in refused.text
    by_ids.stop()

    paged: ServerProcess = server_factory("--cloud-paging", "next-page", db=db)
    listing = f"{paged.base_url}/api/v1/cloud/memory_stores/{store.id}/versions"
    # The switch is in force: no ids to continue from, and after_id is refused.
    first = httpx.get(listing, params={"limit": "100"}, headers=auth).json()
    assert first["next_page"] and "last_id" not in first
    refused = httpx.get(listing, params={"after_id": first["data"][-1]["id"]}, headers=auth)
    assert refused.status_code == 400 and "after_id" in refused.text

    with open_client(Dialect.CLOUD, paged.base_url, paged.token) as client:
        by_next_page = pull_store(client, client.get_store(store.id), tmp_path / "by-next-page")
        assert by_next_page.ok, by_next_page.error

    versions = MEMORIES * (1 + UPDATES) + 1
    assert by_after_id.imported == by_next_page.imported == versions
    assert by_after_id.requests == by_next_page.requests
    repo_a = tmp_path / "by-after-id" / store.id
    repo_b = tmp_path / "by-next-page" / store.id
    assert tip(repo_a) == tip(repo_b)
    fsck(repo_a)
    fsck(repo_b)
