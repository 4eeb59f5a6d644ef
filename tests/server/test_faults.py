"""Injected faults really happen, of every kind, at about the configured rate, as a client sees them."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from tests.server.conftest import dialect_client
from tests.support.server import ServerProcess

Factory = Callable[..., ServerProcess]

WRITES = 100
RATE = 0.5
SLOW_S = 1.0


def _until_ok(call: Callable[[], httpx.Response], attempts: int = 40) -> Any:
    """Retry through injected faults (only for setup and read-back; the measured phase never retries)."""
    for _ in range(attempts):
        try:
            response = call()
        except httpx.TransportError:
            continue
        if response.status_code in (200, 201):
            return response.json()
        assert response.status_code in (429, 500), response.text
    raise AssertionError(f"no success in {attempts} attempts")


def test_every_fault_kind_happens_at_about_the_configured_rate(server_factory: Factory) -> None:
    server = server_factory("--fault-rate", str(RATE), "--fault-seed", "20261130")
    debug = httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {server.token}"})
    with dialect_client(server, "/api/v1/forward") as client:
        key = {"Idempotency-Key": uuid.uuid4().hex}
        sid = _until_ok(lambda: client.post("/memory_stores", json={"name": "faulty"}, headers=key))["id"]
    before = debug.get("/debug/faults").json()

    def write(n: int) -> tuple[str, str]:
        with dialect_client(server, "/api/v1/forward") as writer:
            path = f"w{n:03d}"
            started = time.monotonic()
            try:
                response = writer.post(f"/memory_stores/{sid}/memories", json={"path": path, "content": "x"})
            except (httpx.RemoteProtocolError, httpx.ReadError):
                return path, "dropped"
            elapsed = time.monotonic() - started
            if response.status_code == 500:
                assert response.json()["error"]["type"] == "api_error"
                return path, "server_error"
            if response.status_code == 429:
                assert response.headers["retry-after"] == "1"
                assert response.json()["error"]["type"] == "rate_limit_error"
                return path, "rate_limited"
            assert response.status_code == 200, response.text
            # The server names the delay it injected: on a loaded machine a plain answer is slow too.
            if response.headers.get("x-injected-fault") == "slow":
                assert elapsed >= SLOW_S * 0.9
                return path, "slow"
            return path, "ok"

    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = dict(pool.map(write, range(WRITES)))
    after = debug.get("/debug/faults").json()
    with dialect_client(server, "/api/v1/forward") as client:
        listed = _until_ok(lambda: client.get(f"/memory_stores/{sid}/memories", params={"limit": 100}))
    debug.close()
    applied = {m["path"] for m in listed["data"]}

    seen: Counter[str] = Counter()
    for path, outcome in outcomes.items():
        if outcome == "dropped":
            outcome = "drop_after_write" if path in applied else "drop_before_write"
        else:
            assert (path in applied) == (outcome in ("ok", "slow")), (path, outcome)
        seen[outcome] += 1
    injected = {kind: after["faults"][kind] - before["faults"][kind] for kind in after["faults"]}
    assert after["requests"] - before["requests"] == WRITES
    assert {kind: seen[kind] for kind in injected} == injected, (seen, injected)
    total = sum(injected.values())
    assert abs(total - WRITES * RATE) <= 15, injected
    for kind, count in injected.items():
        assert count >= 4, f"{kind} happened only {count} times: {injected}"


def test_no_debug_route_and_no_faults_by_default(server: ServerProcess) -> None:
    response = httpx.get(
        server.base_url + "/debug/faults", headers={"Authorization": f"Bearer {server.token}"}
    )
    assert response.status_code == 404
