"""Backups judged by the real git binary: a remote must hold exactly the mirror's backup refs.

``memsync backup`` pushes ``memstore/main`` to the remote's ``refs/heads/main``, the metadata branch
and every ``refs/memsync/*`` ref under its own name (docs/backup.md). :func:`assert_backup_matches`
reads both sides with ``git for-each-ref`` (the mirror) and ``git ls-remote`` (the remote, as any
client sees it), and checks the remote with ``git fsck --strict`` and for stale ``*.lock`` files.
Crash, fault and secrets tests of backups, and the soak, share these pieces.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.reliability.crashes import CrashCase
from tests.reliability.harness import (
    CRASH_ENV,
    MEMSTORE_REF,
    Finished,
    GitOracle,
    MemsyncCli,
    write_config,
)

METADATA_REF = "refs/heads/memsync/metadata"
RECORDS_PREFIX = "refs/memsync/"


def backup_remotes(*urls: str) -> str:
    """The ``[[backup.remotes]]`` part of a config (for :func:`write_config`'s ``extra``)."""
    return "".join(f"[[backup.remotes]]\nurl = {json.dumps(url)}\n" for url in urls)


def expected_remote_refs(mirror: Path) -> dict[str, str]:
    """``{backup ref: commit}`` the mirror's refs say a backup must hold (git for-each-ref)."""
    listed = GitOracle(mirror).text("for-each-ref", "--format=%(refname) %(objectname)")
    wanted: dict[str, str] = {}
    for line in listed.splitlines():
        name, commit = line.split(" ")
        if name == MEMSTORE_REF:
            wanted["refs/heads/main"] = commit
        elif name == METADATA_REF or name.startswith(RECORDS_PREFIX):
            wanted[name] = commit
    return wanted


def remote_refs(remote: str | Path) -> dict[str, str]:
    """``{ref: commit}`` a client sees in ``remote`` (git ls-remote; HEAD, a symbolic ref, left out)."""
    done = subprocess.run(["git", "ls-remote", str(remote)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"git ls-remote {remote}: {done.stderr}"
    found = {}
    for line in done.stdout.splitlines():
        commit, name = line.split("\t")
        if name != "HEAD":
            found[name] = commit
    return found


def assert_backup_matches(mirror: Path, remote: Path) -> None:
    """The (local, bare) remote holds exactly the mirror's backup refs, is whole, and is not locked."""
    wanted = expected_remote_refs(mirror)
    assert "refs/heads/main" in wanted, f"{mirror} has imported nothing"
    found = remote_refs(remote)
    assert found == wanted, f"{remote}: refs {found}, the mirror says {wanted}"
    GitOracle(remote).fsck()
    stale = sorted(remote.rglob("*.lock"))
    assert stale == [], f"{remote}: stale locks {stale}"
    # A clone of the backup checks out the memories: HEAD names main.
    assert GitOracle(remote).text("symbolic-ref", "HEAD").strip() == "refs/heads/main"


def backup_config(
    directory: Path, base_url: str, store_ids: Sequence[str], *, dialect: str = "forward"
) -> Path:
    """Two remotes per store: a relative path and a ``file://`` URL by name (both created by memsync)."""
    remotes = backup_remotes("backups/{store_id}.git", f"file://{directory / 'second'}/{{name}}.git")
    return write_config(directory, dialect=dialect, base_url=base_url, stores=store_ids, extra=remotes)


def kill_backup_then_finish(
    cli: MemsyncCli,
    crashes: Sequence[CrashCase],
    *,
    full_scan: bool = False,
    batch: int | None = None,
    after_kill: Callable[[CrashCase], None] | None = None,
) -> tuple[list[Finished], Finished]:
    """``memsync backup`` killed once per crash (each must die there), then once to the end (exit 0);
    ``after_kill`` looks at what each kill left before the next run."""
    # One store at a time: "the n-th pass of a crash point" names one place only when stores are not
    # worked on in parallel (with several at once, the n-th pass falls in whichever store gets there).
    args = ["backup", "--json", "--jobs", "1", *(["--full-scan"] if full_scan else [])]
    extra = {} if batch is None else {"MEMSYNC_IMPORT_BATCH": str(batch)}
    killed = []
    for case in crashes:
        run = cli.run(*args, env={CRASH_ENV: str(case), **extra})
        assert run.killed, f"expected a kill at {case}:\n{run.describe()}"
        killed.append(run)
        if after_kill is not None:
            after_kill(case)
    final = cli.run(*args, env=extra)
    assert final.returncode == 0, f"after crashes at {', '.join(map(str, crashes))}:\n{final.describe()}"
    return killed, final


def copy_root(template: Path, directory: Path) -> None:
    """Start from an earlier backup: its mirrors and remotes (paths inside are relative or by name)."""
    for name in ("mirrors", "backups", "second"):
        if (template / name).exists():
            shutil.copytree(template / name, directory / name, symlinks=True)


def remote_temporaries(directory: Path) -> list[Path]:
    """The ``.<name>.memsync-tmp-<pid>`` folders a local remote is made in before its rename, in
    every folder of ``directory`` (the remotes' parents: ``backups``, ``second``)."""
    return sorted(directory.glob("*/.*.memsync-tmp-*"))


def assert_no_half_made_remote(directory: Path) -> None:
    """Every local remote that exists is a whole bare repository with ``HEAD`` -> ``main``: a kill
    while one was created left it at its temporary name, never half made at its own."""
    for remote in sorted(directory.glob("*/*.git")):
        oracle = GitOracle(remote)
        # git -C searches upward: the repository found must be the remote's own.
        assert oracle.text("rev-parse", "--absolute-git-dir").strip() == str(remote.resolve()), remote
        assert oracle.text("rev-parse", "--is-bare-repository").strip() == "true", remote
        assert oracle.text("symbolic-ref", "HEAD").strip() == "refs/heads/main", remote
