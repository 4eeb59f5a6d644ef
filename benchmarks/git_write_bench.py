"""memsync's history writer vs a bare ``git fast-import`` script, and its memory as history grows.

The input is a store's history in a realistic shape: ``--files`` memory files three folders deep
(dK/dK/fK.md), each version a small text edit (one line of a ~320-byte note changes), each commit
one version. Both writers get the same commits (same trees, messages, identities and times) and
must end at the same head commit id; the script asserts it.

Each writer runs in a process of its own, in a fresh repository, and generates its input as it goes
(neither holds the whole history in memory, as a pull does not): memsync's writer
(``Mirror.history_writer()``: a ``git fast-import`` per batch of 1,000 commits, ``git repack
--geometric=2 -d`` past 8 packs), and a script that pipes the same commits into one
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
git-side settings without editing memsync (the benchmark patches memsync.mirror.gitstore in its
child process): ``--repack "ARGS"`` replaces ``gitstore.REPACK`` (git's arguments after ``git``),
``--geometric-from N`` replaces ``GEOMETRIC_FROM``, ``--batch-commits N`` sets the writer's batch,
and three replace what GitStore.repack does (pack-objects' memory goes with the number of objects
it handles, hence thresholds in objects, not bytes):

- ``--keep-over-objects N``: a ``.keep`` beside every pack of more than N objects before each repack
  (git repack then neither rewrites nor counts it; only packs without one count towards
  GEOMETRIC_FROM). git 2.39's walk still goes through the kept packs' trees: no bound.
- ``--cap-objects N``: once more than GEOMETRIC_FROM packs of fewer than N objects exist, merge those
  into one and leave the larger ones alone. ``--rollup stdin-packs`` (default) merges them as git
  repack --geometric does (``pack-objects --stdin-packs``, ``^pack`` for the others); ``--rollup
  revs`` gives ``pack-objects --revs`` the range of commits they hold (the tip, ``^`` the tip when
  the last large pack was made), so git walks only that range. The merged pack must hold exactly
  the objects of the packs it replaces, or the run stops before deleting them.
- ``--commit-graph "ARGS"``: ``git commit-graph write ARGS`` before each repack (e.g.
  ``"--reachable --split=no-merge"``), so git's walk reads commits from the graph.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shlex
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
from memsync.mirror.gitbinary import git_environment, run_git
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


def _idx_objects(idx: Path) -> int:
    """The number of objects a version 2 pack index lists (the last entry of its fan-out table)."""
    with idx.open("rb") as f:
        f.seek(8 + 255 * 4)
        return int.from_bytes(f.read(4), "big")


def _patch_gitstore(options: dict[str, Any], counters: dict[str, float]) -> None:
    """Apply the experiments (``--repack``, ``--geometric-from``, ``--keep-over-objects``,
    ``--cap-objects``, ``--commit-graph``) to GitStore.repack in this process, and count repacks."""
    from memsync.mirror import gitstore

    if options.get("repack"):
        gitstore.REPACK = list(options["repack"])
    if options.get("geometric_from") is not None:
        gitstore.GEOMETRIC_FROM = int(options["geometric_from"])
    keep_over = int(options.get("keep_over_objects") or 0)
    cap = int(options.get("cap_objects") or 0)
    graph = options.get("commit_graph")
    rollup = options.get("rollup") or "stdin-packs"
    boundary: list[str | None] = [None]  # the tip when the newest pack of cap objects or more was made
    original = gitstore.GitStore.repack

    def packs(store: gitstore.GitStore) -> list[Path]:
        return sorted((store.objects_dir / "pack").glob("pack-*.pack"))

    def write_graph(store: gitstore.GitStore) -> None:
        # Before a repack: parse_commit then reads a commit from the graph instead of inflating it
        # and keeping its text, and pack-objects' walk through the whole history costs ~100 bytes a
        # commit instead of ~600.
        if graph is not None:
            run_git(store.path, ["commit-graph", "write", *graph], action="writing the commit-graph")

    def kept_aside(store: gitstore.GitStore) -> bool:
        # What GitStore.repack would do if it left every pack past keep_over objects as it is
        # (a .keep file: git repack neither rewrites it nor counts it in the geometry).
        for pack in packs(store):
            keep = pack.with_suffix(".keep")
            if not keep.exists() and _idx_objects(pack.with_suffix(".idx")) > keep_over:
                keep.touch()
        if sum(1 for p in packs(store) if not p.with_suffix(".keep").exists()) <= gitstore.GEOMETRIC_FROM:
            return False
        write_graph(store)
        store.close()
        try:
            run_git(store.path, gitstore.REPACK, action="repacking the repository")
        finally:
            store.reopen()
        return True

    def capped(store: gitstore.GitStore) -> bool:
        # Merge the packs of fewer than cap objects once there are more than GEOMETRIC_FROM of them,
        # and leave the larger ones alone: no repack handles more than about GEOMETRIC_FROM small
        # packs, whatever the history's length. "stdin-packs" does it as git repack --geometric
        # does (pack-objects --stdin-packs: the packs to merge, "^pack" for the others, whose trees
        # git's walk then skips, unlike a .keep pack's); "revs" feeds pack-objects the range of
        # commits those packs hold (the tip, ^ the tip when the last large pack was made), which
        # walks that range only: each batch's pack holds exactly the objects its commits brought.
        found = packs(store)
        counts = {pack: _idx_objects(pack.with_suffix(".idx")) for pack in found}
        small = [pack for pack in found if counts[pack] < cap]
        if len(small) <= gitstore.GEOMETRIC_FROM:
            return False
        write_graph(store)
        tip = store.ref_target(Mirror.MEMSTORE_REF)
        if rollup == "revs":
            assert tip is not None
            flags = ["--revs"]
            lines = [tip] + [f"^{boundary[0]}"] * (boundary[0] is not None)
        else:
            flags = ["--stdin-packs"]
            lines = [p.name for p in small] + ["^" + p.name for p in found if counts[p] >= cap]
        settings = [arg for i, arg in enumerate(gitstore.REPACK) if "-c" in gitstore.REPACK[i - 1 : i]]
        configs = [x for kv in settings for x in ("-c", kv)]
        flags += ["--delta-base-offset", "--non-empty", "--keep-true-parents", "-q"]
        base = store.objects_dir / "pack" / "pack"
        store.close()
        try:
            name = subprocess.run(
                ["git", *configs, "-C", str(store.path), "pack-objects", *flags, str(base)],
                input="\n".join(lines) + "\n",
                text=True,
                capture_output=True,
                check=True,
                env=git_environment(),
            ).stdout.strip()
            written = _idx_objects(base.parent / f"pack-{name}.idx")
            if written != sum(counts[pack] for pack in small):
                raise RuntimeError(f"the merged pack holds {written} objects, the packs it replaces more")
            for pack in small:
                for suffix in (".pack", ".idx", ".rev", ".bitmap"):
                    pack.with_suffix(suffix).unlink(missing_ok=True)
        finally:
            store.reopen()
        if written >= cap:
            boundary[0] = tip
        return True

    def repack(store: gitstore.GitStore) -> bool:
        started = time.perf_counter()
        if cap:
            done = capped(store)
        elif keep_over:
            done = kept_aside(store)
        else:
            if store.pack_count() > gitstore.GEOMETRIC_FROM:
                write_graph(store)
            done = original(store)
        if done:
            counters["repacks"] += 1
            counters["repack_s"] += time.perf_counter() - started
        return done

    gitstore.GitStore.repack = repack  # type: ignore[method-assign,assignment]


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
    parser.add_argument(
        "--repack",
        default=None,
        help='replaces gitstore.REPACK, e.g. "-c pack.threads=1 repack --geometric=4 -d -q"',
    )
    parser.add_argument("--geometric-from", type=int, default=None)
    parser.add_argument("--keep-over-objects", type=int, default=None)
    parser.add_argument("--cap-objects", type=int, default=None)
    parser.add_argument("--rollup", choices=["stdin-packs", "revs"], default=None)
    parser.add_argument(
        "--commit-graph",
        default=None,
        help='git commit-graph write ARGS before each repack, e.g. "--reachable --split"',
    )
    parser.add_argument("--json", action="store_true", help="with --growth: also a JSON line")
    args = parser.parse_args()
    options = {
        "batch_commits": args.batch_commits,
        "repack": shlex.split(args.repack) if args.repack else None,
        "geometric_from": args.geometric_from,
        "keep_over_objects": args.keep_over_objects,
        "cap_objects": args.cap_objects,
        "rollup": args.rollup,
        "commit_graph": shlex.split(args.commit_graph) if args.commit_graph is not None else None,
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
