"""The storage engine in-process: id order within one clock tick and across restarts, path listing."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memsync.rules import Dialect
from memsync.server import Engine
from memsync.server.ids import order_of

FROZEN = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)


def test_ids_grow_within_one_clock_tick_and_across_restarts(tmp_path: Path) -> None:
    db = tmp_path / "ids.sqlite3"
    engine = Engine(db, clock=lambda: FROZEN)
    store, _ = engine.create_store(Dialect.FORWARD, name="ids")
    memory = engine.create_memory(Dialect.FORWARD, store.id, path="a", content="0")
    for n in range(1, 300):
        engine.update_memory(Dialect.FORWARD, store.id, memory.id, content=str(n))
    versions = engine.list_versions(Dialect.FORWARD, store.id, limit=100).items
    ids = [v.id for v in versions]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == 100
    assert [v.content for v in versions[:3]] == ["299", "298", "297"]
    assert {v.created_at for v in versions} == {int(FROZEN.timestamp() * 1000)}
    last = ids[0]
    engine.close()
    # A restart whose clock runs behind still makes ids that sort after every stored one.
    behind = Engine(db, clock=lambda: FROZEN - timedelta(days=1))
    try:
        newer = behind.update_memory(Dialect.FORWARD, store.id, memory.id, content="after restart")
        assert newer.head_version_id > last
        assert (order_of(newer.head_version_id) or 0) > (order_of(last) or 0)
    finally:
        behind.close()


PATHS = st.lists(
    st.lists(st.sampled_from(["a", "b", "a-b", "é", "z0"]), min_size=1, max_size=3).map(
        lambda s: "/" + "/".join(s)
    ),
    max_size=12,
    unique=True,
)


@given(paths=PATHS, limit=st.integers(1, 4), depth=st.sampled_from([0, 1]))
def test_path_listing_pages_match_one_sorted_listing(paths: list[str], limit: int, depth: int) -> None:
    engine = Engine(":memory:")
    try:
        store, _ = engine.create_store(Dialect.ANTHROPIC, name="paths")
        kept: list[str] = []
        for path in paths:
            if any(p.startswith(path + "/") or path.startswith(p + "/") for p in kept):
                continue
            engine.create_memory(Dialect.ANTHROPIC, store.id, path=path, content="")
            kept.append(path)
        expected: list[str] = []
        for path in sorted(kept, key=lambda p: p.encode("utf-8")):
            rest = path[1:]
            item = "/" + rest.split("/", 1)[0] + "/" if depth == 1 and "/" in rest else path
            if item not in expected:
                expected.append(item)
        walked: list[str] = []
        cursor = None
        for _ in range(100):
            items, cursor = engine.list_memories_by_path(
                Dialect.ANTHROPIC, store.id, limit=limit, prefix="/", depth=depth, cursor=cursor
            )
            assert len(items) <= limit
            walked += [i.path for i in items]
            if cursor is None:
                break
        assert walked == expected
    finally:
        engine.close()


@pytest.mark.e2e
def test_without_db_the_server_uses_the_platform_data_folder(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "memsync", "server", "--port", "0", "--token", "t"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + 30
    line = ""
    try:
        while not line.startswith("listening on ") and time.monotonic() < deadline:
            if selector.select(timeout=deadline - time.monotonic()):
                line = process.stdout.readline()
                if not line:
                    break
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
        selector.close()
    assert line.startswith("listening on http://127.0.0.1:"), line
    assert (tmp_path / "memsync" / "server" / "memstore.sqlite3").exists()
