"""Creating a local backup repository: whole or not at all, and never over something already there.

A local remote is made at ``.<name>.memsync-tmp-<pid>`` beside its path and renamed into place
(the kill between the two is tests/reliability/test_backup_crashes.py's ``backup.remote_initialised``).
Here, one ``memsync backup`` against the real server with a remote per case: an empty folder
(created in, its mode kept), a folder of someone's files and a file (refused by name, untouched), and
a path beside temporaries of a dead and of a live process (the dead one's removed, the live one's
kept). The real git binary judges what was made.
"""

from __future__ import annotations

import os
import stat
import subprocess
import uuid
from pathlib import Path

import pytest

from memsync.api import open_client
from memsync.rules import Dialect
from tests.backup.helpers import git, memsync, stores_json, write_config
from tests.support.server import ServerProcess

# The test here runs the memsync CLI as a process.
pytestmark = pytest.mark.e2e


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def test_a_local_remote_is_created_whole_and_nothing_at_its_path_is_lost(
    server: ServerProcess, tmp_path: Path
) -> None:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        store = client.create_store(f"local-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()))
        client.create_memory(store.id, "a.md", "alpha\n")
    empty = tmp_path / "empty" / f"{store.id}.git"
    empty.mkdir(parents=True)
    empty.chmod(0o2750)  # a folder prepared for the backup, setgid for a group: kept as it is
    foreign = tmp_path / "foreign" / f"{store.id}.git"
    foreign.mkdir(parents=True)
    (foreign / "notes.txt").write_text("someone's file\n")
    a_file = tmp_path / "file" / f"{store.id}.git"
    a_file.parent.mkdir()
    a_file.write_text("not a folder\n")
    beside = tmp_path / "beside" / f"{store.id}.git"
    beside.parent.mkdir()
    stale = beside.with_name(f".{beside.name}.memsync-tmp-{dead_pid()}")
    (stale / "objects").mkdir(parents=True)
    live = beside.with_name(f".{beside.name}.memsync-tmp-{os.getpid()}")
    live.mkdir()
    remotes = [str(path.parent / "{store_id}.git") for path in (empty, foreign, a_file, beside)]
    config = write_config(tmp_path, server.base_url, include=[store.id], remotes=remotes)

    done = memsync("--config", str(config), "backup", "--json", env={"MS_TOKEN": server.token})

    assert done.returncode == 1, done.stderr
    results = {remote["url"]: remote for remote in stores_json(done)[store.id]["remotes"]}
    for made in (empty, beside):
        assert results[str(made)]["ok"] and results[str(made)]["created"] is True, results[str(made)]
        assert git(made, "rev-parse", "--absolute-git-dir").strip() == str(made)
        assert git(made, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
        assert git(made, "show", "main:a.md") == "alpha\n"
        git(made, "fsck", "--strict")
    assert stat.S_IMODE(empty.stat().st_mode) == 0o2750
    assert not stale.exists(), "a dead process's temporary was not removed"
    assert live.is_dir(), "a live process's temporary was removed"
    for refused, what in ((foreign, "is a folder that holds files"), (a_file, "is not a folder")):
        error = results[str(refused)]["error"]
        assert f"the backup path {refused} {what}" in error and "[[backup.remotes]] url" in error, error
        assert results[str(refused)]["created"] is False and results[str(refused)]["refs"] == []
        assert not list(refused.parent.glob(".*memsync-tmp-*")), "a temporary was left behind"
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    assert (foreign / "notes.txt").read_text() == "someone's file\n"
    assert a_file.read_text() == "not a folder\n"
