"""The one exception tree of memsync, and the exit codes it maps to.

Every error memsync raises on purpose derives from :class:`MemsyncError` and carries the exit code
that ``memsync`` exits with when it reaches the command line (docs/design.md §4)::

    MemsyncError                   1  root: something memsync could not do
    ├── UserError                  1  printed as one actionable line, no traceback
    │   ├── UsageError             2  the command line is wrong
    │   ├── ConfigError            2  the configuration is missing, unreadable or invalid
    │   ├── EnvironmentProblem     2  the machine lacks something (the git binary, a recent enough one)
    │   ├── RuleViolation          1  a path, content or metadata breaks a dialect rule (field, rule)
    │   ├── LockHeld              75  another memsync holds the lock; try again
    │   ├── DriftFound             5  verify found a difference between mirror and store
    │   ├── CheckoutBlocked        6  a git operation in progress (rebase, merge, ...) or HEAD off
    │   │                             main keeps the checkout from being reconciled: the message
    │   │                             names the git command that ends it
    │   └── ConflictsPending       4  conflicts, rejected files or withheld changes wait for the user
    ├── StorageFault               1  the local disk refused a write: full, read-only, failing, or
    │                                 not memsync's to write (the message names the fix)
    ├── ApiError                   1  the Memory Store API failed (memsync.api refines it)
    │   └── AuthenticationFailed   3  the token was refused
    └── MirrorError                1  a mirror repository could not be read or written (memsync.mirror)
        └── UnsafeInput            1  data from the API that must not be written (path, hash)

Foreign errors (httpx, pygit2, sqlite3) are translated once, at the boundary of the package that
imports them, so callers only ever see this tree.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable

# Exit codes, in the order of precedence of docs/design.md §4: when several apply, the first wins.
EXIT_USAGE = 2
EXIT_AUTH = 3
EXIT_LOCKED = 75
EXIT_FAILED = 1
EXIT_DRIFT = 5
# Not a failure (the store and the mirror are fine, the import went on) and not 4 either (no file
# waits for `memsync resolve`): the whole checkout waits until the user ends a git operation, so it
# ranks above the per-file 4 and below every failure.
EXIT_BLOCKED = 6
EXIT_ATTENTION = 4
EXIT_OK = 0

_PRECEDENCE = (
    EXIT_USAGE,
    EXIT_AUTH,
    EXIT_LOCKED,
    EXIT_FAILED,
    EXIT_DRIFT,
    EXIT_BLOCKED,
    EXIT_ATTENTION,
    EXIT_OK,
)


def combine_exit_codes(codes: Iterable[int]) -> int:
    """The exit code for a run whose parts ended with ``codes`` (docs/design.md §4 precedence)."""
    seen = set(codes)
    for code in _PRECEDENCE:
        if code in seen:
            return code
    # An unknown code is a failure, never silently success.
    return EXIT_FAILED if seen else EXIT_OK


class MemsyncError(Exception):
    """Root of every error memsync raises on purpose."""

    exit_code: int = EXIT_FAILED

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UserError(MemsyncError):
    """An error the user can act on: printed as one line, without a traceback."""


class UsageError(UserError):
    exit_code = EXIT_USAGE


class ConfigError(UserError):
    exit_code = EXIT_USAGE


class EnvironmentProblem(UserError):
    exit_code = EXIT_USAGE


class RuleViolation(UserError):
    """A value breaks a rule of docs/api-contract.md §2-§4. ``field`` names the value, ``rule`` the
    rule broken."""

    def __init__(self, field: str, rule: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.rule = rule
        self.detail = message


class LockHeld(UserError):
    exit_code = EXIT_LOCKED


class DriftFound(UserError):
    exit_code = EXIT_DRIFT


class CheckoutBlocked(UserError):
    """The checkout is in the middle of a git operation, or HEAD is off ``main``: nothing of it is
    reconciled until the user ends that (the message names the git command)."""

    exit_code = EXIT_BLOCKED


class ConflictsPending(UserError):
    exit_code = EXIT_ATTENTION


class ApiError(MemsyncError):
    """A call to a Memory Store API failed. ``memsync.api.errors`` has the precise kinds."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        error_type: str | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.request_id = request_id


class AuthenticationFailed(ApiError):
    exit_code = EXIT_AUTH


class MirrorError(MemsyncError):
    """A mirror repository could not be read or written."""


class UnsafeInput(MirrorError):
    """Data from the API that memsync refuses to write (a hostile path, a content/hash mismatch)."""


class StorageFault(MemsyncError):
    """The local disk refused a write: full, read-only, failing, or not memsync's to write.

    Every write memsync makes is resumable (docs/reliability.md): nothing was lost, and the next
    run once the fault is gone finishes what this one began, so the message says what to fix.
    """


# errno → what the disk said, and what to do about it.
_STORAGE_FAULTS = {
    errno.ENOSPC: ("the disk is full", "free space on it"),
    errno.EDQUOT: ("the disk quota is used up", "free space or raise the quota"),
    errno.EROFS: ("the filesystem is read-only", "remount it read-write (or move the mirrors)"),
    errno.EIO: ("the disk reported an I/O error", "check the disk (dmesg, fsck) and its connection"),
    errno.EACCES: ("memsync may not write there", "check the owner and permissions of the mirror root"),
    errno.EPERM: ("memsync may not write there", "check the owner and permissions of the mirror root"),
}
# How git and libgit2 quote those errors in their own messages (strerror's words, on every libc).
_STORAGE_WORDS = {
    "No space left on device": errno.ENOSPC,
    "Disk quota exceeded": errno.EDQUOT,
    "Read-only file system": errno.EROFS,
    "Input/output error": errno.EIO,
    "Permission denied": errno.EACCES,
    # SQLite's words for the same faults (the content index)
    "database or disk is full": errno.ENOSPC,
    "disk I/O error": errno.EIO,
}
_AFTER = "then run again: nothing was lost, and the next run finishes what this one began"


def storage_fault_hint(message: str) -> str | None:
    """What to do about an error whose message quotes a storage fault (from an OSError, git or
    libgit2), as the tail of a one-line message; None when it quotes none."""
    for words, number in _STORAGE_WORDS.items():
        if words in message:
            what, fix = _STORAGE_FAULTS[number]
            return f"{what}: {fix}, {_AFTER}"
    return None


def storage_error(message: str) -> MemsyncError:
    """The error a message quoting a local write's failure (git's, libgit2's, SQLite's) amounts to:
    a :class:`StorageFault` with the fix appended when it quotes a fault of :data:`_STORAGE_FAULTS`."""
    hint = storage_fault_hint(message)
    return MirrorError(message) if hint is None else StorageFault(f"{message}: {hint}")


def storage_fault(error: OSError, doing: str) -> MemsyncError:
    """The error an OSError from a local write amounts to: a :class:`StorageFault` naming what
    failed, where, and the fix, for the faults of :data:`_STORAGE_FAULTS`; else a MirrorError with
    the same facts. Never a traceback."""
    where = f" ({error.filename})" if error.filename else ""
    text = f"{doing}: {error.strerror or error}{where}"
    if error.errno in _STORAGE_FAULTS:
        what, fix = _STORAGE_FAULTS[error.errno]
        return StorageFault(f"{text}: {what}: {fix}, {_AFTER}")
    return MirrorError(text)
