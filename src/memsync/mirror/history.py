"""Imported history: one deterministic commit per memory version, written straight into packs.

A version's commit is a pure function of the versions before it (docs/mirror.md, "Trailers" and "What a
version does to the tree"), so fresh mirrors fed the same records, or one resumed after a kill, make the
same commit ids. :func:`replay` rebuilds the :class:`PathMap` from the trailers alone.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import astuple, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from memsync.crashpoints import crash_point
from memsync.errors import MirrorError, UnsafeInput
from memsync.mirror.errors import PathEncodingError, RefMoved, translated
from memsync.mirror.fastimport import Change, FastImport, Move, Put, Remove, ident
from memsync.mirror.folding import fold
from memsync.mirror.paths import (
    MAX_TREE_PATH_BYTES,
    Spelling,
    directory_prefixes,
    encode_path,
    escape_for_terminal,
    quote_for_message,
)
from memsync.mirror.refs import MEMSTORE_REF
from memsync.mirror.trailers import (
    ID_PATTERN,
    OPERATIONS,
    REASON_PATTERN,
    SHA256_PATTERN,
    Operation,
    Trailers,
    format_message,
    inferred_version_id,
    parse_message,
)

if TYPE_CHECKING:
    from memsync.mirror.gitstore import GitStore
    from memsync.mirror.state import State

# The identity of versions no actor is known for (Forward and Cloud record none).
DEFAULT_AUTHOR_NAME = "memsync"
DEFAULT_AUTHOR_EMAIL = "memsync@localhost"

DEFAULT_BATCH_COMMITS = 1000
DEFAULT_BATCH_BYTES = 32 << 20
# Paths Format 1 spelled alike, seen without spelling them twice: ASCII, unsplit, none of rule 6's cases.
_SEGMENT = r'(?!(?i:con|prn|aux|nul|com.|lpt.)(?:[ ./]|$))[^<>:"|?*/\x00-\x1f\x7f-\U0010ffff]{0,79}(?<![. ])'
_ALIKE = re.compile(f"{_SEGMENT}(?:/{_SEGMENT})*")


@dataclass(frozen=True, slots=True)
class VersionRecord:
    """One memory version as the engine hands it to the mirror, in import order; ``created_at`` must be
    timezone-aware (what each kind does to the tree: docs/mirror.md, "What a version does to the tree")."""

    version_id: str
    memory_id: str
    operation: Operation
    path: str | None
    content: bytes | None
    content_sha256: str | None
    created_at: datetime
    redacted: bool = False
    author_name: str = DEFAULT_AUTHOR_NAME
    author_email: str = DEFAULT_AUTHOR_EMAIL
    skipped: bool = False
    skip_reason: str = "unspecified"
    inferred: str | None = None
    history_truncated: int | None = None

    @classmethod
    def inferred_delete(cls, memory_id: str, path: str, created_at: datetime, reason: str) -> VersionRecord:
        """The delete memsync writes for ``memory_id`` when the API shows none (docs/mirror.md, "What
        the history says about itself"): its version id is a pure function of the memory id."""
        return cls(
            version_id=inferred_version_id(memory_id),
            memory_id=memory_id,
            operation="deleted",
            path=path,
            content=None,
            content_sha256=None,
            created_at=created_at,
            inferred=reason,
        )


class PathMap:
    """The files of a tree by memory path, with the memory id that owns each (and the reverse).

    It also keeps what a spelling depends on besides the path (docs/mirror.md, "Path spelling", rules 3
    and 5); a ``listener`` gets the tree change of every file whose spelling changes as paths come and go.
    """

    def __init__(self, by_path: dict[str, str] | None = None) -> None:
        self._by_path: dict[str, str] = {}
        self._by_memory: dict[str, str] = {}
        self._dirs: dict[str, int] = {}
        # (folder, fold of a name) → {name: files at or below folder/name}
        self._names: dict[tuple[str, str], dict[str, int]] = {}
        self._collisions = 0  # groups of _names with more than one name
        self._novel: set[str] = set()  # files spelled by a rule of Memsync-Format 2
        self.listener: TreeChanges | None = None
        # A whole map at once (a cache read back): each file's spelling read once, from the final counts.
        for path, memory_id in (by_path or {}).items():
            self._count(path, 1)
            self._by_path[path], self._by_memory[memory_id] = memory_id, path
        for path in self._by_path:
            self._note_novel(path)

    def copy(self) -> PathMap:
        clone = PathMap()
        clone._by_path, clone._by_memory = dict(self._by_path), dict(self._by_memory)
        clone._dirs, clone._collisions, clone._novel = dict(self._dirs), self._collisions, set(self._novel)
        clone._names = {key: dict(names) for key, names in self._names.items()}
        return clone

    def __len__(self) -> int:
        return len(self._by_path)

    def as_dict(self) -> dict[str, str]:
        """``{memory_path: memory_id}``."""
        return dict(self._by_path)

    def view(self) -> Mapping[str, str]:
        """``{memory_path: memory_id}`` itself, not a copy: read it before the map changes again."""
        return self._by_path

    def owner(self, path: str) -> str | None:
        return self._by_path.get(path)

    def path_of(self, memory_id: str) -> str | None:
        return self._by_memory.get(memory_id)

    def is_directory(self, path: str) -> bool:
        return self._dirs.get(path, 0) > 0

    @property
    def novel(self) -> bool:
        """Whether a file of the tree is spelled by a rule Memsync-Format 1 did not have."""
        return bool(self._novel)

    def spelling(self, path: str, *, adding: bool = False) -> str:
        """The tree path of the file at memory path ``path`` (``adding``: once added, beside its siblings)."""
        return _tree_path(path, self.is_directory(path), self._folded(path, adding=adding))

    def add(self, path: str, memory_id: str) -> None:
        before = {other: self.spelling(other) for other in self._respelled_by(path, adding=True)}
        self._count(path, 1)
        self._by_path[path], self._by_memory[memory_id] = memory_id, path
        self._note_novel(path)
        self._announce(before)

    def remove(self, path: str) -> None:
        before = {other: self.spelling(other) for other in self._respelled_by(path, adding=False) - {path}}
        del self._by_memory[self._by_path.pop(path)]
        if self.listener is not None:
            self.listener.append(Remove(self.spelling(path)))
        self._novel.discard(path)
        self._count(path, -1)
        self._announce(before)

    def reassign(self, path: str, memory_id: str) -> None:
        del self._by_memory[self._by_path[path]]
        self._by_path[path], self._by_memory[memory_id] = memory_id, path

    def _folded(self, path: str, *, adding: bool = False) -> tuple[int, ...]:
        """Rule 5: the indexes of ``path``'s segments spelled folded (a sibling folds like them)."""
        if not self._collisions and not adding:
            return ()
        segments = path.split("/")
        indexes = []
        for index, name in enumerate(segments):
            folded = fold(name)
            if name == folded:
                continue
            names = self._names.get(("/".join(segments[:index]), folded), {})
            if len(names) + (adding and name not in names) > 1:
                indexes.append(index)
        return tuple(indexes)

    def _count(self, path: str, delta: int) -> None:
        """Count the file at ``path`` in (``delta`` 1) or out of (-1) its folders and its entries' names."""
        for entry in [*directory_prefixes(path), path]:
            if entry != path:
                self._dirs[entry] = self._dirs.get(entry, 0) + delta
                if not self._dirs[entry]:
                    del self._dirs[entry]
            parent, _, name = entry.rpartition("/")
            key = (parent, fold(name))
            names = self._names.setdefault(key, {})
            before = len(names)
            names[name] = names.get(name, 0) + delta
            if not names[name]:
                del names[name]
            if not names:
                del self._names[key]
            self._collisions += (len(names) > 1) - (before > 1)

    def _respelled_by(self, path: str, *, adding: bool) -> set[str]:
        """The files whose spelling may change when ``path`` comes or goes: a file that becomes a folder
        too or stops being one (``%_``), and those at or below a name that starts or stops folding alike."""
        affected = {
            prefix
            for prefix in directory_prefixes(path)
            if self._dirs.get(prefix, 0) == (0 if adding else 1) and prefix in self._by_path
        }
        for entry in [*directory_prefixes(path), path]:
            parent, _, name = entry.rpartition("/")
            names = self._names.get((parent, fold(name)))
            if not names:
                continue
            uses = names.get(name, 0)
            if (adding and uses == 0 and len(names) == 1) or (not adding and uses == 1 and len(names) == 2):
                for other in names:
                    if other != name and other != fold(other):
                        below = f"{parent}/{other}" if parent else other
                        affected.update(p for p in self._by_path if p == below or p.startswith(below + "/"))
        return affected

    def _announce(self, before: Mapping[str, str]) -> None:
        for path, old in before.items():
            self._note_novel(path)
            new = self.spelling(path)
            if new != old and self.listener is not None:
                self.listener.append(Move(old, new))

    def _note_novel(self, path: str) -> None:
        suffixed = self.is_directory(path)
        alike = _ALIKE.fullmatch(path) or _tree_path(path, suffixed) == _tree_path(
            path, suffixed, (), Spelling.FORMAT1
        )
        (self._novel.discard if alike and not self._folded(path) else self._novel.add)(path)


def apply_change(paths: PathMap, memory_id: str, operation: Operation, written: str | None) -> None:
    """What a version does to the path map; the writer and :func:`replay` both use exactly this. A
    memory that still owned ``written`` (its delete lost to version retention) loses it."""
    old = paths.path_of(memory_id)
    if old is not None and (operation == "deleted" or (written is not None and old != written)):
        paths.remove(old)
    if operation == "deleted" or written is None:
        return
    owner = paths.owner(written)
    if owner is None:
        paths.add(written, memory_id)
    elif owner != memory_id:
        paths.reassign(written, memory_id)


def apply_trailers(paths: PathMap, trailers: Trailers) -> None:
    if trailers.skipped is None:
        apply_change(paths, trailers.memory_id, trailers.operation, trailers.memory_path)


def replay(store: GitStore, paths: PathMap, until: str, since: str | None) -> None:
    """Bring ``paths`` (the map at ``since``, or empty) forward to commit ``until`` by its trailers."""
    for commit in store.walk(until, since=since, oldest_first=True):
        apply_trailers(paths, parse_message(commit.message, str(commit.id)))


@functools.lru_cache(maxsize=1024)
def _tree_path(
    path: str, suffixed: bool, folded: tuple[int, ...] = (), spelling: Spelling = Spelling.PLAIN
) -> str:
    # Most versions touch a memory written shortly before: a bounded cache keeps encode_path off the
    # hot path without a dictionary that grows with the store.
    return encode_path(path, directory_sibling=suffixed, folded=folded, spelling=spelling)


class TreeChanges(list[Change]):
    """The file changes of the commit being built; as a :class:`PathMap`'s listener it keeps the tree's
    spelling in step with the map (``a`` ↔ ``a%_`` as ``a/...`` comes and goes)."""

    def put(self, paths: PathMap, path: str, blob: str) -> None:
        """Write ``blob`` at memory path ``path``, spelled as the map has it now."""
        self.append(Put(paths.spelling(path), blob))


@functools.lru_cache(maxsize=1024)
def _clean_identity(text: str, fallback: str) -> str:
    # git's ident format cannot hold '<', '>' or line breaks; strip them (and other controls)
    # deterministically instead of refusing the version, so an odd actor name never stalls an import.
    cleaned = "".join(ch for ch in text if ch not in "<>" and unicodedata.category(ch) != "Cc").strip()
    return cleaned or fallback


class ImportTarget(Protocol):
    """What the writer needs of the mirror it writes into (:class:`memsync.mirror.Mirror` is one)."""

    git: GitStore

    def path_map_at(self, tip: str | None) -> PathMap: ...
    def checkpoint_written(
        self, ref: str, previous: str | None, tip: str, paths: PathMap, content: dict[str, str]
    ) -> None: ...
    def blob_for_sha256_at(self, sha256: str, tip: str | None) -> str | None: ...
    def blob_for_sha256(self, sha256: str) -> str | None: ...


class HistoryWriter:
    """Writes commits for :class:`VersionRecord` s onto ``refs/remotes/memstore/main``, one pack per batch.

    A context manager (flushes on a clean exit). The ref moves only by compare-and-swap once a batch's
    pack is complete, so a kill at any moment leaves the previous checkpoint.
    """

    def __init__(
        self,
        mirror: ImportTarget,
        *,
        ref: str | None = None,
        batch_commits: int = DEFAULT_BATCH_COMMITS,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
        keep_ids: bool = False,
    ) -> None:
        self._mirror = mirror
        self._ref = ref or MEMSTORE_REF
        self._batch_commits = batch_commits
        self._batch_bytes = batch_bytes
        self._expected = mirror.git.ref_target(self._ref)
        self._paths = mirror.path_map_at(self._expected).copy()
        self._changes = self._paths.listener = TreeChanges()
        self._stream: FastImport | None = None
        self._new_content: dict[str, str] = {}  # sha256 → blob id, written in the unflushed batch
        self._noted: list[tuple[int, Trailers]] = []  # (mark, trailers) of the batch's facts' commits
        self._broken: str | None = None
        # With keep_ids, the id of every commit flushed, in order (a rewrite maps old ids to them).
        self.written: list[str] | None = [] if keep_ids else None

    @property
    def tip(self) -> str | None:
        """The ref's target as of the last flush (commits of the unflushed batch have no id yet)."""
        return self._expected

    @property
    def started(self) -> bool:
        """Whether the history has a commit, flushed or not: the next record is not the first."""
        return self._expected is not None or self.pending > 0

    @property
    def pending(self) -> int:
        """Commits written into the current batch and not yet behind the ref."""
        return self._stream.commits if self._stream is not None else 0

    def has_content(self, sha256: str) -> bool:
        """Whether a record with this ``content_sha256`` may leave ``content`` out (the mirror or the
        unflushed batch holds it): ask before fetching a version's content."""
        return (
            sha256 in self._new_content or self._mirror.blob_for_sha256_at(sha256, self._expected) is not None
        )

    def add(self, record: VersionRecord) -> None:
        """Write the commit for ``record``, flushing when the batch is full; :class:`UnsafeInput`, before
        anything changes, refuses data that must not be written (the engine can add it ``skipped``)."""
        if self._broken:
            raise MirrorError(f"this history writer cannot continue: {self._broken}")
        self._validate(record)
        who = ident(
            _clean_identity(record.author_name, DEFAULT_AUTHOR_NAME),
            _clean_identity(record.author_email, DEFAULT_AUTHOR_EMAIL),
            math.floor(record.created_at.timestamp()),
        )
        first = not self.started
        if self._stream is None:
            self._stream = self._mirror.git.fast_import()
        stream = self._stream
        blob, content_sha = self._blob_for(stream, record)
        known = self._paths.path_of(record.memory_id)
        written: str | None = None
        moved_from: str | None = None
        self._changes.clear()
        if record.operation == "deleted" and not record.skipped:
            written = known
            apply_change(self._paths, record.memory_id, record.operation, None)
        elif blob is not None:
            written = record.path if record.path is not None else known
            if written is None:
                raise self._refuse(record, "it has content but no path, and the memory has no file yet")
            # Refuse an unencodable path, or one too long to check out, before changing anything.
            spelled = self._paths.spelling(written, adding=True)
            if len(spelled.encode("utf-8")) > MAX_TREE_PATH_BYTES:
                raise self._refuse(
                    record,
                    f"its path is spelled {escape_for_terminal(spelled[:80])}... in the checkout, over"
                    f" the {MAX_TREE_PATH_BYTES} bytes macOS and Windows accept; rename the memory",
                )
            moved_from = known if known != written else None
            apply_change(self._paths, record.memory_id, record.operation, written)
            self._changes.put(self._paths, written, blob)
        trailers = Trailers(
            memory_id=record.memory_id,
            version_id=record.version_id,
            operation=record.operation,
            created_at=record.created_at,
            memory_path=written,
            content_sha256=record.content_sha256 or content_sha,
            redacted=record.redacted,
            skipped=record.skip_reason if record.skipped else None,
            inferred=record.inferred,
            history_truncated=record.history_truncated,
            format=2 if self._paths.novel else 1,
        )
        summary = self._summary(record, written or record.path or known, moved_from)
        message = format_message(summary, trailers).encode("utf-8")
        mark = stream.commit(
            parent=self._expected, author=who, committer=who, message=message, changes=self._changes
        )
        if first or (record.redacted and not record.skipped):
            self._noted.append((mark, trailers))
        if stream.commits >= self._batch_commits or stream.bytes_written >= self._batch_bytes:
            self.flush()

    def flush(self) -> str | None:
        """End the batch's ``git fast-import`` (its pack complete), then compare-and-swap the ref; the tip."""
        if self._broken:
            raise MirrorError(f"this history writer cannot continue: {self._broken}")
        stream, self._stream = self._stream, None
        if stream is None or stream.commits == 0:
            if stream is not None:
                stream.abort()
            return self.tip
        ids = stream.finish()
        tip = ids[stream.commits]
        crash_point("mirror.pack_written")
        try:
            self._mirror.git.set_ref_if_equals(
                self._ref, tip, self._expected, message=f"memsync: import {stream.commits} versions"
            )
        except RefMoved as exc:
            self._broken = str(exc)
            raise
        crash_point("mirror.ref_moved")
        self._mirror.checkpoint_written(self._ref, self._expected, tip, self._paths, self._new_content)
        if self._ref == MEMSTORE_REF:
            self._record_facts(ids, tip)
        if self.written is not None:
            self.written.extend(ids[mark] for mark in range(1, stream.commits + 1))
        self._noted = []
        self._expected = tip
        self._new_content = {}
        self._mirror.git.repack()
        return tip

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, kind: object, value: object, tb: object) -> None:
        # On an error the unflushed batch is dropped: the ref keeps the last complete checkpoint.
        if kind is None:
            self.flush()
        elif self._stream is not None:
            self._stream.abort()
            self._stream = None

    def _record_facts(self, ids: dict[int, str], tip: str) -> None:
        """Extend the facts cached at the batch's parent by the batch."""
        state = self._mirror.git.state
        cached_tip, facts = _load_facts(state) if self._expected is not None else (None, HistoryFacts())
        if cached_tip != self._expected or facts is None:
            # A mirror from before the facts, or a damaged entry: the next reader walks the history once.
            state.put("history-facts", None)
            return
        for mark, trailers in self._noted:
            facts.note(ids[mark], trailers, root=mark == 1 and self._expected is None)
        _save_facts(state, tip, facts)

    def _refuse(self, record: VersionRecord, why: str) -> UnsafeInput:
        return UnsafeInput(f"version {record.version_id} of memory {record.memory_id} is not written: {why}")

    def _validate(self, record: VersionRecord) -> None:
        for name, value in (("version id", record.version_id), ("memory id", record.memory_id)):
            if not isinstance(value, str) or ID_PATTERN.fullmatch(value) is None:
                raise UnsafeInput(f"a version is not written: its {name} {value!r} is not an id")
        if record.operation not in OPERATIONS:
            allowed = ", ".join(OPERATIONS)
            raise self._refuse(record, f"operation {record.operation!r} is not one of {allowed}")
        if record.created_at.tzinfo is None or record.created_at.utcoffset() is None:
            raise self._refuse(record, "created_at has no time zone")
        if record.created_at.timestamp() < 0:
            raise self._refuse(record, "created_at is before 1970, which git cannot record")
        if record.content_sha256 is not None and SHA256_PATTERN.fullmatch(record.content_sha256) is None:
            raise self._refuse(record, "content_sha256 is not 64 lower-case hex digits")
        if record.skipped and REASON_PATTERN.fullmatch(record.skip_reason) is None:
            raise self._refuse(record, f"skip reason {record.skip_reason!r} is not a short lower-case token")
        if record.inferred is not None and (
            REASON_PATTERN.fullmatch(record.inferred) is None
            or record.operation != "deleted"
            or record.content is not None
            or record.skipped
            or record.version_id != inferred_version_id(record.memory_id)
        ):
            raise self._refuse(
                record, "an inferred record is a delete of no content, named inferred:<memory id>"
            )
        if record.history_truncated is not None and (record.history_truncated < 1 or self.started):
            raise self._refuse(
                record, "History-Truncated is a positive count, on a mirror's first commit only"
            )
        if record.path is not None:
            try:
                _tree_path(record.path, False)
            except PathEncodingError as exc:
                raise self._refuse(record, str(exc)) from None

    def _blob_for(self, stream: FastImport, record: VersionRecord) -> tuple[str | None, str | None]:
        """The blob the version writes (None: no file change) and the content's SHA-256."""
        if record.skipped or record.operation == "deleted":
            return None, None
        if record.content is not None:
            sha = hashlib.sha256(record.content).hexdigest()
            if record.content_sha256 is not None and sha != record.content_sha256:
                raise self._refuse(
                    record, f"its content hashes to {sha}, not to its content_sha256 {record.content_sha256}"
                )
            # fast-import stores no object a pack of the repository already holds: only what this
            # batch streamed already is worth skipping.
            blob = self._new_content.get(sha) or stream.blob(record.content)
            self._new_content[sha] = blob
            return blob, sha
        if record.redacted:
            return None, None
        if record.content_sha256 is None:
            raise self._refuse(record, "it has neither content nor content_sha256")
        known = self._new_content.get(record.content_sha256)
        if known is None:
            known = self._mirror.blob_for_sha256(record.content_sha256)
            if known is None:
                raise MirrorError(
                    f"version {record.version_id}: the mirror holds no content with SHA-256 "
                    f"{record.content_sha256}; fetch the version's content and pass it"
                )
            if hashlib.sha256(self._mirror.git.read_blob(known)).hexdigest() != record.content_sha256:
                self._mirror.git.state.drop_caches(content_index=True)
                raise MirrorError(
                    f"the mirror's content index was wrong for SHA-256 {record.content_sha256}; it was"
                    " dropped, and is rebuilt from history: run again"
                )
        return known, record.content_sha256

    def _summary(self, record: VersionRecord, path: str | None, moved_from: str | None) -> str:
        subject = quote_for_message(path) if path is not None else f"memory {record.memory_id}"
        summary = f"{record.operation} {subject}"
        if moved_from is not None:
            summary += f" (moved from {quote_for_message(moved_from)})"
        if record.skipped:
            summary += f" (skipped: {record.skip_reason})"
        elif record.redacted:
            summary += " (redacted)"
        elif record.inferred is not None:
            summary += " (inferred: the store no longer lists the memory)"
        return summary


@dataclass(frozen=True, slots=True)
class RedactedCommit:
    """A commit of a redacted version: whether it ``wrote`` content (the live memory's, same hash)."""

    commit: str
    version_id: str
    memory_id: str
    content_sha256: str | None
    wrote: bool


@dataclass
class HistoryFacts:
    """What pull, status and verify need to know about the imported history without a walk: its root,
    the root's ``History-Truncated`` count, and every commit of a redacted version (rare, so few).
    """

    root: str | None = None
    truncated: int | None = None
    redacted: list[RedactedCommit] = field(default_factory=list)

    def note(self, commit: str, trailers: Trailers, *, root: bool) -> None:
        """Add what ``commit`` (its ``trailers``; ``root``: the history's first commit) tells."""
        if root:
            self.root, self.truncated = commit, trailers.history_truncated
        if trailers.redacted and trailers.skipped is None:
            wrote = trailers.memory_path is not None and trailers.operation != "deleted"
            version = (trailers.version_id, trailers.memory_id, trailers.content_sha256)
            self.redacted.append(RedactedCommit(commit, *version, wrote))


def history_facts(mirror: GitStore, *, save: bool = True) -> HistoryFacts:
    """The facts of ``memstore/main`` as it is now, cached at its tip (a stale cache: a walk of the commits
    since the cached tip); ``save=False`` for readers that must write nothing (``memsync status``)."""
    tip = mirror.ref_target(MEMSTORE_REF)
    if tip is None:
        return HistoryFacts()
    cached_tip, facts = _load_facts(mirror.state)
    if cached_tip == tip and facts is not None:
        return facts
    if facts is None or cached_tip is None or not mirror.is_ancestor(cached_tip, tip):
        cached_tip, facts = None, HistoryFacts()
    with translated("reading the imported history"):
        for commit in mirror.walk(tip, since=cached_tip, oldest_first=True):
            commit_id = str(commit.id)
            facts.note(commit_id, parse_message(commit.message, commit_id), root=not commit.parent_ids)
    if save:
        _save_facts(mirror.state, tip, facts)
    return facts


def _load_facts(state: State) -> tuple[str | None, HistoryFacts | None]:
    try:
        data = state.get("history-facts")
        if data.get("format") != 1:
            return None, None
        redacted = [RedactedCommit(*item) for item in data["redacted"]]
        return str(data["tip"]), HistoryFacts(data["root"], data["truncated"], redacted)
    except (AttributeError, ValueError, TypeError, KeyError):
        return None, None


def _save_facts(state: State, tip: str, facts: HistoryFacts) -> None:
    redacted = [astuple(r) for r in facts.redacted]  # in the order _load_facts passes them back
    record = {"format": 1, "tip": tip, "root": facts.root, "truncated": facts.truncated, "redacted": redacted}
    state.put("history-facts", record)
