"""Three-way merges of one memory, and conflicts recorded so that no side is ever lost (docs/push.md).

Merging uses libgit2's file merge in a scratch repository outside the mirror, so predicting a merge
(``push --dry-run``) writes nothing. libgit2 takes no labels and has no diff3 style: the markers read
``local`` (the checkout) and ``remote`` (the store), and the base is kept in the record instead.

A conflict is a commit under ``refs/memsync/conflicts/<name>`` (no parents) whose tree holds the sides
``base`` (absent when both sides created the memory), ``local``, ``remote`` and ``markers`` (what was
written into the checkout), and whose message (``conflict at <path>`` and trailers) names the memory,
the reason, the store's memory id and each side's SHA-256. The ref keeps every side from ``git gc``.
Ending one moves it to ``refs/memsync/resolved/<name>``. Memories may contain ``<<<<<<<`` naturally:
only a record, never a marker in a file, makes a conflict.
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

    def _scratch(self) -> GitStore:
        if self._store is None:
            folder = tempfile.TemporaryDirectory(prefix="memsync-merge-", ignore_cleanup_errors=True)
            action = "creating a scratch repository for merging"
            self._store = GitStore(Path(self._resources.enter_context(folder)), create="bare", action=action)
            self._resources.enter_context(self._store)
        return self._store

    def merge(self, base: bytes | None, local: bytes, remote: bytes) -> MergeResult:
        """Merge ``local`` and ``remote`` over ``base`` (None: both sides created the file)."""
        if local == remote or remote == base:
            return MergeResult(True, local)
        if local == base:
            return MergeResult(True, remote)
        clean, content = self._scratch().merge_file(base, (LOCAL_LABEL, local), (REMOTE_LABEL, remote))
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
    """The conflicts recorded in one mirror's repository (``mirror.conflicts``): open, record, read
    a side of, and end them."""

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
        trailers = {
            "Memsync-Conflict": "1",
            "Conflict-Path": quote_for_message(memory_path),
            "Reason": " ".join(reason.split()),
            "Remote-Memory-Id": remote_memory_id,
            **{
                f"{name.capitalize()}-SHA256": hashlib.sha256(data).hexdigest()
                for name, data in present.items()
            },
        }
        message = f"conflict at {quote_for_message(memory_path)}\n\n" + "".join(
            f"{key}: {value}\n" for key, value in trailers.items()
        )
        commit = self._commit(tree, message, when)
        ref = ref_name(memory_path)
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

        Its new commit's tree is the conflict's plus ``replaced``, what the file held when the
        resolution overwrote it (edits made after the conflict was recorded: ``--ours`` or
        ``--theirs`` never loses them), and ``previous/``, the path's previous resolution, so every
        resolution stays reachable in case it was the wrong pick.
        """
        resolved = ref_name(record.memory_path, RESOLVED_PREFIX)
        previous = self._git.ref_target(resolved)
        tree = self._git.write_flat_tree(
            {"replaced": replaced} if replaced is not None else {},
            trees={"previous": previous} if previous is not None else None,
            base=record.commit,
        )
        message = (
            f"resolved {quote_for_message(record.memory_path)}\n\n"
            f"Memsync-Resolved: 1\nConflict-Path: {quote_for_message(record.memory_path)}\n"
            f"Resolution: {resolution}\n"
        )
        commit = self._commit(tree, message, when)
        self._git.set_ref_if_equals(resolved, commit, previous, message="memsync: conflict resolved")
        self._git.delete_ref_if_equals(record.ref, record.commit)
        return resolved

    def _commit(self, tree: str, message: str, when: datetime | None) -> str:
        """A parentless commit: a record, not history."""
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
