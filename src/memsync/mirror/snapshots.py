"""What a commit holds, as the push engine needs it, and the commit ``refs/memsync/base`` points at.

A *snapshot* maps each memory path of a commit's tree to its blob, its content's SHA-256 and the memory
id that owns it. The base is the commit the checkout was last reconciled with: an imported commit, or a
*base commit* of memsync's own when a held path keeps an older entry (docs/push.md, "refs/memsync/base").
Its message lists the memory id of every file, paths C-quoted so that no path can add a line.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pygit2
from pygit2.enums import DeltaStatus

from memsync.errors import MirrorError
from memsync.mirror.errors import translated
from memsync.mirror.paths import decoded, encode_paths, quote_for_message, unquote_from_message

if TYPE_CHECKING:
    from memsync.mirror.repository import Mirror

BASE_FORMAT_TRAILER = "Memsync-Base: 1"
_BASE_SUMMARY = "memsync base"
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-")


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    """One memory file of a snapshot: its blob, the SHA-256 of its bytes and its memory id."""

    blob: str
    sha256: str
    memory_id: str


class Snapshots:
    """The snapshots of a mirror's commits and of its base. A blob's SHA-256 never changes, so :meth:`save`
    keeps those computed in the content index for good (status and dry runs do not save)."""

    def __init__(self, mirror: Mirror) -> None:
        self.mirror = mirror
        self._new: dict[str, str] = {}

    def sha256(self, blob: str) -> str:
        found = self._new.get(blob) or self.mirror.content_index.sha256_of(blob)
        if found is None:
            found = self._new[blob] = hashlib.sha256(self.mirror.content(blob)).hexdigest()
        return found

    def rewind(self, base: str | None) -> tuple[str | None, int, dict[str, str | None]] | None:
        """How far ``main`` was moved back behind the base (``git reset --hard HEAD~2``), or None: the
        base's reconciled import must be missing from ``main``'s history (commits after it are no rewind).

        ``(fork, versions, before)``, the push engine's ``Rewind``: the newest imported commit ``main``
        still contains (None: none), how many imported versions lie between it and the reconciled commit,
        and each memory path they changed with its content's SHA-256 at ``fork`` (None: absent there).
        """
        git = self.mirror.git
        main = self.mirror.main()
        reconciled = reconciled_import(self.mirror, base) if base is not None else None
        if main is None or reconciled is None or git.is_ancestor(reconciled, main):
            return None
        with translated("finding where main was moved back to"):
            fork = git.merge_base(main, reconciled)
            versions = sum(1 for _ in git.walk(reconciled, since=fork))
            before: dict[str, str | None] = {}
            for delta in git.tree(fork).diff_to_tree(git.tree(reconciled)).deltas:
                if delta.status != DeltaStatus.ADDED:
                    before[decoded(delta.old_file.path)] = self.sha256(str(delta.old_file.id))
                if delta.status != DeltaStatus.DELETED:
                    before.setdefault(decoded(delta.new_file.path), None)
        return fork, versions, before

    def save(self) -> None:
        """Note the hashes computed; a cache, so a failed write costs only hashing again later."""
        if self._new:
            with contextlib.suppress(MirrorError):
                self.mirror.content_index.note({sha: blob for blob, sha in self._new.items()})
            self._new = {}

    def of(self, commit: str | None) -> dict[str, SnapshotEntry]:
        """The snapshot of an imported commit (``memstore/main`` or one of its ancestors); {} for None."""
        if commit is None:
            return {}
        mirror = self.mirror
        files = mirror.files(commit)
        owners = mirror.paths(commit)
        missing = sorted(set(files) - set(owners))
        if missing:
            mirror.drop_history_caches()
            raise MirrorError(
                f"commit {commit} holds files no memory owns ({', '.join(missing[:3])}); it is not an"
                " imported commit, or the path cache was damaged (dropped now, and rebuilt from history):"
                " run again"
            )
        return {path: SnapshotEntry(blob, self.sha256(blob), owners[path]) for path, blob in files.items()}

    def base(self) -> tuple[str | None, dict[str, SnapshotEntry]]:
        """``(base commit, its snapshot)``. Without ``refs/memsync/base``, the last commit ``main`` shares
        with the imported history, so imported commits never count as local."""
        mirror = self.mirror
        commit = mirror.base()
        if commit is None:
            head, tip = mirror.main(), mirror.tip()
            if head is not None and tip is not None:
                with translated("finding where main left the imported history"):
                    commit = mirror.git.merge_base(head, tip)
        if commit is None:
            return None, {}
        with translated(f"reading the base commit {commit}"):
            message = mirror.git.commit(commit).message
        own = _is_base_message(message)
        owners = _parse_base_ids(message, commit) if own else _kept_base_ids(mirror, commit)
        files = mirror.files(commit)
        if owners is None or set(owners) != set(files):
            if own:
                raise MirrorError(
                    f"the base commit {commit} lists other memories than its tree holds; it was not written"
                    " by memsync. Point refs/memsync/base at memstore/main (git update-ref refs/memsync/base"
                    " refs/remotes/memstore/main) and run again"
                )
            return commit, self.of(commit)
        return commit, {p: SnapshotEntry(b, self.sha256(b), owners[p]) for p, b in files.items()}

    def write_base(
        self,
        entries: Mapping[str, SnapshotEntry],
        *,
        expected_old: str | None,
        tip: str | None,
        tip_snapshot: Mapping[str, SnapshotEntry],
        when: datetime | None = None,
    ) -> str:
        """Point ``refs/memsync/base`` at a commit holding ``entries`` (compare-and-swap); its id: ``tip``
        when ``entries`` are its snapshot (the usual case), else a base commit of memsync's own on ``tip``."""
        mirror = self.mirror
        if tip is not None and dict(entries) == dict(tip_snapshot):
            target = tip
            _save_base_ids(mirror, tip, {path: entry.memory_id for path, entry in entries.items()})
        else:
            spelled = encode_paths(entries)  # the paths as the working tree spells them
            tree = mirror.git.write_tree({spelled[path]: entry.blob for path, entry in entries.items()})
            body = "".join(f"{entries[p].memory_id} {quote_for_message(p)}\n" for p in sorted(entries))
            message = f"{_BASE_SUMMARY}\n\n" + (f"{body}\n" if body else "") + f"{BASE_FORMAT_TRAILER}\n"
            stamp = int((when or datetime.now(UTC)).timestamp())
            signature = pygit2.Signature("memsync", "memsync@localhost", stamp, 0)
            target = mirror.git.create_commit(tree, [tip] if tip is not None else [], signature, message)
        if target != expected_old:
            mirror.git.set_ref_if_equals(mirror.BASE_REF, target, expected_old, message="memsync: reconciled")
        return target

    def store_blob(self, data: bytes) -> str:
        """Write ``data`` as a blob; its id. The content index learns it too, so importing the version a
        push made with it fetches nothing."""
        sha = hashlib.sha256(data).hexdigest()
        blob = self.mirror.git.create_blob(data)
        self.mirror.content_index.note({sha: blob})
        self._new.setdefault(blob, sha)
        return blob

    def keep_base_ids(self) -> None:
        """While the base is the imported tip, keep its ``{path: memory id}`` in the state: called before a
        pull, as once the tip moves past the base, reading them would replay the whole history."""
        mirror = self.mirror
        base = mirror.base()
        if base is not None and base == mirror.tip() and _kept_base_ids(mirror, base) is None:
            _save_base_ids(mirror, base, mirror.paths(base))


def reconciled_import(mirror: Mirror, base: str) -> str | None:
    """The imported commit a base stands for: the base itself, or, for a base commit of memsync's
    own, the tip it was made next to (its parent; None if nothing was imported then)."""
    with translated(f"reading the base commit {base}"):
        commit = mirror.git.commit(base)
        if not _is_base_message(commit.message):
            return base
        return str(commit.parent_ids[0]) if commit.parent_ids else None


def _save_base_ids(mirror: Mirror, commit: str, owners: Mapping[str, str]) -> None:
    with contextlib.suppress(MirrorError):  # a cache: without it the base's ids are read from history
        mirror.git.state.put("base-ids", {"commit": commit, "paths": dict(owners)})


def _kept_base_ids(mirror: Mirror, commit: str) -> dict[str, str] | None:
    data = mirror.git.state.get("base-ids")
    paths = data.get("paths") if isinstance(data, dict) and data.get("commit") == commit else None
    return paths if isinstance(paths, dict) and all(isinstance(v, str) for v in paths.values()) else None


def _is_base_message(message: str) -> bool:
    return message.startswith(_BASE_SUMMARY + "\n") and message.rstrip("\n").endswith(BASE_FORMAT_TRAILER)


def _parse_base_ids(message: str, commit: str) -> dict[str, str]:
    owners: dict[str, str] = {}
    paragraphs = message.rstrip("\n").split("\n\n")
    body = paragraphs[1] if len(paragraphs) == 3 else ""
    for line in body.split("\n") if body else []:
        memory_id, _, spelled = line.partition(" ")
        try:
            path = unquote_from_message(spelled)
        except ValueError:
            path = ""
        if not memory_id or not set(memory_id) <= _ID_CHARS or not path or path in owners:
            raise MirrorError(f"the base commit {commit} has a malformed memory line: {line[:80]!r}")
        owners[path] = memory_id
    return owners
