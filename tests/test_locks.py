from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memsync.errors import EXIT_LOCKED, LockHeld
from memsync.sync.locks import held

# The test here kills a process that holds the lock.
pytestmark = pytest.mark.e2e

HOLDER = """
import sys, time
from pathlib import Path
from memsync.sync.locks import held
with held(Path(sys.argv[1]), "test"):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_second_holder_gets_lock_held_and_a_dead_holder_frees_it(tmp_path: Path) -> None:
    lock = tmp_path / "x" / "lock"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(LockHeld) as info, held(lock, "the mirror x"):
            pass
        assert info.value.exit_code == EXIT_LOCKED
        assert "try again" in str(info.value)
    finally:
        proc.kill()  # SIGKILL: no cleanup runs; the kernel drops the flock.
        proc.wait()
    with held(lock, "the mirror x"):
        pass
