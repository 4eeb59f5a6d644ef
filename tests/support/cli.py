"""The memsync command line run as a user runs it: a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def memsync(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``memsync ARGS`` in this interpreter's environment, ``env`` laid over it; its output kept."""
    return subprocess.run(
        [sys.executable, "-m", "memsync", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=120,
    )
