"""What ``git clone memstore::…`` (:mod:`memsync.remote`) needs of memsync's mirrors (:class:`Clone`)."""

from __future__ import annotations

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

# git's own judgement of the clone's drive (git clone probes it; git for Windows and macOS preset it).
DRIVE_SETTINGS = ("core.ignorecase", "core.precomposeunicode")


@dataclass(frozen=True, slots=True)
class Clone:
    """A git clone of a store (its ``git_dir``) and memsync's private mirror of that store."""

    git_dir: Path
    mirror: Path

    def configure(self) -> bool:
        """Make the clone check out memories as a mirror does (plain bytes, editor temporaries excluded),
        its drive judged by git itself (:data:`DRIVE_SETTINGS`); whether anything was written."""
        settings = {key: value for key, value in PLAIN_CHECKOUT.items() if key not in DRIVE_SETTINGS}
        with GitStore(self.git_dir, action=f"opening the clone at {self.git_dir}") as clone:
            return clone.configure(settings, {"exclude": EXCLUDE_BLOCK, "attributes": ATTRIBUTES_BLOCK})

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

    def discard_local(self) -> None:
        """Put the private mirror back at its imported history: conflicts ended, ``main``, the base and
        the index at ``memstore/main``. The clone holds the user's work, so the private mirror keeps no
        edit or conflict that would refuse every later push. Its files are never the push's: a push
        reads the commit from git's objects, and a checkout on the clone's drive could lose one of
        two names that differ only in case."""
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
            if tip is not None:
                repo.align_index(tip)

    def entries(self, commit: str) -> list[tuple[str, str, str]]:
        """``(tree path, kind, object id)`` of every entry of the clone's ``commit`` but its folders, read
        from git's objects (a drive may take two of its names for one file); kind is ``file``,
        ``symlink`` or ``submodule``."""
        kinds = {FileMode.BLOB: "file", FileMode.BLOB_EXECUTABLE: "file", FileMode.LINK: "symlink"}
        found = []
        opened = GitStore(self.git_dir, action=f"opening the clone at {self.git_dir}")
        with opened as clone, translated(f"reading commit {commit}"):
            pending = [("", clone.tree(commit))]
            while pending:
                prefix, folder = pending.pop()
                for item in folder:
                    if isinstance(item, pygit2.Tree):
                        pending.append((f"{prefix}{item.name}/", item))
                    else:
                        kind = kinds.get(item.filemode, "submodule")
                        found.append((f"{prefix}{item.name}", kind, str(item.id)))
        return sorted(found)

    def read(self, blob: str) -> bytes:
        with GitStore(self.git_dir, action=f"opening the clone at {self.git_dir}") as clone:
            return clone.read_blob(blob)
