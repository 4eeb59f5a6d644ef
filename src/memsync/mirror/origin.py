"""Where a mirror came from: the API dialect and base URL its history was imported from, kept in the
repository's config (``memsync.dialect``, ``memsync.apibase``; docs/mirror.md, "Origin")."""

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
        """The origin recorded in the mirror at ``mirror`` (its working tree), or None: none recorded, or
        a config that cannot be read. Reads the config file alone: a selection checks every mirror."""
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
    if before == origin:
        return None
    # libgit2 writes the config whole and renames it over: a full disk fails it here, named.
    with translated(f"recording the mirror's origin in {store.git_dir / 'config'}"):
        config[_DIALECT] = origin.dialect
        config[_API_BASE] = origin.api_base
    return before
