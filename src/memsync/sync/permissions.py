"""Who may read what memsync writes: owner-only unless the config shares it with the group.

A mirror holds a store's memories and their whole history, so what memsync creates is kept from
other users of the machine as restic and borg keep their repositories: the process's umask is set
once, at the start of a command, so every file and folder memsync, libgit2 and the git processes it
runs create (mirrors, caches, the spool, local backup remotes) is born owner-only, with no chmod
after the fact that a crash could skip. What exists already is not changed behind the user's back:
a root others can read gets one warning that names the fix.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from memsync.config import keeps_modes

OWNER_ONLY = 0o077
GROUP_READABLE = 0o027


def restrict_new_files(group_readable: bool) -> None:
    """Make what this process creates from now on owner-only (or readable by the group too)."""
    os.umask(GROUP_READABLE if group_readable else OWNER_ONLY)


def exposure(root: Path, group_readable: bool) -> str | None:
    """A warning when ``root`` lets users it should not read the mirrors in it, or None.

    None as well where the filesystem keeps no mode bits (exFAT, FAT, a Windows volume, some network
    shares report modes they do not enforce): a warning there could not be acted on.
    """
    if os.name == "nt":
        return None  # no POSIX modes; the profile's ACLs decide (docs/platforms.md)
    try:
        mode = stat.S_IMODE(root.stat().st_mode)
    except OSError:
        return None  # not created yet: it will be, owner-only
    allowed = GROUP_READABLE if group_readable else OWNER_ONLY
    if not mode & allowed or not keeps_modes(root):  # None: not ours to write, nor to warn about
        return None
    who = "other users" if mode & 0o007 else "the group"
    fix = "chmod -R g-w,o-rwx" if group_readable else "chmod -R go-rwx"
    return (
        f"{root} can be read by {who} of this machine (mode {mode:o}), and so can every store's memories"
        f" and history in it: run `{fix} {root}`"
        + ("" if group_readable else ", or set mirror.group_readable = true if a group shares it")
    )
