"""Three-way merges of one memory, and conflicts recorded so that no side is ever lost (docs/push.md).

Merging happens in a scratch repository outside the mirror, so predicting a merge (``push --dry-run``)
writes nothing. A conflict is a parentless commit under ``refs/memsync/conflicts/<name>`` whose tree
keeps every side (the ref keeps them from ``git gc``); ending one moves it to ``refs/memsync/resolved/``.
"""

from __future__ import annotations

import hashlib
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pygit2

from memsync.errors import MirrorError
from memsync.mirror.errors import translated
from memsync.mirror.gitstore import GitStore
from memsync.mirror.paths import quote_for_message, unquote_from_message

CONFLICTS_PREFIX = "refs/memsync/conflicts/"
RESOLVED_PREFIX = "refs/memsync/resolved/"
LOCAL_LABEL = "local"
REMOTE_LABEL = "remote"
_MAX_REF_NAME = 200
_LITERAL = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
SIDES = ("base", "local", "remote", "markers")


@dataclass(frozen=True, slots=True)
class MergeResult:
    """``clean``: ``content`` is the merged memory; otherwise it carries git-style conflict markers."""

    clean: bool
    content: bytes


class Merger:
    """git's three-way file merge over byte contents, in a scratch repository (created on first use)."""

    def __init__(self) -> None:
        self._resources = ExitStack()
        self._store: GitStore | None = None

    def merge(self, base: bytes | None, local: bytes, remote: bytes) -> MergeResult:
        """Merge ``local`` and ``remote`` over ``base`` (None: both sides created the file)."""
        if local == remote or remote == base:
            return MergeResult(True, local)
        if local == base:
            return MergeResult(True, remote)
        if self._store is None:
            folder = tempfile.TemporaryDirectory(prefix="memsync-merge-", ignore_cleanup_errors=True)
            action = "creating a scratch repository for merging"
            self._store = GitStore(Path(self._resources.enter_context(folder)), create="bare", action=action)
            self._resources.enter_context(self._store)
        clean, content = self._store.merge_file(base, (LOCAL_LABEL, local), (REMOTE_LABEL, remote))
        if base is None and clean:
            # Both sides created the memory: that is a conflict even when git could interleave them.
            return MergeResult(False, whole_file_markers(local, remote))
        return MergeResult(clean, content)

    def markers(self, base: bytes | None, local: bytes, remote: bytes) -> bytes:
        """Conflict markers for the two sides, always (a clean merge falls back to whole-file markers)."""
        merged = self.merge(base, local, remote)
        return whole_file_markers(local, remote) if merged.clean else merged.content

    def close(self) -> None:
        self._store = None
        self._resources.close()

    def __enter__(self) -> Merger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def whole_file_markers(local: bytes, remote: bytes) -> bytes:
    """Both contents whole between git-style markers."""
    local, remote = (data if data[-1:] in (b"", b"\n") else data + b"\n" for data in (local, remote))
    return f"<<<<<<< {LOCAL_LABEL}\n%b=======\n%b>>>>>>> {REMOTE_LABEL}\n".encode() % (local, remote)


@dataclass(frozen=True, slots=True)
class ConflictRecord:
    """An open (or resolved) conflict: where, why, and the hashes of its sides."""

    memory_path: str
    ref: str
    commit: str
    reason: str
    remote_memory_id: str
    remote_sha256: str
    local_sha256: str
    base_sha256: str | None
    markers_sha256: str
    recorded_at: datetime


def ref_name(memory_path: str, prefix: str = CONFLICTS_PREFIX) -> str:
    """The memory's ref: every byte outside ``[A-Za-z0-9_-]`` written ``%XX`` (so ``a`` and ``a/b``
    never clash), or ``sha256-<hex of the path>`` when that is longer than 200 characters."""
    raw = memory_path.encode("utf-8")
    name = "".join(chr(b) if b in _LITERAL else f"%{b:02X}" for b in raw)
    if len(name) > _MAX_REF_NAME:
        name = "sha256-" + hashlib.sha256(raw).hexdigest()
    return prefix + name


class Conflicts:
    """The conflicts recorded in one mirror's repository (``mirror.conflicts``)."""

    def __init__(self, git: GitStore) -> None:
        self._git = git

    def open(self) -> dict[str, ConflictRecord]:
        """The recorded conflicts by memory path."""
        targets = {ref: self._git.ref_target(ref) for ref in self._git.refs(CONFLICTS_PREFIX)}
        records = [self._parse(ref, commit) for ref, commit in targets.items() if commit is not None]
        return {record.memory_path: record for record in records}

    def record(
        self,
        memory_path: str,
        *,
        base: bytes | None,
        local: bytes,
        remote: bytes,
        markers: bytes,
        remote_memory_id: str,
        reason: str,
        when: datetime | None = None,
    ) -> ConflictRecord:
        """Write the conflict's commit and point its ref at it (the ref must not exist)."""
        sides = {"remote": remote, "local": local, "base": base, "markers": markers}  # the trailers' order
        present = {name: data for name, data in sides.items() if data is not None}
        tree = self._git.write_flat_tree(present)
        lines = [
            "Memsync-Conflict: 1",
            f"Conflict-Path: {quote_for_message(memory_path)}",
            f"Reason: {' '.join(reason.split())}",
            f"Remote-Memory-Id: {remote_memory_id}",
        ]
        lines += [
            f"{name.capitalize()}-SHA256: {hashlib.sha256(data).hexdigest()}"
            for name, data in present.items()
        ]
        message = f"conflict at {quote_for_message(memory_path)}\n\n" + "".join(f"{line}\n" for line in lines)
        ref = ref_name(memory_path)
        commit = self._commit(tree, message, when)
        self._git.set_ref_if_equals(ref, commit, None, message="memsync: conflict recorded")
        return self._parse(ref, commit)

    def side(self, record: ConflictRecord, side: str) -> bytes | None:
        """One side's bytes (``base``, ``local``, ``remote`` or ``markers``); None for an absent base."""
        blob = self.blob(record, side)
        return None if blob is None else self._git.read_blob(blob)

    def blob(self, record: ConflictRecord, side: str) -> str | None:
        """The blob id of one side (see :meth:`side`)."""
        if side not in SIDES:
            raise ValueError(f"no side {side!r}; one of {', '.join(SIDES)}")
        with translated(f"reading the {side} side of the conflict at {record.memory_path}"):
            tree = self._git.tree(record.commit)
            if side not in tree:
                return None
            blob = tree[side]
        if not isinstance(blob, pygit2.Blob):
            raise MirrorError(f"{record.ref} is damaged: {side} is not a file")
        return str(blob.id)

    def end(
        self,
        record: ConflictRecord,
        *,
        resolution: str,
        replaced: bytes | None = None,
        when: datetime | None = None,
    ) -> str:
        """Close the conflict; return the ref that keeps it, ``refs/memsync/resolved/<name>``.

        The new commit's tree adds ``replaced`` (what the resolution overwrote: later edits are never
        lost) and ``previous/``, the path's previous resolution, in case that was the wrong pick."""
        resolved = ref_name(record.memory_path, RESOLVED_PREFIX)
        previous = self._git.ref_target(resolved)
        tree = self._git.write_flat_tree(
            {"replaced": replaced} if replaced is not None else {},
            trees={"previous": previous} if previous is not None else None,
            base=record.commit,
        )
        path = quote_for_message(record.memory_path)
        message = f"resolved {path}\n\nMemsync-Resolved: 1\nConflict-Path: {path}\nResolution: {resolution}\n"
        commit = self._commit(tree, message, when)
        self._git.set_ref_if_equals(resolved, commit, previous, message="memsync: conflict resolved")
        self._git.delete_ref_if_equals(record.ref, record.commit)
        return resolved

    def _commit(self, tree: str, message: str, when: datetime | None) -> str:
        moment = (when or datetime.now(UTC)).astimezone(UTC)
        signature = pygit2.Signature("memsync", "memsync@localhost", int(moment.timestamp()), 0)
        return self._git.create_commit(tree, [], signature, message)

    def _parse(self, ref: str, commit: str) -> ConflictRecord:
        with translated(f"reading {ref}"):
            found = self._git.commit(commit)
            message, when = found.message, found.commit_time
        lines = message.rstrip("\n").split("\n\n")[-1].split("\n")
        fields = dict(line.split(": ", 1) for line in lines if ": " in line)
        try:
            if fields.get("Memsync-Conflict") != "1":
                raise ValueError("not a conflict record")
            return ConflictRecord(
                memory_path=unquote_from_message(fields["Conflict-Path"]),
                ref=ref,
                commit=commit,
                reason=fields.get("Reason", ""),
                remote_memory_id=fields["Remote-Memory-Id"],
                remote_sha256=fields["Remote-SHA256"],
                local_sha256=fields["Local-SHA256"],
                base_sha256=fields.get("Base-SHA256"),
                markers_sha256=fields["Markers-SHA256"],
                recorded_at=datetime.fromtimestamp(when, UTC),
            )
        except (KeyError, ValueError) as exc:
            raise MirrorError(
                f"{ref} is not a conflict record memsync can read ({exc}); if you made it, delete it:"
                f" git update-ref -d {ref}"
            ) from None
