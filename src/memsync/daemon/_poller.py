"""The poll backend of the watcher: a stat of every file of every checkout, every ``poll_interval``.

For where no change notification works (a network share, a FUSE filesystem that sends none, a
platform watchdog does not cover) and as the fallback when a native backend cannot start: a save is
then seen within ``daemon.poll_interval`` (2 s by default) instead of at the next scheduled cycle.
A file counts as changed when its size, mtime, ctime or inode differs from the last pass (the keys
the working-tree scan's stat cache trusts); the watcher's baseline then hashes it, as it does for
an event, so a touch is still no edit. docs/daemon.md gives its CPU per 1,000 files.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from memsync.daemon._inotify import checkout_folders

log = logging.getLogger("memsync.daemon.watch")

Stat = tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, inode


class Note(Protocol):
    """The watcher's ``note``: the paths of one pass are noted at once, so they settle together."""

    def __call__(self, store_id: str, *tree_paths: str) -> None: ...


def stat_snapshot(checkout: Path) -> dict[str, Stat]:
    """Every non-folder entry of a checkout (``.git`` left out) by tree path, with its stat keys."""
    found: dict[str, Stat] = {}
    for folder in checkout_folders(checkout):
        try:
            with os.scandir(checkout / folder if folder else checkout) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        continue
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue  # gone meanwhile
                    tree_path = f"{folder}/{entry.name}" if folder else entry.name
                    found[tree_path] = (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)
        except OSError:
            continue
    return found


class PollSource:
    """Compares every watched checkout with its last stat snapshot, ``interval`` seconds apart."""

    name = "poll"

    def __init__(
        self,
        note: Note,
        rescan: Callable[[list[str]], None],
        *,
        interval: float,
    ) -> None:
        self._note = note
        self._interval = interval
        self._roots: dict[str, Path] = {}
        self._snapshots: dict[str, dict[str, Stat]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memsync-poll", daemon=True)
        self.exhausted: str | None = None

    @property
    def watch_count(self) -> int:
        with self._lock:
            return len(self._roots)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        with self._lock:
            self._roots.clear()
            self._snapshots.clear()

    def add(self, store_id: str, checkout: Path) -> bool:
        # The first snapshot is taken now: a save after watch() returns is a difference from it.
        snapshot = stat_snapshot(checkout)
        with self._lock:
            self._roots[store_id] = checkout
            self._snapshots[store_id] = snapshot
        return True

    def remove(self, store_id: str) -> None:
        with self._lock:
            self._roots.pop(store_id, None)
            self._snapshots.pop(store_id, None)

    def _loop(self) -> None:
        while not self._stopping.wait(self._interval):
            try:
                self.poll_once()
            except Exception:
                log.exception("polling the checkouts failed")

    def poll_once(self) -> None:
        """One pass over every checkout, noting what differs from the last pass."""
        with self._lock:
            roots = list(self._roots.items())
        for store_id, root in roots:
            now = stat_snapshot(root)
            with self._lock:
                if self._roots.get(store_id) is not root:
                    continue  # unwatched meanwhile
                before = self._snapshots.get(store_id, {})
                self._snapshots[store_id] = now
            changed = sorted(p for p in before.keys() | now.keys() if before.get(p) != now.get(p))
            if changed:
                self._note(store_id, *changed)
