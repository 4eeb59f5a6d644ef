"""A store on the real reference server, its mirror, and helpers to edit both sides and sync."""

from __future__ import annotations

import hashlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from memsync.api import Client, Store, open_client
from memsync.rules import Dialect
from memsync.sync.cycle import CycleReport, run_cycle
from tests.support.server import ServerProcess


def git(repo: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {done.stderr}")
    return done.stdout


@dataclass
class Side:
    """One store and its mirror: the remote through the API, the local side through files."""

    client: Client
    store: Store
    root: Path

    @property
    def repo(self) -> Path:
        return self.root / self.store.id

    @property
    def dialect(self) -> Dialect:
        return self.client.dialect

    def sync(self, *, force: bool = False, client: Client | None = None) -> CycleReport:
        fresh = self.client.get_store(self.store.id)
        return run_cycle(client or self.client, fresh, self.root, force=force)

    def synced(self, *, force: bool = False) -> CycleReport:
        """A sync that must succeed."""
        report = self.sync(force=force)
        assert report.ok, report.error
        return report

    # --- the remote ---------------------------------------------------------------------------

    def remote(self) -> dict[str, str]:
        """``{path: content}`` of the store now."""
        found = {}
        for memory in self.client.list_memories(self.store.id):
            content = self.client.get_memory(self.store.id, memory.id).content
            assert content is not None
            found[memory.path] = content
        return found

    def put(self, path: str, content: str) -> None:
        """A remote write by someone else: create, or update whatever is there."""
        memory = self.client.find_memory(self.store.id, path)
        if memory is None:
            self.client.create_memory(self.store.id, path, content)
        else:
            self.client.update_memory(
                self.store.id, memory.id, content, expected_sha256=memory.content_sha256
            )

    def drop(self, path: str) -> None:
        memory = self.client.find_memory(self.store.id, path)
        assert memory is not None
        self.client.delete_memory(self.store.id, memory.id, expected_sha256=memory.content_sha256)

    def memory_id(self, path: str) -> str:
        memory = self.client.find_memory(self.store.id, path)
        assert memory is not None
        return memory.id

    def version_count(self) -> int:
        return sum(1 for _ in self.client.iter_versions(self.store.id))

    # --- the local side -----------------------------------------------------------------------

    def write(self, path: str, data: str | bytes) -> Path:
        target = self.repo / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else data)
        return target

    def read(self, path: str) -> str:
        return (self.repo / path).read_text(encoding="utf-8")

    def local(self) -> dict[str, bytes]:
        """Every file of the working tree (``.git`` left out), links not followed."""
        found: dict[str, bytes] = {}
        for folder, dirs, files in os.walk(self.repo):
            if Path(folder) == self.repo:
                dirs[:] = [d for d in dirs if d != ".git"]
            for name in files:
                full = Path(folder) / name
                rel = full.relative_to(self.repo).as_posix()
                found[rel] = b"<link>" if full.is_symlink() else full.read_bytes()
        return found

    def status(self) -> str:
        return git(self.repo, "status", "--porcelain", "--untracked-files=all")

    def ref(self, name: str) -> str | None:
        done = subprocess.run(
            ["git", "-C", str(self.repo), "rev-parse", "--verify", "-q", name], capture_output=True, text=True
        )
        return done.stdout.strip() or None

    def assert_in_step(self) -> None:
        """Checkout, main, memstore/main and the base agree; git fsck is clean."""
        tip = self.ref("refs/remotes/memstore/main")
        assert self.ref("refs/heads/main") == tip
        assert self.ref("refs/memsync/base") == tip
        assert self.status() == ""
        git(self.repo, "fsck", "--strict")


def sha256(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


@pytest.fixture
def make_side(server: ServerProcess, tmp_path: Path) -> Iterator[object]:
    """``make_side(dialect, {path: content})``: a fresh store seeded remotely, pulled into a mirror."""
    clients: list[Client] = []

    def make(dialect: Dialect = Dialect.FORWARD, seed: dict[str, str] | None = None) -> Side:
        client = open_client(dialect, server.base_url, server.token)
        clients.append(client)
        name = f"push-{uuid.uuid4().hex[:8]}"
        store = (
            client.create_store(name, idempotency_key=str(uuid.uuid4()), description="made by tests")
            if dialect is Dialect.FORWARD
            else client.create_store(name, description="made by tests")
        )
        for path, content in (seed or {}).items():
            client.create_memory(store.id, path, content)
        side = Side(client, store, tmp_path / f"mirrors-{len(clients)}")
        side.synced()
        return side

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def forward(make_side: object) -> Side:
    assert callable(make_side)
    side = make_side(Dialect.FORWARD, {"a.md": "one\ntwo\nthree\n", "b.md": "bee\n"})
    assert isinstance(side, Side)
    return side


DIALECTS = [Dialect.FORWARD, Dialect.CLOUD, Dialect.ANTHROPIC]
