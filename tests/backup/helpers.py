"""Shared pieces of the backup, verify, restore and redaction tests: the CLI, git and configs."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from memsync.rules import Dialect
from tests.support.cli import memsync as memsync  # the backup tests import it from here


def stores_json(done: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    """``--json`` output by store id."""
    return {entry["id"]: entry for entry in json.loads(done.stdout)["stores"]}


def git(repo: Path, *args: str, check: bool = True, input_text: str | None = None) -> str:
    result = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False, input=input_text
    )
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def has_object(repo: Path, obj: str) -> bool:
    return (
        subprocess.run(["git", "-C", str(repo), "cat-file", "-e", obj], capture_output=True).returncode == 0
    )


def blob_id(content: str | bytes) -> str:
    data = content.encode() if isinstance(content, str) else content
    return hashlib.sha1(b"blob %d\0%s" % (len(data), data), usedforsecurity=False).hexdigest()


def write_config(
    directory: Path,
    base_url: str,
    *,
    dialect: Dialect = Dialect.FORWARD,
    include: list[str] | None = None,
    remotes: list[str] = (),  # type: ignore[assignment]
    extra: str = "",
) -> Path:
    """A config file in ``directory`` (mirrors in ``directory/mirrors``, token from $MS_TOKEN)."""
    lines = [
        "[api]",
        f'dialect = "{dialect.value}"',
        f'base_url = "{base_url}"',
        'token_env = "MS_TOKEN"',
        "[mirror]",
        'root = "mirrors"',
        "[stores]",
        f"include = {json.dumps(include or ['*'])}",
    ]
    for url in remotes:
        lines += ["[[backup.remotes]]", f"url = {json.dumps(url)}"]
    config = directory / "memsync.toml"
    config.write_text("\n".join(lines) + "\n" + extra)
    return config
