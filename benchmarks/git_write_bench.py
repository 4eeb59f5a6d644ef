"""Git writing vs ``git fast-import``: 10,000 one-file commits over 1,000 files, 3 levels deep.

Both writers get the same commits (same trees, messages, identities and times), so both must end at
the same head commit id; the script asserts it. Each variant runs in a fresh repository; the
variants alternate, and the median of the rounds is reported with the ratio to fast-import (target
≤ 1.0) and the peak RSS of the writing process.

    python benchmarks/git_write_bench.py [--commits 10000] [--files 1000] [--rounds 3] [--variants]

``--variants`` also times the writer with ``git index-pack`` writing the pack index, with zlib level
6 instead of 1, and with one pack instead of ten, to back the choices made in memsync.mirror.pack
and memsync.mirror.history.
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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memsync.mirror import Mirror, VersionRecord
from memsync.mirror.history import DEFAULT_AUTHOR_EMAIL, DEFAULT_AUTHOR_NAME
from memsync.mirror.trailers import Trailers, format_message

BASE_TIME = datetime(2026, 1, 1, tzinfo=UTC)


def make_records(commits: int, files: int) -> list[VersionRecord]:
    """Deterministic versions: file k lives at dK/dK/fK.md; each commit touches one file."""
    paths = [f"d{k // 100 % 10}/d{k // 10 % 10}/f{k:04d}.md" for k in range(files)]
    seen: set[int] = set()
    records = []
    for i in range(commits):
        k = (i * 7919) % files
        content = (f"# memory {k}\n\nversion {i}\n" + "lorem ipsum dolor sit amet " * 6 + "\n").encode()
        records.append(
            VersionRecord(
                version_id=f"memver_{i:06d}",
                memory_id=f"mem_{k:05d}",
                operation="updated" if k in seen else "created",
                path=paths[k],
                content=content,
                content_sha256=hashlib.sha256(content).hexdigest(),
                created_at=BASE_TIME + timedelta(seconds=i, microseconds=i % 1000),
            )
        )
        seen.add(k)
    return records


def fast_import_stream(records: list[VersionRecord]) -> bytes:
    """The same commits as a fast-import stream (messages built by the same trailer format)."""
    parts: list[bytes] = []
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
        parts.append(b"commit refs/heads/main\nmark :%d\n" % mark)
        parts.append(b"author " + ident + b"\ncommitter " + ident + b"\n")
        parts.append(b"data %d\n" % len(message) + message + b"\n")
        if mark > 1:
            parts.append(b"from :%d\n" % (mark - 1))
        parts.append(b"M 100644 inline " + record.path.encode() + b"\n")
        parts.append(b"data %d\n" % len(record.content) + record.content + b"\n")
    return b"".join(parts)


@dataclass(frozen=True)
class Run:
    wall: float  # seconds writing, excluding setup (git init, building the input)
    cpu: float  # user + system seconds of the writing process
    peak_rss: float  # MiB, of the process that wrote (input included, like fast-import's stream)
    pack_bytes: int
    head: str


def _peak_rss(pid: int | str = "self") -> float | None:
    """VmHWM of a live process in MiB: its own high-water mark since exec.

    ru_maxrss is no good for children here: a child started by vfork or fork inherits the
    parent's resident set into its maximum, and the parent holds the whole input.
    """
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _pack_bytes(repo: Path) -> int:
    return sum(f.stat().st_size for f in repo.rglob("objects/pack/*"))


def run_fast_import(workdir: Path, stream: bytes) -> Run:
    repo = workdir / "fast-import"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    started = time.perf_counter()
    child = subprocess.Popen(["git", "-C", str(repo), "fast-import", "--quiet"], stdin=subprocess.PIPE)
    assert child.stdin is not None
    child.stdin.write(stream)
    child.stdin.close()
    peak = 0.0
    while True:  # sample the high-water mark until it exits (it only grows)
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        peak = max(peak, _peak_rss(child.pid) or 0.0)
        time.sleep(0.002)
    elapsed = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    assert child.returncode == 0, "git fast-import failed"
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "refs/heads/main"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return Run(elapsed, usage.ru_utime + usage.ru_stime, peak, _pack_bytes(repo), head)


def run_writer(workdir: Path, commits: int, files: int, options: dict[str, Any]) -> Run:
    """The writer in a process of its own, so its CPU time and peak RSS are its own."""
    result = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(options), str(workdir), str(commits), str(files)],
        capture_output=True,
        text=True,
        check=True,
    )
    fields = json.loads(result.stdout)
    return Run(**fields)


def child(options: dict[str, Any], workdir: Path, commits: int, files: int) -> None:
    records = make_records(commits, files)
    mirror = Mirror.init(workdir / "memsync")
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    with mirror.history_writer(**options) as writer:
        for record in records:
            writer.add(record)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    head = mirror.tip()
    print(
        json.dumps(
            dict(
                wall=elapsed,
                cpu=cpu,
                peak_rss=_peak_rss() or after.ru_maxrss / 1024,
                pack_bytes=_pack_bytes(mirror.path),
                head=head,
            )
        )
    )


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(json.loads(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", action="store_true")
    args = parser.parse_args()

    stream = fast_import_stream(make_records(args.commits, args.files))
    writer_options: dict[str, dict[str, Any]] = {"memsync writer": {}}
    if args.variants:
        writer_options.update(
            {
                "writer, git index-pack": {"indexer": "git"},
                "writer, zlib level 6": {"compression": 6},
                "writer, 10k-commit batch": {"batch_commits": 10_000},
            }
        )
    variants: dict[str, Callable[[Path], Run]] = {"git fast-import": lambda d: run_fast_import(d, stream)}
    for name, options in writer_options.items():
        variants[name] = lambda d, o=options: run_writer(d, args.commits, args.files, o)  # type: ignore[misc]
    runs: dict[str, list[Run]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, run in variants.items():
            workdir = Path(tempfile.mkdtemp(prefix="memsync-bench-"))
            try:
                runs[name].append(run(workdir))
            finally:
                shutil.rmtree(workdir)
    heads = {r.head for results in runs.values() for r in results}
    assert len(heads) == 1, f"the writers disagree on the head commit: {sorted(heads)}"

    base_wall = statistics.median(r.wall for r in runs["git fast-import"])
    base_cpu = statistics.median(r.cpu for r in runs["git fast-import"])
    print(f"{args.commits:,} one-file commits over {args.files:,} files, median of {args.rounds} rounds")
    print(f"head commit (identical for all): {heads.pop()}")
    print(
        f"  {'':<26}{'wall':>8}{'commits/s':>11}{'ratio':>7}{'cpu':>9}{'ratio':>7}"
        f"{'peak RSS':>10}{'packs':>10}"
    )
    for name, results in runs.items():
        wall = statistics.median(r.wall for r in results)
        cpu = statistics.median(r.cpu for r in results)
        rss = max(r.peak_rss for r in results)
        size = results[-1].pack_bytes / 2**20
        print(
            f"  {name:<26}{wall:6.2f} s{args.commits / wall:11,.0f}{wall / base_wall:7.2f}"
            f"{cpu:7.2f} s{cpu / base_cpu:7.2f}{rss:6.0f} MiB{size:6.1f} MiB"
        )
    git_version = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.split()[-1]
    print(
        f"python {sys.version.split()[0]}, git {git_version}, {os.cpu_count()} cpus, "
        f"load {os.getloadavg()[0]:.1f}; peak RSS of the writing process, its input included"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
