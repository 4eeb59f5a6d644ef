"""``memsync pull`` in a hostile local environment: a git configuration that would rewrite or watch
every file, a user editing files while a pull runs, and two pulls of one store at once.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from memsync.api import Client, Store, open_client
from memsync.rules import Dialect
from tests.reliability.gate import Gate
from tests.reliability.harness import MEMSTORE_REF, GitOracle, MemsyncCli, finish, write_config
from tests.reliability.histories import decoded_worktree
from tests.reliability.hostile_git import hostile_git_environment
from tests.reliability.loopback import Request
from tests.support.server import ServerProcess

# Every test here runs memsync as a process: killed, faulted, or on a full disk.
pytestmark = pytest.mark.e2e

# Contents that any conversion would change: line endings of every kind, an ident keyword, case.
TRICKY = {
    "crlf.md": "windows\r\nline endings\r\n",
    "mixed.md": "unix\nwindows\r\nold mac\rend",
    "ident.md": "$Id$ and $Id: stale $\n",
    "case.md": "lower case text that a filter would shout\n",
    "deep/unicode.md": "ünïcødé ✓ — tabs\tand trailing spaces  \n",
}


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Client]:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as c:
        yield c


def _store(client: Client, files: dict[str, str]) -> tuple[Store, dict[str, str]]:
    store = client.create_store(f"env-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()))
    ids = {path: client.create_memory(store.id, path, content).id for path, content in files.items()}
    return store, ids


def test_a_hostile_git_configuration_is_never_obeyed(
    client: Client, server: ServerProcess, tmp_path: Path
) -> None:
    hostile = hostile_git_environment(tmp_path)
    store, ids = _store(client, TRICKY)
    config = write_config(tmp_path, dialect="forward", base_url=server.base_url, stores=[store.id])
    cli = MemsyncCli(config, server.token, env=hostile.env)
    first = cli.run("pull", "--json")
    assert first.returncode == 0, first.describe()

    # An incremental pull moves the checkout over existing files; a redaction found by --full-scan
    # rewrites the history, which runs the git binary (update-ref, reflog expire, gc).
    expected = dict(TRICKY)
    expected["crlf.md"] = "still\r\nwindows\r\n"
    client.update_memory(store.id, ids["crlf.md"], expected["crlf.md"], expected_sha256=None)
    secret = "a secret the redaction takes back\r\n"
    later = client.update_memory(store.id, ids["case.md"], secret, expected_sha256=None)
    client.update_memory(store.id, ids["case.md"], expected["case.md"] + "v3\n", expected_sha256=None)
    expected["case.md"] += "v3\n"
    assert cli.run("pull", "--json").returncode == 0
    redacted = next(v for v in client.iter_versions(store.id) if v.content_sha256 == later.content_sha256)
    client.redact_version(store.id, redacted.id)
    scan = cli.run("pull", "--full-scan", "--json")
    assert scan.returncode == 0, scan.describe()

    assert hostile.ran() == [], f"hooks, filters or fsmonitor ran: {hostile.ran()}"
    repo = tmp_path / "mirrors" / store.id
    oracle = GitOracle(repo)  # the test's own, clean git configuration
    assert decoded_worktree(repo) == expected
    for path, content in expected.items():
        assert oracle.git("cat-file", "blob", f"{MEMSTORE_REF}:{path}") == content.encode()
    assert secret.encode() not in oracle.all_objects()
    assert oracle.text("status", "--porcelain") == ""
    oracle.fsck()


@dataclass
class Editor:
    """A user saving a file again and again while memsync runs, checking each time that the file
    still holds what they saved last: anything else means memsync wrote over their edit."""

    path: Path
    saves: int = 0
    overwritten: str | None = None

    def save(self) -> None:
        self.saves += 1
        self.path.write_text(f"my edit number {self.saves}\n", encoding="utf-8")

    def keep_saving(self, stop: threading.Event) -> None:
        while not stop.is_set():
            found = self.path.read_text(encoding="utf-8") if self.path.exists() else "(deleted)"
            if found != f"my edit number {self.saves}\n":
                self.overwritten = found
                return
            self.save()
            stop.wait(0.002)  # pacing, so the pull under test keeps a core


def test_files_a_user_edits_during_a_pull_are_never_overwritten(
    client: Client, server: ServerProcess, tmp_path: Path
) -> None:
    store, ids = _store(client, {"a.md": "a1\n", "b.md": "b1\n", "c.md": "c1\n"})
    config = write_config(tmp_path, dialect="forward", base_url=server.base_url, stores=[store.id])
    assert MemsyncCli(config, server.token).run("pull").returncode == 0
    repo = tmp_path / "mirrors" / store.id
    oracle = GitOracle(repo)
    base = oracle.ref("refs/memsync/base")
    # The remote moves on: a and b change, c goes, d arrives (several batches).
    for n in range(12):
        client.update_memory(store.id, ids["a.md"], f"a remote {n}\n", expected_sha256=None)
        client.update_memory(store.id, ids["b.md"], f"b remote {n}\n", expected_sha256=None)
    client.delete_memory(store.id, ids["c.md"], expected_sha256=None)
    client.create_memory(store.id, "d.md", "d remote\n")

    # The pull is held at its first content request; the user edits while it waits and goes on
    # saving a.md until the pull has ended.
    with Gate(server.base_url, lambda r: "/memory_versions/" in r.path) as gate:
        gated = write_config(
            tmp_path, dialect="forward", base_url=gate.base_url, stores=[store.id], name="g.toml"
        )
        started = time.monotonic()
        process = MemsyncCli(gated, server.token).start("pull", "--json", env={"MEMSYNC_IMPORT_BATCH": "5"})
        gate.wait_until_held()
        editor = Editor(repo / "a.md")
        editor.save()
        (repo / "c.md").unlink()  # the user deletes a file the remote deletes too
        (repo / "e.md").write_text("my new file\n", encoding="utf-8")
        stop = threading.Event()
        saving = threading.Thread(target=editor.keep_saving, args=(stop,))
        saving.start()
        gate.open()
        pulled = finish(process, ["pull", "--json"], started)
        stop.set()
        saving.join(timeout=30)

    assert pulled.returncode == 0, pulled.describe()
    entry = pulled.store(store.id)
    assert entry["checkout"] == "local-changes"
    assert {"a.md", "c.md", "e.md"} <= set(entry["local_changes"])
    assert editor.overwritten is None, f"memsync wrote over the user's edit: {editor.overwritten!r}"
    assert editor.saves > 1
    assert (repo / "a.md").read_text() == f"my edit number {editor.saves}\n"
    assert (repo / "e.md").read_text() == "my new file\n" and not (repo / "c.md").exists()
    assert (repo / "b.md").read_text() == "b1\n"  # untouched by the user, held back with the rest
    # The import itself went on: the remote's history is all there, the base did not move.
    assert len(oracle.commits()) == 3 + 24 + 2
    assert oracle.ref("refs/memsync/base") == base
    assert oracle.lock_files() == []
    oracle.fsck()


def _holds_listing(request: Request) -> bool:
    return request.path.endswith("/memory_versions")


def test_two_pulls_of_one_store_at_once_one_waits_with_75(
    client: Client, server: ServerProcess, tmp_path: Path
) -> None:
    store, _ = _store(client, {f"n{i}.md": f"{i}\n" for i in range(5)})
    direct = MemsyncCli(
        write_config(tmp_path, dialect="forward", base_url=server.base_url, stores=[store.id]), server.token
    )
    with Gate(server.base_url, _holds_listing) as gate:
        gated = write_config(
            tmp_path, dialect="forward", base_url=gate.base_url, stores=[store.id], name="g.toml"
        )
        started = time.monotonic()
        first = MemsyncCli(gated, server.token).start("pull", "--json")
        gate.wait_until_held()  # the first pull lists versions while holding the store's lock
        second = direct.run("pull", "--json")
        gate.open()
        done = finish(first, ["pull", "--json"], started)

    assert second.returncode == 75, second.describe()
    assert "another memsync is working on" in second.store(store.id)["error"]
    assert "try again" in second.store(store.id)["error"]
    assert done.returncode == 0, done.describe()
    assert done.store(store.id)["imported"] == 5
    again = direct.run("pull", "--json")
    assert again.returncode == 0 and again.store(store.id)["imported"] == 0
    repo = tmp_path / "mirrors" / store.id
    assert decoded_worktree(repo) == {f"n{i}.md": f"{i}\n" for i in range(5)}
    GitOracle(repo).fsck()


def test_pulls_racing_freely_never_corrupt_a_mirror(
    client: Client, server: ServerProcess, tmp_path: Path
) -> None:
    store, _ = _store(client, {f"r{i}.md": f"{i}\n" for i in range(8)})
    cli = MemsyncCli(
        write_config(tmp_path, dialect="forward", base_url=server.base_url, stores=[store.id]), server.token
    )
    for _ in range(2):
        started = time.monotonic()
        processes = [cli.start("pull", "--json", env={"MEMSYNC_IMPORT_BATCH": "2"}) for _ in range(2)]
        codes = sorted(finish(p, ["pull"], started).returncode for p in processes)
        assert codes in ([0, 0], [0, 75]), codes
    repo = tmp_path / "mirrors" / store.id
    oracle = GitOracle(repo)
    assert len(oracle.commits()) == 8
    assert decoded_worktree(repo) == {f"r{i}.md": f"{i}\n" for i in range(8)}
    assert oracle.lock_files() == []
    oracle.fsck()
