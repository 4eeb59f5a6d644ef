"""The mirror's refinements of :class:`memsync.errors.MirrorError`, and the one pygit2 boundary:
:func:`translated` turns pygit2's exceptions into :mod:`memsync.errors` at every public operation's edge.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pygit2

from memsync.errors import MirrorError, UnsafeInput


class RefMoved(MirrorError):
    """A compare-and-swap ref update found the ref at another commit than expected."""

    def __init__(self, ref: str, expected: str | None, actual: str | None) -> None:
        super().__init__(
            f"{ref} moved while memsync was writing (expected {expected or 'no ref'}, "
            f"found {actual or 'no ref'}); another process is writing this mirror: run again"
        )


class FormatError(MirrorError):
    """A commit that memsync should have written does not follow the mirror's format."""


class PathEncodingError(UnsafeInput):
    """A memory or working-tree path with no valid spelling on the other side of the encoding;
    ``suggestion`` is the canonical spelling when one can be guessed (``100%25.md`` for ``100%.md``)."""

    def __init__(self, message: str, *, path: str, reason: str, suggestion: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.reason = reason
        self.suggestion = suggestion


@contextmanager
def translated(action: str) -> Iterator[None]:
    """Turn pygit2's exceptions into :class:`MirrorError` naming ``action``."""
    try:
        yield
    except (pygit2.GitError, OSError) as exc:
        raise MirrorError(f"{action}: {exc}") from exc
    except (KeyError, ValueError) as exc:
        # pygit2 answers a missing object with KeyError and a malformed id with ValueError.
        raise MirrorError(f"{action}: {exc.args[0] if exc.args else type(exc).__name__}") from exc
