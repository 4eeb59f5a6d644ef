"""The daemon and people's git habits: staged edits, editors' temporaries, their own ignore rules,
a rebase left half done, ``main`` moved back. Each is an ordinary cycle, never a failed one."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memsync.api import Client, Store
from memsync.daemon import read_state
from memsync.daemon._watcher import CheckoutWatcher
from memsync.errors import EXIT_ATTENTION, EXIT_BLOCKED, EXIT_OK
from tests.daemon.test_cli import DaemonProcess, run, write_config
from tests.daemon.test_watcher import MAX_WAIT, QUIET, Recorder
from tests.support.server import ServerProcess
from tests.support.waiting import wait_for


def git(repo: Path, *args: str, **env: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env={**os.environ, **env}
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


def contents(client: Client, store: Store) -> dict[str, str]:
    found = {}
    for memory in client.list_memories(store.id):
        content = client.get_memory(store.id, memory.id).content
        assert content is not None
        found[memory.path] = content
    return found


@pytest.fixture
def store(client: Client) -> Store:
    made = client.create_store(f"habits-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()))
    for path, content in {"notes/a.md": "one\n", "b.md": "bee\n", "c.md": "sea\n"}.items():
        client.create_memory(made.id, path, content)
    return made


def once(config: Path, server: ServerProcess) -> tuple[int, dict[str, object]]:
    result = run(config, "--once", "--json", token=server.token)
    assert result.stdout, result.stderr
    (entry,) = json.loads(result.stdout)["stores"]
    assert isinstance(entry, dict)
    return result.returncode, entry


@pytest.mark.e2e
def test_once_takes_staged_edits_temporaries_and_ignore_rules_in_its_stride(
    tmp_path: Path, server: ServerProcess, client: Client, store: Store
) -> None:
    config = write_config(tmp_path, server, store)
    assert once(config, server)[0] == EXIT_OK
    checkout = tmp_path / "mirrors" / store.id
    (checkout / "notes" / "a.md").write_text("one\nstaged\n")
    git(checkout, "add", "notes/a.md")
    git(checkout, "mv", "b.md", "notes/b.md")
    git(checkout, "rm", "-q", "c.md")
    for temporary in ("notes/a.md___jb_tmp___", "notes/a.md___jb_old___", ".goutputstream-Q1W2E3"):
        (checkout / temporary).write_text("half a save\n")
    (checkout / "tmpab_cd123").write_text("mkstemp\n")
    (checkout / ".gitignore").write_text("*.draft\n")
    (checkout / "idea.draft").write_text("not yet\n")

    code, entry = once(config, server)

    assert code == EXIT_OK, entry
    assert entry["ok"] and entry["error"] is None and entry["rejected"] == []
    assert contents(client, store) == {"notes/a.md": "one\nstaged\n", "notes/b.md": "bee\n"}
    state = read_state(checkout)
    assert state is not None and state.last_cycle is not None
    assert state.last_cycle.result == "success" and state.consecutive_failures == 0
    assert git(checkout, "status", "--porcelain") == ""
    # And again: nothing left to do, still no failure.
    code, entry = once(config, server)
    assert code == EXIT_OK and entry["pushed"] == []


@pytest.mark.e2e
def test_once_mid_rebase_waits_for_the_user_without_failing(
    tmp_path: Path, server: ServerProcess, client: Client, store: Store
) -> None:
    config = write_config(tmp_path, server, store)
    assert once(config, server)[0] == EXIT_OK
    checkout = tmp_path / "mirrors" / store.id
    git(checkout, "rebase", "-i", "HEAD~1", GIT_SEQUENCE_EDITOR="sed -i 1s/^pick/edit/")

    code, entry = once(config, server)

    assert code == EXIT_BLOCKED, entry
    assert entry["ok"] and entry["error"] is None
    blocked = entry["blocked"]
    assert isinstance(blocked, str) and "`git rebase --abort`" in blocked
    state = read_state(checkout)
    assert state is not None and state.last_cycle is not None
    assert state.last_cycle.result != "error" and state.consecutive_failures == 0
    git(checkout, "rebase", "--abort")
    assert once(config, server)[0] == EXIT_OK


@pytest.mark.e2e
def test_once_after_main_moved_back_withholds_and_does_not_fail(
    tmp_path: Path, server: ServerProcess, client: Client, store: Store
) -> None:
    config = write_config(tmp_path, server, store)
    assert once(config, server)[0] == EXIT_OK
    checkout = tmp_path / "mirrors" / store.id
    git(checkout, "reset", "-q", "--hard", "HEAD~1")  # undoes the create of c.md

    code, entry = once(config, server)

    assert code == EXIT_ATTENTION, entry
    withheld = entry["withheld"]
    assert entry["ok"] and isinstance(withheld, list) and [w["path"] for w in withheld] == ["c.md"]
    assert "c.md" in contents(client, store)
    state = read_state(checkout)
    assert state is not None and [w["path"] for w in state.withheld] == ["c.md"]
    assert state.consecutive_failures == 0


# --- the watcher: the same ignore list as the push's scan --------------------------------------------


@pytest.fixture
def watched(
    mirrored: Callable[..., tuple[Store, Path]],
) -> Iterator[tuple[Path, Recorder]]:
    store, checkout = mirrored()
    recorder = Recorder(checkout)
    watcher = CheckoutWatcher(
        recorder.on_change, lambda s: s in recorder.busy, quiet=QUIET, max_wait=MAX_WAIT
    )
    watcher.start()
    assert watcher.watch(store.id, checkout)
    yield checkout, recorder
    watcher.stop()


def test_the_watcher_ignores_what_the_push_ignores(watched: tuple[Path, Recorder]) -> None:
    checkout, recorder = watched
    for temporary in (
        "notes/a.md___jb_tmp___",
        "notes/a.md___jb_old___",
        "notes/.goutputstream-Q1W2E3",
        "tmpab_cd123",
        ".tmpAb12Cd",
        "sedQ1w2E3",
    ):
        (checkout / temporary).write_text("half a save\n")
    (checkout / ".gitignore").write_text("*.draft\n")
    (checkout / "notes" / ".gitignore").write_text("private/\n")
    (checkout / "idea.draft").write_text("not yet\n")
    (checkout / "notes" / "private").mkdir()
    (checkout / "notes" / "private" / "p.md").write_text("mine\n")
    assert recorder.until_barrier() == []
    # A file no rule covers is still an edit.
    (checkout / "notes" / "tmp.md").write_text("a memory called tmp\n")
    assert recorder.next_change() == ["notes/tmp.md"]


@pytest.fixture
def daemon_processes() -> Iterator[list[DaemonProcess]]:
    started: list[DaemonProcess] = []
    yield started
    for daemon in started:
        if not daemon.exited():
            daemon.process.kill()
            daemon.process.wait()
        if daemon.pump is not None:
            daemon.pump.join(timeout=10)
        if daemon.process.stderr is not None:
            daemon.process.stderr.close()


@pytest.mark.e2e
def test_a_running_daemon_pushes_a_staged_edit_without_a_failed_cycle(
    tmp_path: Path,
    server: ServerProcess,
    client: Client,
    store: Store,
    daemon_processes: list[DaemonProcess],
) -> None:
    config = write_config(tmp_path, server, store)
    # A long interval: after the start cycle only the watcher starts one.
    config.write_text(config.read_text().replace('interval = "500ms"', 'interval = "1h"'))
    daemon = DaemonProcess.start(config, server.token)
    daemon_processes.append(daemon)
    checkout = tmp_path / "mirrors" / store.id
    wait_for(lambda: getattr(read_state(checkout), "last_success", None), what="the start cycle")
    (checkout / "b.md___jb_old___").write_text("the old b\n")  # a JetBrains save, mid-way
    (checkout / "b.md").write_text("bee, staged\n")
    git(checkout, "add", "b.md")

    wait_for(lambda: contents(client, store).get("b.md") == "bee, staged\n", what="the staged edit")

    def settled() -> bool:
        state = read_state(checkout)
        last = state.last_cycle if state is not None else None
        return state is not None and state.status == "idle" and last is not None and last.pushed == 1

    wait_for(settled, what="the cycle that pushed it to end")
    assert daemon.stop() == 0, daemon.log()
    state = read_state(checkout)
    assert state is not None and state.consecutive_failures == 0
    assert "cycle failed" not in daemon.log(), daemon.log()
    assert "b.md___jb_old___" not in contents(client, store)
    assert git(checkout, "status", "--porcelain") == ""
