"""Git writing vs ``git fast-import``: 10,000 one-file commits over 1,000 files, 3 levels deep.

Both writers get the same commits (same trees, messages, identities and times), so both must end at
the same head commit id; the script asserts it. Each variant runs in a fresh repository; the
variants alternate, and the median of the rounds is reported with the ratio to fast-import (target
≤ 1.0) and the peak RSS of the writing process.

    python benchmarks/git_write_bench.py [--commits 10000] [--files 1000] [--rounds 3] [--variants]

``--variants`` also times the writer with ``git index-pack`` writing the pack index, and with zlib
level 6 instead of 1, to back the choices made in memsync.mirror.pack.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
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


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def run_fast_import(workdir: Path, stream: bytes) -> tuple[float, float, str]:
    repo = workdir / "fast-import"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    cpu = _cpu(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(["git", "-C", str(repo), "fast-import", "--quiet"], input=stream, check=True)
    elapsed = time.perf_counter() - started
    cpu = _cpu(resource.RUSAGE_CHILDREN) - cpu
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "refs/heads/main"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return elapsed, cpu, head


def run_writer(workdir: Path, records: list[VersionRecord], **options: Any) -> tuple[float, float, str]:
    mirror = Mirror.init(workdir / "memsync")
    cpu = _cpu(resource.RUSAGE_SELF)
    started = time.perf_counter()
    with mirror.history_writer(**options) as writer:
        for record in records:
            writer.add(record)
    elapsed = time.perf_counter() - started
    cpu = _cpu(resource.RUSAGE_SELF) - cpu
    head = mirror.tip()
    assert head is not None
    return elapsed, cpu, head


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", action="store_true")
    args = parser.parse_args()

    records = make_records(args.commits, args.files)
    stream = fast_import_stream(records)
    variants: dict[str, Callable[[Path], tuple[float, float, str]]] = {
        "git fast-import": lambda d: run_fast_import(d, stream),
        "memsync writer": lambda d: run_writer(d, records),
    }
    if args.variants:
        variants["writer, git index-pack"] = lambda d: run_writer(d, records, indexer="git")
        variants["writer, zlib level 6"] = lambda d: run_writer(d, records, compression=6)
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpus: dict[str, list[float]] = {name: [] for name in variants}
    heads: set[str] = set()
    for _ in range(args.rounds):
        for name, run in variants.items():
            workdir = Path(tempfile.mkdtemp(prefix="memsync-bench-"))
            try:
                elapsed, cpu, head = run(workdir)
            finally:
                shutil.rmtree(workdir)
            times[name].append(elapsed)
            cpus[name].append(cpu)
            heads.add(head)
    assert len(heads) == 1, f"the writers disagree on the head commit: {sorted(heads)}"

    baseline = statistics.median(times["git fast-import"])
    cpu_baseline = statistics.median(cpus["git fast-import"])
    print(f"{args.commits:,} one-file commits over {args.files:,} files, median of {args.rounds}")
    print(f"head commit (identical for all): {heads.pop()}")
    print(f"  {'':<24} {'wall':>8} {'commits/s':>10} {'ratio':>6}   {'cpu':>7} {'ratio':>6}")
    for name, values in times.items():
        median = statistics.median(values)
        cpu = statistics.median(cpus[name])
        print(
            f"  {name:<24} {median:6.2f} s {args.commits / median:10,.0f} {median / baseline:6.2f}"
            f"   {cpu:5.2f} s {cpu / cpu_baseline:6.2f}"
        )
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak RSS: this process (records + writer) {own:.0f} MiB; git children {children:.0f} MiB")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
