"""Shared machinery of the reliability suite: run memsync as a user does, and judge what it left behind.

Everything here is command-agnostic on purpose. ``pull`` is the command that exists today; push, the
daemon and backups slot in by running ``MemsyncCli.run("push", ...)`` (or ``start`` for a
long-running daemon), crashing through the same seeded crash points (:data:`CRASH_ENV`), and judging
mirrors with the same :class:`GitOracle` and tree snapshots. ``benchmarks/soak.py`` imports this
module too, so the soak and CI run exactly the same checks at different budgets.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memsync.crashpoints import ENV as CRASH_ENV

TOKEN_ENV = "MEMSYNC_RELIABILITY_TOKEN"
BATCH_ENV = "MEMSYNC_IMPORT_BATCH"
MEMSTORE_REF = "refs/remotes/memstore/main"
# A memsync run in these tests handles at most a few hundred versions on loopback; anything slower
# than this is a hang, and the run is killed and reported rather than waited for.
RUN_TIMEOUT_S = 120.0
# memsync processes started by this process (the soak reports it).
runs_started = 0

# Runs `memsync` with every logger at DEBUG on stderr and no filter: the secrets tests read what a user
# who turned logging all the way up would see. Only httpcore's wire trace stays off, as memsync's own
# logging configuration (memsync.daemon.configure_logging) keeps it off at every level: it prints each
# response's headers verbatim, whatever a server puts in them.
_DEBUG_MAIN = (
    "import logging, sys\n"
    "logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,"
    " format='%(levelname)s %(name)s: %(message)s')\n"
    "logging.getLogger('httpcore').setLevel(logging.INFO)\n"
    "from memsync.cli import main\n"
    "main(sys.argv[1:])\n"
)


def write_config(
    directory: Path,
    *,
    dialect: str,
    base_url: str,
    stores: Sequence[str] = ("*",),
    root: str = "mirrors",
    extra: str = "",
    name: str = "memsync.toml",
) -> Path:
    """A config file in ``directory`` whose token comes from :data:`TOKEN_ENV` (never the file)."""
    include = ", ".join(json.dumps(s) for s in stores)
    config = directory / name
    config.write_text(
        f'[api]\ndialect = "{dialect}"\nbase_url = "{base_url}"\ntoken_env = "{TOKEN_ENV}"\n'
        f'[mirror]\nroot = "{root}"\n[stores]\ninclude = [{include}]\n{extra}',
        encoding="utf-8",
    )
    return config


@dataclass(frozen=True)
class Finished:
    """One finished memsync process."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    elapsed: float

    @property
    def killed(self) -> bool:
        """Whether it died of SIGKILL: what ``MEMSYNC_CRASH_AT`` does."""
        return self.returncode == -signal.SIGKILL

    def json(self) -> dict[str, Any]:
        try:
            data = json.loads(self.stdout)
        except ValueError as exc:
            raise AssertionError(f"memsync {' '.join(self.args)} printed no JSON: {self.describe()}") from exc
        assert isinstance(data, dict)
        return data

    def store(self, store_id: str) -> dict[str, Any]:
        """The ``--json`` entry of one store."""
        entries = [entry for entry in self.json()["stores"] if entry["id"] == store_id]
        assert len(entries) == 1, self.describe()
        entry: dict[str, Any] = entries[0]
        return entry

    def describe(self) -> str:
        return (
            f"memsync {' '.join(self.args)} exited {self.returncode} after {self.elapsed:.1f}s\n"
            f"--- stdout\n{self.stdout[-4000:]}\n--- stderr\n{self.stderr[-4000:]}"
        )


@dataclass
class MemsyncCli:
    """``memsync`` as a user runs it: a subprocess with a config file and the token in the environment."""

    config: Path
    token: str
    env: Mapping[str, str] = field(default_factory=dict)
    debug_logging: bool = False

    def command(self, *args: str) -> list[str]:
        if self.debug_logging:
            return [sys.executable, "-c", _DEBUG_MAIN, "--config", str(self.config), *args]
        return [sys.executable, "-m", "memsync", "--config", str(self.config), *args]

    def environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
        env.update(self.env)
        env[TOKEN_ENV] = self.token
        env.update(extra or {})
        return env

    def start(self, *args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
        global runs_started
        runs_started += 1
        return subprocess.Popen(
            self.command(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.environment(env),
            cwd=self.config.parent,
        )

    def run(
        self, *args: str, env: Mapping[str, str] | None = None, timeout: float = RUN_TIMEOUT_S
    ) -> Finished:
        started = time.monotonic()
        process = self.start(*args, env=env)
        return finish(process, args, started, timeout)


def finish(
    process: subprocess.Popen[str], args: Sequence[str], started: float, timeout: float = RUN_TIMEOUT_S
) -> Finished:
    """Wait for ``process`` (killing it after ``timeout``: a hang is a failure, reported with output)."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        raise AssertionError(
            f"memsync {' '.join(args)} did not end within {timeout}s\n{stdout[-2000:]}\n{stderr[-2000:]}"
        ) from None
    except BaseException:
        # pytest-timeout or ^C interrupts the wait: the child must not outlive the test.
        process.kill()
        process.wait()
        raise
    return Finished(tuple(args), process.returncode, stdout, stderr, time.monotonic() - started)


def wait_until(condition: Callable[[], bool], *, timeout: float, what: str, interval: float = 0.01) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# --- the git oracle ---------------------------------------------------------------------------------


class GitOracle:
    """The real git binary's view of a mirror: the judge of every reliability test."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo

    def git(self, *args: str, input: bytes | None = None) -> bytes:
        done = subprocess.run(
            ["git", "-C", str(self.repo), *args], input=input, capture_output=True, check=False
        )
        if done.returncode != 0:
            raise AssertionError(f"git {' '.join(args)} failed in {self.repo}: {done.stderr.decode()}")
        return done.stdout

    def text(self, *args: str) -> str:
        return self.git(*args).decode("utf-8")

    def ref(self, name: str) -> str | None:
        done = subprocess.run(
            ["git", "-C", str(self.repo), "rev-parse", "--verify", "--quiet", name],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout.strip() or None

    def commits(self, ref: str = MEMSTORE_REF) -> list[str]:
        """Commit ids of ``ref``, oldest first."""
        if self.ref(ref) is None:
            return []
        return self.text("rev-list", "--reverse", ref).split()

    def fsck(self) -> None:
        """``git fsck --strict`` finds nothing (dangling objects from a killed batch are allowed)."""
        done = subprocess.run(
            ["git", "-C", str(self.repo), "fsck", "--strict", "--no-dangling", "--no-progress"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), (
            f"git fsck --strict in {self.repo}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        )

    def all_objects(self) -> bytes:
        """Every object in the repository, headers and contents (packs decompressed by git)."""
        return self.git("cat-file", "--batch-all-objects", "--batch", "--unordered")

    def object_summary(self) -> list[str]:
        return self.text("cat-file", "--batch-all-objects", "--batch-check").splitlines()

    def tree_paths(self, rev: str = MEMSTORE_REF) -> list[bytes]:
        """Every file path in ``rev``'s tree, as git stores it (raw bytes)."""
        if self.ref(rev) is None:
            return []
        return [p for p in self.git("ls-tree", "-r", "-z", "--name-only", rev).split(b"\0") if p]

    def all_tree_paths(self, *refs: str) -> set[bytes]:
        """File paths of every commit reachable from ``refs`` (default: the imported history and main)."""
        wanted = [ref for ref in refs or (MEMSTORE_REF, "refs/heads/main") if self.ref(ref) is not None]
        paths: set[bytes] = set()
        for commit in self.text("rev-list", *wanted).split() if wanted else []:
            paths.update(self.tree_paths(commit))
        return paths

    def lock_files(self) -> list[Path]:
        """``*.lock`` files in the git directory: a killed git or libgit2 writer would leave them."""
        return sorted((self.repo / ".git").rglob("*.lock"))

    def worktree(self) -> dict[str, bytes]:
        """The checkout: every file outside ``.git``, by ``/``-separated relative path."""
        files: dict[str, bytes] = {}
        for path in sorted(self.repo.rglob("*")):
            relative = path.relative_to(self.repo)
            if relative.parts[0] == ".git" or not path.is_file() or path.is_symlink():
                continue
            files[relative.as_posix()] = path.read_bytes()
        return files


# --- snapshots of whole trees ------------------------------------------------------------------------


def snapshot(root: Path, *, exclude: Iterable[Path] = ()) -> dict[str, str]:
    """``{relative path: digest}`` of everything under ``root`` (files by content, links by target).

    Directories count too, so a new empty directory outside a repository is seen. Paths in
    ``exclude`` (and everything below them) are left out.
    """
    skipped = [p.resolve() for p in exclude]
    found: dict[str, str] = {}
    for current, dirs, files in os.walk(root, followlinks=False):
        here = Path(current)
        if any(here.resolve() == s or s in here.resolve().parents for s in skipped):
            dirs[:] = []
            continue
        for name in dirs + files:
            path = here / name
            relative = path.relative_to(root).as_posix()
            if any(path.resolve() == s for s in skipped):
                continue
            if path.is_symlink():
                found[relative] = f"link:{os.readlink(path)}"
            elif path.is_dir():
                found[relative] = "dir"
            else:
                found[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def changed_entries(before: Mapping[str, str], after: Mapping[str, str]) -> dict[str, str]:
    """What differs between two snapshots: ``{path: "added"|"removed"|"changed"}``."""
    changes: dict[str, str] = {}
    for path in before.keys() | after.keys():
        if path not in after:
            changes[path] = "removed"
        elif path not in before:
            changes[path] = "added"
        elif before[path] != after[path]:
            changes[path] = "changed"
    return changes


def git_dir_own_files(repo: Path) -> dict[str, str]:
    """Digests of the files git itself acts on: hooks, config, info/, HEAD, description."""
    git_dir = repo / ".git"
    own: dict[str, str] = {}
    for name in ("config", "HEAD", "description"):
        path = git_dir / name
        data = path.read_bytes() if path.exists() else b"absent"
        if name == "config":
            # memsync.apibase is where the mirror's store was last listed: a server started again on
            # another port moves it, and memsync records that (the mirror's origin) by design.
            data = re.sub(rb"(?m)^\s*apibase = .*\n", b"", data)
        own[name] = hashlib.sha256(data).hexdigest()
    for folder in ("hooks", "info"):
        for path in sorted((git_dir / folder).rglob("*")):
            if path.is_file():
                own[path.relative_to(git_dir).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return own


def files_containing(root: Path, needle: bytes) -> list[Path]:
    """Every file under ``root`` whose bytes contain ``needle`` (git's compressed packs are read by
    :meth:`GitOracle.all_objects` instead)."""
    hits = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
            hits.append(path)
    return hits
