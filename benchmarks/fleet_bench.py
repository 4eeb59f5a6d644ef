"""Thousands of small stores: memsync's commands and daemon over a fleet (docs/design.md §5).

The reference server is seeded (``--seed``) with ``--stores`` Forward stores of ``--memories``
memories each, in three folders. For each ``--latency-ms`` (0 is loopback; others go through
api_fetch_bench's LatencyProxy, which delays every request by that much) one run prints:

- the **first pull** of every store (``memsync pull --json``, ``[fleet] concurrency`` stores at once):
  wall time, HTTP requests, and the time the same requests take one after another (requests × the
  median time of a lone request through the same path; target at 50 ms: memsync within 0.3× of it);
- a **no-op pull** of every store: requests per store (target: 1, plus the store listing) and time;
- a **no-op cycle** of every store (``memsync daemon --once``, the daemon's cycle: pull, reconcile,
  push): time, and the time 10,000 stores would take at that rate (target at 50 ms: one 5-minute
  interval);
- the **CPU** of each no-op, per store: user + system seconds of memsync and the git processes it
  ran, its start included, at ``[fleet] concurrency`` and one store at a time (target: 3 ms);

On loopback it also runs ``memsync daemon`` twice, over ``--small`` stores and over all of them, each
until every store's first cycle is done, and prints its threads (``/proc/PID/task``; target: the same
for both), inotify watches (``/proc/PID/fdinfo``), and anonymous memory once idle (``Pss_Anon`` of the
daemon and every process under it), whose growth per store is the memory a store costs (target: under
50 KiB), and the peak anonymous memory of its first round (benchmarks/anonmem.py: the daemon and its
git processes summed, sampled every 20 ms). Last, **4 → 5 shards**: how many stores move (about 1/5,
all to the new shard), and whether the new owner's first pull of them (``--shard 4/5`` into a fresh
root) makes the same commit ids.

    python benchmarks/fleet_bench.py [--stores 200] [--memories 10] [--latency-ms 0,50] [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from anonmem import LABEL, AnonSampler, tree_total_kib
from api_fetch_bench import TOKEN, LatencyProxy, Server
from pull_bench import compile_memsync

from memsync.engine.shards import owner

TOKEN_ENV = "MEMSYNC_BENCH_TOKEN"
FLEET = 10_000  # the fleet the no-op cycle time is extrapolated to
INTERVAL_S = 300.0  # daemon.interval's default


def write_seed(path: Path, stores: int, memories: int) -> None:
    """``stores`` Forward stores, each with ``memories`` one-version memories in three folders."""
    body = "What the agent keeps about this customer: preferences, open tickets, decisions. " * 3
    seeded = [
        {
            "dialect": "forward",
            "name": f"fleet-{s:05d}",
            "memories": [
                {"path": f"notes/topic{m % 3}/note{m:03d}.md", "content": f"# {s}/{m}\n{body}\n"}
                for m in range(memories)
            ],
        }
        for s in range(stores)
    ]
    path.write_text(json.dumps({"stores": seeded}))


def write_config(
    folder: Path, base_url: str, *, jobs: int | None, include: list[str] | None = None, name: str = "memsync"
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        "[api]",
        'dialect = "forward"',
        f'base_url = "{base_url}"',
        f'token_env = "{TOKEN_ENV}"',
        "[mirror]",
        'root = "mirrors"',
    ]
    if include is not None:
        lines += ["[stores]", "include = [" + ", ".join(f'"{i}"' for i in include) + "]"]
    lines += ["[daemon]", 'interval = "1h"', 'jitter = "0s"', "[log]", 'format = "json"']
    if jobs is not None:
        lines += ["[fleet]", f"concurrency = {jobs}"]
    config = folder / f"{name}.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


def memsync(config: Path, *args: str) -> tuple[float, dict[str, Any]]:
    """Run ``memsync --config CONFIG ARGS --json``: wall seconds and its JSON."""
    wall, _, document = memsync_cpu(config, *args)
    return wall, document


def memsync_cpu(config: Path, *args: str) -> tuple[float, float, dict[str, Any]]:
    """Run ``memsync --config CONFIG ARGS --json``: wall seconds, CPU seconds (user + system of memsync
    and the git processes it ran, from the kernel's accounting of reaped children) and its JSON."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    child = subprocess.run(
        [sys.executable, "-m", "memsync", "--config", str(config), *args, "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, TOKEN_ENV: TOKEN},
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if child.returncode not in (0, 4):
        raise RuntimeError(f"memsync {' '.join(args)} exited {child.returncode}: {child.stderr[-3000:]}")
    return wall, cpu, json.loads(child.stdout)


def lone_request_s(base_url: str, rounds: int = 21) -> float:
    """The median time of one request sent alone over a kept-alive connection (a small listing)."""
    import httpx

    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as http:
        http.get("/api/v1/forward/memory_stores", params={"limit": "1"})  # opens the connection
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            http.get("/api/v1/forward/memory_stores", params={"limit": "1"}).raise_for_status()
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def store_ids(base_url: str) -> list[str]:
    import httpx

    found: list[str] = []
    params: dict[str, str] = {"limit": "100"}
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http:
        while True:
            page = http.get("/api/v1/forward/memory_stores", params=params).json()
            found += [store["id"] for store in page["data"]]
            if not page["has_more"]:
                return found
            params = {"limit": "100", "after_id": page["last_id"]}


# --- the daemon's cost --------------------------------------------------------------------------


def anon_kib(pid: int) -> int:
    """Pss_Anon of ``pid`` and of every process under it (the git processes it runs), KiB."""
    return tree_total_kib(pid, source="pss")


def inotify_watches(pid: int) -> int:
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd) == "anon_inode:inotify":
                info = (Path(f"/proc/{pid}/fdinfo") / fd.name).read_text()
                count += sum(1 for line in info.splitlines() if line.startswith("inotify wd:"))
        except OSError:
            continue
    return count


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.2)


def measure_daemon(config: Path, mirrors: Path, ids: list[str]) -> dict[str, Any]:
    """Start ``memsync daemon``; once every store's start cycle is done and idle: its figures."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "memsync", "--config", str(config), "daemon"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, TOKEN_ENV: TOKEN},
    )
    states = [mirrors / store_id / ".git" / "memsync" / "daemon-state.json" for store_id in ids]
    sampler = AnonSampler(process.pid).start()  # the first round's peak, git processes included

    def settled() -> bool:
        if process.poll() is not None:
            raise SystemExit(f"memsync daemon exited {process.returncode}")
        for path in states:
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):
                return False
            if state["daemon"]["pid"] != process.pid or state["last_cycle"] is None:
                return False
            if state["status"] != "idle":
                return False
        return True

    try:
        wait_for(settled, 3600, "the daemon's first cycle of every store")
        first_round = time.perf_counter() - started
        time.sleep(1.0)  # the last state writes
        peak = sampler.stop()
        pid = process.pid
        return {
            "stores": len(ids),
            "first_round_s": first_round,
            "threads": len(list(Path(f"/proc/{pid}/task").iterdir())),
            "inotify_watches": inotify_watches(pid),
            "anon_kib": anon_kib(pid),
            "first_round_peak": peak.as_dict(),
        }
    finally:
        sampler.stop()
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- the runs -----------------------------------------------------------------------------------


def fleet_run(workdir: Path, label: str, base_url: str, stores: int, jobs: int | None) -> dict[str, Any]:
    folder = workdir / f"run-{label}"
    config = write_config(folder, base_url, jobs=jobs)
    lone = lone_request_s(base_url)
    first_s, first = memsync(config, "pull")
    entries = first["stores"]
    failed = [entry["id"] for entry in entries if not entry["ok"]]
    if failed or len(entries) != stores:
        raise RuntimeError(f"first pull: {len(entries)} stores, failed {failed[:5]}")
    listing = math.ceil(stores / 100)
    first_requests = sum(entry["requests"] for entry in entries) + listing
    noop_s, noop_cpu, noop = memsync_cpu(config, "pull")
    noop_requests = [entry["requests"] for entry in noop["stores"]]
    cycle_s, cycle_cpu, cycle = memsync_cpu(config, "daemon", "--once")
    cycle_requests = [entry["requests"] for entry in cycle["stores"]]
    # The same no-ops one store at a time, over the same mirrors.
    one_by_one = write_config(folder, base_url, jobs=1, name="sequential")
    noop_seq_s, noop_seq_cpu, _ = memsync_cpu(one_by_one, "pull")
    cycle_seq_s, cycle_seq_cpu, _ = memsync_cpu(one_by_one, "daemon", "--once")
    return {
        "label": label,
        "lone_request_s": lone,
        "first_pull_s": first_s,
        "first_pull_requests": first_requests,
        "one_after_another_s": first_requests * lone,
        "noop_pull_s": noop_s,
        "noop_requests_per_store": statistics.mean(noop_requests),
        "noop_requests_max": max(noop_requests),
        "listing_requests": listing,
        "noop_cycle_s": cycle_s,
        "noop_cycle_requests_per_store": statistics.mean(cycle_requests),
        "noop_pull_cpu_s": noop_cpu,
        "noop_cycle_cpu_s": cycle_cpu,
        "noop_pull_sequential_s": noop_seq_s,
        "noop_pull_sequential_cpu_s": noop_seq_cpu,
        "noop_cycle_sequential_s": cycle_seq_s,
        "noop_cycle_sequential_cpu_s": cycle_seq_cpu,
        "fleet_poll_s": cycle_s / stores * FLEET,
        "tips": {entry["id"]: entry["tip"] for entry in entries},
        "folder": str(folder),
    }


def shard_run(workdir: Path, base_url: str, ids: list[str], tips: dict[str, str]) -> dict[str, Any]:
    """4 -> 5 shards: the stores that move, and the new owner's first pull of them."""
    moved = [store_id for store_id in ids if owner(store_id, 4) != owner(store_id, 5)]
    to_new = sum(1 for store_id in moved if owner(store_id, 5) == 4)
    config = write_config(workdir / "shard-4-of-5", base_url, jobs=None)
    wall, pulled = memsync(config, "pull", "--shard", "4/5")
    mine = {entry["id"]: entry["tip"] for entry in pulled["stores"]}
    return {
        "moved": len(moved),
        "moved_to_new_shard": to_new,
        "new_shard_stores": len(mine),
        "new_shard_pull_s": wall,
        "same_commit_ids": sum(1 for store_id, tip in mine.items() if tips.get(store_id) == tip),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stores", type=int, default=200)
    parser.add_argument("--memories", type=int, default=10)
    parser.add_argument("--latency-ms", default="0,50", help="comma-separated; 0 is loopback")
    parser.add_argument("--jobs", type=int, default=None, help="[fleet] concurrency (default: memsync's)")
    parser.add_argument("--small", type=int, default=None, help="stores of the small daemon (default N/10)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (its path is printed)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    latencies = [float(x) for x in args.latency_ms.split(",") if x.strip()]
    small = args.small or max(1, args.stores // 10)
    compile_memsync()
    workdir = Path(tempfile.mkdtemp(prefix="memsync-fleet-bench-"))
    try:
        seed = workdir / "seed.json"
        write_seed(seed, args.stores, args.memories)
        started = time.perf_counter()
        server = Server(workdir / "server.sqlite3", seed)
        seeded_s = time.perf_counter() - started
        runs: list[dict[str, Any]] = []
        daemons: list[dict[str, Any]] = []
        shards: dict[str, Any] | None = None
        try:
            ids = store_ids(server.base_url)
            host, port = server.base_url.removeprefix("http://").split(":")
            for latency in latencies:
                proxy = LatencyProxy(host, int(port), latency / 1000) if latency else None
                url = f"http://127.0.0.1:{proxy.port}" if proxy else server.base_url
                try:
                    run = fleet_run(workdir, f"{latency:g}ms", url, len(ids), args.jobs)
                finally:
                    if proxy is not None:
                        proxy.stop()
                runs.append(run)
                print(_run_line(run, len(ids)), file=sys.stderr, flush=True)
                if latency == 0 and not daemons:
                    # The loopback run's mirrors, every store's start cycle a no-op.
                    folder = Path(run["folder"])
                    for subset in (ids[:small], ids):
                        name = f"daemon-{len(subset)}"
                        config = write_config(
                            folder, server.base_url, jobs=args.jobs, include=subset, name=name
                        )
                        daemons.append(measure_daemon(config, folder / "mirrors", subset))
                    shards = shard_run(workdir, server.base_url, ids, run["tips"])
        finally:
            server.stop()
        report = {
            "stores": len(ids),
            "memories": args.memories,
            "seeded_s": seeded_s,
            "runs": [{k: v for k, v in run.items() if k != "tips"} for run in runs],
            "daemons": daemons,
            "shards": shards,
        }
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            print(_table(report))
    finally:
        if args.keep:
            print(f"work folder kept: {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def _run_line(run: dict[str, Any], stores: int) -> str:
    return (
        f"[{run['label']}] first pull {run['first_pull_s']:.1f}s, no-op pull {run['noop_pull_s']:.1f}s,"
        f" no-op cycle {run['noop_cycle_s']:.1f}s ({stores} stores)"
    )


def _table(report: dict[str, Any]) -> str:
    stores = report["stores"]
    rows: list[tuple[str, str]] = [
        ("fleet", f"{stores} stores x {report['memories']} memories (seeded in {report['seeded_s']:.0f} s)")
    ]
    for run in report["runs"]:
        label = "loopback" if run["label"] == "0ms" else f"+{run['label']}"
        ratio = run["first_pull_s"] / run["one_after_another_s"]
        rows += [
            (
                f"{label}: first pull",
                f"{run['first_pull_s']:.1f} s, {run['first_pull_requests']} requests;"
                f" one after another {run['one_after_another_s']:.1f} s"
                f" ({run['lone_request_s'] * 1000:.1f} ms each): {ratio:.2f}x",
            ),
            (
                f"{label}: no-op pull",
                f"{run['noop_pull_s']:.1f} s ({run['noop_pull_s'] / stores * 1000:.1f} ms per store),"
                f" {run['noop_requests_per_store']:.2f} requests per store (max {run['noop_requests_max']})"
                f" + {run['listing_requests']} for the store listing",
            ),
            (
                f"{label}: no-op CPU per store",
                f"pull {run['noop_pull_cpu_s'] / stores * 1000:.2f} ms"
                f" (one at a time {run['noop_pull_sequential_cpu_s'] / stores * 1000:.2f} ms,"
                f" {run['noop_pull_sequential_s']:.1f} s),"
                f" cycle {run['noop_cycle_cpu_s'] / stores * 1000:.2f} ms"
                f" (one at a time {run['noop_cycle_sequential_cpu_s'] / stores * 1000:.2f} ms,"
                f" {run['noop_cycle_sequential_s']:.1f} s): memsync and its git processes, start included",
            ),
            (
                f"{label}: no-op cycle (daemon --once)",
                f"{run['noop_cycle_s']:.1f} s, {run['noop_cycle_requests_per_store']:.2f} requests per"
                f" store; {FLEET:,} stores: {run['fleet_poll_s']:.0f} s"
                f" ({run['fleet_poll_s'] / INTERVAL_S:.2f} of a 5-minute interval)",
            ),
        ]
    daemons = report["daemons"]
    if len(daemons) == 2:
        small, big = daemons
        per_store = (big["anon_kib"] - small["anon_kib"]) / max(1, big["stores"] - small["stores"])
        base = small["anon_kib"] - per_store * small["stores"]
        for daemon in daemons:
            rows.append(
                (
                    f"daemon over {daemon['stores']} stores",
                    f"{daemon['threads']} threads, {daemon['inotify_watches']} inotify watches"
                    f" ({daemon['inotify_watches'] / daemon['stores']:.1f} per store),"
                    f" {daemon['anon_kib'] / 1024:.1f} MiB anonymous once idle;"
                    f" first round {daemon['first_round_s']:.1f} s,"
                    f" {LABEL} {daemon['first_round_peak']['peak_anon_mib']:.1f}"
                    f" (memsync {daemon['first_round_peak']['memsync_peak_mib']:.1f},"
                    f" git processes {daemon['first_round_peak']['git_peak_mib']:.1f})",
                )
            )
        rows.append(
            ("daemon memory per store", f"{per_store:.1f} KiB beyond a base of {base / 1024:.1f} MiB")
        )
    shards = report["shards"]
    if shards is not None:
        rows.append(
            (
                "4 -> 5 shards",
                f"{shards['moved']} of {stores} stores move ({shards['moved'] / stores:.1%}),"
                f" {shards['moved_to_new_shard']} of them to the new shard; its first pull of its"
                f" {shards['new_shard_stores']} stores: {shards['new_shard_pull_s']:.1f} s,"
                f" {shards['same_commit_ids']} of {shards['new_shard_stores']} with the same commit ids",
            )
        )
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


if __name__ == "__main__":
    main()
