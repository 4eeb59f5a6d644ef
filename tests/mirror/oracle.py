"""The real git binary as the oracle for mirror tests, and versions to feed the writer."""

from __future__ import annotations

import hashlib
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memsync.mirror import VersionRecord

T0 = datetime(2026, 3, 1, 12, 0, 0, 250_000, tzinfo=UTC)


def git(repo: Path, *args: str, check: bool = True, input: bytes | None = None) -> str:
    """Run the real git in ``repo``; its stdout (surrogate-escaped so odd names survive)."""
    result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, input=input, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {result.stderr.decode(errors='replace')}")
    return result.stdout.decode("utf-8", "surrogateescape")


def pack_count(repo: Path) -> int:
    """The packs git counts in ``repo`` (``git count-objects -v``)."""
    return int(git(repo, "count-objects", "-v").split("packs: ")[1].split()[0])


def fsck(repo: Path) -> None:
    result = subprocess.run(
        ["git", "-C", str(repo), "fsck", "--strict", "--no-progress", "--no-dangling"],
        capture_output=True,
        text=True,
        check=False,
    )
    problems = [line for line in result.stderr.splitlines() if not line.startswith("notice:")]
    assert result.returncode == 0 and not problems, result.stderr


def record(
    n: int,
    memory: str,
    operation: str,
    path: str | None,
    content: bytes | None,
    *,
    redacted: bool = False,
    sha: str | None = None,
    skipped: bool = False,
    skip_reason: str = "unspecified",
    author: tuple[str, str] = ("memsync", "memsync@localhost"),
) -> VersionRecord:
    """The n-th version, created n seconds after T0; the hash is computed from content by default."""
    if sha is None and content is not None:
        sha = hashlib.sha256(content).hexdigest()
    return VersionRecord(
        version_id=f"memver_{n:04d}",
        memory_id=memory,
        operation=operation,  # type: ignore[arg-type]
        path=path,
        content=content,
        content_sha256=sha,
        created_at=T0 + timedelta(seconds=n),
        redacted=redacted,
        author_name=author[0],
        author_email=author[1],
        skipped=skipped,
        skip_reason=skip_reason,
    )
