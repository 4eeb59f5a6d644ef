"""The inotify backend of the watcher (Linux): one instance and one thread for every checkout.

A watchdog ``Observer`` runs an emitter thread per scheduled watch (a daemon over 300 checkouts had
309 threads), so on Linux the daemon reads inotify itself. inotify watches one folder per watch and
does not recurse: every folder of a checkout gets a watch, folders created later get one as their
creation is seen, and ``.git`` never does (its folders were most of the watches: 22 per store of 10
memories, where the checkout itself had 1).
"""

from __future__ import annotations

import errno
import logging
import os
import select
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    from inotify_simple import INotify, flags
except ImportError:  # installed on Linux only (pyproject.toml): the watcher falls back elsewhere
    INotify = flags = None

log = logging.getLogger("memsync.daemon.watch")

KERNEL_LIMIT_FILE = Path("/proc/sys/fs/inotify/max_user_watches")
SYSCTL = "fs.inotify.max_user_watches"

# The events a save can consist of: a file created, written, closed after writing, deleted or moved,
# and a folder's own deletion or move. Leaving out opens, reads and read-only closes keeps memsync's
# own reads silent; attribute changes (a touch) are not listed either.
MASK = (
    0  # not Linux: nothing is watched
    if flags is None
    else flags.CREATE
    | flags.MODIFY
    | flags.CLOSE_WRITE
    | flags.DELETE
    | flags.MOVED_FROM
    | flags.MOVED_TO
    | flags.DELETE_SELF
    | flags.MOVE_SELF
    | flags.ONLYDIR
    | flags.DONT_FOLLOW
    | flags.EXCL_UNLINK
)


class WatchUnavailable(Exception):
    """A backend cannot be used here (not its platform, or the kernel refused an instance)."""


def checkout_folders(checkout: Path) -> Iterator[str]:
    """The folders of a checkout as tree paths ('' is the checkout itself), ``.git`` left out."""
    pending = [""]
    while pending:
        folder = pending.pop()
        yield folder
        try:
            with os.scandir(checkout / folder if folder else checkout) as entries:
                for entry in entries:
                    if not entry.is_dir(follow_symlinks=False):
                        continue
                    if folder == "" and entry.name == ".git":
                        continue
                    pending.append(f"{folder}/{entry.name}" if folder else entry.name)
        except OSError:
            continue  # gone meanwhile, or unreadable: nothing under it to watch


@dataclass(frozen=True)
class WatchBudget:
    """How many inotify watches the daemon may add: the kernel's per-user limit less what this user's
    other programs hold, and ``daemon.max_watches`` when set."""

    kernel_limit: int | None
    in_use: int
    configured: int | None

    @property
    def available(self) -> int | None:
        limits = [x for x in (self.configured,) if x is not None]
        if self.kernel_limit is not None:
            limits.append(max(0, self.kernel_limit - self.in_use))
        return min(limits) if limits else None

    def advice(self, needed: int) -> str:
        """What to do when ``needed`` watches do not fit: the sysctl to raise, and how to keep it."""
        parts = []
        if self.kernel_limit is not None:
            target = max(needed + self.in_use, self.kernel_limit) * 2
            parts.append(
                f"{SYSCTL} is {self.kernel_limit} ({self.in_use} in use by this user's other programs):"
                f" raise it with `sysctl {SYSCTL}={target}` and keep it across reboots with"
                f" `echo {SYSCTL}={target} > /etc/sysctl.d/60-memsync.conf`"
            )
        if self.configured is not None:
            parts.append(f"daemon.max_watches is {self.configured}: raise it or remove it")
        parts.append('or set daemon.watcher = "poll", or daemon.watch = false for stores nobody edits')
        return "; ".join(parts)


def watch_budget(configured: int | None) -> WatchBudget:
    """The budget as the kernel and ``daemon.max_watches`` set it now."""
    try:
        kernel: int | None = int(KERNEL_LIMIT_FILE.read_text().strip())
    except (OSError, ValueError):
        kernel = None  # not Linux, or /proc hidden: only the configured cap and ENOSPC say no
    return WatchBudget(kernel, _watches_in_use() if kernel is not None else 0, configured)


def _watches_in_use() -> int:
    """inotify watches the processes of this user hold (the kernel's limit is per user)."""
    if sys.platform != "linux":
        return 0
    uid = os.getuid()
    used = 0
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return 0
    for pid in pids:
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:inotify":
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii", errors="replace") as info:
                    used += sum(1 for line in info if line.startswith("inotify wd:"))
        except OSError:
            continue  # exited meanwhile, or not ours to read
    return used


class InotifySource:
    """Events of every watched checkout from one inotify instance, read by one thread.

    ``note(store_id, tree_path)`` is called for each path an event names; ``rescan(store_ids)`` when
    the kernel dropped events (its queue overflowed): something may have changed anywhere.
    ``max_watches`` caps the watches (one per folder); past it, or past the kernel's limit,
    :attr:`exhausted` says why and the checkout that did not fit is not watched.
    """

    name = "inotify"

    def __init__(
        self,
        note: Callable[[str, str], None],
        rescan: Callable[[list[str]], None],
        *,
        max_watches: int | None = None,
    ) -> None:
        self._note = note
        self._rescan = rescan
        self._max_watches = max_watches
        self._inotify: Any = None
        # Wakes the reader's poll at stop (see _read_loop); made by start().
        self._wake: tuple[int, int] | None = None
        self._roots: dict[str, Path] = {}
        self._folders: dict[str, dict[str, int]] = {}  # store id -> folder tree path -> descriptor
        self._by_wd: dict[int, tuple[str, str]] = {}  # watch descriptor -> (store id, folder)
        # Taken by the reader thread and by add/remove; an RLock, as adding a tree notes its files.
        self._lock = threading.RLock()
        self.exhausted: str | None = None
        self._reader = threading.Thread(target=self._read_loop, name="memsync-inotify", daemon=True)

    @property
    def watch_count(self) -> int:
        with self._lock:
            return len(self._by_wd)

    def start(self) -> None:
        if INotify is None:
            raise WatchUnavailable("inotify exists on Linux only")
        try:
            self._inotify = INotify()
        except (OSError, AttributeError) as exc:  # AttributeError: a C library without inotify
            raise WatchUnavailable(f"inotify cannot be used here ({exc})") from None
        self._wake = os.pipe()
        self._reader.start()

    def stop(self) -> None:
        if self._inotify is None or self._wake is None:
            return
        os.write(self._wake[1], b"x")  # ends the reader (_read_loop)
        if self._reader.is_alive():
            self._reader.join(timeout=10)
        self._inotify.close()  # every watch goes with the instance
        for fd in self._wake:
            os.close(fd)
        self._inotify = self._wake = None
        with self._lock:
            self._roots.clear()
            self._folders.clear()
            self._by_wd.clear()

    def add(self, store_id: str, checkout: Path) -> bool:
        with self._lock:
            self._roots[store_id] = checkout
            self._folders[store_id] = {}
            if not self._add_tree(store_id, ""):
                self.remove(store_id)
                return False
        return True

    def remove(self, store_id: str) -> None:
        with self._lock:
            self._roots.pop(store_id, None)
            folders = self._folders.pop(store_id, {})
            for wd in folders.values():
                self._by_wd.pop(wd, None)
            self._remove_watches(list(folders.values()))

    def _add_tree(self, store_id: str, top: str) -> bool:
        """Watch the folder ``top`` of a checkout and every folder under it, noting the files found
        in folders that are new (created before their watch existed); False when a watch could not
        be added."""
        with self._lock:
            root = self._roots.get(store_id)
            folders = self._folders.get(store_id)
            if root is None or folders is None or self._inotify is None:
                return True
            for folder in checkout_folders(root / top if top else root):
                relative = f"{top}/{folder}" if top and folder else (top or folder)
                if (
                    self._max_watches is not None
                    and relative not in folders
                    and len(self._by_wd) >= self._max_watches
                ):
                    self._said_limit(f"daemon.max_watches ({self._max_watches}) is reached")
                    return False
                path = root / relative if relative else root
                try:
                    wd = self._inotify.add_watch(path, MASK)
                except OSError as exc:
                    if exc.errno == errno.ENOSPC:
                        self._said_limit(f"the kernel's {SYSCTL} is reached")
                        return False
                    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                        continue  # gone meanwhile: its deletion has its own event
                    raise OSError(exc.errno, f"watching {path}: {exc.strerror}") from None
                previous = folders.get(relative)
                if previous is not None and previous != wd:
                    self._by_wd.pop(previous, None)
                folders[relative] = wd
                self._by_wd[wd] = (store_id, relative)
                if top:
                    self._note_files(store_id, root, relative)
        return True

    def _note_files(self, store_id: str, root: Path, folder: str) -> None:
        try:
            with os.scandir(root / folder) as entries:
                names = [entry.name for entry in entries if not entry.is_dir(follow_symlinks=False)]
        except OSError:
            return
        for name in names:
            self._note(store_id, f"{folder}/{name}")

    def _drop_tree(self, store_id: str, top: str) -> None:
        """Stop watching the folder ``top`` and the folders under it (moved away or deleted)."""
        prefix = top + "/"
        with self._lock:
            folders = self._folders.get(store_id)
            if folders is None:
                return
            gone = [f for f in folders if f == top or f.startswith(prefix)]
            wds = [folders.pop(f) for f in gone]
            for wd in wds:
                self._by_wd.pop(wd, None)
            self._remove_watches(wds)

    def _remove_watches(self, wds: list[int]) -> None:
        if self._inotify is None:
            return
        for wd in wds:
            try:
                self._inotify.rm_watch(wd)
            except OSError as exc:
                if exc.errno != errno.EINVAL:  # EINVAL: the kernel dropped it already (folder deleted)
                    log.debug("removing an inotify watch: %s", exc)
            except ValueError:
                pass  # the instance is closed, and its watches with it

    def _said_limit(self, why: str) -> None:
        if self.exhausted is not None:
            return
        self.exhausted = why
        budget = watch_budget(self._max_watches)
        log.error(
            "NOT WATCHING any more: cannot watch another folder (%s); saves in every checkout are picked"
            " up by the scheduled cycles only. To watch: %s",
            why,
            budget.advice(self.watch_count + 1),
        )

    # --- events (the reader's thread) ------------------------------------------------------------

    def _read_loop(self) -> None:
        """Read the instance until stop, handing each batch to :meth:`_events`.

        ``INotify.read`` waits in a poll of the inotify descriptor alone, and closing a descriptor
        does not wake a poll another thread has on it; a read timeout would wake the idle daemon
        over and over. So the poll here waits on a pipe too, which stop writes to, and reads
        without waiting once the descriptor is readable. (``select.poll``: this backend runs on
        Linux only, where poll has no descriptor-number limit as select has.)
        """
        assert self._inotify is not None and self._wake is not None
        if sys.platform != "linux":
            return  # start() refuses elsewhere; said here too, for mypy --platform
        poller = select.poll()
        poller.register(self._inotify.fileno(), select.POLLIN)
        poller.register(self._wake[0], select.POLLIN)
        while True:
            if any(fd == self._wake[0] for fd, _ in poller.poll()):
                return
            try:
                events = self._inotify.read(timeout=0)
            except (OSError, ValueError):  # ValueError: closed under us (stop gave up waiting)
                return
            try:
                self._events(events)
            except Exception:
                # One bad batch must not end the watching of every checkout.
                log.exception("handling file events failed")

    def _events(self, events: list[Any]) -> None:
        """A batch read from inotify (``inotify_simple.Event``s, on its reading thread)."""
        for event in events:
            if event.mask & flags.Q_OVERFLOW:
                self._overflow()
            elif event.mask & flags.IGNORED:
                self._forget(event.wd)
            else:
                self._event(event)

    def _event(self, event: Any) -> None:
        with self._lock:
            where = self._by_wd.get(event.wd)
        name: str = event.name  # decoded with os.fsdecode, as tree paths are
        if where is None or not name:
            return  # a folder's own deletion or move: its parent's event names it
        store_id, folder = where
        if folder == "" and name == ".git":
            return
        tree_path = f"{folder}/{name}" if folder else name
        if event.mask & flags.ISDIR:
            if event.mask & (flags.CREATE | flags.MOVED_TO):
                self._add_tree(store_id, tree_path)
            elif event.mask & (flags.MOVED_FROM | flags.DELETE):
                self._drop_tree(store_id, tree_path)
        self._note(store_id, tree_path)

    def _forget(self, wd: int) -> None:
        """The kernel dropped a watch (its folder was deleted)."""
        with self._lock:
            where = self._by_wd.pop(wd, None)
            if where is not None:
                folders = self._folders.get(where[0])
                if folders is not None and folders.get(where[1]) == wd:
                    del folders[where[1]]

    def _overflow(self) -> None:
        """The kernel dropped events: watch the folders made meanwhile, and let every store look."""
        log.warning("the kernel dropped file events (inotify queue overflow): every checkout is checked")
        with self._lock:
            stores = list(self._roots)
            for store_id in stores:
                self._add_tree(store_id, "")
        self._rescan(stores)
