"""The watchdog backend of the watcher: the platform's own change notification where inotify is not.

watchdog wraps FSEvents on macOS (one stream for a whole tree, file-level events),
ReadDirectoryChangesW on Windows and kqueue on the BSDs; on Linux it uses inotify, which is how CI
runs this backend through the same tests as the others. One ``Observer`` serves every checkout (one
recursive schedule each); events under ``.git`` are dropped here, as the inotify backend never
watches it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import ObservedWatch

from memsync.daemon._inotify import WatchUnavailable, checkout_folders

log = logging.getLogger("memsync.daemon.watch")

# Opening, reading and closing without writing are memsync's own reads (and every editor's);
# attribute changes are a touch. None of them is a save. (Names, not constants: older watchdog
# releases lack some of the constants.)
_NOT_SAVES = frozenset({"opened", "closed_no_write", "attrib"})


class _Checkout(FileSystemEventHandler):
    """Turns one checkout's events into tree paths."""

    def __init__(self, store_id: str, root: Path, note: Callable[[str, str], None]) -> None:
        self.store_id = store_id
        self.root = root
        self._prefix = os.path.join(os.fsdecode(root), "")
        self._note = note

    def _tree_path(self, path: str | bytes) -> str | None:
        text = os.fsdecode(path)
        if not text.startswith(self._prefix):
            return None  # the checkout's own folder
        relative = text[len(self._prefix) :].replace(os.sep, "/")
        if not relative or relative == ".git" or relative.startswith(".git/"):
            return None
        return relative

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in _NOT_SAVES:
            return
        paths = [event.src_path]
        if event.event_type == "moved":
            paths.append(event.dest_path)
        for path in paths:
            tree_path = self._tree_path(path)
            if tree_path is None:
                continue
            self._note(self.store_id, tree_path)
            if event.is_directory and event.event_type in ("created", "moved"):
                self._note_files(tree_path)

    def _note_files(self, top: str) -> None:
        """The files of a folder that appeared (made, or moved in): some may predate its watch."""
        for folder in checkout_folders(self.root / top):
            where = f"{top}/{folder}" if folder else top
            try:
                with os.scandir(self.root / where) as entries:
                    names = [e.name for e in entries if not e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            for name in names:
                self._note(self.store_id, f"{where}/{name}")


class WatchdogSource:
    """Events of every watched checkout from one watchdog observer."""

    name = "watchdog"

    def __init__(self, note: Callable[[str, str], None], rescan: Callable[[list[str]], None]) -> None:
        self._note = note
        self._rescan = rescan  # unused: watchdog reports no dropped events to act on
        self._observer = Observer()
        self._observer.name = "memsync-watchdog"
        self._watches: dict[str, ObservedWatch] = {}
        self._lock = threading.Lock()
        self.exhausted: str | None = None

    @property
    def watch_count(self) -> int:
        with self._lock:
            return len(self._watches)

    def start(self) -> None:
        try:
            self._observer.start()
        except (OSError, RuntimeError) as exc:
            raise WatchUnavailable(f"watchdog cannot watch here ({exc})") from None

    def stop(self) -> None:
        self._observer.stop()
        if self._observer.is_alive():
            self._observer.join(timeout=10)
        with self._lock:
            self._watches.clear()

    def add(self, store_id: str, checkout: Path) -> bool:
        handler = _Checkout(store_id, checkout, self._note)
        try:
            watch = self._observer.schedule(handler, str(checkout), recursive=True)
        except OSError as exc:
            log.error("cannot watch %s: %s", checkout, exc, extra={"store": store_id})
            return False
        with self._lock:
            self._watches[store_id] = watch
        return True

    def remove(self, store_id: str) -> None:
        with self._lock:
            watch = self._watches.pop(store_id, None)
        if watch is not None:
            try:
                self._observer.unschedule(watch)
            except (KeyError, OSError):
                pass  # gone with its folder already
