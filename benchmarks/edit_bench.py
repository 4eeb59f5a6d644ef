"""A one-file edit's sync as the checkout grows: does its cost follow the edit or the checkout?

For each ``--files`` count (100 and 2,000), a Forward store of that many memories (in 70 folders)
on the loopback reference server is synced into a mirror; then, ``--rounds`` times, one file of the
checkout is rewritten and one cycle (``run_cycle``, what ``memsync sync`` and the daemon run) pushes
it. It prints the median CPU seconds of this process and the git processes it ran, and the median wall
time, per count, and the ratio of the largest count to the smallest (target: within 1.2x).

    python benchmarks/edit_bench.py [--files 100,2000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.server import ServerProcess

from memsync.api import open_client
from memsync.rules import Dialect
from memsync.sync.cycle import run_cycle


def cpu_s() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(server: ServerProcess, files: int, rounds: int, work: Path) -> tuple[float, float]:
    """Median (CPU seconds, wall seconds) of a cycle pushing one edited file, over ``rounds``."""
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        created = client.create_store(f"edit-{files}", idempotency_key=str(uuid.uuid4()))
        for i in range(files):
            client.create_memory(created.id, f"d{i % 10}/e{i % 7}/m{i}.md", f"memory {i}\n" * 20)
        store = client.get_store(created.id)  # with its entry count, as the store listing gives it
        root = work / f"mirrors-{files}"
        assert run_cycle(client, store, root).ok
        checkout = root / store.id
        # A settled checkout: files last written long ago, as between a user's saves.
        for file in checkout.rglob("*.md"):
            os.utime(file, (1_600_000_000, 1_600_000_000))
        subprocess.run(["git", "-C", str(checkout), "update-index", "-q", "--refresh"], check=True)
        assert run_cycle(client, store, root).ok
        cpu, wall = [], []
        for i in range(rounds + 1):
            (checkout / "d0/e0/m0.md").write_text(f"edited {i}\n")
            started_cpu, started = cpu_s(), time.perf_counter()
            report = run_cycle(client, store, root)
            cpu.append(cpu_s() - started_cpu)
            wall.append(time.perf_counter() - started)
            assert report.ok and report.pushed == 1, (report.pull.error, report.push and report.push.error)
        return statistics.median(cpu[1:]), statistics.median(wall[1:])  # the first warms the caches


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", default="100,2000", help="comma-separated checkout sizes")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    counts = [int(n) for n in args.files.split(",")]
    with tempfile.TemporaryDirectory(prefix="edit-bench-") as tmp:
        work = Path(tmp)
        with ServerProcess(db=work / "server.sqlite3") as server:
            figures = {files: measure(server, files, args.rounds, work) for files in counts}
    print(f"one-file edit, one cycle (median of {args.rounds}):")
    for files, (cpu, wall) in figures.items():
        print(f"  {files:6d} files: {cpu * 1000:7.1f} ms CPU (memsync + git), {wall * 1000:7.1f} ms wall")
    (small_cpu, small_wall), (big_cpu, big_wall) = figures[min(counts)], figures[max(counts)]
    print(
        f"  {max(counts)} / {min(counts)} files: {big_cpu / small_cpu:.2f}x CPU,"
        f" {big_wall / small_wall:.2f}x wall (target: within 1.2x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
