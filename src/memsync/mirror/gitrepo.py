"""Opening a git repository at exactly a path: the one way the mirror and backups do it (pygit2).

``NO_SEARCH`` because a path that is not itself a repository must fail, not open whatever repository
one of its parent folders belongs to (a mirror root inside someone's checkout, a backup path under
a repository): memsync would then read or write the wrong repository.
"""

from __future__ import annotations

from pathlib import Path

import pygit2

from memsync.mirror.errors import translated


def open_repository(path: Path, action: str) -> pygit2.Repository:
    """The repository at ``path``; :class:`~memsync.errors.MirrorError` ``"<action>: <git's reason>"``
    when there is none (or git cannot read it). Free it (``.free()``) when done: it holds pack maps."""
    with translated(action):
        return pygit2.Repository(str(path), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)


def is_repository(path: Path) -> bool:
    """Whether git can open ``path`` itself as a repository (bare or not); nothing is kept open."""
    try:
        repo = pygit2.Repository(str(path), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    except (pygit2.GitError, OSError):
        return False
    repo.free()
    return True
