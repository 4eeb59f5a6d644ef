"""What a test needs of the machine that a plain install may lack: root, FUSE and loop devices, the exFAT
and ntfs-3g tools, strace, ``unshare``, a tmpfs to mount.

Where one is missing, the test skips and says why — except under CI as root: ``.ci/run`` installs
them all (and fails when it cannot), so a missing one there is a broken CI, and the test fails rather
than pass as skipped and leave those paths untested without anyone noticing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import NoReturn

import pytest


def _euid() -> int | None:
    geteuid = getattr(os, "geteuid", None)  # POSIX only
    return geteuid() if geteuid is not None else None


def missing_fails(environ: Mapping[str, str], euid: int | None) -> bool:
    """Whether a test that cannot run here fails instead of skipping: under CI (``CI=true``, as CI
    services set it), as root."""
    return environ.get("CI", "").strip().lower() in ("true", "1") and euid == 0


def cannot_run_here(why: str) -> NoReturn:
    """Skip the calling test because ``why`` (what is missing, and how to get it); fail it under CI as
    root."""
    if missing_fails(os.environ, _euid()):
        pytest.fail(
            f"{why} (under CI as root this test must run: .ci/run installs what it needs)", pytrace=False
        )
    pytest.skip(why)
