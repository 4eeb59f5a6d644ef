"""Peak anonymous memory of a process tree: memsync and the git processes it runs.

What the benchmarks report as memory. Not VmHWM or ru_maxrss: those count resident file pages too
(the mapped ``.idx`` and ``.pack`` files of a mirror, shared libraries), which the kernel reclaims
when it needs the room, and ru_maxrss of a child carries its parent's pages over a fork. Anonymous
memory (heap, stacks, git's object tables and delta caches) is what a machine must really provide.

:class:`AnonSampler` is a thread of the *measuring* process (never the measured one) that every
``interval`` seconds (20 ms) lists the root process and all its descendants (``/proc/*/stat``, by
parent pid: this kernel has no ``/proc/PID/task/TID/children``), sums their ``RssAnon``
(``/proc/PID/status``; ``Pss_Anon`` of ``smaps_rollup`` with ``source="pss"``) and keeps the
largest sum, with the share of each process kind at that moment and each kind's own peak. Kinds are
``memsync`` for the root (the Python process) and git's subcommand for a git process
(``fast-import``, ``repack``, ``pack-objects``, ``index-pack``...). A child that has forked but not
yet exec'd (its command line still its parent's) is skipped: it shares its parent's pages.

A process that lives less than one interval can be missed; memsync's short git commands
(``update-ref``, ``rev-parse``) are small, and fast-import and repack live far longer.

    python benchmarks/anonmem.py [--interval 0.02] [--pss] -- COMMAND [ARG...]

runs a command and prints its peak the same way.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

ROOT_KIND = "memsync"
LABEL = "peak anon MiB (memsync + git)"


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def descendants(root: int) -> list[int]:
    """``root``'s living descendants (children first), found by parent pid in ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            pid = int(entry)
            parent = _parent(pid)
            if parent is not None:
                children.setdefault(parent, []).append(pid)
    found: list[int] = []
    queue = list(children.get(root, []))
    while queue:
        pid = queue.pop(0)
        found.append(pid)
        queue.extend(children.get(pid, []))
    return found


def _cmdline(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part] or None


def kind_of(argv: list[str]) -> str:
    """``fast-import`` for ``git -c x=y --git-dir=D fast-import ...``; the program's name otherwise."""
    program = Path(argv[0]).name
    if program.startswith("git-"):
        return program[4:]
    if program != "git":
        return program
    args = iter(argv[1:])
    for arg in args:
        if arg in ("-c", "-C"):
            next(args, None)
        elif not arg.startswith("-"):
            return arg
    return "git"


def anon_kib(pid: int, source: str = "rss") -> int | None:
    """``RssAnon`` (``source="rss"``) or ``Pss_Anon`` (``"pss"``) of one process, KiB; None if gone."""
    path, key = (
        (f"/proc/{pid}/status", "RssAnon:") if source == "rss" else (f"/proc/{pid}/smaps_rollup", "Pss_Anon:")
    )
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return 0  # a kernel thread or a zombie: no memory of its own


def tree_kib(root: int, source: str = "rss", root_kind: str = ROOT_KIND) -> dict[str, int]:
    """One reading of ``root``'s tree: anonymous KiB by process kind (``root_kind`` for the root)."""
    by_kind: dict[str, int] = {}
    root_argv = _cmdline(root)
    own = anon_kib(root, source)
    if own is None:
        return by_kind
    by_kind[root_kind] = own
    argvs = {root: root_argv}
    for pid in descendants(root):
        argv = _cmdline(pid)
        parent = _parent(pid)
        if argv is None or parent is None:
            continue
        argvs[pid] = argv
        if argv == argvs.get(parent):
            continue  # forked, not yet exec'd: its pages are its parent's
        kib = anon_kib(pid, source)
        if kib is None:
            continue
        kind = kind_of(argv)
        by_kind[kind] = by_kind.get(kind, 0) + kib
    return by_kind


def tree_total_kib(root: int, source: str = "rss") -> int:
    """One reading of the anonymous KiB of ``root`` and all its descendants."""
    return sum(tree_kib(root, source).values())


@dataclass
class AnonPeak:
    """The largest sum seen, its split by kind at that moment, and each kind's own largest sum."""

    peak_kib: int = 0
    at_peak: dict[str, int] = field(default_factory=dict)
    kind_peaks: dict[str, int] = field(default_factory=dict)
    git_peak_kib: int = 0  # the largest sum of the descendants (the git processes) alone
    samples: int = 0
    root_kind: str = ROOT_KIND

    def add(self, by_kind: dict[str, int]) -> None:
        if not by_kind:
            return
        self.samples += 1
        total = sum(by_kind.values())
        if total > self.peak_kib:
            self.peak_kib, self.at_peak = total, dict(by_kind)
        for kind, kib in by_kind.items():
            self.kind_peaks[kind] = max(self.kind_peaks.get(kind, 0), kib)
        self.git_peak_kib = max(self.git_peak_kib, total - by_kind.get(self.root_kind, 0))

    @property
    def mib(self) -> float:
        return self.peak_kib / 1024

    @property
    def memsync_mib(self) -> float:
        """The root process's own peak."""
        return self.kind_peaks.get(self.root_kind, 0) / 1024

    @property
    def git_mib(self) -> float:
        """The peak of the git processes together."""
        return self.git_peak_kib / 1024

    def split(self) -> list[tuple[str, float]]:
        """``(kind, MiB)`` at the peak, the root first."""
        return [(kind, kib / 1024) for kind, kib in _ordered(self.at_peak.items(), self.root_kind)]

    def as_dict(self) -> dict[str, object]:
        return {
            "peak_anon_mib": round(self.mib, 1),
            f"{self.root_kind}_peak_mib": round(self.memsync_mib, 1),
            "git_peak_mib": round(self.git_mib, 1),
            "at_peak_mib": {kind: round(mib, 1) for kind, mib in self.split()},
            "kind_peaks_mib": {
                k: round(v / 1024, 1) for k, v in _ordered(self.kind_peaks.items(), self.root_kind)
            },
            "samples": self.samples,
        }

    def summary(self) -> str:
        """``123.4 MiB (memsync 40.1 + fast-import 12.0 at the peak; own peaks: ...)``."""
        at = " + ".join(f"{k} {kib / 1024:.1f}" for k, kib in _ordered(self.at_peak.items(), self.root_kind))
        own = ", ".join(
            f"{k} {kib / 1024:.1f}" for k, kib in _ordered(self.kind_peaks.items(), self.root_kind)
        )
        return f"{self.mib:.1f} MiB ({at} at the peak; each kind's own peak: {own})"


def _ordered(items: Iterable[tuple[str, int]], root_kind: str) -> list[tuple[str, int]]:
    return sorted(items, key=lambda item: (item[0] != root_kind, item[0]))


class AnonSampler:
    """Samples the tree under ``pid`` from a thread of this process until :meth:`stop`."""

    def __init__(
        self, pid: int, *, interval: float = 0.02, source: str = "rss", root_kind: str = ROOT_KIND
    ) -> None:
        self.pid = pid
        self.interval = interval
        self.source = source
        self.root_kind = root_kind
        self.peak = AnonPeak(root_kind=root_kind)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"anonmem-{pid}", daemon=True)

    def start(self) -> AnonSampler:
        self._thread.start()
        return self

    def stop(self) -> AnonPeak:
        self._stop.set()
        self._thread.join()
        return self.peak

    def _run(self) -> None:
        while True:
            self.peak.add(tree_kib(self.pid, self.source, self.root_kind))
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> AnonSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_sampled(
    args: list[str],
    *,
    interval: float = 0.02,
    source: str = "rss",
    root_kind: str = ROOT_KIND,
    **popen: object,
) -> tuple[subprocess.CompletedProcess[bytes], AnonPeak, float]:
    """Run ``args`` to its end with its tree sampled; the result, the peak, wall seconds. Output is
    captured when ``popen`` asks for pipes, as with :func:`subprocess.run`."""
    started = time.perf_counter()
    child = subprocess.Popen(args, **popen)  # type: ignore[call-overload]
    sampler = AnonSampler(child.pid, interval=interval, source=source, root_kind=root_kind).start()
    try:
        out, err = child.communicate()
    finally:
        peak = sampler.stop()
    wall = time.perf_counter() - started
    return subprocess.CompletedProcess(args, child.returncode, out, err), peak, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument("--pss", action="store_true", help="Pss_Anon of smaps_rollup instead of RssAnon")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command")
    result, peak, wall = run_sampled(command, interval=args.interval, source="pss" if args.pss else "rss")
    print(f"{LABEL}: {peak.summary()}; {wall:.2f} s, {peak.samples} samples", file=sys.stderr)
    return result.returncode


if __name__ == "__main__":
    raise SystemExit(main())
