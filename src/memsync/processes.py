"""Whether a process id names a live process, on every platform.

``os.kill(pid, 0)`` probes on POSIX; on Windows it does not probe at all: signal 0 is
``CTRL_C_EVENT``, sent to the console group. There the process is opened and its exit code read.
A leaf module: every package may use it, as it may use :mod:`memsync.errors`.
"""

from __future__ import annotations

import os
import sys


def process_alive(pid: int) -> bool:
    """Whether a process has this id (one alive under another user counts as alive). An id no
    process can have (zero, negative, out of range: a corrupt state file) is not alive."""
    if pid <= 0:
        return False
    if sys.platform == "win32":
        return _windows_alive(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError):
        return False
    return True


if sys.platform == "win32":
    import ctypes
    from ctypes import wintypes

    _PROCESS_QUERY_LIMITED_INFORMATION = 0x1000
    _STILL_ACTIVE = 259
    _ERROR_ACCESS_DENIED = 5

    def _windows_alive(pid: int) -> bool:
        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        if pid > 0xFFFFFFFF:
            return False
        handle = kernel32.OpenProcess(_PROCESS_QUERY_LIMITED_INFORMATION, False, pid)
        if not handle:
            # Denied means it exists (another user's); anything else, that it does not.
            return ctypes.get_last_error() == _ERROR_ACCESS_DENIED
        try:
            code = wintypes.DWORD()
            if not kernel32.GetExitCodeProcess(handle, ctypes.byref(code)):
                return True
            return code.value == _STILL_ACTIVE
        finally:
            kernel32.CloseHandle(handle)
