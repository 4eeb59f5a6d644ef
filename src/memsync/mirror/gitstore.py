"""The git repository under a mirror or a view: the one place memsync reads and writes it.

A :class:`GitStore` owns its ``pygit2.Repository``. Everything else in memsync works through its
methods: refs moved only by compare-and-swap, the one walk of a tree, blob reads, objects written by
``git fast-import`` (:mod:`memsync.mirror.fastimport`), and packs kept few by ``git repack``. libgit2
reads; git's own programs write packs; memsync encodes none of git's formats.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import pygit2

from memsync.errors import MirrorError
from memsync.mirror.errors import RefMoved, translated
from memsync.mirror.fastimport import SCRATCH_REF, FastImport
from memsync.mirror.gitbinary import run_git
from memsync.mirror.gitrepo import open_repository

# How many packs a repository may hold before git repacks it (see GitStore.repack). One thread: the
# machines memsync runs on are small, and each pack-objects thread has its own delta window.
GEOMETRIC_FROM = 8
REPACK = ["-c", "pack.threads=1", "repack", "--geometric=2", "-d", "-q"]

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


class GitStore:
    """One git repository with a working tree, at ``path``."""

    def __init__(self, repo: pygit2.Repository, path: Path) -> None:
        self._repo = repo
        self.path = path
        self.git_dir = Path(repo.path)
        self.objects_dir = self.git_dir / "objects"
        self.state_dir = self.git_dir / "memsync"

    def close(self) -> None:
        """Release the repository's files (pack handles and maps); unusable after."""
        self._repo.free()

    def reopen(self) -> None:
        """Fresh pygit2 handles (after git replaced the pack files the old ones had open)."""
        self._repo.free()
        self._repo = open_repository(self.path, "reopening the repository")

    # --- refs ------------------------------------------------------------------------------------

    def ref_target(self, name: str) -> str | None:
        """The commit id ``name`` points at, or None if the ref does not exist."""
        with translated(f"reading {name}"):
            ref = self._repo.references.get(name)
            if ref is None:
                return None
            return str(ref.resolve().target)

    def set_ref_if_equals(
        self, name: str, new: str, expected_old: str | None, *, message: str = "memsync"
    ) -> None:
        """Point ``name`` at ``new`` only if it still points at ``expected_old`` (None: absent).

        Atomic against other writers (libgit2 locks the ref and compares under the lock); raises
        :class:`RefMoved` naming what it found otherwise.
        """
        if not name.startswith("refs/"):
            raise MirrorError(f"refusing to update {name!r}: not a full ref name under refs/")
        try:
            if expected_old is None:
                self._repo.create_reference_direct(name, new, False, message=message)
                return
            ref = self._repo.references.get(name)
            actual = str(ref.target) if ref is not None else None
            if ref is None or actual != expected_old:
                raise RefMoved(name, expected_old, actual)
            ref.set_target(new, message)
        except pygit2.AlreadyExistsError:
            raise RefMoved(name, expected_old, self.ref_target(name)) from None
        except (pygit2.GitError, OSError) as exc:  # pygit2 reports a held lock as an OSError
            if "does not match" in str(exc) or "modified" in str(exc):
                raise RefMoved(name, expected_old, self.ref_target(name)) from None
            lock = self.git_dir / f"{name}.lock"
            if lock.exists():
                raise MirrorError(
                    f"cannot update {name}: {lock} exists. Another git process is updating it, or one "
                    "was killed; if none is running, delete that file and run again"
                ) from exc
            raise MirrorError(f"updating {name}: {exc}") from exc

    def delete_ref_if_equals(self, name: str, expected_old: str) -> None:
        """Delete ``name`` only if it points at ``expected_old``; :class:`RefMoved` otherwise."""
        actual = self.ref_target(name)
        if actual != expected_old:
            raise RefMoved(name, expected_old, actual)
        # git update-ref compares under the ref lock; pygit2's delete cannot.
        try:
            run_git(self.path, ["update-ref", "-d", name, expected_old], action=f"deleting {name}")
        except MirrorError:
            raise RefMoved(name, expected_old, self.ref_target(name)) from None

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        """Whether ``ancestor`` is ``descendant`` or one of its ancestors."""
        if ancestor == descendant:
            return True
        try:
            return bool(self._repo.descendant_of(descendant, ancestor))
        except (pygit2.GitError, KeyError, ValueError):
            return False

    # --- reading objects -------------------------------------------------------------------------

    def tree_files(self, commit: str | None) -> dict[str, str]:
        """``{tree path: blob id}`` of every file in ``commit``'s tree (None: the empty tree)."""
        if commit is None:
            return {}
        with translated(f"reading the tree of {commit}"):
            return dict(walk_tree(self._repo[commit].peel(pygit2.Tree)))

    def read_blob(self, blob_id: str) -> bytes:
        with translated(f"reading blob {blob_id}"):
            blob = self._repo[blob_id]
        if not isinstance(blob, pygit2.Blob):
            raise MirrorError(f"{blob_id} is not a blob")
        return blob.data

    def has_object(self, object_id: str) -> bool:
        with translated(f"looking up {object_id}"):
            return bool(self._repo.odb.exists(object_id))

    # --- writing objects, and keeping the packs few ----------------------------------------------

    def edit_tree(self, tree: str, changes: Iterable[tuple[str, str | None]]) -> str:
        """The id of ``tree`` with each ``(tree path, blob id or None to remove)`` applied in order
        (libgit2 writes the trees). A file put where a folder was replaces the folder, and the
        other way round, as a checkout would."""
        with translated(f"editing tree {tree}"):
            index = pygit2.Index()
            index.read_tree(self._repo[tree].peel(pygit2.Tree))
            for path, blob in changes:
                for entry in [e.path for e in index if e.path == path or e.path.startswith(path + "/")]:
                    index.remove(entry)
                if blob is None:
                    continue
                parts = path.split("/")
                for depth in range(1, len(parts)):
                    if "/".join(parts[:depth]) in index:
                        index.remove("/".join(parts[:depth]))
                index.add(pygit2.IndexEntry(path, pygit2.Oid(hex=blob), pygit2.enums.FileMode.BLOB))
            return str(index.write_tree(self._repo))

    def recommit(self, commit: str, tree: str, parents: list[str]) -> str:
        """``commit`` again with another tree and parents; author, committer, message and its encoding
        stay (libgit2 writes it; a signature would no longer verify, so it goes)."""
        with translated(f"rewriting commit {commit}"):
            old = self._repo[commit].peel(pygit2.Commit)
            oid = self._repo.create_commit(
                None,
                old.author,
                old.committer,
                old.raw_message,
                pygit2.Oid(hex=tree),
                [pygit2.Oid(hex=parent) for parent in parents],
                *([old.message_encoding] if old.message_encoding else []),
            )
        return str(oid)

    def fast_import(self) -> FastImport:
        """A ``git fast-import`` for one batch of objects (:mod:`memsync.mirror.fastimport`)."""
        # A writer killed mid-stream left its scratch ref (the caller's lock keeps out any live
        # one), and fast-import, seeing its input end early, a crash report: neither holds anything.
        with translated("clearing a killed import's scratch ref"):
            if self._repo.references.get(SCRATCH_REF) is not None:
                self._repo.references.delete(SCRATCH_REF)
        for report in self.git_dir.glob("fast_import_crash_*"):
            report.unlink(missing_ok=True)
        self.state_dir.mkdir(exist_ok=True)
        return FastImport(self.git_dir, self.state_dir / "import-marks")

    def pack_count(self) -> int:
        return len(list((self.objects_dir / "pack").glob("pack-*.pack")))

    def repack(self) -> bool:
        """Keep the packs few, by git's own means; True if git repacked.

        Each batch of an import is one pack. Past :data:`GEOMETRIC_FROM` packs, ``git repack
        --geometric=2`` merges the smallest ones until each pack is at least twice the size of all
        smaller ones together: a handful of packs at any size, and each object rewritten only a
        logarithmic number of times.
        """
        if self.pack_count() <= GEOMETRIC_FROM:
            return False
        self.close()  # the pack files about to go are not held open
        try:
            run_git(self.path, REPACK, action="repacking the repository")
        finally:
            self.reopen()
        return True

    def drop_unreachable(self, *, keep_reflog: str | None = None) -> None:
        """Expire reflogs and prune every object nothing reaches (content that must leave for good).

        ``keep_reflog`` names a ref whose reflog survives as it is (the stash lives in its reflog).
        """
        kept_log = self.git_dir / "logs" / keep_reflog if keep_reflog else None
        kept = kept_log.read_bytes() if kept_log is not None and kept_log.exists() else None
        run_git(
            self.path,
            ["reflog", "expire", "--expire=now", "--expire-unreachable=now", "--all"],
            action="expiring the reflogs",
        )
        if kept_log is not None and kept is not None:
            temporary = kept_log.with_suffix(".memsync-tmp")
            temporary.write_bytes(kept)
            temporary.replace(kept_log)
        self.close()
        try:
            run_git(self.path, ["gc", "--prune=now", "--quiet"], action="pruning unreachable objects")
        finally:
            self.reopen()

    def fsck(self) -> None:
        """Run ``git fsck --strict``; :class:`MirrorError` with its findings if it is not clean."""
        run_git(self.path, ["fsck", "--strict", "--no-progress"], action=f"git fsck of {self.path}")


def walk_tree(tree: pygit2.Tree, prefix: str = "") -> Iterator[tuple[str, str]]:
    """``(tree path, blob id)`` of every file under ``tree``: memsync's one walk of a tree."""
    for item in tree:
        name = prefix + (item.name or "")
        if isinstance(item, pygit2.Tree):
            yield from walk_tree(item, name + "/")
        elif isinstance(item, pygit2.Blob):
            yield name, str(item.id)
