"""Timing of sync cycles against the loopback reference server (not collected by pytest).

    python -m tests.push.bench_push [--files 1000] [--rounds 5]

For a store of N memories (3 folders deep): a sync with nothing to do, a sync pushing one edited file,
a sync pushing one edit while the store also changed (the base lags the tip: the path map of the base
commit is read), a sync bringing one remote change into a checkout that also has a local edit, and the
working-tree scan alone (the first one fills the stat cache). Medians of ``--rounds`` runs, wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from memsync.api import open_client
from memsync.mirror import Mirror
from memsync.rules import Dialect
from memsync.sync.cycle import run_cycle
from tests.support.server import ServerProcess


def median_ms(
    action: Callable[[], object], rounds: int, before: Callable[[int], None] | None = None
) -> float:
    samples = []
    for i in range(rounds):
        if before is not None:
            before(i)
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="memsync-push-bench-"))
    with (
        ServerProcess(db=tmp / "db.sqlite3") as server,
        open_client(Dialect.FORWARD, server.base_url, server.token) as client,
    ):
        store = client.create_store("bench", idempotency_key=str(uuid.uuid4()))
        ids = {}
        for i in range(args.files):
            path = f"d{i % 10}/e{i % 7}/m{i}.md"
            ids[path] = client.create_memory(store.id, path, f"memory {i}\n" * 20).id
        root = tmp / "mirrors"
        assert run_cycle(client, store, root).ok
        repo = root / store.id
        # A settled checkout: files last written long ago, as between a user's saves (the stat cache
        # reads again any file written in the second before a scan).
        for file in repo.rglob("*.md"):
            os.utime(file, (1_600_000_000, 1_600_000_000))
        subprocess.run(["git", "-C", str(repo), "update-index", "-q", "--refresh"], check=True)

        def sync() -> None:
            report = run_cycle(client, store, root)
            assert report.ok, report.error

        def edit_local(i: int) -> None:
            (repo / "d0/e0/m0.md").write_text(f"edited {i}\n")

        def edit_both(i: int) -> None:
            edit_local(i)
            path = "d1/e1/m1.md"
            current = client.get_memory(store.id, ids[path])
            client.update_memory(store.id, ids[path], f"remote {i}\n", expected_sha256=current.content_sha256)

        def remote_only_with_local_pending(i: int) -> None:
            (repo / "d2/e2/m2.md").write_bytes(b"\xff rejected, stays local\n")
            path = "d3/e3/m3.md"
            current = client.get_memory(store.id, ids[path])
            client.update_memory(store.id, ids[path], f"remote {i}\n", expected_sha256=current.content_sha256)

        with Mirror.open(repo) as mirror:
            scan = median_ms(lambda: mirror.worktree.scan(Dialect.FORWARD), args.rounds)
        print(f"{args.files} memories, median of {args.rounds} (ms):")
        print(f"  scan of the working tree        {scan:8.1f}")
        print(f"  sync, nothing to do             {median_ms(sync, args.rounds):8.1f}")
        print(f"  sync, push one edit             {median_ms(sync, args.rounds, edit_local):8.1f}")
        print(f"  sync, push one + one remote     {median_ms(sync, args.rounds, edit_both):8.1f}")
        held = median_ms(sync, args.rounds, remote_only_with_local_pending)
        print(f"  sync, one remote, held file     {held:8.1f}")


if __name__ == "__main__":
    main()
