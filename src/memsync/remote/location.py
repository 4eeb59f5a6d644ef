"""Where a ``memstore::`` URL points, and the token that opens it.

The URL is the store's own URL in its API, so a user copies it from the API rather than learning a
memsync syntax: the dialect follows from the path (``/api/v1/forward/``, ``/api/v1/cloud/`` or
``/v1/``, then ``memory_stores/<id>``), and what comes before that prefix is the API's base URL.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from memsync.errors import ConfigError
from memsync.rules import Dialect

TOKEN_ENV = "MEMSYNC_TOKEN"

_PREFIXES = {"/api/v1/forward": Dialect.FORWARD, "/api/v1/cloud": Dialect.CLOUD, "/v1": Dialect.ANTHROPIC}
_STORE_PATH = re.compile(
    r"^(?P<base>.*?)(?P<prefix>/api/v1/forward|/api/v1/cloud|/v1)/memory_stores/(?P<id>[^/]+)/?$"
)


@dataclass(frozen=True)
class StoreLocation:
    """A store's URL taken apart: its dialect, the API's base URL and the store's id."""

    url: str
    dialect: Dialect
    base_url: str
    store_id: str


def parse_store_url(url: str) -> StoreLocation:
    """The store a ``memstore::`` URL names; :class:`ConfigError` (exit 2) saying what is expected."""
    parts = urlsplit(url)
    expected = (
        "a store's URL in its API, such as https://api.example.com/api/v1/forward/memory_stores/<id>"
        " (or /api/v1/cloud/…, /v1/… for Anthropic)"
    )
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"memstore::{url} is not an http(s) URL: give {expected}")
    if parts.query or parts.fragment:
        raise ConfigError(f"memstore::{url} has a query or fragment: give {expected}")
    found = _STORE_PATH.match(parts.path)
    if found is None:
        raise ConfigError(f"memstore::{url} names no store: give {expected}")
    base = f"{parts.scheme}://{parts.netloc}{found['base']}"
    return StoreLocation(url, _PREFIXES[found["prefix"]], base, found["id"])


def read_token(location: StoreLocation, git_dir: Path) -> str:
    """The API token: ``$MEMSYNC_TOKEN``, else the file ``memstore.tokenFile`` names in git config,
    else what git's credential helpers give for the URL (``git credential fill``).

    Never written anywhere: not into the URL, the clone's config or a log line.
    """
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        return token
    named = git_config(git_dir, "memstore.tokenFile")
    if named:
        path = Path(named).expanduser()
        try:
            token = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(
                f"memstore.tokenFile names {path}, which cannot be read ({exc.strerror}): fix the path"
                " (git config memstore.tokenFile FILE) or set MEMSYNC_TOKEN"
            ) from None
        if not token:
            raise ConfigError(f"memstore.tokenFile names {path}, which is empty: put the API token in it")
        return token
    token = _credential(location)
    if token:
        return token
    raise ConfigError(
        f"no API token for {location.url}: set MEMSYNC_TOKEN, name a file holding it"
        " (git config memstore.tokenFile FILE), or store it with a git credential helper"
    )


def _credential(location: StoreLocation) -> str:
    parts = urlsplit(location.url)
    query = f"protocol={parts.scheme}\nhost={parts.netloc}\npath={parts.path.lstrip('/')}\n\n"
    try:
        answer = subprocess.run(
            ["git", "credential", "fill"],
            input=query,
            capture_output=True,
            text=True,
            check=False,
            # No prompt for a username and password: an API token is no password a user types here.
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "", "SSH_ASKPASS": ""},
        )
    except OSError:
        return ""
    if answer.returncode != 0:
        return ""
    fields = dict(line.split("=", 1) for line in answer.stdout.splitlines() if "=" in line)
    return fields.get("password", "").strip()


def git(git_dir: Path, *args: str) -> str | None:
    """What ``git --git-dir=GIT_DIR ARGS`` prints (stripped), or None when it fails."""
    found = subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], capture_output=True, text=True, check=False
    )
    return found.stdout.strip() if found.returncode == 0 else None


def git_config(git_dir: Path, key: str) -> str | None:
    """One value of the repository's git config (and the user's, system's), or None."""
    return git(git_dir, "config", "--get", key)


def git_config_all(git_dir: Path, key: str) -> list[str]:
    """Every value of a multi-valued key (``memstore.skipVersion``)."""
    return (git(git_dir, "config", "--get-all", key) or "").split()
