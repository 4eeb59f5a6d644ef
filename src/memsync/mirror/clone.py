"""What ``git clone memstore::…`` (:mod:`memsync.remote`) needs of memsync's mirrors (:class:`Clone`)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pygit2
from pygit2.enums import FileMode

from memsync.mirror.errors import translated
from memsync.mirror.gitbinary import run_git
from memsync.mirror.gitstore import GitStore
from memsync.mirror.ignores import EXCLUDE_BLOCK
from memsync.mirror.refs import BASE_REF, MAIN_REF, MEMSTORE_REF
from memsync.mirror.repository import ATTRIBUTES_BLOCK, PLAIN_CHECKOUT, Mirror


@dataclass(frozen=True, slots=True)
class Clone:
    """A git clone of a store (its ``git_dir``) and memsync's private mirror of that store."""

    git_dir: Path
    mirror: Path

    def configure(self) -> bool:
        """Make the clone check out memories as a mirror does (plain bytes, exact paths, editor
        temporaries excluded); whether anything was written. Remotes, branches and hooks stay."""
        with GitStore(self.git_dir, action=f"opening the clone at {self.git_dir}") as clone:
            return clone.configure(PLAIN_CHECKOUT, {"exclude": EXCLUDE_BLOCK, "attributes": ATTRIBUTES_BLOCK})

    def copy_history(self, ref: str) -> str | None:
        """Fetch the private mirror's imported history into the clone as ``ref`` (forced); the tip, or
        None before any import."""
        with Mirror.open(self.mirror) as repo:
            tip = repo.tip()
        if tip is None:
            return None
        flags = ["--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-gc", "--no-recurse-submodules"]
        fetch = ["fetch", *flags, str(self.mirror / ".git"), f"+{MEMSTORE_REF}:{ref}"]
        run_git(self.git_dir, fetch, action=f"copying the history of {self.mirror} into {self.git_dir}")
        return tip

    def discard_local(self, *, files: bool = True) -> None:
        """Put the private mirror back at its imported history: conflicts ended, ``main``, the base, the
        index and (``files``) the working tree at ``memstore/main``. The clone holds the user's work,
        so the private mirror keeps no edit or conflict that would refuse every later push."""
        with Mirror.open(self.mirror) as repo:
            for record in repo.conflicts.open().values():
                repo.conflicts.end(record, resolution="discarded: the clone that pushed merges it")
            tip = repo.tip()
            for ref in (MAIN_REF, BASE_REF):
                current = repo.git.ref_target(ref)
                if tip is None and current is not None:
                    repo.git.delete_ref_if_equals(ref, current)
                elif tip is not None and current != tip:
                    repo.git.set_ref_if_equals(ref, tip, current, message="memsync: back at the imported tip")
            if files:
                _stage(self.mirror / ".git", tip, self.mirror)
            if tip is not None:
                repo.align_index(tip)
                return
            index = repo.git.index()
            with translated("resetting the index"):
                index.clear()
                index.write()

    def stage(self, commit: str) -> list[str]:
        """Make the private mirror's working tree hold exactly the files of the clone's ``commit``."""
        return _stage(self.git_dir, commit, self.mirror)


def _stage(source: Path, commit: str | None, mirror: Path) -> list[str]:
    """Write ``commit`` of the repository ``source`` (None: no file) into the working tree of the mirror
    at ``mirror``, byte for byte. Returns the entries that cannot be a memory's file (a symbolic link,
    a submodule, a name git should not hold), which are not written; the scan judges the rest."""
    problems: list[str] = []
    for entry in [entry for entry in mirror.iterdir() if entry.name != ".git"]:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    with GitStore(source, action=f"opening {source}") as clone, translated(f"reading commit {commit}"):
        pending: list[tuple[str, pygit2.Tree]] = [("", clone.tree(commit))]
        while pending:
            prefix, folder = pending.pop()
            for item in folder:
                base = item.name or ""
                name = f"{prefix}{base}"
                if base in ("", ".", "..", ".git") or "/" in base:
                    problems.append(f"{name}: a name git should not hold")
                elif item.filemode == FileMode.TREE:
                    assert isinstance(item, pygit2.Tree)
                    (mirror / name).mkdir()
                    pending.append((f"{name}/", item))
                elif item.filemode in (FileMode.BLOB, FileMode.BLOB_EXECUTABLE):
                    (mirror / name).write_bytes(clone.read_blob(str(item.id)))
                else:
                    problems.append(f"{name}: a symbolic link or submodule, not a file")
    return problems
