"""What memsync writes whole stays whole: ``replace_file`` and a checkout make their files durable
before what depends on them, and on Windows a file an editor holds open is retried, then named.

A power cut cannot be made here; what is checked is that the calls a power cut needs are made, with
strace as the oracle (every fsync memsync asks of the kernel is in its trace), and the retry with a
replace that fails as Windows' does (the one fault no real peer here can produce)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from memsync.api import open_client
from memsync.mirror.gitstore import REPLACE_ATTEMPTS, TEMPORARY_PREFIX, replace_over
from memsync.rules import Dialect
from tests.support.machine import cannot_run_here
from tests.support.server import ServerProcess


def _strace(script: str, tmp_path: Path) -> list[str]:
    if shutil.which("strace") is None:
        cannot_run_here("strace is not installed (apt-get install strace)")
    trace = tmp_path / "trace"
    done = subprocess.run(
        [
            "strace",
            "-f",
            "-qq",
            "-y",
            "-o",
            str(trace),
            "-e",
            "trace=fsync,fdatasync,syncfs,rename,unlink,openat",
            sys.executable,
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    if done.returncode != 0 and "ptrace" in done.stderr:
        cannot_run_here(f"strace cannot trace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    return trace.read_text().splitlines()


@pytest.mark.e2e
def test_replace_file_syncs_the_new_content_before_renaming_and_the_folder_after(tmp_path: Path) -> None:
    script = (
        "from pathlib import Path\nfrom memsync.mirror.gitstore import replace_file\n"
        "replace_file(Path('note.json'), b'{}')\n"
    )
    calls = [re.sub(r"^\d+\s+", "", line) for line in _strace(script, tmp_path)]
    renamed = next(i for i, c in enumerate(calls) if c.startswith("rename(") and '"note.json"' in c)
    assert any(c.startswith("fsync(") for c in calls[:renamed]), "the content is not synced before the rename"
    assert any(c.startswith("fsync(") for c in calls[renamed:]), "the folder is not synced after the rename"
    assert (tmp_path / "note.json").read_bytes() == b"{}"


def test_a_replace_refused_as_on_windows_is_retried_then_named(tmp_path: Path) -> None:
    source, target = tmp_path / "new", tmp_path / "memory.md"
    source.write_text("new\n")
    target.write_text("old\n")
    refusals = iter([PermissionError(13, "Access is denied")] * 2)
    waited: list[float] = []

    def held_twice(a: Path, b: Path) -> None:
        failure = next(refusals, None)
        if failure is not None:
            raise failure
        os.replace(a, b)

    replace_over(source, target, replace=held_twice, sleep=waited.append, retry=True)
    assert target.read_text() == "new\n" and waited == [0.05, 0.1]

    source.write_text("newer\n")

    def held(a: Path, b: Path) -> None:
        raise PermissionError(13, "Access is denied")

    waited.clear()
    with pytest.raises(PermissionError, match="held open by another program") as refused:
        replace_over(source, target, replace=held, sleep=waited.append, retry=True)
    assert str(target) in str(refused.value) and len(waited) == REPLACE_ATTEMPTS - 1
    assert target.read_text() == "new\n" and source.read_text() == "newer\n"  # nothing lost
    # POSIX replaces an open file: one try, the error as it came.
    with pytest.raises(PermissionError, match="Access is denied"):
        replace_over(source, target, replace=held, sleep=waited.append, retry=False)


@pytest.mark.e2e
def test_a_checkout_syncs_what_it_wrote_before_its_intent_goes(
    tmp_path: Path, server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        store = client.create_store(f"durable-{uuid.uuid4().hex[:6]}", idempotency_key=str(uuid.uuid4()))
        client.create_memory(store.id, "notes/a.md", "kept through a power cut\n")
    (tmp_path / "memsync.toml").write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{server.base_url}"\ntoken_env = "MS_TOKEN"\n'
        f'[mirror]\nroot = "mirrors"\n[stores]\ninclude = ["{store.id}"]\n'
    )
    monkeypatch.setenv("MS_TOKEN", server.token)
    script = "from memsync.cli import main\nmain(['--config', 'memsync.toml', 'pull'])\n"
    calls = [re.sub(r"^\d+\s+", "", line) for line in _strace(script, tmp_path)]
    # The intent is a row of the state database: a transaction that sets or clears an intent syncs
    # its write-ahead log (one of caches only does not). One lands before the checkout opens the
    # file (the intent noted), and the next one after it (the intent gone) only once the file was
    # synced.
    commits = [i for i, c in enumerate(calls) if c_is(c, "fdatasync") and "state.sqlite-wal" in c]
    opened = next(i for i, c in enumerate(calls) if c.startswith("openat(") and "notes/a.md" in c)
    assert any(i < opened for i in commits), "no intent synced before the checkout"
    gone = next(i for i in commits if i > opened)
    between = calls[opened:gone]
    assert any(c.startswith(("fsync(", "syncfs(")) and "state.sqlite" not in c for c in between), "\n".join(
        between
    )
    assert (tmp_path / "mirrors" / store.id / "notes" / "a.md").read_text() == "kept through a power cut\n"


def c_is(call: str, name: str) -> bool:
    """Whether a line of the trace is a call of ``name``."""
    return call.startswith(f"{name}(")


@pytest.mark.e2e
def test_a_push_syncs_what_it_wrote_into_the_checkout_before_the_base_moves(
    tmp_path: Path, server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        store = client.create_store(f"durable-{uuid.uuid4().hex[:6]}", idempotency_key=str(uuid.uuid4()))
        client.create_memory(store.id, "notes/a.md", "edited here\n")
        theirs = client.create_memory(store.id, "notes/b.md", "edited there\n")
    (tmp_path / "memsync.toml").write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{server.base_url}"\ntoken_env = "MS_TOKEN"\n'
        f'[mirror]\nroot = "mirrors"\n[stores]\ninclude = ["{store.id}"]\n'
    )
    monkeypatch.setenv("MS_TOKEN", server.token)
    pulled = subprocess.run(
        [sys.executable, "-m", "memsync", "--config", "memsync.toml", "pull"],
        cwd=tmp_path,
        capture_output=True,
    )
    assert pulled.returncode == 0, pulled.stderr
    checkout = tmp_path / "mirrors" / store.id
    (checkout / "notes" / "a.md").write_text("edited here, twice\n")
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        client.update_memory(store.id, theirs.id, "edited there, twice\n", expected_sha256=None)
    # The pull leaves a checkout with a local edit alone: the push writes b.md's new version into it.
    script = "from memsync.cli import main\nmain(['--config', 'memsync.toml', 'push'])\n"
    calls = [re.sub(r"^\d+\s+", "", line) for line in _strace(script, tmp_path)]
    renamed = [i for i, c in enumerate(calls) if c_is(c, "rename") and c.endswith('") = 0')]
    written = next(
        i for i in renamed if TEMPORARY_PREFIX in calls[i] and calls[i].endswith('notes/b.md") = 0')
    )
    moved = next(i for i in renamed if i > written and calls[i].endswith('refs/memsync/base") = 0'))
    synced = [c for c in calls[written:moved] if c_is(c, "fsync") or c_is(c, "syncfs")]
    if not any(c_is(c, "syncfs") for c in synced):  # many files: the whole filesystem at once
        assert any(c.endswith(f"<{checkout}/notes/b.md>) = 0") for c in synced), "\n".join(synced)
        assert any(c.endswith(f"<{checkout}/notes>) = 0") for c in synced), "\n".join(synced)
    assert (checkout / "notes" / "b.md").read_text() == "edited there, twice\n"
