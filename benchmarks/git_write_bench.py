"""memsync's history writer vs a bare ``git fast-import`` script, and its memory as history grows.

The input is a store's history in a realistic shape: ``--files`` memory files three folders deep
(dK/dK/fK.md), each version a small text edit (one line of a ~320-byte note changes), each commit
one version. Both writers get the same commits (same trees, messages, identities and times) and
must end at the same head commit id; the script asserts it.

Each writer runs in a process of its own, in a fresh repository, and generates its input as it goes
(neither holds the whole history in memory, as a pull does not): memsync's writer
(``Mirror.history_writer()``: a ``git fast-import`` per batch of 1,000 commits, ``git pack-objects``
merging past 8 open packs), and a script that pipes the same commits into one
``git fast-import``. Times are the writing process's wall clock, input generation included for
both; CPU is that process's and its git children's. Memory is the peak *anonymous* memory of the
writing process plus every git process under it, sampled every 20 ms (benchmarks/anonmem.py):
"peak anon MiB (memsync + git)".

    python benchmarks/git_write_bench.py [--commits 10000] [--files 1000] [--rounds 3]

compares the two writers, alternated, medians of ``--rounds``.

    python benchmarks/git_write_bench.py --growth [--sizes 10000,100000] [--rounds 1]

imports ``--sizes`` versions with memsync's writer and prints, for each, the time, the peak
anonymous memory (memsync's own, the git processes', the split at the peak), the final pack count,
and the growth of the peak from the first size to the last (target: under 20 %). Options to try
other settings without editing memsync (the benchmark patches memsync.mirror.gitstore in its child
process): ``--geometric-from N`` replaces ``GEOMETRIC_FROM`` (open packs before a merge),
``--sealed-bytes N`` replaces ``SEALED_BYTES`` (the size that seals a pack), ``--batch-commits N``
sets the writer's batch.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from anonmem import LABEL, AnonPeak, run_sampled

from memsync.mirror import Mirror, VersionRecord
from memsync.mirror.history import DEFAULT_AUTHOR_EMAIL, DEFAULT_AUTHOR_NAME
from memsync.mirror.trailers import Operation, Trailers, format_message

BASE_TIME = datetime(2026, 1, 1, tzinfo=UTC)
LINES = 6
WORDS = "lorem ipsum dolor sit"


def make_records(commits: int, files: int) -> Iterator[VersionRecord]:
    """Deterministic versions, generated lazily: file k lives at dK/dK/fK.md; commit i edits file
    (i * 7919) % files, changing one of its six lines (the line says which version last wrote it)."""
    paths = [f"d{k // 100 % 10}/d{k // 10 % 10}/f{k:04d}.md" for k in range(files)]
    lines: dict[int, list[int]] = {}
    for i in range(commits):
        k = (i * 7919) % files
        state = lines.get(k)
        operation: Operation = "updated" if state is not None else "created"
        if state is None:
            state = lines[k] = [0] * LINES
        state[i % LINES] = i
        body = "".join(f"- point {j} of memory {k}: {WORDS} {state[j]}\n" for j in range(LINES))
        content = f"# memory {k}\n\n{body}".encode()
        yield VersionRecord(
            version_id=f"memver_{i:06d}",
            memory_id=f"mem_{k:05d}",
            operation=operation,
            path=paths[k],
            content=content,
            content_sha256=hashlib.sha256(content).hexdigest(),
            created_at=BASE_TIME + timedelta(seconds=i, microseconds=i % 1000),
        )


def fast_import_stream(records: Iterator[VersionRecord]) -> Iterator[bytes]:
    """The same commits as a fast-import stream, one commit at a time (messages built by the same
    trailer format)."""
    for mark, record in enumerate(records, start=1):
        assert record.path is not None and record.content is not None
        message = format_message(
            f"{record.operation} {record.path}",
            Trailers(
                memory_id=record.memory_id,
                version_id=record.version_id,
                operation=record.operation,
                created_at=record.created_at,
                memory_path=record.path,
                content_sha256=record.content_sha256,
            ),
        ).encode()
        seconds = int(record.created_at.timestamp())
        ident = f"{DEFAULT_AUTHOR_NAME} <{DEFAULT_AUTHOR_EMAIL}> {seconds} +0000".encode()
        yield b"".join(
            [
                b"commit refs/heads/main\nmark :%d\n" % mark,
                b"author " + ident + b"\ncommitter " + ident + b"\n",
                b"data %d\n" % len(message) + message + b"\n",
                b"from :%d\n" % (mark - 1) if mark > 1 else b"",
                b"M 100644 inline " + record.path.encode() + b"\n",
                b"data %d\n" % len(record.content) + record.content + b"\n",
            ]
        )


@dataclass
class Run:
    wall: float  # seconds writing, input generation included (not python start-up, not git init)
    cpu: float  # user + system seconds of the writing process and its git children
    pack_bytes: int
    packs: int
    head: str
    repacks: int = 0
    repack_s: float = 0.0
    kept_packs: int = 0
    memory: AnonPeak = field(default_factory=AnonPeak)


def _pack_files(repo: Path) -> list[Path]:
    return sorted(repo.rglob("objects/pack/pack-*.pack"))


def _pack_bytes(repo: Path) -> int:
    return sum(f.stat().st_size for f in repo.rglob("objects/pack/*") if f.suffix in (".pack", ".idx"))


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_child(mode: str, workdir: Path, commits: int, files: int, options: dict[str, Any]) -> Run:
    """One writer in a process of its own, its process tree's anonymous memory sampled from here."""
    args = [sys.executable, __file__, mode, json.dumps(options), str(workdir), str(commits), str(files)]
    kind = "memsync" if mode == "--child" else "feeder"
    result, peak, _ = run_sampled(args, root_kind=kind, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if result.returncode != 0:
        raise RuntimeError(f"{mode} failed: {result.stderr.decode()[-3000:]}")
    return Run(**json.loads(result.stdout), memory=peak)


def child_fast_import(workdir: Path, commits: int, files: int) -> dict[str, Any]:
    repo = workdir / "fast-import"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    before, started = _cpu(), time.perf_counter()
    child = subprocess.Popen(["git", "-C", str(repo), "fast-import", "--quiet"], stdin=subprocess.PIPE)
    assert child.stdin is not None
    for chunk in fast_import_stream(make_records(commits, files)):
        child.stdin.write(chunk)
    child.stdin.close()
    if child.wait() != 0:
        raise RuntimeError("git fast-import failed")
    wall, cpu = time.perf_counter() - started, _cpu() - before
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "refs/heads/main"], capture_output=True, text=True, check=True
    ).stdout.strip()
    packs = _pack_files(repo)
    return dict(wall=wall, cpu=cpu, pack_bytes=_pack_bytes(repo), packs=len(packs), head=head)


def _patch_gitstore(options: dict[str, Any], counters: dict[str, float]) -> None:
    """Apply ``--geometric-from`` and ``--sealed-bytes`` to GitStore in this process, and count merges."""
    from memsync.mirror import gitstore

    if options.get("geometric_from") is not None:
        gitstore.GEOMETRIC_FROM = int(options["geometric_from"])
    if options.get("sealed_bytes") is not None:
        gitstore.SEALED_BYTES = int(options["sealed_bytes"])
    original = gitstore.GitStore.repack

    def repack(store: gitstore.GitStore) -> bool:
        started = time.perf_counter()
        done = original(store)
        if done:
            counters["repacks"] += 1
            counters["repack_s"] += time.perf_counter() - started
        return done

    gitstore.GitStore.repack = repack  # type: ignore[method-assign]


def child_writer(workdir: Path, commits: int, files: int, options: dict[str, Any]) -> dict[str, Any]:
    counters = {"repacks": 0.0, "repack_s": 0.0}
    _patch_gitstore(options, counters)
    writer_options = {k: options[k] for k in ("batch_commits", "batch_bytes") if options.get(k)}
    mirror = Mirror.init(workdir / "memsync")
    before, started = _cpu(), time.perf_counter()
    with mirror.history_writer(**writer_options) as writer:
        for record in make_records(commits, files):
            writer.add(record)
    wall, cpu = time.perf_counter() - started, _cpu() - before
    packs = _pack_files(mirror.path)
    return dict(
        wall=wall,
        cpu=cpu,
        pack_bytes=_pack_bytes(mirror.path),
        packs=len(packs),
        head=mirror.tip(),
        repacks=int(counters["repacks"]),
        repack_s=counters["repack_s"],
        kept_packs=sum(1 for p in packs if p.with_suffix(".keep").exists()),
    )


def _fresh(run: Any) -> Run:
    workdir = Path(tempfile.mkdtemp(prefix="memsync-bench-"))
    try:
        result: Run = run(workdir)
        return result
    finally:
        shutil.rmtree(workdir)


def compare(args: argparse.Namespace, options: dict[str, Any]) -> None:
    variants = {
        "git fast-import script": ("--child-fast-import", {}),
        "memsync writer": ("--child", options),
    }
    runs: dict[str, list[Run]] = {name: [] for name in variants}
    for _ in range(args.rounds):  # alternated, so drift in the machine's load hits both alike
        for name, (mode, opts) in variants.items():
            runs[name].append(_fresh(lambda d, m=mode, o=opts: run_child(m, d, args.commits, args.files, o)))
    heads = {r.head for results in runs.values() for r in results}
    assert len(heads) == 1, f"the writers disagree on the head commit: {sorted(heads)}"
    base = runs["git fast-import script"]
    base_wall = statistics.median(r.wall for r in base)
    base_cpu = statistics.median(r.cpu for r in base)
    print(f"{args.commits:,} one-file commits over {args.files:,} files, median of {args.rounds} rounds")
    print(f"head commit (identical for all): {heads.pop()}")
    print(
        f"  {'':<24}{'wall':>8}{'commits/s':>11}{'ratio':>7}{'cpu':>9}{'ratio':>7}"
        f"{'peak anon':>11}{'packs':>7}{'pack+idx':>10}"
    )
    for name, results in runs.items():
        wall = statistics.median(r.wall for r in results)
        cpu = statistics.median(r.cpu for r in results)
        anon = statistics.median(r.memory.mib for r in results)
        print(
            f"  {name:<24}{wall:6.2f} s{args.commits / wall:11,.0f}{wall / base_wall:7.2f}"
            f"{cpu:7.2f} s{cpu / base_cpu:7.2f}{anon:7.1f} MiB{results[-1].packs:7d}"
            f"{results[-1].pack_bytes / 2**20:6.1f} MiB"
        )
    for name, results in runs.items():
        middle = sorted(results, key=lambda r: r.memory.mib)[len(results) // 2]
        print(f"  {LABEL}, {name} (median run): {middle.memory.summary()}")
    _footer()


def growth(args: argparse.Namespace, options: dict[str, Any]) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[int, list[Run]] = {size: [] for size in sizes}
    for _ in range(args.rounds):
        for size in sizes:
            run = _fresh(lambda d, n=size: run_child("--child", d, n, args.files, options))
            results[size].append(run)
            print(
                f"  [{size:,} versions] {run.wall:.1f} s, {LABEL}: {run.memory.summary()};"
                f" {run.packs} packs, {run.repacks} repacks in {run.repack_s:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    settings = {k: v for k, v in options.items() if v not in (None, [], "")}
    print(
        f"memsync writer, {args.files:,} files, ~320-byte notes, one-line edits;"
        f" median of {args.rounds} run(s); settings:"
        f" {json.dumps(settings) if settings else 'memsync defaults'}"
    )
    print(
        f"  {'versions':>9}{'wall':>9}{'versions/s':>12}{'peak anon':>11}{'memsync':>9}{'git':>8}"
        f"{'packs':>7}{'kept':>6}{'repacks':>9}{'repack s':>10}{'pack+idx':>10}   split at the peak (MiB)"
    )
    medians: dict[int, float] = {}
    report: dict[str, Any] = {"settings": settings, "sizes": {}}
    for size, runs in results.items():
        wall = statistics.median(r.wall for r in runs)
        anon = medians[size] = statistics.median(r.memory.mib for r in runs)
        middle = sorted(runs, key=lambda r: r.memory.mib)[len(runs) // 2]
        split = ", ".join(f"{kind} {mib:.1f}" for kind, mib in middle.memory.split())
        print(
            f"  {size:>9,}{wall:7.1f} s{size / wall:12,.0f}{anon:7.1f} MiB"
            f"{statistics.median(r.memory.memsync_mib for r in runs):9.1f}"
            f"{statistics.median(r.memory.git_mib for r in runs):8.1f}"
            f"{middle.packs:7d}{middle.kept_packs:6d}{middle.repacks:9d}{middle.repack_s:8.1f} s"
            f"{middle.pack_bytes / 2**20:6.1f} MiB   {split}"
        )
        report["sizes"][size] = {
            "wall_s": round(wall, 2),
            "packs": middle.packs,
            "kept_packs": middle.kept_packs,
            "repacks": middle.repacks,
            "repack_s": round(middle.repack_s, 2),
            "pack_mib": round(middle.pack_bytes / 2**20, 2),
            **middle.memory.as_dict(),
            "peak_anon_mib_median": round(anon, 1),
        }
    first, last = sizes[0], sizes[-1]
    change = (medians[last] / medians[first] - 1) * 100
    report["growth_percent"] = round(change, 1)
    verdict = "within" if change < 20 else "OVER"
    print(
        f"  {LABEL}: {medians[first]:.1f} at {first:,} -> {medians[last]:.1f} at {last:,}:"
        f" {change:+.1f} % ({verdict} the 20 % target)"
    )
    print("  memsync = the writing Python process; git = its git processes together (their own peak)")
    _footer()
    if args.json:
        print(json.dumps(report))


def _footer() -> None:
    git_version = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.split()[-1]
    print(
        f"python {sys.version.split()[0]}, git {git_version}, {os.cpu_count()} cpus,"
        f" load {os.getloadavg()[0]:.1f}; memory: anonymous (RssAnon) of the writing process and"
        " all its git processes, summed, sampled every 20 ms"
    )


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] in ("--child", "--child-fast-import"):
        options, workdir = json.loads(sys.argv[2]), Path(sys.argv[3])
        commits, files = int(sys.argv[4]), int(sys.argv[5])
        if sys.argv[1] == "--child":
            print(json.dumps(child_writer(workdir, commits, files, options)))
        else:
            print(json.dumps(child_fast_import(workdir, commits, files)))
        return 0
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=None, help="default: 3, or 1 with --growth")
    parser.add_argument("--growth", action="store_true", help="memsync's writer at each of --sizes")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--batch-commits", type=int, default=None)
    parser.add_argument("--geometric-from", type=int, default=None)
    parser.add_argument("--sealed-bytes", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="with --growth: also a JSON line")
    args = parser.parse_args()
    options = {
        "batch_commits": args.batch_commits,
        "geometric_from": args.geometric_from,
        "sealed_bytes": args.sealed_bytes,
    }
    if args.growth:
        args.rounds = args.rounds or 1
        growth(args, options)
    else:
        args.rounds = args.rounds or 3
        compare(args, options)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
