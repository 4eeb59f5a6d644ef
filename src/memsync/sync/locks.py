"""The OS file locks the CLI and the daemon share (a store's, a mirror root's daemon lock).

They are OS file locks (``flock`` through filelock): the kernel releases them when the process dies,
so a ``kill -9`` never leaves a stale lock that blocks the next run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from memsync.errors import LockHeld


@contextmanager
def held(lock_file: Path, what: str, *, timeout: float = 0.0) -> Iterator[None]:
    """Hold ``lock_file`` for the block, or raise LockHeld (exit 75) naming ``what`` is busy."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_file), timeout=timeout, is_singleton=False)
    try:
        lock.acquire()
    except Timeout:
        raise LockHeld(
            f"another memsync is working on {what} (lock {lock_file}); try again shortly"
        ) from None
    try:
        yield
    finally:
        lock.release()
