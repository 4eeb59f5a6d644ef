"""`memsync pull` end to end, side by side with its yardsticks (docs/design.md §5).

One run prints:

- versions per second of a first import of ``--versions`` versions over ``--memories`` memories from
  the local reference server, whole process (``memsync pull`` as a user runs it);
- the HTTP requests it made against the minimum of docs/design.md §5 (ceil(V/100) list pages plus one
  content request per version whose content is new);
- the same, next to two bare scripts that only list and fetch the same contents from the same server
  (one request at a time with keep-alive; 8 in flight), median of ``--rounds`` alternated runs, on
  loopback and with ``--latency-ms`` added to every request (a local TCP proxy), and the ratio of
  memsync to the faster script (target: within 1.25);
- the git-writing part alone (memsync's HistoryWriter fed the imported versions) against
  ``git fast-import`` fed the same commits (``git fast-export`` of the mirror), as the ratio of the
  medians of at least 3 alternated rounds, and a check that both end on the same commit id (target:
  ratio at most 1.0);
- the peak anonymous memory of the import, memsync's process and every git process it ran summed
  (fast-import, repack, pack-objects; sampled every 20 ms by benchmarks/anonmem.py, printed as
  "peak anon MiB (memsync + git)" with the split at the peak), and the same for an import of
  ``--scale`` times more versions over the same memories, a longer history of the same store
  (target: within 20 %). Not VmHWM or ru_maxrss: those count the page cache of the mirror's mapped
  pack files, which the kernel reclaims, and a child's ru_maxrss starts from its parent's.

    python benchmarks/pull_bench.py [--versions 10000] [--memories 1000] [--rounds 3] [--scale 10]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from anonmem import LABEL, AnonPeak, run_sampled
from api_fetch_bench import TOKEN, LatencyProxy, Server

BARE_SCRIPT = r"""
import sys, time, httpx
from concurrent.futures import ThreadPoolExecutor
base, token, store, inflight = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
client = httpx.Client(base_url=base + "/api/v1/forward", headers={"Authorization": "Bearer " + token},
                      limits=httpx.Limits(max_connections=max(1, inflight)), timeout=60)
ids, cursor = [], None
while True:
    params = {"limit": "100", **({"after_id": cursor} if cursor else {})}
    page = client.get(f"/memory_stores/{store}/memory_versions", params=params).json()
    ids += [v["id"] for v in page["data"]]
    if not page["has_more"]:
        break
    cursor = page["last_id"]
def fetch(vid):
    return len(client.get(f"/memory_stores/{store}/memory_versions/{vid}").json()["content"])
if inflight == 1:
    total = sum(fetch(v) for v in ids)
else:
    with ThreadPoolExecutor(inflight) as pool:
        total = sum(pool.map(fetch, ids))
print(len(ids), total)
"""


def write_seed(path: Path, versions: int, memories: int) -> None:
    """One Forward store: ``memories`` memories, each created then updated, ``versions`` in all."""
    per = max(1, versions // memories)
    body = "An agent's note about the project: decisions, people, open questions. " * 12
    seed_memories = []
    for n in range(memories):
        history: list[dict[str, Any]] = [{"op": "create", "content": f"# note {n}\n{body}\nv0\n"}]
        history += [{"op": "update", "content": f"# note {n}\n{body}\nv{k}\n"} for k in range(1, per)]
        seed_memories.append({"path": f"area{n % 10}/topic{n % 7}/note{n:05d}.md", "history": history})
    stores = [{"dialect": "forward", "name": "bench", "memories": seed_memories}]
    path.write_text(json.dumps({"stores": stores}))


def compile_memsync() -> None:
    """Byte-compile memsync, as an installed package is: the bare scripts' httpx loads compiled
    bytecode, while an editable checkout under PYTHONDONTWRITEBYTECODE=1 (set on these machines)
    would recompile memsync's modules from source in every run (~0.1 s of each pull)."""
    import compileall

    import memsync

    compileall.compile_dir(Path(memsync.__file__).parent, quiet=1)


def timed(args: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    """Wall seconds and stdout of a child process."""
    started = time.perf_counter()
    child = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **(env or {})}
    )
    out, err = child.communicate()
    wall = time.perf_counter() - started
    if child.returncode != 0:
        raise RuntimeError(f"{args[:4]} failed: {err.decode()[-2000:]}")
    return wall, out.decode()


def run_pull(base_url: str, store_id: str, workdir: Path) -> tuple[float, AnonPeak, dict[str, Any]]:
    """A first import by `memsync pull` into a fresh root; wall time, the peak anonymous memory of
    memsync and the git processes it ran (sampled from here, benchmarks/anonmem.py), its JSON entry."""
    root = Path(tempfile.mkdtemp(dir=workdir))
    config = root / "memsync.toml"
    config.write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{base_url}"\ntoken_env = "BENCH_TOKEN"\n'
        f'[mirror]\nroot = "m"\n[stores]\ninclude = ["{store_id}"]\n'
    )
    child, peak, wall = run_sampled(
        [sys.executable, "-m", "memsync", "--config", str(config), "pull", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "BENCH_TOKEN": TOKEN},
    )
    if child.returncode != 0:
        raise RuntimeError(f"memsync pull failed: {child.stderr.decode()[-2000:]}")
    (entry,) = json.loads(child.stdout)["stores"]
    return wall, peak, entry | {"repo": str(root / "m" / store_id)}


def run_bare(base_url: str, store_id: str, inflight: int) -> float:
    wall, _ = timed([sys.executable, "-c", BARE_SCRIPT, base_url, TOKEN, store_id, str(inflight)])
    return wall


def imported_tip(repo: Path) -> str:
    """The commit id of ``refs/remotes/memstore/main`` in ``repo``."""
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "refs/remotes/memstore/main"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def git_writing_vs_fast_import(repo: Path, workdir: Path, rounds: int) -> dict[str, float | bool]:
    """HistoryWriter alone vs `git fast-import`, both fed the commits of ``repo``'s imported history,
    each in a fresh repository and process; medians of ``rounds`` alternated rounds."""
    stream = subprocess.run(
        ["git", "-C", str(repo), "fast-export", "--reencode=no", "refs/remotes/memstore/main"],
        capture_output=True,
        check=True,
    ).stdout
    tip = imported_tip(repo)
    writer_script = r"""
import sys, time, json
from datetime import datetime
import pygit2
from memsync.mirror import Mirror, VersionRecord
from memsync.mirror.trailers import parse_message
source = pygit2.Repository(sys.argv[1])
records = []
walker = source.walk(source.references["refs/remotes/memstore/main"].target,
                     pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
previous = None
for commit in walker:
    t = parse_message(commit.message, str(commit.id))
    content = None
    if t.operation != "deleted" and t.memory_path is not None:
        diff = commit.tree.diff_to_tree(previous.tree) if previous is not None else commit.tree.diff_to_tree()
        for patch in diff:
            if patch.delta.old_file.id != patch.delta.new_file.id:
                blob = source[patch.delta.old_file.id]
                content = blob.data
                break
    records.append(VersionRecord(version_id=t.version_id, memory_id=t.memory_id, operation=t.operation,
        path=t.memory_path, content=content, content_sha256=t.content_sha256, created_at=t.created_at,
        author_name=commit.author.name, author_email=commit.author.email))
    previous = commit
mirror = Mirror.init(sys.argv[2])
started = time.perf_counter()
with mirror.history_writer() as writer:
    for record in records:
        writer.add(record)
elapsed = time.perf_counter() - started
print(json.dumps({"seconds": elapsed, "tip": mirror.tip()}))
"""
    fast_times: list[float] = []
    writer_times: list[float] = []
    same = same_writer = True
    for round_number in range(rounds):
        target = workdir / f"fast-import-{round_number}"
        subprocess.run(["git", "init", "-q", "--bare", str(target)], check=True)
        started = time.perf_counter()
        subprocess.run(["git", "-C", str(target), "fast-import", "--quiet"], input=stream, check=True)
        fast_times.append(time.perf_counter() - started)
        same = same and imported_tip(target) == tip
        out = subprocess.run(
            [sys.executable, "-c", writer_script, str(repo), str(workdir / f"writer-{round_number}")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        result = json.loads(out)
        writer_times.append(result["seconds"])
        same_writer = same_writer and result["tip"] == tip
    fast = statistics.median(fast_times)
    writer = statistics.median(writer_times)
    return {
        "fast_import_s": fast,
        "writer_s": writer,
        "ratio": writer / fast,
        "same_tip_fast_import": same,
        "same_tip_writer": same_writer,
    }


def scenario(workdir: Path, versions: int, memories: int, rounds: int, latency_ms: float) -> dict[str, Any]:
    seed = workdir / f"seed-{versions}.json"
    write_seed(seed, versions, memories)
    server = Server(workdir / f"server-{versions}.sqlite3", seed)
    proxy: LatencyProxy | None = None
    try:
        import httpx

        stores = httpx.get(
            f"{server.base_url}/api/v1/forward/memory_stores",
            headers={"Authorization": f"Bearer {TOKEN}"},
        ).json()["data"]
        store_id = stores[0]["id"]
        results: dict[str, Any] = {"versions": versions, "memories": memories}
        host, port = server.base_url.removeprefix("http://").split(":")
        proxy = LatencyProxy(host, int(port), latency_ms / 1000) if latency_ms else None
        targets = [("loopback", server.base_url)]
        if proxy is not None:
            targets.append((f"+{latency_ms:g} ms", f"http://127.0.0.1:{proxy.port}"))
        for label, url in targets:
            runs: dict[str, list[float]] = {"memsync": [], "bare-1": [], "bare-8": []}
            peaks: list[AnonPeak] = []
            entry: dict[str, Any] = {}
            for _ in range(rounds):  # alternated, so drift in the machine's load hits all alike
                wall, peak, entry = run_pull(url, store_id, workdir)
                runs["memsync"].append(wall)
                peaks.append(peak)
                runs["bare-1"].append(run_bare(url, store_id, 1))
                runs["bare-8"].append(run_bare(url, store_id, 8))
            medians = {name: statistics.median(values) for name, values in runs.items()}
            best_bare = min(medians["bare-1"], medians["bare-8"])
            minimum = math.ceil(versions / 100) + versions
            results[label] = {
                "median_s": medians,
                "versions_per_s": versions / medians["memsync"],
                "ratio_to_faster_bare": medians["memsync"] / best_bare,
                "requests": entry["requests"],
                "requests_minimum": minimum,
                # the median run's figures (by the peak of the sum)
                "memory": sorted(peaks, key=lambda p: p.peak_kib)[len(peaks) // 2].as_dict(),
                "imported": entry["imported"],
            }
            results["repo"] = entry["repo"]
        return results
    finally:
        if proxy is not None:
            proxy.stop()
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--versions", type=int, default=10_000)
    parser.add_argument("--memories", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument(
        "--scale", type=int, default=10, help="the larger import for the memory check (0: skip)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    compile_memsync()
    with tempfile.TemporaryDirectory(prefix="memsync-pull-bench-") as tmp:
        workdir = Path(tmp)
        main_run = scenario(workdir, args.versions, args.memories, args.rounds, args.latency_ms)
        writing = git_writing_vs_fast_import(Path(main_run["repo"]), workdir, max(args.rounds, 3))
        large: dict[str, Any] | None = None
        if args.scale > 1:
            large = scenario(workdir, args.versions * args.scale, args.memories, 1, 0)
    report = {"import": main_run, "git_writing": writing, "large": large}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"first import of {args.versions} versions over {args.memories} memories")
    for label in [k for k in main_run if k.startswith(("loopback", "+"))]:
        r = main_run[label]
        m = r["median_s"]
        print(
            f"  {label:>9}: memsync {m['memsync']:.2f} s ({r['versions_per_s']:.0f} versions/s), "
            f"bare one-at-a-time {m['bare-1']:.2f} s, bare 8-in-flight {m['bare-8']:.2f} s, "
            f"ratio to the faster {r['ratio_to_faster_bare']:.2f}; "
            f"requests {r['requests']} (minimum {r['requests_minimum']});"
            f" {LABEL} {_memory(r['memory'])}"
        )
    print(
        f"git writing: HistoryWriter {writing['writer_s']:.2f} s"
        f" vs git fast-import {writing['fast_import_s']:.2f} s,"
        f" ratio {writing['ratio']:.2f}; same tip: writer {writing['same_tip_writer']},"
        f" fast-import {writing['same_tip_fast_import']}"
    )
    if large is not None:
        small, big = main_run["loopback"], large["loopback"]
        small_mib, big_mib = small["memory"]["peak_anon_mib"], big["memory"]["peak_anon_mib"]
        growth = (big_mib / small_mib - 1) * 100
        print(
            f"x{args.scale}: {large['versions']} versions over {large['memories']} memories in"
            f" {big['median_s']['memsync']:.1f} s ({big['versions_per_s']:.0f} versions/s),"
            f" {LABEL} {big_mib:.1f} vs {small_mib:.1f} ({growth:+.1f} %, target under 20 %);"
            f" {_memory(big['memory'])}"
        )


def _memory(memory: dict[str, Any]) -> str:
    split = " + ".join(f"{kind} {mib:.1f}" for kind, mib in memory["at_peak_mib"].items())
    return (
        f"{memory['peak_anon_mib']:.1f} MiB ({split} at the peak; own peaks: memsync"
        f" {memory['memsync_peak_mib']:.1f}, git processes {memory['git_peak_mib']:.1f})"
    )


if __name__ == "__main__":
    main()
