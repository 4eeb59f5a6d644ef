"""The clone's drive as git judges it: ``core.ignorecase`` and ``core.precomposeunicode``.

git clone probes the drive it writes to (git for Windows and macOS preset both), and git then keeps one
index entry per file the drive can hold. Clones made by earlier versions of the helper carry the
mirrors' ``false`` for both, whatever the drive: those are probed again, once, as git clone would.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import unicodedata
from pathlib import Path

from memsync.mirror import escape_for_terminal
from memsync.remote.location import git, git_config

PROBED = "memstore.driveProbed"


def _ignores_case(git_dir: Path) -> bool:
    # git clone's own probe: its config file found under another case.
    return os.path.lexists(git_dir / "CoNfIg")


def _precomposes(git_dir: Path) -> bool | None:
    """macOS only, as git probes it: whether the drive hands back an NFC name in NFD (None elsewhere,
    where git leaves the key unset and never reads it)."""
    if sys.platform != "darwin":
        return None
    probe = git_dir / "\u00c4-memstore-probe"
    try:
        probe.touch()
        return os.path.lexists(git_dir / unicodedata.normalize("NFD", probe.name))
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


def judge_drive(git_dir: Path) -> list[str]:
    """Re-probe a clone carrying the mirrors' values (once); warnings for an index holding two
    spellings of one file of this drive, each naming the command that repairs it."""
    if git_config(git_dir, PROBED) is None:
        if git_config(git_dir, "core.ignorecase") == "false":
            if _ignores_case(git_dir):
                git(git_dir, "config", "core.ignorecase", "true")
            else:
                git(git_dir, "config", "--unset", "core.ignorecase")
        if git_config(git_dir, "core.precomposeunicode") == "false":
            probed = _precomposes(git_dir)
            if probed is None:
                git(git_dir, "config", "--unset", "core.precomposeunicode")
            else:
                git(git_dir, "config", "core.precomposeunicode", str(probed).lower())
        git(git_dir, "config", PROBED, "true")
    return _index_twins(git_dir)


def _index_twins(git_dir: Path) -> list[str]:
    fold_case = _ignores_case(git_dir)
    compose = git_config(git_dir, "core.precomposeunicode") == "true"
    if not (fold_case or compose):
        return []
    groups: dict[str, list[str]] = {}
    for path in (git(git_dir, "ls-files", "-z") or "").split("\0"):
        if path:
            key = unicodedata.normalize("NFC", path) if compose else path
            groups.setdefault(key.casefold() if fold_case else key, []).append(path)
    warnings = []
    for names in (names for names in groups.values() if len(names) > 1):
        work_tree = git_dir.parent
        on_disk = [name for name in names if _named(work_tree, name)]
        stale = [name for name in names if name not in on_disk[:1]] if on_disk else names[1:]
        shown = " and ".join(escape_for_terminal(name) for name in names)
        where = f" (it is {escape_for_terminal(on_disk[0])} there)" if on_disk else ""
        warnings.append(
            f"the index holds {shown}, one file on this drive{where}: run `git rm --cached -- "
            f"{' '.join(shlex.quote(escape_for_terminal(name)) for name in stale)}`, then commit"
        )
    return warnings


def _named(work_tree: Path, path: str) -> bool:
    """Whether the drive holds ``path`` under exactly that name, not another that folds like it."""
    folder, _, name = path.rpartition("/")
    with contextlib.suppress(OSError):
        return name in os.listdir(work_tree / folder)
    return False
