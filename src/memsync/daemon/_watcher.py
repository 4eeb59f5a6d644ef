"""Watching the checkouts for saves, and turning saves into cycle requests.

One inotify instance (inotify_simple's ``INotify``) and one thread read the events of every checkout,
however many there are (a watchdog ``Observer`` runs an emitter thread per scheduled watch: a daemon
over 300 checkouts had 309 threads). inotify watches one folder per watch and does not recurse:
every folder of a checkout gets a watch, folders created later get one as their creation is seen,
and ``.git`` never does (its folders were most of the watches: 22 per store of 10 memories, where
the checkout itself had 1).

Events only *note* a path; the debouncer (quiet delay, maximum wait) decides when the path has
settled; then :class:`CheckoutBaseline` re-hashes it and drops whatever is not an edit (memsync's own
checkout writes, a touch, temporaries, ignored files). Paths that settle while their store's cycle
is running are held until it ends: the cycle may be moving the checkout and its base, and comparing
halfway would see its own writes as edits.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    from inotify_simple import INotify, flags
except ImportError:  # installed on Linux only (pyproject.toml): elsewhere start() says it cannot watch
    INotify = flags = None

from memsync.daemon._baseline import CheckoutBaseline
from memsync.daemon._debounce import Debouncer

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

Key = tuple[str, str]  # (store id, tree path)


class WatchUnavailable(Exception):
    """inotify cannot be used here (not Linux, or no inotify instance left)."""


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
        parts.append("or set daemon.watch = false for stores nobody edits")
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


@dataclass
class _Watched:
    checkout: Path
    baseline: CheckoutBaseline
    folders: dict[str, int] = field(default_factory=dict)  # tree path of a folder -> watch descriptor


class CheckoutWatcher:
    """Watches checkouts; calls ``on_change(store_id, tree_paths)`` for edits that settled.

    ``busy(store_id)`` tells whether the store's cycle is running; call :meth:`cycle_finished` after
    each cycle so the paths held back during it are looked at. ``max_watches`` caps the inotify
    watches (one per folder); a checkout that does not fit is not watched, and :attr:`exhausted` says
    why (the daemon then stops watching altogether). When the kernel drops
    events (its queue overflowed), every watched store gets ``on_change(store_id, [])``: something
    may have changed, and only a cycle can tell.
    """

    def __init__(
        self,
        on_change: Callable[[str, list[str]], None],
        busy: Callable[[str], bool],
        *,
        quiet: float,
        max_wait: float,
        clock: Callable[[], float] = time.monotonic,
        max_watches: int | None = None,
    ) -> None:
        self._on_change = on_change
        self._busy = busy
        self._clock = clock
        self._max_watches = max_watches
        self._debouncer: Debouncer[Key] = Debouncer(quiet, max_wait)
        self._inotify: INotify | None = None
        # Wakes the reader's poll at stop (see _read_loop); made by start().
        self._wake: tuple[int, int] | None = None
        self._stores: dict[str, _Watched] = {}
        self._by_wd: dict[int, tuple[str, str]] = {}  # watch descriptor -> (store id, folder)
        # The checkouts and their watches: taken briefly by the reader thread, watch and unwatch.
        self._maps = threading.Lock()
        # The baselines: the settling thread holds it while it compares, so that a baseline is
        # never closed under its feet by unwatch.
        self._registry = threading.RLock()
        self._held: dict[str, set[str]] = defaultdict(set)
        self._cond = threading.Condition()
        self._stopped = False
        # Why the watches ran out, once they did: the daemon then stops watching altogether.
        self.exhausted: str | None = None
        self._thread = threading.Thread(target=self._settle_loop, name="memsync-watch", daemon=True)
        self._reader = threading.Thread(target=self._read_loop, name="memsync-inotify", daemon=True)

    @property
    def watch_count(self) -> int:
        """inotify watches held (one per watched folder)."""
        with self._maps:
            return len(self._by_wd)

    def start(self) -> None:
        """Start reading events; WatchUnavailable when inotify cannot be used here."""
        if INotify is None:
            raise WatchUnavailable("inotify cannot be used here (Linux only)")
        try:
            self._inotify = INotify()
        except (OSError, AttributeError) as exc:  # AttributeError: a C library without inotify
            raise WatchUnavailable(f"inotify cannot be used here ({exc})") from None
        self._wake = os.pipe()
        self._reader.start()
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            first = not self._stopped
            self._stopped = True
            self._cond.notify_all()
        if first and self._inotify is not None and self._wake is not None:
            os.write(self._wake[1], b"x")  # ends the reader (_read_loop)
            if self._reader.is_alive():
                self._reader.join(timeout=10)
            self._inotify.close()  # every watch goes with the instance
            for fd in self._wake:
                os.close(fd)
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        with self._registry:
            for watched in self._stores.values():
                watched.baseline.close()
            with self._maps:
                self._stores.clear()
                self._by_wd.clear()

    def watching(self, store_id: str) -> bool:
        return store_id in self._stores

    def watch(self, store_id: str, checkout: Path) -> bool:
        """Start watching a checkout; False if it does not exist (yet) or its folders do not fit."""
        with self._registry:
            if store_id in self._stores or self._stopped or self._inotify is None:
                return store_id in self._stores
            if not (checkout / ".git").is_dir():
                return False
            watched = _Watched(checkout, CheckoutBaseline(checkout))
            with self._maps:
                self._stores[store_id] = watched
            if not self._add_tree(store_id, ""):
                self.unwatch(store_id)
                return False
        log.debug("watching %s", checkout, extra={"store": store_id})
        return True

    def unwatch(self, store_id: str) -> None:
        with self._registry:
            with self._maps:
                watched = self._stores.pop(store_id, None)
                if watched is None:
                    return
                for wd in watched.folders.values():
                    self._by_wd.pop(wd, None)
            self._remove_watches(list(watched.folders.values()))
            with self._cond:
                self._held.pop(store_id, None)
            watched.baseline.close()

    def note(self, store_id: str, tree_path: str) -> None:
        """An event touched ``tree_path`` of ``store_id``'s checkout."""
        with self._cond:
            before = self._debouncer.next_deadline()
            self._debouncer.note((store_id, tree_path), self._clock())
            after = self._debouncer.next_deadline()
            # Wake the settling thread only when it now has to wake up earlier than it planned.
            if before is None or (after is not None and after < before):
                self._cond.notify()

    def cycle_finished(self, store_id: str) -> None:
        """Look at the paths that settled while the store's cycle ran."""
        with self._cond:
            held = self._held.pop(store_id, set())
            now = self._clock()
            for tree_path in held:
                self._debouncer.expedite((store_id, tree_path), now)
            if held:
                self._cond.notify()

    # --- inotify watches -------------------------------------------------------------------------

    def _add_tree(self, store_id: str, top: str) -> bool:
        """Watch the folder ``top`` of a checkout and every folder under it, noting the files found
        in folders that are new (created before their watch existed); False when a watch could not
        be added."""
        watched = self._stores.get(store_id)
        if watched is None or self._inotify is None:
            return True
        root = watched.checkout
        for folder in checkout_folders(root / top if top else root):
            relative = f"{top}/{folder}" if top and folder else (top or folder)
            with self._maps:
                full = (
                    self._max_watches is not None
                    and relative not in watched.folders
                    and len(self._by_wd) >= self._max_watches
                )
            if full:
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
            with self._maps:
                gone = self._stores.get(store_id) is not watched
                if not gone:
                    previous = watched.folders.get(relative)
                    if previous is not None and previous != wd:
                        self._by_wd.pop(previous, None)
                    watched.folders[relative] = wd
                    self._by_wd[wd] = (store_id, relative)
            if gone:
                self._remove_watches([wd])  # unwatched meanwhile (the reader thread adds folders too)
                return True
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
            self.note(store_id, f"{folder}/{name}")

    def _drop_tree(self, store_id: str, top: str) -> None:
        """Stop watching the folder ``top`` and the folders under it (moved away or deleted)."""
        prefix = top + "/"
        with self._maps:
            watched = self._stores.get(store_id)
            if watched is None:
                return
            gone = [f for f in watched.folders if f == top or f.startswith(prefix)]
            wds = [watched.folders.pop(f) for f in gone]
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
        without waiting once the descriptor is readable.
        """
        assert self._inotify is not None and self._wake is not None
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
        with self._maps:
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
        self.note(store_id, tree_path)

    def _forget(self, wd: int) -> None:
        """The kernel dropped a watch (its folder was deleted)."""
        with self._maps:
            where = self._by_wd.pop(wd, None)
            if where is not None:
                watched = self._stores.get(where[0])
                if watched is not None and watched.folders.get(where[1]) == wd:
                    del watched.folders[where[1]]

    def _overflow(self) -> None:
        """The kernel dropped events: watch the folders made meanwhile, and let every store look."""
        log.warning("the kernel dropped file events (inotify queue overflow): every checkout is checked")
        with self._registry:
            stores = list(self._stores)
            for store_id in stores:
                self._add_tree(store_id, "")
        for store_id in stores:
            self._on_change(store_id, [])

    # --- settling --------------------------------------------------------------------------------

    def _settle_loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    deadline = self._debouncer.next_deadline()
                    now = self._clock()
                    if deadline is not None and deadline <= now:
                        break
                    self._cond.wait(None if deadline is None else deadline - now)
                if self._stopped:
                    return
                ready: dict[str, list[str]] = defaultdict(list)
                for store_id, tree_path in self._debouncer.due(self._clock()):
                    if store_id not in self._stores:
                        continue
                    # Checked under our lock, and cycle_finished takes it too: a path held here is
                    # always released by the end of the cycle that made us hold it.
                    if self._busy(store_id):
                        self._held[store_id].add(tree_path)
                    else:
                        ready[store_id].append(tree_path)
            changes: list[tuple[str, list[str]]] = []
            with self._registry:
                for store_id, tree_paths in ready.items():
                    watched = self._stores.get(store_id)
                    if watched is None:
                        continue
                    try:
                        changed = watched.baseline.changed(tree_paths)
                    except Exception:
                        log.exception("comparing %s with its base failed", watched.checkout)
                        changed = tree_paths
                    if changed:
                        changes.append((store_id, changed))
            for store_id, changed in changes:
                self._on_change(store_id, changed)
