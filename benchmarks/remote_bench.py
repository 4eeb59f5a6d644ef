"""``git clone memstore::…`` side by side with ``memsync pull`` of the same store (docs/remote-helper.md).

One run seeds the local reference server with a Forward store of ``--versions`` versions over
``--memories`` memories, then alternates, ``--rounds`` times, a first ``memsync pull`` into a fresh root
and a ``git clone memstore::<store URL>`` into a fresh folder, and prints the median wall time of
each and their ratio (target: the clone within 1.25 times the pull), and whether the clone's HEAD
is the mirror's tip (the same commit ids).

    python benchmarks/remote_bench.py [--versions 10000] [--memories 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from api_fetch_bench import TOKEN, Server
from pull_bench import compile_memsync, imported_tip, write_seed


def pull(base_url: str, store_id: str, workdir: Path) -> tuple[float, str]:
    root = Path(tempfile.mkdtemp(dir=workdir))
    config = root / "memsync.toml"
    config.write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{base_url}"\ntoken_env = "BENCH_TOKEN"\n'
        f'[mirror]\nroot = "m"\n[stores]\ninclude = ["{store_id}"]\n'
    )
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "memsync", "--config", str(config), "pull"],
        check=True,
        capture_output=True,
        env={**os.environ, "BENCH_TOKEN": TOKEN},
    )
    return time.perf_counter() - started, imported_tip(root / "m" / store_id)


def clone(base_url: str, store_id: str, workdir: Path) -> tuple[float, str]:
    target = Path(tempfile.mkdtemp(dir=workdir)) / "notes"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "MEMSYNC_TOKEN": TOKEN,
    }
    url = f"memstore::{base_url}/api/v1/forward/memory_stores/{store_id}"
    started = time.perf_counter()
    subprocess.run(["git", "clone", "-q", url, str(target)], check=True, capture_output=True, env=env)
    wall = time.perf_counter() - started
    head = subprocess.run(
        ["git", "-C", str(target), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return wall, head


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", type=int, default=10_000)
    parser.add_argument("--memories", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    compile_memsync()
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        seed = workdir / "seed.json"
        write_seed(seed, options.versions, options.memories)
        server = Server(workdir / "db.sqlite3", seed)
        try:
            listing = subprocess.run(
                [sys.executable, "-c", _STORE_ID, server.base_url, TOKEN],
                check=True,
                capture_output=True,
                text=True,
            )
            store_id = listing.stdout.strip()
            pulls, clones, same = [], [], True
            for _ in range(options.rounds):
                pulled, tip = pull(server.base_url, store_id, workdir)
                cloned, head = clone(server.base_url, store_id, workdir)
                pulls.append(pulled)
                clones.append(cloned)
                same = same and tip == head
        finally:
            server.stop()
    ratio = statistics.median(clones) / statistics.median(pulls)
    print(
        json.dumps(
            {
                "versions": options.versions,
                "memsync pull s (median)": round(statistics.median(pulls), 2),
                "git clone s (median)": round(statistics.median(clones), 2),
                "clone / pull": round(ratio, 3),
                "same commit ids": same,
                "rounds": options.rounds,
            },
            indent=2,
        )
    )


_STORE_ID = """
import sys
from memsync.api import open_client
from memsync.rules import Dialect
with open_client(Dialect.FORWARD, sys.argv[1], sys.argv[2]) as client:
    (store,) = client.list_stores()
    print(store.id)
"""


if __name__ == "__main__":
    main()
