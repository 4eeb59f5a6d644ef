"""``memsync.server.BackgroundServer``: the reference server in a thread of the caller, seeded, on a free
loopback port, and gone (port closed, database closed) once stopped."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

import memsync
from memsync.api import open_client
from memsync.errors import UsageError
from memsync.rules import Dialect
from memsync.server import BackgroundServer

SEED = Path(memsync.__file__).parent / "demo" / "history.json"


def test_a_background_server_serves_its_seed_and_is_gone_once_stopped(tmp_path: Path) -> None:
    db = tmp_path / "deep" / "memstore.sqlite3"
    with BackgroundServer(db, ["bg-token"], seed_file=SEED) as server:
        assert server.url.startswith("http://127.0.0.1:")
        with open_client(Dialect.FORWARD, server.url, "bg-token") as client:
            (store,) = client.list_stores()
            assert store.name == "project-alpha-memory"
            assert client.find_memory(store.id, "decisions/arch-choice.md") is not None
        url = server.url
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/api/v1/forward/memory_stores", timeout=5)
    # The database is kept: a server started on it again finds the seeded store, and seeds nothing.
    with (
        BackgroundServer(db, ["bg-token"]) as again,
        open_client(Dialect.FORWARD, again.url, "bg-token") as c,
    ):
        assert [s.name for s in c.list_stores()] == ["project-alpha-memory"]


def test_a_background_server_needs_a_token(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="token"):
        BackgroundServer(tmp_path / "db.sqlite3", [])
