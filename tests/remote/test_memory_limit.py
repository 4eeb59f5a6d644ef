"""A clone's ``git push`` past an Anthropic store's 2,000 memories (docs/api-contract.md §4, the real
default of the reference server) is refused before any write, with or without ``--force``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from memsync.api import open_client
from memsync.rules import MAX_ANTHROPIC_MEMORIES, Dialect
from tests.support.server import ServerProcess

Factory = Callable[..., ServerProcess]


def test_a_clone_push_past_the_memory_limit_writes_nothing(server_factory: Factory, tmp_path: Path) -> None:
    memories = [{"path": f"/m/{n:04d}.md", "content": f"memory {n}\n"} for n in range(MAX_ANTHROPIC_MEMORIES)]
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps({"stores": [{"dialect": "anthropic", "name": "full", "memories": memories}]}))
    server = server_factory("--seed", str(seed))
    with open_client(Dialect.ANTHROPIC, server.base_url, server.token) as client:
        (store,) = client.list_stores()
        before = {m.path: m.content_sha256 for m in client.list_memories(store.id)}
        env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "MEMSYNC_TOKEN": server.token,
        }

        def git(*args: str, cwd: Path = tmp_path) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
            )

        url = f"memstore::{server.base_url}/v1/memory_stores/{store.id}"
        assert git("clone", "-q", url, "full").returncode == 0
        clone = tmp_path / "full"
        (clone / "m" / "0000.md").write_text("memory 0, edited\n")
        (clone / "one-more.md").write_text("one more\n")
        git("add", "-A", cwd=clone)
        git("commit", "-q", "-m", "one more", cwd=clone)
        for forced in ((), ("--force",)):
            pushed = git("push", *forced, "origin", "main", cwd=clone)
            assert pushed.returncode != 0, pushed.stderr
            said = pushed.stderr.replace("\n", " ")
            for part in ("one-more.md", "holds 2000 memories", "leaving 2001", "2,000", "delete at least 1"):
                assert part in said, said
            assert "--force sends it" not in said
            assert {m.path: m.content_sha256 for m in client.list_memories(store.id)} == before
