"""Where a mirror came from: the API dialect and base URL its history was imported from.

Kept in the repository's config (``git config memsync.dialect``, ``memsync.apibase``) by the first
pull that finds its store listed, and read back before a command trusts a listing: a config pointed
at the right server in the wrong dialect is then a configuration error naming both dialects, instead
of every mirror's store taken for deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pygit2

from memsync.mirror.errors import translated
from memsync.mirror.gitstore import GitStore

_DIALECT = "memsync.dialect"
_API_BASE = "memsync.apibase"


@dataclass(frozen=True, slots=True)
class Origin:
    dialect: str
    api_base: str

    @staticmethod
    def read(mirror: Path) -> Origin | None:
        """The origin recorded in the mirror at ``mirror`` (its working tree), or None: recorded before
        origins were, or a config that cannot be read (the open that follows says why). Reads the
        config file alone, without opening the repository: a selection checks every mirror this way."""
        try:
            config = pygit2.Config(str(mirror / ".git" / "config"))
            dialect, api_base = config[_DIALECT], config[_API_BASE]
        except (KeyError, pygit2.GitError, OSError):
            return None
        return Origin(str(dialect), str(api_base))


def record_origin(store: GitStore, origin: Origin) -> Origin | None:
    """Record ``origin`` in ``store``'s config; return the origin it replaces, if it was another."""
    config = store.config
    try:
        before = Origin(str(config[_DIALECT]), str(config[_API_BASE]))
    except KeyError:
        before = None
    if before != origin:
        # libgit2 writes the config whole and renames it over: a full disk fails it here, named.
        with translated(f"recording the mirror's origin in {store.git_dir / 'config'}"):
            config[_DIALECT] = origin.dialect
            config[_API_BASE] = origin.api_base
    return before if before != origin else None
