"""What a command imports when it starts: each pays only for the path it runs (the real command, in a
child process, read through ``python -X importtime``)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from memsync.api import open_client
from memsync.rules import Dialect
from tests.support.server import ServerProcess

pytestmark = pytest.mark.e2e  # each test runs memsync as a process


def imported_by(
    *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``memsync ARGS``; its result and the top-level packages it imported."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "memsync", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert lines, done.stderr  # importtime wrote its table: an empty set would prove nothing
    names = {line.rsplit("|", 1)[1].strip() for line in lines}
    return done, {name.split(".")[0] for name in names} | {n for n in names if n.startswith("memsync.")}


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_version_and_help_import_neither_httpx_nor_pydantic(args: list[str]) -> None:
    done, modules = imported_by(*args)
    assert done.returncode == 0, done.stderr
    assert "memsync" in done.stdout
    assert {"httpx", "pydantic", "pygit2", "fastapi"} & modules == set()


def test_status_makes_no_request_and_imports_no_http_client(tmp_path: Path) -> None:
    config = tmp_path / "memsync.toml"
    config.write_text(
        '[api]\ndialect = "forward"\nbase_url = "http://127.0.0.1:9"\ntoken_env = "MS_TOKEN"\n'
        '[mirror]\nroot = "mirrors"\n'
    )
    done, modules = imported_by("status", "--config", str(config), env={"MS_TOKEN": "t"})
    assert done.returncode == 0, done.stderr
    assert {"httpx", "httpcore", "fastapi", "uvicorn", "apscheduler", "rich"} & modules == set()


def test_pull_imports_neither_the_server_nor_backups(server: ServerProcess, tmp_path: Path) -> None:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        store = client.create_store(f"start-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()))
        client.create_memory(store.id, "notes/a.md", "hello\n")
    config = tmp_path / "memsync.toml"
    config.write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{server.base_url}"\ntoken_env = "MS_TOKEN"\n'
        f'[mirror]\nroot = "mirrors"\n[stores]\ninclude = ["{store.id}"]\n'
    )
    done, modules = imported_by("pull", "--config", str(config), env={"MS_TOKEN": server.token})
    assert done.returncode == 0 and "imported 1 version(s)" in done.stdout, done.stderr
    assert "httpx" in modules  # the request was made through the one client
    assert {
        "fastapi",
        "uvicorn",
        "apscheduler",
        "rich",
        "memsync.server",
        "memsync.sync.backup",
    } & modules == set()
