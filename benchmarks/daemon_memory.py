"""A daemon's anonymous memory under sustained writes: does it grow with what it has imported?

One Cloud store of ``--memories`` memories (30) under ``memsync daemon`` (interval ``--interval``, 3 s,
no jitter) while a client updates its memories at ``--rate`` versions a second (5), for ``--minutes``.
Every ``--sample`` seconds (15) it prints the versions written so far, the daemon's own ``RssAnon``,
the anonymous memory of the daemon and the git processes it runs at that moment
(benchmarks/anonmem.py) and the daemon's open descriptors (those of deleted files apart: a pack a
consolidation removed that a repository handle still holds), and at the end the change after the
first ``--settle`` minutes (10), the figure whose target is at most 10 %.

With ``--tracemalloc DIR`` the daemon runs under :mod:`tracemalloc` (8 frames) and writes a snapshot
to DIR at every sample; the script then prints the 25 tracebacks whose memory grew most between the
first snapshot after ``--settle`` minutes (or the first) and the last: what the daemon holds on to.
(tracemalloc's own tables inflate the process; compare RssAnon figures only between runs without it.)

``--no-watch`` runs the daemon without its file watcher (``daemon.watch = false``).

    python benchmarks/daemon_memory.py [--minutes 12] [--settle 10] [--rate 5] [--no-watch]
        [--tracemalloc DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from anonmem import anon_kib, tree_total_kib
from api_fetch_bench import TOKEN, Server

from memsync.api import open_client
from memsync.rules import Dialect

TOKEN_ENV = "MEMSYNC_BENCH_TOKEN"

# Runs the daemon with tracemalloc on and a thread that writes a snapshot when SIGUSR1 arrives.
TRACED = """
import os, signal, sys, threading, tracemalloc
tracemalloc.start(8)
folder, taken = sys.argv.pop(1), [0]
wanted = threading.Event()
def take():
    while True:
        wanted.wait(); wanted.clear()
        taken[0] += 1
        tracemalloc.take_snapshot().dump(os.path.join(folder, f"{taken[0]:04d}.snapshot"))
threading.Thread(target=take, daemon=True).start()
signal.signal(signal.SIGUSR1, lambda *_: wanted.set())
from memsync.cli import main
main()
"""


def write_config(folder: Path, base_url: str, store_id: str, interval: str, watch: bool) -> Path:
    config = folder / "memsync.toml"
    config.write_text(
        f'[api]\ndialect = "cloud"\nbase_url = "{base_url}"\ntoken_env = "{TOKEN_ENV}"\n'
        f'[mirror]\nroot = "mirrors"\n[stores]\ninclude = ["{store_id}"]\n'
        f'[daemon]\ninterval = "{interval}"\njitter = "0s"\nwatch = {str(watch).lower()}\n'
        '[log]\nformat = "json"\nlevel = "warning"\n'
    )
    return config


class Writer(threading.Thread):
    """Updates the store's memories in turn, ``rate`` a second, until stopped."""

    def __init__(self, base_url: str, store_id: str, memory_ids: list[str], rate: float) -> None:
        super().__init__(daemon=True)
        self.base_url, self.store_id, self.memory_ids, self.rate = base_url, store_id, memory_ids, rate
        self.written = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        with open_client(Dialect.CLOUD, self.base_url, TOKEN) as client:
            start = time.monotonic()
            while not self.stopped.is_set():
                memory_id = self.memory_ids[self.written % len(self.memory_ids)]
                body = f"# note {self.written}\n" + "What the agent keeps about this customer. " * 20
                client.update_memory(self.store_id, memory_id, body, expected_sha256=None)
                self.written += 1
                self.stopped.wait(max(0.0, start + self.written / self.rate - time.monotonic()))


def descriptors(pid: int) -> tuple[int, int]:
    """The process's open descriptors, and how many of them are of files deleted since."""
    targets = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:  # closed meanwhile
            continue
    return len(targets), sum(1 for target in targets if target.endswith(" (deleted)"))


def print_growth(folder: Path, settle_index: int) -> None:
    import tracemalloc

    snapshots = sorted(folder.glob("*.snapshot"))
    if len(snapshots) < 2:
        print("fewer than two snapshots: nothing to compare")
        return
    first = snapshots[min(settle_index, len(snapshots) - 2)]
    noise = (
        tracemalloc.Filter(False, tracemalloc.__file__),
        tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
        tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
    )
    old = tracemalloc.Snapshot.load(str(first)).filter_traces(noise)
    new = tracemalloc.Snapshot.load(str(snapshots[-1])).filter_traces(noise)
    diff = new.compare_to(old, "traceback")
    print(f"\ngrowth from {first.name} to {snapshots[-1].name} (the 25 largest, newest frame last):")
    for stat in diff[:25]:
        print(f"\n{stat.size_diff / 1024:+.1f} KiB in {stat.count_diff:+d} blocks")
        for line in stat.traceback.format()[-12:]:
            print("   ", line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=12.0)
    parser.add_argument("--settle", type=float, default=10.0, help="minutes after which it must stay flat")
    parser.add_argument("--memories", type=int, default=30)
    parser.add_argument("--rate", type=float, default=5.0, help="versions written a second")
    parser.add_argument("--interval", default="3s")
    parser.add_argument("--sample", type=float, default=15.0, help="seconds between samples")
    parser.add_argument("--no-watch", action="store_true", help="daemon.watch = false: no file watcher")
    parser.add_argument("--tracemalloc", type=Path, default=None, metavar="DIR")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="daemon-memory-") as tmp:
        work = Path(tmp)
        memories = [{"path": f"notes/n{i:03d}.md", "content": f"# note {i}\n"} for i in range(args.memories)]
        seed = work / "seed.json"
        store_seed = {"dialect": "cloud", "name": "soak", "description": "notes", "memories": memories}
        seed.write_text(json.dumps({"stores": [store_seed]}))
        server = Server(work / "server.sqlite3", seed)
        try:
            with open_client(Dialect.CLOUD, server.base_url, TOKEN) as client:
                (store,) = client.list_stores()
                memory_ids = [m.id for m in client.list_memories(store.id)]
            config = write_config(work, server.base_url, store.id, args.interval, not args.no_watch)
            command = [sys.executable, "-m", "memsync", "--config", str(config), "daemon"]
            if args.tracemalloc is not None:
                args.tracemalloc.mkdir(parents=True, exist_ok=True)
                command = [sys.executable, "-c", TRACED, str(args.tracemalloc), *command[3:]]
            env = {**os.environ, TOKEN_ENV: TOKEN}
            daemon = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
            writer = Writer(server.base_url, store.id, memory_ids, args.rate)
            writer.start()
            began = time.monotonic()
            rows: list[tuple[float, int, float, float]] = []
            print("minute  versions  daemon RssAnon MiB  daemon+git anon MiB  fds  deleted", flush=True)
            try:
                while time.monotonic() - began < args.minutes * 60:
                    time.sleep(args.sample)
                    if daemon.poll() is not None:
                        raise SystemExit(f"the daemon exited with {daemon.returncode}")
                    own = (anon_kib(daemon.pid) or 0) / 1024
                    tree = tree_total_kib(daemon.pid) / 1024
                    minute = (time.monotonic() - began) / 60
                    rows.append((minute, writer.written, own, tree))
                    fds, deleted = descriptors(daemon.pid)
                    row = f"{minute:6.2f}  {writer.written:8d}  {own:18.1f}  {tree:19.1f}"
                    print(f"{row}  {fds:3d}  {deleted:7d}", flush=True)
                    if args.tracemalloc is not None:
                        daemon.send_signal(signal.SIGUSR1)
            finally:
                writer.stopped.set()
                writer.join(timeout=30)
                daemon.terminate()
                daemon.wait(timeout=60)
        finally:
            server.stop()

    settled = [row for row in rows if row[0] >= args.settle] or rows[-2:]
    first, last = settled[0], rows[-1]
    change = (last[2] - first[2]) / first[2] * 100
    print(
        f"\nafter minute {first[0]:.1f}: daemon RssAnon {first[2]:.1f} -> {last[2]:.1f} MiB ({change:+.1f} %)"
        f" while {last[1] - first[1]} more versions were written ({last[1]} in all); target: within 10 %"
    )
    if args.tracemalloc is not None:
        print_growth(args.tracemalloc, rows.index(first))
    return 0


if __name__ == "__main__":
    sys.exit(main())
