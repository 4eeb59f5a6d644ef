"""Rewriting a mirror after a redaction, so the redacted content is in no object of the repository.

docs/design.md §2, "Redaction propagates": the commits from the first redacted version on are derived
again by the deterministic :class:`HistoryWriter`, from the parent of the first affected commit,
with the redacted versions now recorded as redacted. The result has the commit ids a fresh import
made after the redaction would have. Everything else that points into the old history follows:

* ``main`` (the user's checkout), ``refs/memsync/base``, other branches, ``ORIG_HEAD`` and friends,
  and every stash entry: a commit of the old history maps to its new commit; a commit made on top
  of it (unpushed local work) is made again on the new parent, keeping the files it changed and
  taking the rewritten content for the files it did not touch;
* memsync's records under ``refs/memsync/`` (conflict records, whose ``base`` and ``remote`` sides
  copy store content): a file that is exactly redacted content leaves the record; a file that
  contains it among other bytes (conflict markers, the ``local`` side) is the user's and stays;
* the index and the working tree: a file the user did not touch takes its new content (or goes);
  a file the user changed is kept as it is;
* reflogs are expired (the stash's own log is rewritten to the new commits, so no stash is lost),
  unreachable objects are pruned (``git gc --prune=now``), and the caches under ``.git/memsync/``
  that name old commits are dropped (they are rebuilt from history).

A blob that a version which is not redacted also uses stays (it is that version's content too).
Unpushed work that itself contains the redacted bytes stays and is reported: it is the user's.

The steps are ordered so that a kill at any point is finished by the next full scan: the new
history is written on a private ref, the other refs and the checkout follow, ``memstore/main`` moves
last, and the state's ``rewrite-pending`` intent names what still has to be pruned until pruning is
done. Old commit ids that were replaced are added to its ``superseded`` intent: the next backup may
force-update a remote ref only from one of those (``memsync backup``).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pygit2

from memsync.crashpoints import crash_point
from memsync.mirror.errors import translated
from memsync.mirror.gitstore import blob_at, replace_file
from memsync.mirror.history import HistoryWriter, PathMap, VersionRecord, apply_trailers
from memsync.mirror.paths import quote_for_message, unquote_from_message
from memsync.mirror.trailers import Trailers, parse_message

if TYPE_CHECKING:
    from memsync.mirror.repository import Mirror

# The new history is written here first; memstore/main moves to it only once everything else followed.
# Outside refs/memsync/ on purpose: backups push refs/memsync/*, and this ref is never worth pushing.
WORK_REF = "refs/memsync-rewrite/memstore"
STASH_REF = "refs/stash"
# The spelling rules a mirror's history is checked against (respell_history).
SPELLING_RULES = "2"
# memsync's records (conflicts and others): they copy store content, so redacted copies leave them.
RECORDS_PREFIX = "refs/memsync/"
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
    """What a rewrite did. ``commits`` of ``memstore/main`` were derived again from ``first_commit``
    (its old id) on; ``refs`` are the other refs that moved; ``removed`` are the redacted blobs no
    object holds any more, ``shared`` those kept because a version that is not redacted has the same
    content, ``kept`` redacted content left in unpushed work; ``remaining`` blobs that are still in
    the repository for a reason memsync could not name (an error: the output says so)."""

    versions: tuple[str, ...]
    first_commit: str | None
    old_tip: str | None
    new_tip: str | None
    commits: int
    refs: tuple[str, ...] = ()
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
        if self.reason == "spelling":
            text = (
                f"path spelling: rewrote {self.commits} commit(s) of memstore/main from"
                f" {self.first_commit or '-'} so that names differing only in case or normalization,"
                " and names Windows cannot hold, check out as distinct files everywhere (docs/mirror.md,"
                " 'Path spelling'); their commit ids changed, and `memsync backup` updates the backups"
            )
            return text + (f"; moved {', '.join(self.refs)}" if self.refs else "")
        text = (
            f"redaction: rewrote {self.commits} commit(s) of memstore/main from {self.first_commit or '-'}"
            f" ({len(self.versions)} redacted version(s)); {len(self.removed)} redacted"
            f" content(s) removed from every object"
        )
        if self.refs:
            text += f"; moved {', '.join(self.refs)}"
        if self.shared:
            text += f"; {len(self.shared)} kept as the content of a version that is not redacted"
        if self.kept:
            kept = ", ".join(k.where if k.path is None else f"{k.where}: {k.path}" for k in self.kept)
            text += f"; kept in your unpushed work: {kept}"
        return text


@dataclass
class _Pending:
    """What an interrupted rewrite still owes: blobs to prune and the version ids concerned."""

    versions: list[str] = field(default_factory=list)
    blobs: dict[str, str] = field(default_factory=dict)  # redacted blob id → its content's SHA-256

    @classmethod
    def load(cls, mirror: Mirror) -> _Pending | None:
        data = mirror.git.state.get("rewrite-pending")
        if data is None:
            return None
        return cls(versions=list(data.get("versions", [])), blobs=dict(data.get("blobs", {})))

    def save(self, mirror: Mirror) -> None:
        mirror.git.state.put("rewrite-pending", asdict(self))


def superseded_commits(mirror: Mirror) -> set[str]:
    """Old commit ids that a redaction rewrite replaced (a backup may force-update a ref from these)."""
    return {commit for commit in mirror.git.state.get("superseded") or () if len(commit) == 40}


def rewrite_pending(mirror: Mirror) -> bool:
    """Whether an interrupted rewrite still has redacted content to prune."""
    return mirror.git.state.get("rewrite-pending") is not None


def defer_rewrite(mirror: Mirror, versions: Iterable[str]) -> None:
    """Note that a rewrite is due for ``versions`` without doing it now (:func:`rewrite_pending` is
    then true, so the next pull looks again at every redacted commit and rewrites)."""
    pending = _Pending.load(mirror) or _Pending()
    pending.versions.extend(v for v in versions if v not in pending.versions)
    pending.save(mirror)


def rewrite_redacted(
    mirror: Mirror,
    records: Iterable[VersionRecord],
    *,
    recontent: Mapping[str, bytes | None] | None = None,
) -> RewriteReport | None:
    """Rewrite the mirror so the versions of ``records`` are redacted in it (see the module docstring).

    ``records`` are the redacted versions exactly as a fresh import would add them (content None, or
    the live memory's current content when the API still serves it under the kept hash). Versions the
    history does not hold are ignored. ``recontent`` names versions whose commits record them as
    redacted already, with the content a fresh import would now write for them: None where the memory
    no longer serves the kept hash (its content leaves the mirror), or the bytes it serves again.
    Returns None when there was nothing to do; also finishes the pruning an interrupted rewrite left
    pending. The caller holds the store's lock.
    """
    replacements = {record.version_id: record for record in records}
    recontent = dict(recontent or {})
    pending = _Pending.load(mirror)
    if not replacements and not recontent and pending is None:
        return None  # the common full scan: nothing redacted since the import, nothing owed
    history = _read_history(mirror)

    def is_affected(old: _OldCommit) -> bool:
        version = old.trailers.version_id
        if version in replacements:
            # A commit that already records its version as redacted was written from a redacted version.
            return not old.trailers.redacted
        if version in recontent and old.trailers.redacted:
            return (_written_path(old.trailers) is not None) != (recontent[version] is not None)
        return False

    affected = [i for i, old in enumerate(history) if is_affected(old)]
    if not affected and pending is None:
        return None
    pending = pending or _Pending()
    old_tip = new_tip = mirror.tip()
    start = affected[0] if affected else 0
    parent = history[start - 1].id if start > 0 else None  # the last commit the rewrite keeps
    mapping: dict[str, str] = {}  # old → new id of every commit from ``start`` on
    if affected:
        for old in (history[index] for index in affected):
            if old.trailers.version_id not in pending.versions:
                pending.versions.append(old.trailers.version_id)
            blob = _written_blob(mirror, old)
            if blob is not None:
                pending.blobs[blob] = hashlib.sha256(mirror.git.read_blob(blob)).hexdigest()
        # Written before anything changes: from here on, a kill leaves a note of what to prune.
        pending.save(mirror)
        new_tip, mapping = _derive(mirror, history[start:], parent, replacements, recontent)
        crash_point("rewrite.history_written")
    return _carry_and_prune(mirror, history, start, mapping, old_tip, new_tip, pending, reason="redaction")


def respelling_due(mirror: Mirror) -> bool:
    """Whether the mirror's history was not yet checked against today's path spelling rules."""
    return mirror.git.state.get("spelling-rules") != SPELLING_RULES


def respell_history(mirror: Mirror) -> RewriteReport | None:
    """Rewrite the history a memsync without spelling rules 5 and 6 wrote, if any of its trees needs
    them (docs/mirror.md, "Path spelling"), exactly as a redaction is rewritten: the commits from the
    first such tree on are derived again (with the commit ids a fresh import makes now), and ``main``,
    the checkout, the stash and memsync's records follow. Returns None when nothing needed it (the
    mirror is then noted as checked, and the history is not read again). The caller holds the
    store's lock and owns the checkout.
    """
    if not respelling_due(mirror):
        return None
    history = _read_history(mirror)
    paths = PathMap()
    start = None
    for index, old in enumerate(history):
        apply_trailers(paths, old.trailers)
        if paths.novel and old.trailers.format == 1:
            start = index  # its tree was spelled by format 1's rules, and would not be now
            break
    report = None
    if start is not None:
        old_tip = mirror.tip()
        parent = history[start - 1].id if start > 0 else None
        new_tip, mapping = _derive(mirror, history[start:], parent, {}, {})
        crash_point("rewrite.history_written")
        report = _carry_and_prune(
            mirror, history, start, mapping, old_tip, new_tip, _Pending(), reason="spelling"
        )
    mirror.git.state.put("spelling-rules", SPELLING_RULES)
    return report


def _carry_and_prune(
    mirror: Mirror,
    history: list[_OldCommit],
    start: int,
    mapping: dict[str, str],
    old_tip: str | None,
    new_tip: str | None,
    pending: _Pending,
    *,
    reason: str,
) -> RewriteReport:
    """The rest of a rewrite once the new history is on :data:`WORK_REF`: everything else follows,
    ``memstore/main`` moves, what nothing reaches is pruned, and what remains is checked."""
    parent = history[start - 1].id if start > 0 else None
    carried = _Carrier(mirror, mapping, parent)
    refs, kept, warnings = carried.carry_everything(pending)
    crash_point("rewrite.refs_carried")
    # Synced before memstore/main moves: a backup may force-update a remote ref only from these.
    superseded = [old for old, new in {**mapping, **carried.replaced}.items() if old != new]
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
    shared_hashes = _contents_in_history(mirror, history[:start], parent)
    removed: list[str] = []
    shared: list[str] = []
    remaining: list[str] = []
    kept_blobs = {k.blob for k in kept if k.blob is not None}
    with translated("checking the redacted contents are gone"):
        for blob, sha in sorted(pending.blobs.items()):
            if not mirror.git.has_object(blob):
                removed.append(blob)
            elif sha in shared_hashes:
                shared.append(blob)
            elif blob not in kept_blobs:
                remaining.append(blob)
    kept.extend(_scan_state_files(mirror, carried.redacted.values()))
    if remaining:
        warnings.append(
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
        new_tip=mirror.tip(),
        commits=len(mapping),
        refs=tuple(refs),
        removed=tuple(removed),
        shared=tuple(shared),
        kept=tuple(kept),
        remaining=tuple(remaining),
        warnings=tuple(warnings),
        reason=reason,
    )


# --- reading the old history ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _OldCommit:
    id: str
    trailers: Trailers
    summary: str
    author_name: str
    author_email: str


def _read_history(mirror: Mirror) -> list[_OldCommit]:
    """The commits of ``memstore/main``, oldest first."""
    tip = mirror.tip()
    if tip is None:
        return []
    with translated("reading the imported history"):
        return [
            _OldCommit(
                id=str(commit.id),
                trailers=parse_message(commit.message, str(commit.id)),
                summary=commit.message.split("\n", 1)[0],
                author_name=commit.author.name,
                author_email=commit.author.email,
            )
            for commit in mirror.git.walk(tip, oldest_first=True)
        ]


def _written_path(trailers: Trailers) -> str | None:
    """The memory path whose file the commit set (a redacted one too); None when it set none."""
    if trailers.operation == "deleted" or trailers.skipped is not None:
        return None
    return trailers.memory_path


def _written_blob(mirror: Mirror, old: _OldCommit) -> str | None:
    """The blob a commit wrote for its version (None when it wrote none)."""
    path = _written_path(old.trailers)
    if path is None:
        return None
    with translated(f"reading commit {old.id}"):
        blob = blob_at(mirror.git.tree(old.id), path)
    return str(blob.id) if blob is not None else None


def _record_path(old: _OldCommit, moved_from: str | None) -> str | None:
    """The version's ``path`` as the import got it, recovered from the commit.

    A commit that wrote or removed a file names it in ``Memory-Path``. Otherwise the summary line
    holds the record's path, or the memory's known path when the record had none. Anthropic drops
    both the path and the hash of a redacted version, so such a commit (redacted, no hash) had no
    path: returning None lets the writer name the memory by its path in the new history, as a
    fresh import does.
    """
    trailers = old.trailers
    if trailers.memory_path is not None:
        return trailers.memory_path
    if trailers.redacted and trailers.content_sha256 is None and trailers.skipped is None:
        return None
    subject = old.summary.removeprefix(f"{trailers.operation} ")
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
    # A redacted version that still wrote content (the live memory's current content): the writer
    # needs the bytes, a hash alone would not make it write the file. Nor can it write content the
    # mirror cannot find by its hash.
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
        author_name=old.author_name,
        author_email=old.author_email,
        skipped=trailers.skipped is not None,
        skip_reason=trailers.skipped or "unspecified",
        inferred=trailers.inferred,
        history_truncated=trailers.history_truncated,
    )


# --- deriving the new history -----------------------------------------------------------------------


def _derive(
    mirror: Mirror,
    rewritten: list[_OldCommit],
    parent: str | None,
    replacements: Mapping[str, VersionRecord],
    recontent: Mapping[str, bytes | None],
) -> tuple[str | None, dict[str, str]]:
    """Write ``rewritten`` again on :data:`WORK_REF`, on their old ``parent``; (new tip, old → new ids)."""
    current = mirror.git.ref_target(WORK_REF)
    if current is not None:
        # A rewrite killed earlier left its work here; it is derived again from scratch.
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


# --- carrying everything else over ------------------------------------------------------------------


class _Carrier:
    """Moves refs, the stash, pseudo-refs, the index and the working tree onto the new history."""

    def __init__(self, mirror: Mirror, mapping: Mapping[str, str], first_old: str | None) -> None:
        self._mirror = mirror
        self._mapping = dict(mapping)  # old → new id of every rewritten commit
        self.replaced: dict[str, str] = {}  # commits made again on the new history (old → new)
        self._first_old = first_old  # the parent of the first rewritten commit (None: the root)
        self._kept: list[KeptContent] = []
        # The redacted bytes, read before pruning removes them (to look for them elsewhere).
        self.redacted: dict[str, bytes] = {}

    def carry_everything(self, pending: _Pending) -> tuple[list[str], list[KeptContent], list[str]]:
        """Carry every ref and the checkout; (refs moved, redacted content kept, warnings)."""
        with translated("reading the redacted contents"):
            self.redacted = {
                b: self._mirror.git.read_blob(b) for b in pending.blobs if self._mirror.git.has_object(b)
            }
        moved: list[str] = []
        warnings: list[str] = []
        with translated("moving refs onto the rewritten history"):
            self._carry_checkout()
            for name, old in sorted(self._mirror.git.direct_refs().items()):
                if name in (self._mirror.MEMSTORE_REF, WORK_REF, STASH_REF) or name == "HEAD":
                    continue
                kind = self._mirror.git.object_type(old)
                if kind != "commit":
                    if kind == "tag":
                        warnings.append(f"{name} is an annotated tag; it was left pointing where it was")
                    continue
                new = self._carry(old, name)
                if name.startswith(RECORDS_PREFIX) and name != self._mirror.BASE_REF:
                    new = self._scrub(new, name)
                if new != old:
                    self._mirror.git.set_ref_if_equals(
                        name, new, old, message="memsync: carried over a redaction"
                    )
                    moved.append(name)
            if self._carry_stash():
                moved.append(STASH_REF)
            moved.extend(self._carry_pseudo_refs())
        return moved, self._kept, warnings

    # --- commits ---------------------------------------------------------------------------------

    def _carry(self, commit: str, where: str) -> str:
        """The commit on the new history that stands for ``commit``."""
        if not self._mapping:
            return commit
        if commit in self._mapping or commit in self.replaced:
            return self._mapping.get(commit) or self.replaced[commit]
        for item in self._mirror.git.walk(commit, since=self._first_old, oldest_first=True):
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
        changes = _tree_changes(self._mirror.git.tree(old_parent), self._mirror.git.tree(new_parents[0]))
        if changes:
            mine = self._mirror.git.tree_files(tree)
            edits: list[tuple[str, str | None]] = []
            for path, (before, after) in _removals_first(changes):
                if mine.get(path) == before:
                    edits.append((path, after))
                elif path in mine and self._holds_redacted(mine[path]):
                    self._kept.append(KeptContent(where, path, mine[path]))
            tree = self._mirror.git.edit_tree(tree, edits)
        return self._mirror.git.recommit(str(commit.id), tree, new_parents)

    def _scrub(self, commit: str, where: str) -> str:
        """A memsync record (a conflict's sides, say) without the redacted blobs it holds as they are.

        Such a record copies store content (a conflict's ``base`` and ``remote``): an exact copy of
        redacted content goes. A file that merely contains the redacted bytes among others (the
        conflict markers, the user's ``local`` side) is the user's work: kept, and reported.
        """
        if not self.redacted:
            return commit
        found = self._mirror.git.commit(commit)
        files = self._mirror.git.tree_files(commit)
        exact = [path for path, blob in files.items() if blob in self.redacted]
        for path, blob in sorted(files.items()):
            if blob not in self.redacted and self._holds_redacted(blob):
                self._kept.append(KeptContent(where, path, blob))
        if not exact:
            return commit
        root = self._mirror.git.edit_tree(str(found.tree.id), [(path, None) for path in exact])
        new = self._mirror.git.recommit(commit, root, [str(p) for p in found.parent_ids])
        self.replaced[commit] = new
        return new

    def _holds_redacted(self, blob: str) -> bool:
        return blob in self.redacted or self._contains_redacted(self._mirror.git.read_blob(blob))

    def _contains_redacted(self, data: bytes) -> bool:
        return any(content and content in data for content in self.redacted.values())

    # --- the checkout ----------------------------------------------------------------------------

    def _carry_checkout(self) -> None:
        """Index and working tree of HEAD follow HEAD's commit onto the new history."""
        head = self._mirror.git.head()
        if head.target is None:
            return
        new = self._carry(head.target, "HEAD")
        if new != head.target:
            index = self._mirror.git.index()
            changes = _tree_changes(self._mirror.git.tree(head.target), self._mirror.git.tree(new))
            for path, (before, after) in _removals_first(changes):
                self._carry_file(self._mirror.git.workdir, path, before, after)
                staged = str(index[path].id) if path in index else None
                if staged == before:
                    if after is None:
                        index.remove(path)
                    else:
                        index.add(pygit2.IndexEntry(path, pygit2.Oid(hex=after), pygit2.enums.FileMode.BLOB))
            index.write()
            if head.branch is None:
                self._mirror.git.detach_head(new)
        self._report_working_tree()

    def _carry_file(self, workdir: Path, path: str, before: str | None, after: str | None) -> None:
        file = workdir / path
        try:
            data: bytes | None = file.read_bytes() if file.is_file() and not file.is_symlink() else None
        except OSError:
            data = None
        current = str(pygit2.hash(data)) if data is not None else None
        if current == after or current != before:
            return  # already carried (a rerun after a kill), or the user's (see _report_working_tree)
        if after is None:
            file.unlink()
            with contextlib.suppress(OSError):  # a folder that is not empty stays, and those above it
                for folder in Path(path).parents[:-1]:
                    (workdir / folder).rmdir()
        else:
            file.parent.mkdir(parents=True, exist_ok=True)
            replace_file(file, self._mirror.git.read_blob(after))

    def _report_working_tree(self) -> None:
        """Staged entries and working-tree files the user changed that hold redacted bytes: kept, and
        said so (the index's blob is an object of the repository, the file is the user's)."""
        if not self.redacted:
            return
        workdir = self._mirror.git.workdir
        index = self._mirror.git.index()
        staged_flags = pygit2.enums.FileStatus.INDEX_NEW | pygit2.enums.FileStatus.INDEX_MODIFIED
        changed_flags = pygit2.enums.FileStatus.WT_NEW | pygit2.enums.FileStatus.WT_MODIFIED
        for path, flags in sorted(self._mirror.git.status().items()):
            if flags & staged_flags and path in index:
                staged = str(index[path].id)
                if self._holds_redacted(staged):
                    self._kept.append(KeptContent("index", path, staged))
            try:
                data = (workdir / path).read_bytes()
            except OSError:
                continue
            if (flags & (changed_flags | staged_flags)) and self._contains_redacted(data):
                self._kept.append(KeptContent("working tree", path, None))

    # --- the stash and pseudo-refs ---------------------------------------------------------------

    def _carry_stash(self) -> bool:
        """Every stash entry onto the new history; its reflog rewritten line by line (keeps dates)."""
        old_stash = self._mirror.git.ref_target(STASH_REF)
        if old_stash is None:
            return False
        log_file = self._mirror.git_dir / "logs" / STASH_REF
        try:
            lines = log_file.read_bytes().splitlines(keepends=True)
        except FileNotFoundError:
            lines = []
        rewritten: list[bytes] = []
        for line in lines:
            head, tab, message = line.partition(b"\t")
            fields = head.split(b" ", 2)  # old id, new id, who and when
            if len(fields) == 3:
                ids = [value.decode("ascii") for value in fields[:2]]
                carried = [self._carry(i, STASH_REF) if set(i) != {"0"} else i for i in ids]
                line = " ".join(carried).encode("ascii") + b" " + fields[2] + tab + message
            rewritten.append(line)
        new_stash = self._carry(old_stash, STASH_REF)
        if new_stash != old_stash:
            self._mirror.git.set_ref_if_equals(
                STASH_REF, new_stash, old_stash, message="memsync: carried over a redaction"
            )
        if rewritten != lines:
            replace_file(log_file, b"".join(rewritten))
        return new_stash != old_stash or rewritten != lines

    def _carry_pseudo_refs(self) -> list[str]:
        moved = []
        for name in PSEUDO_REFS:
            file = self._mirror.git_dir / name
            try:
                data = file.read_bytes()
            except FileNotFoundError:
                continue

            def carried(match: re.Match[bytes], name: str = name) -> bytes:
                commit = match.group(0).decode("ascii")
                if self._mirror.git.object_type(commit) != "commit":
                    return match.group(0)
                return self._carry(commit, name).encode("ascii")

            updated = _HEX40.sub(carried, data)
            if updated != data:
                replace_file(file, updated)
                moved.append(name)
        return moved


def _tree_changes(old: pygit2.Tree, new: pygit2.Tree) -> dict[str, tuple[str | None, str | None]]:
    """``{tree path: (blob before or None, blob after or None)}`` for every file that differs."""
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
    return changes


def _removals_first(
    changes: Mapping[str, tuple[str | None, str | None]],
) -> list[tuple[str, tuple[str | None, str | None]]]:
    """Removed files before written ones: a file can take the place of a directory that goes."""
    return sorted(changes.items(), key=lambda item: (item[1][1] is not None, item[0]))


# --- pruning and bookkeeping ------------------------------------------------------------------------


def _contents_in_history(mirror: Mirror, unchanged: list[_OldCommit], parent: str | None) -> set[str]:
    """SHA-256 of every content a version wrote in the imported history as it is now.

    The ``unchanged`` commits (up to ``parent``) were not rewritten: their trailers were read
    already. Only the rewritten part is read again.
    """
    every = [old.trailers for old in unchanged]
    tip = mirror.tip()
    if tip is not None:
        with translated("reading the rewritten history"):
            every.extend(
                parse_message(commit.message, str(commit.id)) for commit in mirror.git.walk(tip, since=parent)
            )
    return {t.content_sha256 for t in every if _written_path(t) is not None and t.content_sha256 is not None}


def _scan_state_files(mirror: Mirror, contents: Iterable[bytes]) -> list[KeptContent]:
    """Files of other memsync parts under ``.git/memsync/`` that hold redacted bytes (reported)."""
    wanted = [content for content in contents if content]
    if not wanted:
        return []
    found = []
    for file in sorted(mirror.state_dir.rglob("*")):
        if not file.is_file() or file.stat().st_size > 64 << 20:
            continue
        data = file.read_bytes()
        if any(content in data for content in wanted):
            where = f".git/memsync/{file.relative_to(mirror.state_dir).as_posix()}"
            found.append(KeptContent(where, None, None))
    return found
