"""The checkout's files as memories: reading them safely, and writing what reconciling decides.

A memory is a regular file whose path decodes to a memory path (docs/push.md, "What is a memory"); a file
with no memory path (``100%.md``, a second spelling of one memory) is a *stray*: reported, never touched.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import operator
import os
import posixpath
import secrets
import stat
import time
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from memsync.errors import MirrorError, RuleViolation
from memsync.mirror.errors import PathEncodingError
from memsync.mirror.fastimport import blob_id
from memsync.mirror.gitstore import TEMPORARY_PREFIX, GitStore, make_durable
from memsync.mirror.ignores import is_ignore_file, is_ignored
from memsync.mirror.paths import (
    check_memory_path,
    decoded,
    encode_paths,
    encoded,
    escape_for_terminal,
    segment_spellings,
)
from memsync.rules import MAX_CONTENT_BYTES, Dialect, decode_content

INDEX_LOCK_WAIT_S = 5.0


class WorktreeChanged(MirrorError):
    """A checkout file no longer holds what the plan saw: the user saved it meanwhile; re-plan."""

    def __init__(self, tree_path: str, expected: str | None, found: str | None) -> None:
        super().__init__(
            f"{escape_for_terminal(tree_path)} changed while memsync was working on it"
            f" (expected {_describe(expected)}, found {_describe(found)}); run again"
        )


def _describe(sha: str | None) -> str:
    return "no file" if sha is None else ("a non-regular file" if sha == NOT_REGULAR else sha[:12])


# What :meth:`Worktree.sha256` reports for a symlink or other non-regular file: never a real hash.
NOT_REGULAR = "not-a-regular-file"


@dataclass(frozen=True, slots=True)
class WorktreeFile:
    """One candidate memory. ``kind`` is ``file`` (hashed, unless it vanished while read; ``problem``:
    the content rule it breaks) or ``symlink``, ``fifo``, ``socket``, ``device``, ``other``: never read."""

    tree_path: str
    kind: str
    sha256: str | None = None
    problem: str | None = None


@dataclass
class WorktreeScan:
    """Candidate memories by memory path; strays by tree path, with the reason and what to do."""

    files: dict[str, WorktreeFile] = field(default_factory=dict)
    strays: dict[str, str] = field(default_factory=dict)


class _StatCache:
    """What scans found, by tree path and ``lstat`` (state ``worktree-stat``): hashing is most of a scan.
    A file whose mtime is within a second of the scan that hashed it is hashed again: rewritten in the
    same timestamp tick, it would look unchanged (git's "racily clean" problem)."""

    FORMAT = 2
    RACY_NS = 1_000_000_000

    def __init__(self, git: GitStore, dialect: Dialect, *, trusted: bool) -> None:
        self._state, self._dialect = git.state, dialect
        # What the cached answers depend on besides the files: a cache of another dialect is not used.
        self._header = {"format": self.FORMAT, "dialect": dialect.value}
        self._started = time.time_ns()
        data = self._state.get("worktree-stat") if trusted else None
        if not isinstance(data, dict) or any(data.get(key) != value for key, value in self._header.items()):
            data = {}
        files = data.get("files")
        self._old: dict[str, list[object]] = files if isinstance(files, dict) else {}
        self._new: dict[str, list[object]] = {}

    def inspect(self, full: Path, tree_path: str, info: os.stat_result) -> WorktreeFile:
        """The file as the scan that hashed it found it, if it is unchanged; else hashed now."""
        kind = _KINDS.get(stat.S_IFMT(info.st_mode), "other")
        if kind != "file":
            return WorktreeFile(tree_path, kind)
        key: list[object] = [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino]
        entry = self._old.get(tree_path)
        if isinstance(entry, list) and len(entry) == 7 and entry[:4] == key:
            hashed_at, old_sha, old_problem = entry[4:]
            settled = isinstance(hashed_at, int) and info.st_mtime_ns + self.RACY_NS < hashed_at
            if settled and isinstance(old_sha, str) and isinstance(old_problem, str | None):
                self._new[tree_path] = entry
                return WorktreeFile(tree_path, kind, old_sha, old_problem)
        try:
            sha, size, data = _hash_file(full)
        except _NotRegular as exc:
            return WorktreeFile(tree_path, exc.args[0])
        except FileNotFoundError:
            # Gone between the listing and the read (an editor saving by rename): held, not a delete.
            return WorktreeFile(tree_path, kind, problem="it disappeared while memsync read it")
        problem: str | None = None
        try:
            if data is None:
                raise RuleViolation(
                    "content", "too_large", f"is {size} bytes; at most {MAX_CONTENT_BYTES} (100 KiB)"
                )
            decode_content(data, self._dialect)
        except RuleViolation as exc:
            problem = str(exc)
        self._new[tree_path] = [*key, self._started, sha, problem]
        return WorktreeFile(tree_path, kind, sha, problem)

    def save(self) -> None:
        if self._new != self._old:
            with contextlib.suppress(MirrorError):  # a cache: the next scan hashes again
                self._state.put("worktree-stat", {**self._header, "files": self._new})


def _walk(root: Path) -> Iterable[tuple[str, os.stat_result]]:
    """``(tree path, lstat)`` of every non-folder below ``root`` but ``.git``, links not followed."""
    pending = [""]
    while pending:
        prefix = pending.pop()
        try:
            entries = sorted(os.scandir(root / prefix), key=lambda e: e.name)
        except FileNotFoundError:
            continue
        for entry in entries:
            tree_path = f"{prefix}{entry.name}"
            if tree_path == ".git":
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(info.st_mode):
                pending.append(tree_path + "/")
            else:
                yield tree_path, info


_KINDS = {stat.S_IFREG: "file", stat.S_IFLNK: "symlink", stat.S_IFIFO: "fifo", stat.S_IFSOCK: "socket"}
_KINDS |= dict.fromkeys((stat.S_IFCHR, stat.S_IFBLK), "device")


class _NotRegular(Exception):
    """A file that is never read (a link, a fifo, ...); its kind (:class:`WorktreeFile`) is ``args[0]``."""


# O_NOFOLLOW and O_NONBLOCK do not exist on Windows, where a link is no file to open by mistake and
# a fifo cannot sit in a folder; the fstat below still refuses anything but a regular file.
_OPTIONAL_FLAGS = ("O_NOFOLLOW", "O_NONBLOCK", "O_CLOEXEC", "O_BINARY")
_READ_FLAGS = functools.reduce(operator.or_, (getattr(os, name, 0) for name in _OPTIONAL_FLAGS), os.O_RDONLY)


def _hash_file(full: Path) -> tuple[str, int, bytes | None]:
    """``(sha256, size, bytes or None when too large to be a memory)``, never through a link."""
    if not hasattr(os, "O_NOFOLLOW") and os.path.islink(full):
        raise _NotRegular("symlink")  # checked by hand where the flag cannot (a race git shares)
    try:
        fd = os.open(full, _READ_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _NotRegular("symlink") from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):
            raise _NotRegular("other") from None
        raise
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _NotRegular(_KINDS.get(stat.S_IFMT(info.st_mode), "other"))
        if info.st_size <= MAX_CONTENT_BYTES:
            data = handle.read(MAX_CONTENT_BYTES + 1)
            if len(data) <= MAX_CONTENT_BYTES:
                return hashlib.sha256(data).hexdigest(), len(data), data
            handle.seek(0)
        # Too large to be a memory: hashed in chunks (it is only ever reported), never held.
        return hashlib.file_digest(handle, "sha256").hexdigest(), handle.tell(), None


@functools.lru_cache(maxsize=64)
def _case_insensitive(root: Path) -> bool:
    # Rule 2 escapes a memory's ``.GIT``: only a filesystem that ignores case has one.
    return os.path.lexists(root / ".GIT")


def _named(root: Path, tree_path: str) -> bool:
    """Whether ``tree_path`` exists by that very name, not another's that folds like it."""
    folder, _, name = tree_path.rpartition("/")
    try:
        return name in os.listdir(root / folder if folder else root)
    except OSError:
        return False


def _is_folder(path: Path) -> bool:
    """A link to a folder is a file of the checkout: never followed."""
    return os.path.isdir(path) and not os.path.islink(path)


def prune_folders(root: Path, tree_path: str) -> None:
    """Remove the folders of ``tree_path`` that are now empty."""
    for folder in PurePosixPath(tree_path).parents[:-1]:
        try:
            (root / folder).rmdir()
        except OSError:
            return


@dataclass(frozen=True, slots=True)
class CheckoutChange:
    """``data`` for the memory's file (None: remove it) if it hashes to ``expected_sha256`` (None: absent)."""

    memory_path: str
    data: bytes | None
    expected_sha256: str | None


class Worktree:
    """The mirror's working tree as memories (``mirror.worktree``): see the module docstring."""

    def __init__(self, git: GitStore) -> None:
        self._git = git
        self.path = git.path

    def scan(
        self,
        dialect: Dialect,
        *,
        known: Set[str] = frozenset(),
        save_cache: bool = True,
        trust_cache: bool = True,
    ) -> WorktreeScan:
        """Hash the working tree's files; ``known`` memory paths count whatever git ignores."""
        cache = _StatCache(self._git, dialect, trusted=trust_cache)
        scan = WorktreeScan()

        # The index is asked only about the few files git would ignore: a tracked one still counts.
        def counts(tree_path: str) -> bool:
            return not is_ignored(self._git, tree_path) or tree_path in self._git.index()

        for tree_path, info in _walk(self.path):
            # Never a memory's spelling (that is %2Egitignore): it would be a stray on every sync.
            if is_ignore_file(tree_path):
                continue
            try:
                memory_path = decoded(tree_path)
            except PathEncodingError as exc:
                if counts(tree_path):
                    scan.strays[tree_path] = str(exc)
                continue
            if memory_path not in known and not counts(tree_path):
                continue
            if (other := scan.files.get(memory_path)) is not None:
                scan.strays[tree_path] = (
                    f"{escape_for_terminal(other.tree_path)} and {escape_for_terminal(tree_path)} are two"
                    f" spellings of the memory {escape_for_terminal(memory_path)}; keep one of them"
                )
                continue
            scan.files[memory_path] = cache.inspect(self.path / tree_path, tree_path, info)
        if save_cache:
            cache.save()
        return scan

    def memory_paths(self) -> dict[str, str]:
        """``{memory path: tree path}`` of the checkout's files (any kind), none read."""
        found: dict[str, str] = {}
        for tree_path, _ in _walk(self.path):
            with contextlib.suppress(PathEncodingError):
                found.setdefault(decoded(tree_path), tree_path)
        return found

    def blob(self, tree_path: str) -> str | None:
        """git's blob id of the regular file at ``tree_path`` (None: absent, not regular, or too large)."""
        try:
            data = _hash_file(self.path / tree_path)[2]
        except (_NotRegular, OSError):
            return None
        return None if data is None else blob_id(data)

    def locate(self, memory_path: str) -> str | None:
        """The tree path of the memory's file in the checkout now (any spelling), or None."""
        root = self.path
        exact = _case_insensitive(root)
        segments = check_memory_path(memory_path).split("/")
        # One level at a time: a spelling whose folders are not there is not looked at.
        found = [""]
        for depth, segment in enumerate(segments, 1):
            last = depth == len(segments)
            found = [
                joined
                for prefix in found
                for components in segment_spellings(segment, last=last)
                if os.path.lexists(root / (joined := posixpath.join(prefix, *components)))
                and _is_folder(root / joined) != last
                and (not exact or _named(root, joined))
            ]
        if len(found) > 1:
            raise MirrorError(
                f"{escape_for_terminal(found[0])} and {escape_for_terminal(found[1])} are both the memory"
                f" {escape_for_terminal(memory_path)}; keep one of them and run again"
            )
        return found[0] if found else None

    def _hash_at(self, tree_path: str) -> tuple[str | None, bytes | None]:
        try:
            sha, _, data = _hash_file(self.path / tree_path)
        except _NotRegular:
            return NOT_REGULAR, None
        except FileNotFoundError:
            return None, None
        return sha, data

    def sha256(self, memory_path: str) -> str | None:
        """The SHA-256 of the memory's checkout file now; None if absent; :data:`NOT_REGULAR` for a link."""
        tree_path = self.locate(memory_path)
        return None if tree_path is None else self._hash_at(tree_path)[0]

    def read(self, memory_path: str, expected_sha256: str) -> bytes:
        """The bytes of the memory's checkout file, which must still hash to ``expected_sha256``."""
        tree_path = self.locate(memory_path) or encoded(memory_path)
        found, data = self._hash_at(tree_path)
        if found != expected_sha256 or data is None:
            raise WorktreeChanged(tree_path, expected_sha256, found)
        return data

    def apply(self, changes: Sequence[CheckoutChange], *, present: Mapping[str, str]) -> list[str]:
        """Carry out ``changes``, every expectation checked first, and respell the files ``present`` (as
        scanned) whose ``%_`` suffix the new set of paths changes; returns warnings."""
        by_path = {change.memory_path: change for change in changes}
        if len(by_path) != len(changes):
            raise MirrorError("two checkout changes for one memory: the plan is inconsistent")
        for change in changes:
            self._check_unchanged(change.memory_path, change.expected_sha256)
        removed = {c.memory_path for c in changes if c.data is None}
        final = (set(present) | set(by_path)) - removed
        spelling = encode_paths(final)
        pending: list[tuple[str, str | None, CheckoutChange | None]] = []  # (target, where now, change)
        for memory_path in sorted(final):
            if (wanted := by_path.get(memory_path)) is not None:
                pending.append((spelling[memory_path], self.locate(memory_path), wanted))
            elif present[memory_path] != spelling[memory_path]:
                pending.append((spelling[memory_path], present[memory_path], None))
        touched = [path for target, where, _ in pending for path in (target, where) if path is not None]
        for memory_path in sorted(removed):
            if (gone := self.locate(memory_path)) is not None:
                self._check_unchanged(memory_path, by_path[memory_path].expected_sha256)
                os.unlink(self.path / gone)
                prune_folders(self.path, gone)
                touched.append(gone)
        # A step blocked now may run once another has moved out of its way: go round while any runs.
        while len(blocked := [step for step in pending if not self._move_or_write(*step)]) < len(pending):
            pending = blocked
        # Durable before the caller moves the base: after a power cut, a file cut short would read as an edit.
        make_durable(self.path, touched)
        for target, _, write in pending:
            if write is not None:
                raise MirrorError(
                    f"cannot write {escape_for_terminal(target)}: another file or folder is in the"
                    " way (a file git ignores, or one that is no memory's spelling); move it and run again"
                )
        return [
            f"{escape_for_terminal(where or '')} keeps its spelling: memsync would spell it"
            f" {escape_for_terminal(target)}, but something else is in the way"
            for target, where, _ in pending
        ]

    def _move_or_write(self, target: str, where: str | None, change: CheckoutChange | None) -> bool:
        """Move the file at ``where`` to ``target``, or write ``change`` there; False when the way is
        blocked for now (a file where a folder must go)."""
        root = self.path
        destination = root / target
        try:
            destination.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            return False
        if _is_folder(destination):
            try:
                destination.rmdir()
            except OSError:
                return False
        if change is None:
            assert where is not None
            if os.path.lexists(destination):
                return False
            try:
                os.rename(root / where, destination)
            except FileNotFoundError:
                raise WorktreeChanged(where, "a file", None) from None
            prune_folders(root, where)
            return True
        assert change.data is not None
        self._check_unchanged(change.memory_path, change.expected_sha256)
        moved_from = where if where != target else None
        temporary = destination.parent / f"{TEMPORARY_PREFIX}{secrets.token_hex(6)}"
        with open(temporary, "xb") as out:
            out.write(change.data)
        try:
            if moved_from is not None and os.path.lexists(destination):
                return False
            os.replace(temporary, destination)
        finally:
            temporary.unlink(missing_ok=True)  # gone already once renamed
        if moved_from is not None:
            (root / moved_from).unlink(missing_ok=True)
            prune_folders(root, moved_from)
        return True

    def _check_unchanged(self, memory_path: str, expected: str | None) -> None:
        found = self.sha256(memory_path)
        if found != expected:
            raise WorktreeChanged(self.locate(memory_path) or encoded(memory_path), expected, found)

    def wait_for_index_lock(self) -> None:
        """Wait a while git holds ``.git/index.lock``, then a clear error."""
        lock = self._git.git_dir / "index.lock"
        deadline = time.monotonic() + INDEX_LOCK_WAIT_S
        while lock.exists():
            if time.monotonic() >= deadline:
                raise MirrorError(
                    f"git is working in {self.path} ({lock} exists): wait for it to finish and run again;"
                    " if no git command is running, a crashed one left the file behind: delete it"
                )
            time.sleep(0.05)
