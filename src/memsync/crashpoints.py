"""Seeded crash points for tests: ``MEMSYNC_CRASH_AT=step:n`` kills the process at the n-th ``step``.

Crash-and-resume tests need a process to die at an exact point, repeatably, with no cleanup running —
which a timer cannot give. Code calls :func:`crash_point` at the places where an interruption matters;
with the variable unset it costs one dictionary lookup. The process sends itself SIGKILL, exactly
what ``kill -9`` does.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

ENV = "MEMSYNC_CRASH_AT"
_passes: dict[str, int] = {}
# Stores are worked on in threads (memsync.sync.fleet): every pass is counted, none twice.
_lock = threading.Lock()


def crash_point(step: str) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    name, _, count = spec.rpartition(":")
    if name != step:
        return
    with _lock:
        _passes[step] = _passes.get(step, 0) + 1
        reached = str(_passes[step]) == count
    if reached:
        if sys.platform == "win32":
            os._exit(137)  # no SIGKILL there; an exit that runs no cleanup is the nearest
        os.kill(os.getpid(), signal.SIGKILL)
