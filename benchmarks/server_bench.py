"""Requests per second of the reference server, one request at a time over one keep-alive connection.

Starts a fresh ``memsync server`` on 127.0.0.1 (port 0, a temporary database), then measures

* ``GET .../memory_versions/{id}`` (a version with its content), and
* ``POST .../memories/{id}`` with a ``content_sha256`` precondition (each update writes a version),

for ``--seconds`` per round, three rounds each, and prints the median. It measures with httpx (the
client memsync uses) and with the standard library's ``http.client`` (whose per-request cost is
lower, so its figure is closer to the server's own capacity). Usage::

    python benchmarks/server_bench.py [--seconds 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.server import ServerProcess

TOKEN = "bench-token"
BASE = "/api/v1/forward"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Stdlib:
    """The same calls through http.client, to separate client cost from server cost."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self.connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port)
        self.headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: dict[str, str] | None = None) -> dict[str, object]:
        payload = None if body is None else json.dumps(body)
        self.connection.request(method, BASE + path, body=payload, headers=self.headers)
        response = self.connection.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{method} {path}: {response.status} {data[:200]!r}")
        return dict(json.loads(data))


class Httpx:
    def __init__(self, base_url: str) -> None:
        self.client = httpx.Client(base_url=base_url + BASE, headers={"Authorization": f"Bearer {TOKEN}"})

    def call(self, method: str, path: str, body: dict[str, str] | None = None) -> dict[str, object]:
        response = self.client.request(method, path, json=body)
        if response.status_code != 200:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:200]}")
        return dict(response.json())


def rate(step: Callable[[], None], seconds: float) -> float:
    for _ in range(50):
        step()  # warm up the connection and the server's caches
    count, started = 0, time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        step()
        count += 1
    return count / (time.perf_counter() - started)


def measure(client: Httpx | Stdlib, seconds: float, rounds: int) -> dict[str, float]:
    store = client.call("POST", "/memory_stores", {"name": f"bench-{uuid.uuid4().hex[:8]}"})
    sid = str(store["id"])
    memory = client.call("POST", f"/memory_stores/{sid}/memories", {"path": "bench.md", "content": "start"})
    mid = str(memory["id"])
    versions = client.call("GET", f"/memory_stores/{sid}/memory_versions?limit=1")
    vid = str(versions["first_id"])
    state = {"content": "start", "n": 0}

    def get_version() -> None:
        client.call("GET", f"/memory_stores/{sid}/memory_versions/{vid}")

    def update() -> None:
        state["n"] = int(state["n"]) + 1
        new = f"content {state['n']}"
        body = {"content": new, "content_sha256": sha(str(state["content"]))}
        client.call("POST", f"/memory_stores/{sid}/memories/{mid}", body)
        state["content"] = new

    return {
        "GET version": statistics.median(rate(get_version, seconds) for _ in range(rounds)),
        "preconditioned update": statistics.median(rate(update, seconds) for _ in range(rounds)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="length of one round (default 3)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per figure; the median is shown")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        server = ServerProcess(db=Path(folder) / "bench.sqlite3", token=TOKEN).start()
        try:
            # Idempotency-Key is required on Forward store creation; each client run makes one store.
            results = {}
            with_key = Httpx(server.base_url)
            with_key.client.headers["Idempotency-Key"] = uuid.uuid4().hex
            results["httpx.Client"] = measure(with_key, args.seconds, args.rounds)
            stdlib = Stdlib(server.base_url)
            stdlib.headers["Idempotency-Key"] = uuid.uuid4().hex
            results["http.client"] = measure(stdlib, args.seconds, args.rounds)
        finally:
            server.stop()
    print(
        "reference server, one request at a time, keep-alive;"
        f" median of {args.rounds} rounds of {args.seconds:g} s"
    )
    print(f"{'client':<14} {'GET version':>14} {'preconditioned update':>24}")
    for client_name, figures in results.items():
        print(
            f"{client_name:<14} {figures['GET version']:>10,.0f} r/s"
            f" {figures['preconditioned update']:>20,.0f} r/s"
        )


if __name__ == "__main__":
    main()
