"""Latency and idle cost of ``memsync daemon`` against the reference server on loopback.

Three figures, each from a real ``memsync daemon`` subprocess:

1. **save → readable from the server**: a file in the checkout is rewritten; the time until the
   server serves the new content (target: the quiet delay + 0.5 s), with a 1 h interval so that
   only the watcher triggers cycles. On a build whose ``run_cycle`` does not push, the content never
   arrives: the script says so and reports instead the part the daemon owns — save → the end of the
   cycle the save requested (quiet delay, re-hash, the request, the cycle), from its JSON log.
2. **remote write → checkout**: a memory is updated through the API; the time until the checkout
   file holds the new content (target: one interval; with jitter 0 it is uniform over the interval
   plus a cycle, so the median is about half of it).
3. **idle CPU and anonymous memory** of a daemon watching 10 stores of 1,000 files each (100 folders
   per store), after the first import, with no cycle due during the window; plus its inotify
   watches, and the peak anonymous memory of that first import: the daemon and every git process
   it ran, summed, sampled every 20 ms (benchmarks/anonmem.py; not VmRSS/VmHWM, which count the
   page cache of mapped pack files).

Usage::

    python benchmarks/daemon_bench.py [--rounds 9] [--interval 2s] [--idle-seconds 30]
        [--watcher auto|inotify|watchdog|poll] [--poll-interval 2s]

``--watcher`` picks the daemon's backend (``daemon.watcher``); with ``poll`` the idle figure is the
poller's own cost, also given per 1,000 files and minute.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from anonmem import LABEL, AnonSampler, tree_total_kib
from tests.support.server import ServerProcess

from memsync.api import Client, open_client
from memsync.rules import Dialect, parse_duration

TOKEN = "bench-token"
TOKEN_ENV = "MEMSYNC_BENCH_TOKEN"
STORES = 10
FILES = 1000
FOLDERS = 100


@dataclass
class Daemon:
    """A ``memsync daemon`` subprocess with its JSON log lines collected as they come."""

    process: subprocess.Popen[str]
    entries: list[dict[str, object]] = field(default_factory=list)

    @classmethod
    def start(cls, config: Path) -> Daemon:
        process = subprocess.Popen(
            [sys.executable, "-m", "memsync", "--config", str(config), "daemon"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, TOKEN_ENV: TOKEN, "PYTHONUNBUFFERED": "1"},
        )
        daemon = cls(process)
        threading.Thread(target=daemon._pump, daemon=True).start()
        return daemon

    def _pump(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            try:
                self.entries.append(json.loads(line))
            except ValueError:
                self.entries.append({"message": line.rstrip()})

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.005)


WATCHER = {"watcher": "auto", "poll_interval": "2s"}  # set from the command line by main()


def write_config(folder: Path, base_url: str, include: list[str], interval: str, level: str) -> Path:
    config = folder / "memsync.toml"
    quoted = ", ".join(f'"{s}"' for s in include)
    config.write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{base_url}"\ntoken_env = "{TOKEN_ENV}"\n'
        f'[mirror]\nroot = "mirrors"\n[stores]\ninclude = [{quoted}]\n'
        f'[daemon]\ninterval = "{interval}"\njitter = "0s"\n'
        f'watcher = "{WATCHER["watcher"]}"\npoll_interval = "{WATCHER["poll_interval"]}"\n'
        f'[log]\nformat = "json"\nlevel = "{level}"\n'
    )
    return config


def seed_file(folder: Path) -> Path:
    stores = []
    for s in range(STORES):
        memories = [
            {"path": f"topic{i % FOLDERS:03}/note{i:04}.md", "content": f"store {s} note {i}\n" * 3}
            for i in range(FILES)
        ]
        stores.append({"dialect": "forward", "name": f"bench-{s}", "memories": memories})
    path = folder / "seed.json"
    path.write_text(json.dumps({"stores": stores}))
    return path


def parse_time(entry: dict[str, object]) -> float:
    return datetime.fromisoformat(str(entry["time"]).replace("Z", "+00:00")).timestamp()


def measure_save(
    client: Client, store_id: str, checkout: Path, daemon: Daemon, rounds: int
) -> dict[str, object]:
    """Save → server (when push exists), and save → end of the cycle the save requested."""
    target = checkout / "topic000" / "note0000.md"
    pushed: list[float] = []
    cycles: list[float] = []
    noticed: list[float] = []  # save -> the watcher's request (quiet delay + re-hash)
    durations: list[float] = []  # the requested cycle's own duration (run_cycle)
    push_works: bool | None = None

    def on_server(content: str) -> bool:
        memory = client.find_memory(store_id, "topic000/note0000.md")
        return memory is not None and client.get_memory(store_id, memory.id).content == content

    def watch_cycle(since: int) -> dict[str, object] | None:
        # The first cycle the watcher requested after the save, from the daemon's JSON log.
        for entry in daemon.entries[since:]:
            if entry.get("store") == store_id and "watch" in str(entry.get("trigger", "")):
                return entry
        return None

    def watch_cycle_end(since: int) -> float | None:
        entry = watch_cycle(since)
        return None if entry is None else parse_time(entry)

    def breakdown(since: int, saved: float) -> None:
        wait_for(lambda: watch_cycle(since) is not None, 30, "the cycle the save requested")
        for entry in daemon.entries[since:]:
            if str(entry.get("message", "")).startswith("local change in"):
                noticed.append(parse_time(entry) - saved)
                break
        cycle = watch_cycle(since)
        assert cycle is not None
        durations.append(float(str(cycle.get("duration_s", "nan"))))

    for n in range(rounds):
        content = f"saved locally, round {n} {uuid.uuid4().hex}\n"
        mark = len(daemon.entries)
        saved = time.time()
        target.write_text(content)
        if push_works is not False:
            # Polled every 20 ms: the figure is at most that much late.
            polled = WATCHER["watcher"] == "poll"
            deadline = time.monotonic() + 5.0 + (parse_duration(WATCHER["poll_interval"]) if polled else 0)
            while time.monotonic() < deadline and not on_server(content):
                time.sleep(0.02)
            if on_server(content):
                pushed.append(time.time() - saved)
                push_works = True
                breakdown(mark, saved)
            else:
                push_works = False
        if not push_works:
            # A pull-only build: measure what the daemon does of the way (quiet delay, re-hash, request,
            # the cycle) instead.
            wait_for(lambda m=mark: watch_cycle_end(m) is not None, 30, "the cycle the save requested")
            finished = watch_cycle_end(mark)
            assert finished is not None
            cycles.append(finished - saved)
        time.sleep(0.3)
    return {"pushed": pushed, "cycle": cycles, "noticed": noticed, "durations": durations}


def measure_remote(
    client: Client, store_id: str, checkout: Path, rounds: int, interval: float
) -> list[float]:
    memory = client.find_memory(store_id, "topic001/note0001.md")
    assert memory is not None
    sha = memory.content_sha256
    target = checkout / "topic001" / "note0001.md"
    latencies: list[float] = []
    for n in range(rounds):
        # Land at a random phase of the interval, as real writes do.
        time.sleep(random.uniform(0, interval))
        content = f"written remotely, round {n}\n"
        started = time.monotonic()
        updated = client.update_memory(store_id, memory.id, content, expected_sha256=sha)
        sha = updated.content_sha256
        wait_for(
            lambda c=content: target.exists() and target.read_text() == c, 10 * interval + 10, "the checkout"
        )
        latencies.append(time.monotonic() - started)
    return latencies


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def inotify_watches(pid: int) -> int:
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd) == "anon_inode:inotify":
                count += sum(
                    1
                    for line in (Path(f"/proc/{pid}/fdinfo") / fd.name).read_text().splitlines()
                    if line.startswith("inotify wd:")
                )
        except OSError:
            continue
    return count


def threads(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--interval", default="2s", help="daemon.interval for the latency runs")
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--watcher", choices=["auto", "inotify", "watchdog", "poll"], default="auto")
    parser.add_argument("--poll-interval", default="2s", help="daemon.poll_interval with --watcher poll")
    args = parser.parse_args()
    WATCHER.update(watcher=args.watcher, poll_interval=args.poll_interval)
    interval = parse_duration(args.interval)

    with tempfile.TemporaryDirectory(prefix="memsync-daemon-bench-") as tmp:
        folder = Path(tmp)
        seeded = time.perf_counter()
        with ServerProcess(
            db=folder / "db.sqlite3", token=TOKEN, extra_args=["--seed", str(seed_file(folder))]
        ) as server:
            print(
                f"server with {STORES} stores x {FILES} files seeded in {time.perf_counter() - seeded:.1f}s"
            )
            with open_client(Dialect.FORWARD, server.base_url, TOKEN) as client:
                store_ids = sorted(s.id for s in client.list_stores() if s.name.startswith("bench-"))

                # --- idle: 10 stores watched, nothing due -----------------------------------------
                idle_dir = folder / "idle"
                idle_dir.mkdir()
                config = write_config(idle_dir, server.base_url, store_ids, "1h", "info")
                started = time.perf_counter()
                daemon = Daemon.start(config)
                sampler = AnonSampler(daemon.process.pid).start()  # the first import's peak
                try:
                    wait_for(
                        lambda: all(
                            (idle_dir / "mirrors" / s / ".git" / "memsync" / "daemon-state.json").exists()
                            and json.loads(
                                (
                                    idle_dir / "mirrors" / s / ".git" / "memsync" / "daemon-state.json"
                                ).read_text()
                            )["last_success"]
                            for s in store_ids
                        ),
                        600,
                        "the first import of every store",
                    )
                    first_import = time.perf_counter() - started
                    time.sleep(2.0)  # let the last state writes and watches settle
                    first_peak = sampler.stop()
                    pid = daemon.process.pid
                    cpu_before, wall_before = cpu_seconds(pid), time.monotonic()
                    time.sleep(args.idle_seconds)
                    used = cpu_seconds(pid) - cpu_before
                    window = time.monotonic() - wall_before
                    idle = {
                        "first_import_s": round(first_import, 1),
                        "idle_cpu_ms": round(1000 * used),
                        "idle_cpu_percent": round(100 * used / window, 3),
                        "anon_mib": round(tree_total_kib(pid) / 1024, 1),
                        "first_import_peak_anon_mib": round(first_peak.mib, 1),
                        "first_import_peak": first_peak.summary(),
                        "inotify_watches": inotify_watches(pid),
                        "threads": threads(pid),
                    }
                finally:
                    sampler.stop()
                    daemon.stop()

                # --- save -> server: one store, only the watcher triggers cycles --------------------
                store_id = store_ids[0]
                save_dir = folder / "save"
                save_dir.mkdir()
                config = write_config(save_dir, server.base_url, [store_id], "1h", "debug")
                daemon = Daemon.start(config)
                checkout = save_dir / "mirrors" / store_id
                try:
                    wait_for(
                        lambda: (checkout / "topic001" / "note0001.md").exists(), 120, "the first import"
                    )
                    time.sleep(1.0)
                    save = measure_save(client, store_id, checkout, daemon, args.rounds)
                finally:
                    daemon.stop()

                # --- remote write -> checkout: the same store, a short interval -------------------
                config = write_config(save_dir, server.base_url, [store_id], args.interval, "info")
                daemon = Daemon.start(config)
                try:
                    time.sleep(1.0)  # the start cycle
                    remote = measure_remote(client, store_id, checkout, args.rounds, interval)
                finally:
                    daemon.stop()

    quiet = 0.25
    pushed = save["pushed"]
    cycle = save["cycle"]
    assert isinstance(pushed, list) and isinstance(cycle, list)
    lines = [
        f"remote write -> checkout, interval {interval:g}s, jitter 0:"
        f" median {statistics.median(remote):.2f}s, max {max(remote):.2f}s over {len(remote)} writes"
        f" (target: one interval)",
    ]
    if pushed:
        lines.append(
            f"save -> readable from the server (interval 1h: the watcher alone): median"
            f" {statistics.median(pushed):.2f}s, max {max(pushed):.2f}s over {len(pushed)} saves"
            f" (target: quiet delay + 0.5s = {quiet + 0.5:.2f}s)"
        )
        noticed, durations = save["noticed"], save["durations"]
        assert isinstance(noticed, list) and isinstance(durations, list)
        lines.append(
            f"  of which save -> the watcher's request: median {statistics.median(noticed):.3f}s;"
            f" the cycle itself (pull, reconcile, push, import): median {statistics.median(durations):.3f}s"
        )
    else:
        lines.append(
            "save -> readable from the server: NOT MEASURED. run_cycle does not push in this build, so a"
            " save never reaches the server; reported instead is the daemon's share of that latency:"
        )
        lines.append(
            f"save -> end of the cycle it requested: median {statistics.median(cycle):.3f}s,"
            f" max {max(cycle):.3f}s over {len(cycle)} saves (quiet delay {quiet}s)"
        )
    lines.append(
        f"idle, {STORES} stores x {FILES} files in {FOLDERS} folders each, over {args.idle_seconds:g}s:"
        f" CPU {idle['idle_cpu_ms']} ms = {idle['idle_cpu_percent']}% of one core (/proc counts in"
        f" {1000 // os.sysconf('SC_CLK_TCK')} ms ticks), anonymous memory {idle['anon_mib']} MiB"
        f" (daemon + any git process), {idle['inotify_watches']} inotify watches, {idle['threads']} threads"
        f" (first import of all stores: {idle['first_import_s']}s)"
    )
    lines.append(f"first import of all stores, {LABEL}: {idle['first_import_peak']}")
    if args.watcher == "poll":
        per_minute = 60 / args.idle_seconds
        idle_ms = idle["idle_cpu_ms"]
        assert isinstance(idle_ms, int)
        per_thousand = idle_ms * per_minute * 1000 / (STORES * FILES)
        lines.append(
            f"poll backend, every {args.poll_interval}: {per_thousand:.0f} ms of CPU per 1,000 files"
            f" per minute (the idle figure above over {STORES * FILES} files)"
        )
    lines.insert(0, f"watcher backend: {args.watcher}")
    print("\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
