"""Fixtures of the daemon tests: a client of the session's reference server and fresh mirrors."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memsync.api import Client, Store, open_client
from memsync.rules import Dialect
from memsync.sync.pull import pull_store
from tests.support.server import ServerProcess


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Client]:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as c:
        yield c


@pytest.fixture
def mirrored(client: Client, tmp_path: Path) -> Callable[..., tuple[Store, Path]]:
    """A new store with ``files`` on the server, pulled into ``tmp_path/mirrors/<store id>``."""

    def make(files: dict[str, str] | None = None) -> tuple[Store, Path]:
        store = client.create_store(f"daemon-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()))
        for path, content in (files or {"notes/a.md": "one\n", "b.md": "bee\n"}).items():
            client.create_memory(store.id, path, content)
        root = tmp_path / "mirrors"
        report = pull_store(client, store, root)
        assert report.ok, report.error
        return store, root / store.id

    return make
