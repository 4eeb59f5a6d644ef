"""How fast memsync.api fetches version contents, one at a time and with requests in flight.

Runs the real reference server (``memsync server``) with a seeded store, then fetches every version's
content with each strategy, on loopback and through a small local TCP proxy that delays each request by
``--latency-ms`` (20 ms by default), and prints versions per second (median of ``--rounds``) and the
HTTP requests made against the minimum.

Strategies:

- ``inline``: ``client.get_version`` in a plain loop, no thread: the bare one-at-a-time baseline;
- ``window N``: ``client.fetch_contents(..., concurrency=N)``, N requests in flight (N=1 still fetches
  the next version while the caller handles the current one);
- ``adaptive``: ``fetch_contents`` with the default, which sizes the window from observed latency;
- on Anthropic, ``full listing``: ``iter_versions(full=True)``, contents 20 per request, and
  ``grouped``: ``fetch_contents`` on a basic listing (ranged ``view=full`` listings, 20 per request).

``--consumer-ms`` makes the caller spend that much CPU per version (as git writing would), to show
the overlap of fetching with the caller's work.

    python benchmarks/api_fetch_bench.py [--versions 400] [--rounds 3] [--latency-ms 20] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from memsync.api import Client, MemoryVersion, open_client
from memsync.rules import Dialect

TOKEN = "bench-token"
MEMORIES = 40


# --- the peers -----------------------------------------------------------------------------------


def write_seed(path: Path, versions: int) -> None:
    """One Forward and one Anthropic store, each with ``versions`` versions of ~1.5 KB notes."""
    per_memory = max(1, versions // MEMORIES)
    paragraph = "A note an agent keeps about the project, its decisions and open questions. " * 20

    def memory(n: int, root: str) -> dict[str, Any]:
        history = [{"op": "create", "content": f"# note {n}\n\n{paragraph}\nv0\n"}]
        history += [
            {"op": "update", "content": f"# note {n}\n\n{paragraph}\nv{k}\n"} for k in range(1, per_memory)
        ]
        return {"path": f"{root}notes/{n:03d}.md", "history": history}

    stores = [
        {
            "dialect": dialect,
            "name": f"bench-{dialect}",
            "memories": [memory(n, root) for n in range(MEMORIES)],
        }
        for dialect, root in (("forward", ""), ("anthropic", "/"))
    ]
    path.write_text(json.dumps({"stores": stores}))


class Server:
    def __init__(self, db: Path, seed: Path) -> None:
        args = [sys.executable, "-m", "memsync", "server", "--port", "0", "--db", str(db)]
        args += ["--token", TOKEN, "--seed", str(seed)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        assert self.process.stdout is not None
        said = []
        for line in self.process.stdout:
            said.append(line)
            if line.startswith("listening on "):
                self.base_url = line.removeprefix("listening on ").strip()
                break
        else:
            raise RuntimeError(f"the server exited before listening: {''.join(said)}")
        # Keep draining its output so that it never blocks on a full pipe.
        threading.Thread(target=self.process.stdout.read, daemon=True).start()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=15)


class LatencyProxy:
    """A TCP proxy on 127.0.0.1 that holds every chunk from client to server for ``delay_s``.

    A GET is one chunk, so each request arrives ``delay_s`` later: a round trip across a network.
    Connections are independent, so requests in flight on several connections overlap their delays.
    """

    def __init__(self, upstream_host: str, upstream_port: int, delay_s: float) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.delay_s = delay_s
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.port = 0

        self.server: asyncio.Server | None = None

        async def start() -> None:
            self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()

        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(start(), self.loop)
        ready.wait(10)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, delay: float) -> None:
            try:
                while data := await src.read(65536):
                    if delay:
                        await asyncio.sleep(delay)
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        try:
            await asyncio.gather(pipe(reader, up_writer, self.delay_s), pipe(up_reader, writer, 0.0))
        except asyncio.CancelledError:
            # Shutting down: end quietly rather than as a cancelled task asyncio would report.
            writer.close()
            up_writer.close()

    def stop(self) -> None:
        async def shut() -> None:
            if self.server is not None:
                self.server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


# --- the strategies ------------------------------------------------------------------------------


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def inline(client: Client, store_id: str, versions: list[MemoryVersion]) -> Iterator[str | None]:
    for version in versions:
        yield client.get_version(store_id, version.id).content


def windowed(n: int | None) -> Callable[[Client, str, list[MemoryVersion]], Iterator[str | None]]:
    def run(client: Client, store_id: str, versions: list[MemoryVersion]) -> Iterator[str | None]:
        for _, content in client.fetch_contents(store_id, versions, concurrency=n):
            yield content

    return run


def full_listing(client: Client, store_id: str, versions: list[MemoryVersion]) -> Iterator[str | None]:
    listed = list(client.iter_versions(store_id, full=True))
    for _, content in client.fetch_contents(store_id, reversed(listed)):
        yield content


def measure(
    base_url: str,
    dialect: Dialect,
    store_id: str,
    strategy: Callable[[Client, str, list[MemoryVersion]], Iterator[str | None]],
    consumer_s: float,
) -> tuple[float, int, int]:
    """(seconds, requests, versions) for one fetch of every version with a fresh client."""
    with open_client(dialect, base_url, TOKEN) as client:
        versions = list(reversed(list(client.iter_versions(store_id))))
        listed_with = client.request_count
        start = time.perf_counter()
        count = 0
        for content in strategy(client, store_id, versions):
            assert content is not None
            if consumer_s:
                busy(consumer_s)
            count += 1
        elapsed = time.perf_counter() - start
        requests = client.request_count - listed_with
    assert count == len(versions)
    return elapsed, requests, count


def store_ids(base_url: str) -> dict[Dialect, str]:
    found = {}
    for dialect in (Dialect.FORWARD, Dialect.ANTHROPIC):
        with open_client(dialect, base_url, TOKEN) as client:
            found[dialect] = next(s.id for s in client.list_stores() if s.name == f"bench-{dialect.value}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--versions", type=int, default=400, help="versions per store (default 400)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per measurement; the median is shown")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="delay added per request by the proxy")
    parser.add_argument("--consumer-ms", type=float, default=0.0, help="CPU the caller spends per version")
    parser.add_argument("--network", choices=("both", "loopback", "latency"), default="both")
    parser.add_argument(
        "--only", nargs="*", default=None, help='strategies to run, e.g. "window 8" or "anthropic:grouped"'
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args()

    strategies: list[
        tuple[Dialect, str, Callable[[Client, str, list[MemoryVersion]], Iterator[str | None]]]
    ] = [
        (Dialect.FORWARD, "inline", inline),
        (Dialect.FORWARD, "window 1", windowed(1)),
        (Dialect.FORWARD, "window 2", windowed(2)),
        (Dialect.FORWARD, "window 4", windowed(4)),
        (Dialect.FORWARD, "window 8", windowed(8)),
        (Dialect.FORWARD, "window 16", windowed(16)),
        (Dialect.FORWARD, "adaptive", windowed(None)),
        (Dialect.ANTHROPIC, "inline", inline),
        (Dialect.ANTHROPIC, "grouped", windowed(None)),
        (Dialect.ANTHROPIC, "full listing", full_listing),
    ]
    if args.only:
        strategies = [s for s in strategies if f"{s[0].value}:{s[1]}" in args.only or s[1] in args.only]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        seed = Path(tmp) / "seed.json"
        write_seed(seed, args.versions)
        server = Server(Path(tmp) / "bench.sqlite3", seed)
        host_port = server.base_url.removeprefix("http://")
        host, port = host_port.rsplit(":", 1)
        proxy = LatencyProxy(host, int(port), args.latency_ms / 1000.0)
        try:
            stores = store_ids(server.base_url)
            networks = [
                ("loopback", server.base_url),
                (f"+{args.latency_ms:g} ms", f"http://127.0.0.1:{proxy.port}"),
            ]
            if args.network != "both":
                networks = networks[:1] if args.network == "loopback" else networks[1:]
            for network, url in networks:
                # Round-robin over the strategies, so that load from elsewhere on the machine hits all alike.
                runs: dict[int, list[tuple[float, int, int]]] = {i: [] for i in range(len(strategies))}
                for _ in range(args.rounds):
                    for index, (dialect, _name, strategy) in enumerate(strategies):
                        consumer_s = args.consumer_ms / 1000.0
                        runs[index].append(measure(url, dialect, stores[dialect], strategy, consumer_s))
                for index, (dialect, name, _strategy) in enumerate(strategies):
                    seconds = statistics.median(r[0] for r in runs[index])
                    versions = runs[index][0][2]
                    minimum = -(-versions // 20) if dialect is Dialect.ANTHROPIC else versions
                    row = {
                        "network": network,
                        "dialect": dialect.value,
                        "strategy": name,
                        "versions": versions,
                        "versions_per_s": round(versions / seconds, 1),
                        "requests": runs[index][0][1],
                        "minimum_requests": minimum,
                    }
                    rows.append(row)
                    if not args.json:
                        rate = row["versions_per_s"]
                        print(
                            f"{network:>9}  {dialect.value:<9}  {name:<12}  {rate:>8.1f} versions/s"
                            f"  {row['requests']:>4} requests (minimum {minimum})",
                            flush=True,
                        )
        finally:
            proxy.stop()
            server.stop()
    if args.json:
        print(json.dumps({"cores": os.cpu_count(), "consumer_ms": args.consumer_ms, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
