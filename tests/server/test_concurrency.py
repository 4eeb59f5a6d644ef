"""Writers racing, paging while writes happen, and restarts: the engine's ordering promises."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.server.checks import forward_store, ok, sha
from tests.server.conftest import dialect_client
from tests.support.server import ServerProcess

Factory = Callable[..., ServerProcess]


def _race(server: ServerProcess, calls: list[Callable[[httpx.Client], httpx.Response]]) -> list[int]:
    """Run each call from its own connection, all released at once; the status codes in order."""
    clients = [dialect_client(server, "/api/v1/forward") for _ in calls]
    for client in clients:
        client.get("/memory_stores", params={"limit": 1})  # connect before the start line
    barrier = threading.Barrier(len(calls))
    statuses: list[int] = [0] * len(calls)

    def run(index: int) -> None:
        barrier.wait()
        statuses[index] = calls[index](clients[index]).status_code

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    for client in clients:
        client.close()
    return statuses


def test_exactly_one_of_racing_preconditioned_updates_wins(
    server: ServerProcess, forward: httpx.Client
) -> None:
    sid = forward_store(forward)["id"]
    mid = ok(forward.post(f"/memory_stores/{sid}/memories", json={"path": "race.md", "content": "base"}))[
        "id"
    ]
    current = "base"
    for round_ in range(8):
        contenders = [f"round {round_} writer {w}" for w in range(3)]
        expected = sha(current)
        calls = [
            (
                lambda c, text=text, expected=expected: c.post(
                    f"/memory_stores/{sid}/memories/{mid}", json={"content": text, "content_sha256": expected}
                )
            )
            for text in contenders
        ]
        statuses = _race(server, calls)
        assert sorted(statuses) == [200, 409, 409], statuses
        current = contenders[statuses.index(200)]
        assert ok(forward.get(f"/memory_stores/{sid}/memories/{mid}"))["content"] == current
    versions = ok(forward.get(f"/memory_stores/{sid}/memory_versions", params={"limit": 100}))["data"]
    assert len(versions) == 9


def test_racing_creates_of_one_path_make_one_memory(server: ServerProcess, forward: httpx.Client) -> None:
    sid = forward_store(forward)["id"]
    calls = [
        (lambda c, n=n: c.post(f"/memory_stores/{sid}/memories", json={"path": "same", "content": f"w{n}"}))
        for n in range(4)
    ]
    assert sorted(_race(server, calls)) == [200, 409, 409, 409]
    assert len(ok(forward.get(f"/memory_stores/{sid}/memories"))["data"]) == 1


def _walk(client: httpx.Client, url: str, direction: str, start: str | None) -> list[str]:
    seen: list[str] = []
    cursor = start
    while True:
        params: dict[str, Any] = {"limit": 7}
        if cursor is not None:
            params[direction] = cursor
        page = ok(client.get(url, params=params))
        ids = [item["id"] for item in page["data"]]
        assert ids == sorted(ids, reverse=True), "every page is newest first"
        seen.extend(ids if direction == "after_id" else reversed(ids))
        if not page["has_more"]:
            return seen
        cursor = page["last_id"] if direction == "after_id" else page["first_id"]


def test_paging_both_ways_has_no_gap_and_no_duplicate_while_writes_happen(
    server: ServerProcess, forward: httpx.Client
) -> None:
    sid = forward_store(forward)["id"]
    originals = [
        ok(forward.post(f"/memory_stores/{sid}/memories", json={"path": f"m{n:02d}", "content": f"c{n}"}))[
            "id"
        ]
        for n in range(30)
    ]
    stop, writing = threading.Event(), threading.Event()

    def write() -> None:
        with dialect_client(server, "/api/v1/forward") as writer:
            n = 0
            while not stop.is_set() and n < 400:
                writer.post(f"/memory_stores/{sid}/memories", json={"path": f"new{n}", "content": "x"})
                writer.post(f"/memory_stores/{sid}/memories/{originals[n % 30]}", json={"content": f"u{n}"})
                n += 1
                if n == 3:
                    writing.set()

    writer = threading.Thread(target=write)
    writer.start()
    assert writing.wait(timeout=10)
    try:
        for url in (f"/memory_stores/{sid}/memories", f"/memory_stores/{sid}/memory_versions"):
            older = _walk(forward, url, "after_id", None)
            assert len(older) == len(set(older)), "no duplicate paging to older items"
            assert older == sorted(older, reverse=True)
            if url.endswith("memories"):
                assert set(originals) <= set(older), "no gap"
            newer = _walk(forward, url, "before_id", older[-1])
            assert len(newer) == len(set(newer)), "no duplicate paging to newer items"
            assert newer == sorted(newer)
            assert set(older[:-1]) <= set(newer), "everything seen going down is seen going up"
    finally:
        stop.set()
        writer.join(timeout=30)


def test_restart_keeps_data_and_id_order(server_factory: Factory, tmp_path: Path) -> None:
    db = tmp_path / "kept.sqlite3"
    first = server_factory(db=db)
    with dialect_client(first, "/api/v1/forward") as client:
        sid = forward_store(client)["id"]
        before = ok(client.post(f"/memory_stores/{sid}/memories", json={"path": "a", "content": "kept"}))
    assert first.stop() == 0
    second = server_factory(db=db)
    with dialect_client(second, "/api/v1/forward") as client:
        assert ok(client.get(f"/memory_stores/{sid}/memories/{before['id']}")) == before
        after = ok(client.post(f"/memory_stores/{sid}/memories", json={"path": "b", "content": "new"}))
        assert after["id"] > before["id"]
        versions = ok(client.get(f"/memory_stores/{sid}/memory_versions"))["data"]
        assert [v["path"] for v in versions] == ["b", "a"]
    assert second.stop() == 0
