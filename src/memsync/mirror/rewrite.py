"""Rewriting a mirror's history after a redaction, so no object holds the redacted content, or after the
path spelling rules changed, to the ids a fresh import made now would have (docs/backup.md, "Redaction
propagates"). Crash order, so the next full scan finishes a killed rewrite: the new history is written on
a private ref, the other refs and the checkout follow, ``memstore/main`` moves last.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pygit2

from memsync.crashpoints import crash_point
from memsync.mirror.errors import translated
from memsync.mirror.gitstore import blob_at, replace_file
from memsync.mirror.history import HistoryWriter, PathMap, VersionRecord, apply_trailers
from memsync.mirror.paths import quote_for_message, unquote_from_message
from memsync.mirror.trailers import Trailers, parse_message
from memsync.mirror.worktree import prune_folders

if TYPE_CHECKING:
    from memsync.mirror.repository import Mirror

# Outside refs/memsync/ on purpose: backups push refs/memsync/*, and this ref is never worth pushing.
WORK_REF = "refs/memsync-rewrite/memstore"
STASH_REF = "refs/stash"
SPELLING_RULES = "2"  # the spelling rules a mirror's history is checked against (Rewriter.respell)
RECORDS_PREFIX = "refs/memsync/"  # memsync's records: they copy store content, so redacted copies leave
# Files git keeps next to HEAD that name a commit; they are not refs, so they are mapped by hand.
PSEUDO_REFS = ("ORIG_HEAD", "MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "FETCH_HEAD", "AUTO_MERGE")
_HEX40 = re.compile(rb"\b[0-9a-f]{40}\b")


@dataclass(frozen=True, slots=True)
class KeptContent:
    """Redacted content memsync left in place because it is the user's unpushed work."""

    where: str  # "working tree", "index", a ref name, or a file under .git/memsync/
    path: str | None  # the working-tree path concerned, when there is one
    blob: str | None


@dataclass(frozen=True)
class RewriteReport:
    """What a rewrite did: the redacted blobs ``removed`` from every object, ``shared`` with a version
    that is not redacted, ``kept`` in unpushed work, or ``remaining`` for a reason memsync cannot name."""

    versions: tuple[str, ...]
    first_commit: str | None  # the old id of the first commit of memstore/main derived again
    old_tip: str | None
    new_tip: str | None
    commits: int
    refs: tuple[str, ...] = ()  # the other refs moved
    removed: tuple[str, ...] = ()
    shared: tuple[str, ...] = ()
    kept: tuple[KeptContent, ...] = ()
    remaining: tuple[str, ...] = ()
    pruned: bool = True
    warnings: tuple[str, ...] = ()
    reason: str = "redaction"  # or "spelling": names respelled by today's path spelling rules

    def to_json(self) -> dict[str, Any]:
        # Lists where the fields hold tuples: the report reads as it would once loaded from JSON.
        return asdict(
            self, dict_factory=lambda items: {k: list(v) if isinstance(v, tuple) else v for k, v in items}
        )

    def summary(self) -> str:
        """One line for the user: what was rewritten and what stays."""
        moved = f"; moved {', '.join(self.refs)}" if self.refs else ""
        if self.reason == "spelling":
            return (
                f"path spelling: rewrote {self.commits} commit(s) of memstore/main from"
                f" {self.first_commit or '-'} so that names differing only in case or normalization,"
                " and names Windows cannot hold, check out as distinct files everywhere"
                " (docs/mirror.md, 'Path spelling'); their commit ids changed, and `memsync backup` updates"
                f" the backups{moved}"
            )
        text = (
            f"redaction: rewrote {self.commits} commit(s) of memstore/main from {self.first_commit or '-'}"
            f" ({len(self.versions)} redacted version(s)); {len(self.removed)} redacted"
            f" content(s) removed from every object{moved}"
        )
        if self.shared:
            text += f"; {len(self.shared)} kept as the content of a version that is not redacted"
        if self.kept:
            kept = ", ".join(k.where if k.path is None else f"{k.where}: {k.path}" for k in self.kept)
            text += f"; kept in your unpushed work: {kept}"
        return text


@dataclass
class _Pending:
    """The ``rewrite-pending`` intent: the versions concerned and the redacted blobs still to prune."""

    versions: list[str] = field(default_factory=list)
    blobs: dict[str, str] = field(default_factory=dict)  # redacted blob id → its content's SHA-256

    @classmethod
    def load(cls, mirror: Mirror) -> _Pending | None:
        data = mirror.git.state.get("rewrite-pending")
        return None if data is None else cls(list(data.get("versions", [])), dict(data.get("blobs", {})))

    def save(self, mirror: Mirror) -> None:
        mirror.git.state.put("rewrite-pending", asdict(self))


class Rewriter:
    """Rewrites of one mirror's history (see the module docstring); the caller holds the store's lock."""

    def __init__(self, mirror: Mirror) -> None:
        self.mirror = mirror

    def superseded(self) -> set[str]:
        """Old commit ids that a rewrite replaced (a backup may force-update a ref from these)."""
        return {commit for commit in self.mirror.git.state.get("superseded") or () if len(commit) == 40}

    def pending(self) -> bool:
        """Whether an interrupted rewrite still has redacted content to prune."""
        return self.mirror.git.state.get("rewrite-pending") is not None

    def defer(self, versions: Iterable[str]) -> None:
        """Note a rewrite due for ``versions`` without doing it: the next pull rewrites (:meth:`pending`)."""
        pending = _Pending.load(self.mirror) or _Pending()
        pending.versions.extend(v for v in versions if v not in pending.versions)
        pending.save(self.mirror)

    def redact(
        self, records: Iterable[VersionRecord], *, recontent: Mapping[str, bytes | None] | None = None
    ) -> RewriteReport | None:
        """Rewrite the mirror so the versions of ``records`` (as a fresh import would add them now) are
        redacted in it, and finish the pruning an interrupted rewrite left; None when nothing was to do.
        ``recontent`` names versions whose commits record them as redacted already, with the content a
        fresh import would now write (None: the memory no longer serves the kept hash)."""
        mirror = self.mirror
        replacements = {record.version_id: record for record in records}
        recontent = dict(recontent or {})
        pending = _Pending.load(mirror)
        if not replacements and not recontent and pending is None:
            return None  # the common full scan: nothing redacted since the import, nothing owed
        history = _read_history(mirror)

        def is_affected(trailers: Trailers) -> bool:
            if trailers.version_id in replacements:
                # A commit that already records its version as redacted was written from a redacted version.
                return not trailers.redacted
            if trailers.version_id in recontent and trailers.redacted:
                return (_written_path(trailers) is not None) != (recontent[trailers.version_id] is not None)
            return False

        affected = [i for i, old in enumerate(history) if is_affected(old.trailers)]
        if not affected and pending is None:
            return None
        pending = pending or _Pending()
        for old in (history[index] for index in affected):
            if old.trailers.version_id not in pending.versions:
                pending.versions.append(old.trailers.version_id)
            blob = _written_blob(mirror, old)
            if blob is not None:
                pending.blobs[blob] = hashlib.sha256(mirror.git.read_blob(blob)).hexdigest()
        if affected:  # before anything changes: from here on, a kill leaves a note of what to prune
            pending.save(mirror)
        start = affected[0] if affected else None
        return _rewrite(mirror, history, start, pending, "redaction", replacements, recontent)

    def respelling_due(self) -> bool:
        """Whether the history was not yet checked against today's path spelling rules."""
        return self.mirror.git.state.get("spelling-rules") != SPELLING_RULES

    def respell(self) -> RewriteReport | None:
        """Rewrite, as a redaction does, a history whose trees spelling rules 5 and 6 (docs/mirror.md, "Path
        spelling") would spell otherwise; None when none would. The caller also owns the checkout."""
        if not self.respelling_due():
            return None
        history = _read_history(self.mirror)
        paths = PathMap()
        report = None
        for index, old in enumerate(history):
            apply_trailers(paths, old.trailers)
            # Format 1's rules spelled this tree, today's would not.
            if paths.novel and old.trailers.format == 1:
                report = _rewrite(self.mirror, history, index, _Pending(), "spelling", {}, {})
                break
        self.mirror.git.state.put("spelling-rules", SPELLING_RULES)
        return report


def _rewrite(
    mirror: Mirror,
    history: list[_OldCommit],
    start: int | None,
    pending: _Pending,
    reason: str,
    replacements: Mapping[str, VersionRecord],
    recontent: Mapping[str, bytes | None],
) -> RewriteReport:
    """Derive ``history[start:]`` again (start None: only pruning is owed), carry everything else over,
    move ``memstore/main``, prune what nothing reaches, and check what remains."""
    old_tip = new_tip = mirror.tip()
    parent = history[start - 1].id if start else None  # the last commit the rewrite keeps
    mapping: dict[str, str] = {}  # old → new id of every rewritten commit
    if start is not None:
        new_tip, mapping = _derive(mirror, history[start:], parent, replacements, recontent)
        crash_point("rewrite.history_written")
    carrier = _Carrier(mirror, mapping, parent, pending.blobs)
    carrier.carry_everything()
    crash_point("rewrite.refs_carried")
    # Synced before memstore/main moves: a backup may force-update a remote ref only from these.
    superseded = [old for old, new in {**mapping, **carrier.replaced}.items() if old != new]
    if superseded:
        known = mirror.git.state.get("superseded") or []
        mirror.git.state.put("superseded", known + [c for c in superseded if c not in set(known)])
    if mapping:
        assert new_tip is not None
        if new_tip != old_tip:
            mirror.git.set_ref_if_equals(
                mirror.MEMSTORE_REF, new_tip, old_tip, message=f"memsync: history rewritten ({reason})"
            )
        mirror.git.delete_ref_if_equals(WORK_REF, new_tip)
        crash_point("rewrite.tip_moved")
    mirror.drop_history_caches()
    # Reflogs expire (but the stash's, already rewritten, stays) and what nothing reaches goes.
    mirror.git.drop_unreachable(keep_reflog=STASH_REF)
    crash_point("rewrite.pruned")

    # The SHA-256 of every content the history now writes: the commits before ``start`` were read already.
    trailers = [old.trailers for old in history[: start or 0]]
    tip = mirror.tip()
    if tip is not None:
        with translated("reading the rewritten history"):
            trailers += [parse_message(c.message, str(c.id)) for c in mirror.git.walk(tip, since=parent)]
    in_history = {t.content_sha256 for t in trailers if _written_path(t) is not None}
    with translated("checking the redacted contents are gone"):
        removed = [blob for blob in sorted(pending.blobs) if not mirror.git.has_object(blob)]
    shared = [b for b in sorted(pending.blobs) if b not in removed and pending.blobs[b] in in_history]
    remaining = sorted(set(pending.blobs) - {*removed, *shared, *(k.blob for k in carrier.kept)})
    carrier.scan_state_files()
    if remaining:
        carrier.warnings.append(
            f"{len(remaining)} redacted content(s) are still in the repository and memsync cannot tell"
            f" why ({', '.join(remaining)}); find them with `git rev-list --all --objects` and"
            " `git fsck --unreachable`"
        )
    else:
        mirror.git.state.put("rewrite-pending", None)
    return RewriteReport(
        versions=tuple(pending.versions),
        first_commit=next(iter(mapping), None),
        old_tip=old_tip,
        new_tip=tip,
        commits=len(mapping),
        refs=tuple(carrier.moved),
        removed=tuple(removed),
        shared=tuple(shared),
        kept=tuple(carrier.kept),
        remaining=tuple(remaining),
        warnings=tuple(carrier.warnings),
        reason=reason,
    )


@dataclass(frozen=True, slots=True)
class _OldCommit:
    id: str
    trailers: Trailers
    commit: pygit2.Commit


def _read_history(mirror: Mirror) -> list[_OldCommit]:
    tip = mirror.tip()
    with translated("reading the imported history"):
        commits = list(mirror.git.walk(tip, oldest_first=True)) if tip is not None else []
        return [_OldCommit(str(c.id), parse_message(c.message, str(c.id)), c) for c in commits]


def _written_path(trailers: Trailers) -> str | None:
    """The memory path whose file the commit set (a redacted one too); None when it set none."""
    return None if trailers.operation == "deleted" or trailers.skipped is not None else trailers.memory_path


def _written_blob(mirror: Mirror, old: _OldCommit) -> str | None:
    path = _written_path(old.trailers)
    if path is None:
        return None
    with translated(f"reading commit {old.id}"):
        blob = blob_at(mirror.git.tree(old.id), path)
    return str(blob.id) if blob is not None else None


def _record_path(old: _OldCommit, moved_from: str | None) -> str | None:
    """The version's ``path`` as the import got it: ``Memory-Path``, else the summary line's. Anthropic
    drops both the path and the hash of a redacted version: None lets the writer name the memory by its
    path in the new history, as a fresh import does."""
    trailers = old.trailers
    if trailers.memory_path is not None:
        return trailers.memory_path
    if trailers.redacted and trailers.content_sha256 is None and trailers.skipped is None:
        return None
    subject = old.commit.message.split("\n", 1)[0].removeprefix(f"{trailers.operation} ")
    if trailers.skipped is not None:
        subject = subject.removesuffix(f" (skipped: {trailers.skipped})")
    elif trailers.redacted:
        subject = subject.removesuffix(" (redacted)")
    if moved_from is not None:
        subject = subject.removesuffix(f" (moved from {quote_for_message(moved_from)})")
    if subject == f"memory {trailers.memory_id}":
        return None
    try:
        return unquote_from_message(subject)
    except ValueError:
        return None


def _reconstructed(mirror: Mirror, old: _OldCommit, known: str | None) -> VersionRecord:
    """The record that made ``old``, as far as the commit tells (exactly, for what a rewrite needs)."""
    trailers = old.trailers
    writes = _written_path(trailers) is not None
    moved_from = known if writes and known is not None and known != trailers.memory_path else None
    content: bytes | None = None
    # The writer needs the bytes of a redacted version that still wrote content (a hash alone would not
    # make it write the file), and of content the mirror cannot find by its hash.
    if writes and (
        trailers.redacted
        or trailers.content_sha256 is None
        or mirror.blob_for_sha256(trailers.content_sha256) is None
    ):
        blob = _written_blob(mirror, old)
        content = mirror.git.read_blob(blob) if blob is not None else None
    return VersionRecord(
        version_id=trailers.version_id,
        memory_id=trailers.memory_id,
        operation=trailers.operation,
        path=_record_path(old, moved_from),
        content=content,
        content_sha256=trailers.content_sha256,
        created_at=trailers.created_at,
        redacted=trailers.redacted,
        author_name=old.commit.author.name,
        author_email=old.commit.author.email,
        skipped=trailers.skipped is not None,
        skip_reason=trailers.skipped or "unspecified",
        inferred=trailers.inferred,
        history_truncated=trailers.history_truncated,
    )


def _derive(
    mirror: Mirror,
    rewritten: list[_OldCommit],
    parent: str | None,
    replacements: Mapping[str, VersionRecord],
    recontent: Mapping[str, bytes | None],
) -> tuple[str | None, dict[str, str]]:
    """Write ``rewritten`` again on :data:`WORK_REF`, on their old ``parent``; (new tip, old → new ids)."""
    current = mirror.git.ref_target(WORK_REF)
    if current is not None:  # a rewrite killed earlier left its work here; derived again from scratch
        mirror.git.delete_ref_if_equals(WORK_REF, current)
    if parent is not None:
        mirror.git.set_ref_if_equals(WORK_REF, parent, None, message="memsync: rewrite after a redaction")
    # The old history's path map, to recover what each commit's summary line was made from.
    known = mirror.path_map_at(parent).copy()
    writer = HistoryWriter(mirror, ref=WORK_REF, keep_ids=True)
    for old in rewritten:
        version = old.trailers.version_id
        replacement = replacements.get(version)
        if replacement is not None:
            # What the first commit says about the history before it is no property of the version.
            record = replace(replacement, history_truncated=old.trailers.history_truncated)
            if old.trailers.skipped is not None:
                # The user imported past this version with --skip-version: a fresh import would too.
                record = replace(record, content=None, skipped=True, skip_reason=old.trailers.skipped)
        else:
            record = _reconstructed(mirror, old, known.path_of(old.trailers.memory_id))
            if version in recontent and old.trailers.redacted and old.trailers.skipped is None:
                record = replace(record, content=recontent[version])
        writer.add(record)
        apply_trailers(known, old.trailers)
    tip = writer.flush()
    assert writer.written is not None
    return tip, dict(zip((old.id for old in rewritten), writer.written, strict=True))


class _Carrier:
    """Moves refs, the stash, pseudo-refs, the index and the working tree onto the new history."""

    def __init__(
        self, mirror: Mirror, mapping: Mapping[str, str], first_old: str | None, blobs: Iterable[str]
    ) -> None:
        self._mirror = mirror
        self._git = mirror.git
        self._mapping = dict(mapping)  # old → new id of every rewritten commit
        self._first_old = first_old  # the parent of the first rewritten commit (None: the root)
        self.replaced: dict[str, str] = {}  # commits made again on the new history (old → new)
        self.moved: list[str] = []  # the refs and pseudo-refs that moved
        self.kept: list[KeptContent] = []
        self.warnings: list[str] = []
        # The redacted contents, read before pruning removes them, to look for them elsewhere.
        with translated("reading the redacted contents"):
            self.redacted = {b: self._git.read_blob(b) for b in blobs if self._git.has_object(b)}

    def carry_everything(self) -> None:
        with translated("moving refs onto the rewritten history"):
            self._carry_checkout()
            for name, old in sorted(self._git.direct_refs().items()):
                if name in (self._mirror.MEMSTORE_REF, WORK_REF, STASH_REF, "HEAD"):
                    continue
                kind = self._git.object_type(old)
                if kind == "tag":
                    self.warnings.append(f"{name} is an annotated tag; it was left pointing where it was")
                if kind != "commit":
                    continue
                new = self._carry(old, name)
                if name.startswith(RECORDS_PREFIX) and name != self._mirror.BASE_REF:
                    new = self._scrub(new, name)
                if new != old:
                    self._git.set_ref_if_equals(name, new, old, message="memsync: carried over a redaction")
                    self.moved.append(name)
            self._carry_stash()
            for name in PSEUDO_REFS:
                file = self._mirror.git_dir / name
                try:
                    data = file.read_bytes()
                except FileNotFoundError:
                    continue
                if (updated := self._carry_ids(data, name)) != data:
                    replace_file(file, updated)
                    self.moved.append(name)

    def _carry(self, commit: str, where: str) -> str:
        """The commit on the new history that stands for ``commit``."""
        if not self._mapping:
            return commit
        if commit in self._mapping or commit in self.replaced:
            return self._mapping.get(commit) or self.replaced[commit]
        for item in self._git.walk(commit, since=self._first_old, oldest_first=True):
            old = str(item.id)
            if old in self._mapping or old in self.replaced:
                continue
            parents = [str(p) for p in item.parent_ids]
            new_parents = [self._mapping.get(p) or self.replaced.get(p) or p for p in parents]
            if new_parents != parents:
                self.replaced[old] = self._remake(item, parents[0], new_parents, where)
        return self.replaced.get(commit, commit)

    def _remake(self, commit: pygit2.Commit, old_parent: str, new_parents: list[str], where: str) -> str:
        """``commit`` again on ``new_parents``: its own changes kept, the rest from the new parent."""
        tree = str(commit.tree.id)
        changes = _tree_changes(self._git.tree(old_parent), self._git.tree(new_parents[0]))
        if changes:
            mine = self._git.tree_files(tree)
            edits: list[tuple[str, str | None]] = []
            for path, before, after in changes:
                if mine.get(path) == before:
                    edits.append((path, after))
                elif path in mine and self._holds_redacted(mine[path]):
                    self.kept.append(KeptContent(where, path, mine[path]))
            tree = self._git.edit_tree(tree, edits)
        return self._git.recommit(str(commit.id), tree, new_parents)

    def _scrub(self, commit: str, where: str) -> str:
        """A memsync record without its exact copies of redacted content (a conflict's ``base``, ``remote``);
        a file that merely contains redacted bytes (the markers, the ``local`` side) is kept, and reported."""
        if not self.redacted:
            return commit
        files = self._git.tree_files(commit)
        exact = [path for path, blob in files.items() if blob in self.redacted]
        for path, blob in sorted(files.items()):
            if blob not in self.redacted and self._holds_redacted(blob):
                self.kept.append(KeptContent(where, path, blob))
        if not exact:
            return commit
        found = self._git.commit(commit)
        root = self._git.edit_tree(str(found.tree.id), [(path, None) for path in exact])
        self.replaced[commit] = self._git.recommit(commit, root, [str(p) for p in found.parent_ids])
        return self.replaced[commit]

    def _holds_redacted(self, blob: str) -> bool:
        return blob in self.redacted or self._contains_redacted(self._git.read_blob(blob))

    def _contains_redacted(self, data: bytes) -> bool:
        return any(content and content in data for content in self.redacted.values())

    def _carry_checkout(self) -> None:
        """Index and working tree of HEAD follow HEAD's commit onto the new history."""
        head = self._git.head()
        if head.target is None:
            return
        new = self._carry(head.target, "HEAD")
        if new != head.target:
            index = self._git.index()
            for path, before, after in _tree_changes(self._git.tree(head.target), self._git.tree(new)):
                self._carry_file(path, before, after)
                staged = str(index[path].id) if path in index else None
                if staged == before:
                    if after is None:
                        index.remove(path)
                    else:
                        index.add(pygit2.IndexEntry(path, pygit2.Oid(hex=after), pygit2.enums.FileMode.BLOB))
            index.write()
            if head.branch is None:
                self._git.detach_head(new)
        self._report_working_tree()

    def _carry_file(self, path: str, before: str | None, after: str | None) -> None:
        file = self._git.workdir / path
        try:
            data: bytes | None = file.read_bytes() if file.is_file() and not file.is_symlink() else None
        except OSError:
            data = None
        current = str(pygit2.hash(data)) if data is not None else None
        if current == after or current != before:
            return  # already carried (a rerun after a kill), or the user's (see _report_working_tree)
        if after is None:
            file.unlink()
            prune_folders(self._git.workdir, path)
        else:
            file.parent.mkdir(parents=True, exist_ok=True)
            replace_file(file, self._git.read_blob(after))

    def _report_working_tree(self) -> None:
        """Staged entries and changed working-tree files that hold redacted bytes: kept, and said so."""
        if not self.redacted:
            return
        index = self._git.index()
        staged_flags = pygit2.enums.FileStatus.INDEX_NEW | pygit2.enums.FileStatus.INDEX_MODIFIED
        changed_flags = pygit2.enums.FileStatus.WT_NEW | pygit2.enums.FileStatus.WT_MODIFIED
        for path, flags in sorted(self._git.status().items()):
            if flags & staged_flags and path in index:
                staged = str(index[path].id)
                if self._holds_redacted(staged):
                    self.kept.append(KeptContent("index", path, staged))
            try:
                data = (self._git.workdir / path).read_bytes()
            except OSError:
                continue
            if (flags & (changed_flags | staged_flags)) and self._contains_redacted(data):
                self.kept.append(KeptContent("working tree", path, None))

    def _carry_stash(self) -> None:
        """Every stash entry onto the new history; its reflog rewritten line by line (keeps dates)."""
        old = self._git.ref_target(STASH_REF)
        if old is None:
            return
        log_file = self._mirror.git_dir / "logs" / STASH_REF
        try:
            lines = log_file.read_bytes().splitlines(keepends=True)
        except FileNotFoundError:
            lines = []
        # A line starts with the old and the new id (40 hex digits each, a space between).
        rewritten = [self._carry_ids(line[:81], STASH_REF) + line[81:] for line in lines]
        new = self._carry(old, STASH_REF)
        if new != old:
            self._git.set_ref_if_equals(STASH_REF, new, old, message="memsync: carried over a redaction")
        if rewritten != lines:
            replace_file(log_file, b"".join(rewritten))
        if new != old or rewritten != lines:
            self.moved.append(STASH_REF)

    def _carry_ids(self, data: bytes, where: str) -> bytes:
        def carried(match: re.Match[bytes]) -> bytes:
            commit = match.group(0).decode("ascii")
            if self._git.object_type(commit) != "commit":
                return match.group(0)
            return self._carry(commit, where).encode("ascii")

        return _HEX40.sub(carried, data)

    def scan_state_files(self) -> None:
        """Files of other memsync parts under ``.git/memsync/`` that hold redacted bytes: reported."""
        state_dir = self._mirror.state_dir
        for file in sorted(state_dir.rglob("*")) if any(self.redacted.values()) else []:
            small = file.is_file() and file.stat().st_size <= 64 << 20
            if small and self._contains_redacted(file.read_bytes()):
                where = f".git/memsync/{file.relative_to(state_dir).as_posix()}"
                self.kept.append(KeptContent(where, None, None))


def _tree_changes(old: pygit2.Tree, new: pygit2.Tree) -> list[tuple[str, str | None, str | None]]:
    """``(tree path, blob before or None, blob after or None)`` of every file that differs, removals
    first: a file can take the place of a directory that goes."""
    changes: dict[str, tuple[str | None, str | None]] = {}
    for delta in old.diff_to_tree(new).deltas:
        # No rename detection: one path per delta; a type change comes as a delete and an add of it.
        path = delta.old_file.path
        before, after = changes.get(path, (None, None))
        if delta.status != pygit2.enums.DeltaStatus.ADDED:
            before = str(delta.old_file.id)
        if delta.status != pygit2.enums.DeltaStatus.DELETED:
            after = str(delta.new_file.id)
        changes[path] = (before, after)
    return sorted(((p, b, a) for p, (b, a) in changes.items()), key=lambda c: (c[2] is not None, c[0]))
