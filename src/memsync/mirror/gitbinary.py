"""The ``git`` binary: a run-time dependency for what pygit2 does not do (fast-import, pack-objects, gc),
checked once per process (docs/design.md §3)."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from memsync.errors import EnvironmentProblem, MirrorError

# Variables that would point git at another repository, index or object store than the mirror's.
_LOCATION_VARIABLES = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_QUARANTINE_PATH",
)


def git_environment() -> dict[str, str]:
    """The environment for a git subprocess working on a mirror: no inherited repository location."""
    env = {k: v for k, v in os.environ.items() if k not in _LOCATION_VARIABLES}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["LC_ALL"] = "C"
    # glibc gives the heap's top back to the kernel whenever 128 KiB of it is free, and fast-import
    # frees and reallocates such a block per object: a batch of 1,000 commits then spends two thirds
    # of its time in brk and zeroed pages (benchmarks/git_write_bench.py). Other C libraries ignore it.
    env.setdefault("MALLOC_TRIM_THRESHOLD_", str(1 << 20))
    return env


@functools.cache
def require_git() -> None:
    """Raise :class:`EnvironmentProblem` unless git 2.30 or newer is installed."""
    executable = shutil.which("git")
    needs = "memsync needs git 2.30 or newer"
    if executable is None:
        raise EnvironmentProblem(
            f"the git binary was not found on PATH; {needs} (install it, e.g. apt-get install git)"
        )
    try:
        output = subprocess.run(
            [executable, "--version"], capture_output=True, text=True, check=True, env=git_environment()
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise EnvironmentProblem(
            f"{executable} --version failed ({exc}); memsync needs a working git"
        ) from None
    if (match := re.search(r"git version (\d+)\.(\d+)", output)) is None:
        raise EnvironmentProblem(f"cannot read the version of {executable} from {output.strip()!r}")
    if (int(match[1]), int(match[2])) < (2, 30):
        raise EnvironmentProblem(f"{executable} is git {match[1]}.{match[2]}; {needs}: upgrade git")


# memsync's own git commands in a mirror must not run the user's global hooks or fsmonitor: update-ref
# would run a reference-transaction hook, gc the fsmonitor command.
NO_HOOKS = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")


def run_git(repo: Path, args: Sequence[str], *, action: str, stdin: str | None = None) -> str:
    """``git -C repo args``'s stdout (non-UTF-8 bytes surrogate-escaped); :class:`MirrorError`
    naming ``action`` and git's last words if it fails."""
    require_git()
    result = subprocess.run(
        ["git", *NO_HOOKS, "-C", str(repo), *args],
        capture_output=True,
        input=stdin,
        text=True,
        errors="surrogateescape",
        env=git_environment(),
    )
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise MirrorError(f"{action} failed: {' / '.join(detail[-3:]) or f'git exited {result.returncode}'}")
    return result.stdout
