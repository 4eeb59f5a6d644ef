"""Fixtures of the awareness tests: a reference server seeded with default stores, one per pair.

A default (system-managed) store can only be made by a seed file (docs/server.md "Seed files"), so
this package runs its own server (in a thread of the test process, as the session's is) with one
default store for each of ``PAIRS`` (identity, template) pairs; each test takes a pair no other test
uses, and creates and mounts its other stores over HTTP.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from memsync.api import Client, Store, open_client
from memsync.rules import Dialect
from tests.support.server import ServerProcess

PAIRS = 32
TEMPLATE = "tmpl_aw"
DEFAULT_FILES = {"notes/a.md": "a, from the default store\n", "shared.md": "shared, from the default store\n"}


def _seed() -> dict[str, object]:
    stores = []
    for number in range(PAIRS):
        memories = [
            {"path": path, "history": [{"op": "create", "content": content, "at": f"2026-01-02T00:00:0{i}Z"}]}
            for i, (path, content) in enumerate(DEFAULT_FILES.items())
        ]
        stores.append(
            {
                "dialect": "forward",
                "name": f"default of idn_aw{number}",
                "created_at": "2026-01-01T00:00:00Z",
                "system_managed": True,
                "identity_id": f"idn_aw{number}",
                "template_id": TEMPLATE,
                "memories": memories,
            }
        )
    return {"stores": stores}


@pytest.fixture(scope="session")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("awareness-server")
    seed = folder / "seed.json"
    seed.write_text(json.dumps(_seed()))
    with ServerProcess(db=folder / "memstore.sqlite3", seed_file=seed, in_process=True) as proc:
        yield proc


_pairs = itertools.count()


@dataclass
class Pair:
    """An (identity, template) with its seeded default store, and a client of the seeded server."""

    identity: str
    template: str
    default: Store
    client: Client
    server: ServerProcess

    def store(self, files: dict[str, str]) -> Store:
        """A new store holding ``files`` (created in this order)."""
        store = self.client.create_store(f"aw-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()))
        for path, content in files.items():
            self.client.create_memory(store.id, path, content)
        return store

    def write(self, store: Store, path: str, content: str) -> str:
        """Create or update ``path`` in ``store``; the id of the version written."""
        existing = self.client.find_memory(store.id, path)
        if existing is None:
            memory = self.client.create_memory(store.id, path, content)
        else:
            memory = self.client.update_memory(store.id, existing.id, content, expected_sha256=None)
        return next(iter(self.client.iter_versions(store.id, memory_id=memory.id))).id

    def content(self, store: Store, path: str) -> str:
        memory = self.client.find_memory(store.id, path)
        assert memory is not None, path
        content = self.client.get_memory(store.id, memory.id).content
        assert content is not None
        return content


@pytest.fixture
def pair(seeded: ServerProcess) -> Iterator[Pair]:
    number = next(_pairs)
    assert number < PAIRS, "add pairs to the seed"
    identity = f"idn_aw{number}"
    with open_client(Dialect.FORWARD, seeded.base_url, seeded.token) as client:
        (default,) = client.list_mounts(identity, TEMPLATE)
        yield Pair(identity, TEMPLATE, client.get_store(default.store_id), client, seeded)


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` (the real binary is the oracle); its stdout."""
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


def tree_files(repo: Path) -> dict[str, str]:
    """``{tree path: content}`` of ``main`` as git has it."""
    listed = git(repo, "ls-tree", "-r", "-z", "--name-only", "main").split("\0")
    return {path: git(repo, "show", f"main:{path}") for path in listed if path}


def trailers(repo: Path, commit: str = "main") -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    text = git(repo, "log", "-1", "--format=%(trailers:only,unfold)", commit)
    for line in text.splitlines():
        if ": " in line:
            name, value = line.split(": ", 1)
            found.setdefault(name, []).append(value)
    return found
