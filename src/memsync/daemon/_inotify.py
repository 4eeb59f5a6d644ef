"""Linux inotify through ctypes: one instance, one reading thread, events handed to a callback.

A watchdog ``Observer`` runs one emitter thread per scheduled watch, and its inotify classes are
internals that changed shape between releases (``Inotify`` up to 6, ``InotifyFD`` from 7); the four
system calls the watcher needs are smaller than either. The kernel's limit on watches is per user
(``fs.inotify.max_user_watches``); adding past it fails with ENOSPC, which callers turn into advice.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import select
import struct
import threading
from collections.abc import Callable
from typing import NamedTuple

IN_MODIFY = 0x00000002
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000

log = logging.getLogger("memsync.daemon.watch")

_IN_CLOEXEC = 0o2000000
_IN_NONBLOCK = 0o4000
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, length of the name that follows
_READ_SIZE = 64 * 1024


class Event(NamedTuple):
    wd: int
    mask: int
    cookie: int
    name: bytes  # b"" for an event on the watched folder itself

    @property
    def is_dir(self) -> bool:
        return bool(self.mask & IN_ISDIR)


class _Libc:
    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            self.init1 = libc.inotify_init1
            self.add_watch = libc.inotify_add_watch
            self.rm_watch = libc.inotify_rm_watch
        except AttributeError:
            raise OSError(errno.ENOSYS, "this C library has no inotify (Linux only)") from None
        self.init1.argtypes = [ctypes.c_int]
        self.add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self.rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]


def _raise_errno(what: str) -> None:
    code = ctypes.get_errno()
    raise OSError(code, f"{what}: {os.strerror(code)}")


class Inotify:
    """One inotify instance; :meth:`start` reads it on a thread of its own and calls ``on_events``
    with each batch read (``IN_Q_OVERFLOW`` and ``IN_IGNORED`` included: the caller decides)."""

    def __init__(self, on_events: Callable[[list[Event]], None]) -> None:
        self._libc = _Libc()
        self._on_events = on_events
        fd = self._libc.init1(_IN_CLOEXEC | _IN_NONBLOCK)
        if fd < 0:
            _raise_errno("creating an inotify instance")
        self._fd = fd
        self._wake_read, self._wake_write = os.pipe()
        self._closing = False
        self._thread = threading.Thread(target=self._read_loop, name="memsync-inotify", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def add_watch(self, path: bytes, mask: int) -> int:
        """Watch ``path``: its watch descriptor (the same one again for a folder watched already)."""
        wd = self._libc.add_watch(self._fd, path, mask)
        if wd < 0:
            _raise_errno(f"watching {os.fsdecode(path)}")
        return int(wd)

    def rm_watch(self, wd: int) -> None:
        """Stop a watch; one the kernel dropped already (its folder deleted) is no error."""
        if self._libc.rm_watch(self._fd, wd) < 0 and ctypes.get_errno() != errno.EINVAL:
            _raise_errno("removing an inotify watch")

    def close(self, timeout: float = 10.0) -> None:
        """Stop the reading thread and close the instance (every watch goes with it)."""
        if self._closing:
            return
        self._closing = True
        os.write(self._wake_write, b"x")
        if self._thread.is_alive():
            self._thread.join(timeout)
        for fd in (self._fd, self._wake_read, self._wake_write):
            os.close(fd)

    def _read_loop(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake_read, select.POLLIN)
        while not self._closing:
            ready = {fd for fd, _ in poller.poll()}
            if self._wake_read in ready or self._closing:
                return
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                continue
            except OSError:
                return
            try:
                self._on_events(parse(data))
            except Exception:
                # One bad batch must not end the watching of every checkout.
                log.exception("handling file events failed")


def parse(data: bytes) -> list[Event]:
    """The ``struct inotify_event`` records of one read."""
    events = []
    offset = 0
    while offset + _HEADER.size <= len(data):
        wd, mask, cookie, length = _HEADER.unpack_from(data, offset)
        start = offset + _HEADER.size
        events.append(Event(wd, mask, cookie, data[start : start + length].rstrip(b"\0")))
        offset = start + length
    return events
