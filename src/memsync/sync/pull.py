"""Pull: import a store's new versions into its mirror, one deterministic commit per version.

The flow of one store (docs/design.md §2, §5; docs/api-contract.md §6):

1. Read the checkpoint (the last imported version) from the tip of ``memstore/main``.
2. List versions newest first and stop at the checkpoint: a pull that finds nothing new costs one
   request. The new versions are spooled to disk (memory stays flat whatever the store's size) and
   imported oldest first. On Anthropic the listing carries the contents (``view=full``, 20 a page).
3. A listing out of order, or a version older than the tip that was never imported (a late version),
   switches to listing everything: every version not imported yet is imported at the tip, with a
   warning — the one documented case where two mirrors can differ. ``--full-scan`` does the same on
   purpose, and also reports versions redacted since their import and versions gone through retention;
   redacted ones are then rewritten out of the mirror (:meth:`memsync.mirror.Rewriter.redact`).
4. Contents already in the repository (by hash) are not fetched; the others are fetched in a pipeline
   that overlaps with git writing.
5. Untrusted input — a path git must not see, a content that does not match its hash — stops the
   import just before that version (the checkpoint stays at the version before) and is reported with
   the version id; ``--skip-version ID`` imports past it, recording the skip in a trailer.
6. The checkout fast-forwards to the new tip unless the user has local changes, which are never
   overwritten; metadata gets a snapshot commit on its own branch when it changed: after every pull
   that imported versions, from the versions themselves (Anthropic), by reading the few memories they
   touched, or by listing every memory, whichever costs fewer requests.

What the history says about itself, so that it never quietly holds less or more than the store:

* A first import that finds memories whose listed history begins after their creation (versions
  expired through retention) records how many in a ``History-Truncated`` trailer on its first
  commit, and warns.
* A full scan deletes, with an inferred commit (``Memsync-Inferred: tombstone-expired``), the file
  of a memory the store no longer lists and whose tombstone expired before it was imported.
* A redacted version whose commit kept the content its live memory served is rewritten without it
  as soon as the memory serves something else (any pull that imports a version of that memory, and
  every full scan), so a mirror never keeps content the API no longer serves and keeps a fresh
  import's commit ids.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from memsync.api import (
    ApiError,
    Client,
    ContentMismatch,
    InvalidResponse,
    Memory,
    MemoryVersion,
    NotFound,
    Operation,
    Store,
)
from memsync.crashpoints import crash_point
from memsync.engine.importing import (
    Checkpoint,
    MetadataSource,
    TruncationCounter,
    author_for,
    inferred_deletes,
    metadata_source,
    newer_than_checkpoint,
    redacted_content_changes,
)
from memsync.engine.spool import ReverseSpool
from memsync.errors import ConfigError, MemsyncError, UnsafeInput, storage_fault
from memsync.mirror import (
    Mirror,
    Origin,
    Rewriter,
    VersionRecord,
    escape_for_terminal,
)
from memsync.mirror.history import HistoryWriter
from memsync.mirror.repository import ImportedVersion
from memsync.rules import Dialect
from memsync.sync.locks import held
from memsync.sync.outputs import PullOutput
from memsync.sync.report import StoreReport
from memsync.sync.stores import Selection

log = logging.getLogger("memsync.pull")

# Versions handled per fetch segment: the fetch pipeline drains once per segment, so a segment is
# long enough to make that pause negligible and short enough to keep its metadata small.
SEGMENT = 2000
DEFAULT_BATCH_COMMITS = 1000
# Why a delete was inferred (the Memsync-Inferred trailer): no tombstone left to import.
TOMBSTONE_EXPIRED = "tombstone-expired"

Progress = Callable[[int], None]


@dataclass
class PullReport(StoreReport):
    """What a pull did to one store; ``to_json`` is its entry in ``--json`` output."""

    imported: int = 0
    skipped: list[str] = field(default_factory=list)
    late: int = 0
    requests: int = 0
    tip: str | None = None
    checkout: str = "unchanged"
    local_changes: list[str] = field(default_factory=list)
    stopped_at_version: str | None = None
    stopped_because: str | None = None  # why (not output: the error says it, with the command)
    redacted_since_import: list[str] = field(default_factory=list)
    expired: int = 0
    deleted_remotely: bool = False  # not listed by the API (the key predates the wording)
    not_found_at: str | None = None  # the API base that did not list it
    warnings: list[str] = field(default_factory=list)
    path: str = ""
    rewrite: dict[str, Any] | None = None
    history_truncated: dict[str, Any] | None = None
    inferred_deletes: list[dict[str, str]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=lambda: {"memories": "unchanged", "requests": 0})

    def output(self) -> PullOutput:
        return PullOutput.model_validate(self.fields())

    def fields(self) -> dict[str, Any]:
        """The keys of :class:`PullOutput`, as built (a cycle's output extends them)."""
        return {
            "id": self.id,
            "name": self.name,
            "ok": self.ok,
            "error": self.error,
            "path": self.path,
            "imported": self.imported,
            "skipped": self.skipped,
            "late": self.late,
            "requests": self.requests,
            "tip": self.tip,
            "checkout": self.checkout,
            "local_changes": self.local_changes,
            "stopped_at_version": self.stopped_at_version,
            "redacted_since_import": self.redacted_since_import,
            "expired": self.expired,
            "deleted_remotely": self.deleted_remotely,
            "not_found_at": self.not_found_at,
            "warnings": self.warnings,
            "rewrite": self.rewrite,
            "history_truncated": self.history_truncated,
            "inferred_deletes": self.inferred_deletes,
            "metadata": self.metadata,
        }


def mirror_path(root: Path, store_id: str) -> Path:
    return root / store_id


@contextlib.contextmanager
def store_lock(root: Path, store_id: str) -> Iterator[None]:
    """The lock of one store's mirror, shared by the CLI and the daemon.

    The OS releases the lock itself when its holder dies; what a killed holder cannot release are
    the lock files git and libgit2 made on its behalf (``refs/heads/main.lock``, ``index.lock``),
    which make every later git write fail. So each holder notes its run beside the lock and removes
    the note when done: a note found on taking the lock is a run that was killed, and the git lock
    files it may have left (made since it began) are removed. No process id is involved, so a
    reused one, PID 1 in a container or another PID namespace changes nothing.
    """
    locks = root / ".memsync" / "locks"
    with held(locks / f"{store_id}.lock", f"the mirror of {store_id}"):
        run = locks / f"{store_id}.run"
        with contextlib.suppress(FileNotFoundError):
            began = run.stat().st_mtime
            for left in Mirror.clear_stale_locks(mirror_path(root, store_id), since=began):
                log.warning("removed %s, left by a memsync run that was killed", left)
        # Without room for the note (a full disk) this run goes unnoted: nothing worse than before.
        with contextlib.suppress(OSError):
            run.write_text(f"{os.getpid()}\n", encoding="ascii")
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                run.unlink(missing_ok=True)


def not_listed(selection: Selection, root: Path, store_id: str) -> PullReport:
    """The report of a mirror whose store the API does not list: kept, and named as not found."""
    report = PullReport(
        id=store_id,
        path=str(mirror_path(root, store_id)),
        deleted_remotely=True,
        not_found_at=selection.api_base,
    )
    report.warnings.append(selection.absence(store_id))
    return report


def open_mirror(root: Path, store_id: str) -> Mirror:
    path = mirror_path(root, store_id)
    if (path / ".git").is_dir():
        return Mirror.open(path)
    return Mirror.init(path)


def pull_store(
    client: Client,
    store: Store,
    root: Path,
    *,
    full_scan: bool = False,
    skip_versions: frozenset[str] = frozenset(),
    progress: Progress | None = None,
    locked: bool = False,
    checkout: bool = True,
    mirror: Mirror | None = None,
) -> PullReport:
    """Pull one store into ``root/<store id>``; errors are caught into the report, never raised.

    ``locked``: the caller already holds :func:`store_lock` (a whole sync cycle runs under it), and
    ``mirror`` is the store's mirror it opened (None: opened, or created, here).
    ``checkout=False`` imports only: a reconcile in progress owns the checkout, ``main`` and the
    base until it ends, and a fast-forward in the middle of it would move the base under it.
    """
    report = PullReport(id=store.id, name=store.name, path=str(mirror_path(root, store.id)))
    before = client.request_count
    try:
        with (
            contextlib.nullcontext() if locked else store_lock(root, store.id),
            open_mirror(root, store.id) if mirror is None else contextlib.nullcontext(mirror) as mirror,
        ):
            _follow_origin(mirror, client, report)
            first_import = mirror.tip() is None
            if checkout:
                # Before anything is imported on top of it: a new commit is spelled by today's rules.
                respelled = Rewriter(mirror).respell()
                if respelled is not None:
                    report.rewrite = respelled.to_json()
                    report.warnings.append(respelled.summary())
                    report.warnings.extend(respelled.warnings)
            importer = _Importer(client, store, mirror, report, skip_versions, progress)
            importer.run(full_scan=full_scan)
            importer.snapshot_metadata()
            if full_scan:
                importer.infer_deletes()
            importer.propagate_redactions(everything=full_scan or Rewriter(mirror).pending(), now=checkout)
            if checkout:
                _update_checkout(mirror, report)
            importer.note_history(first_import=first_import)
            report.tip = mirror.tip()
    except MemsyncError as exc:
        # The error's own exit code survives: a held lock is 75, a refused token 3 (docs/design.md §4).
        report.fail(str(exc), exc.exit_code)
    except OSError as exc:  # a local write no layer below translated: one line, never a traceback
        report.fail(str(storage_fault(exc, "pulling")))
    report.requests = client.request_count - before
    return report


def _follow_origin(mirror: Mirror, client: Client, report: PullReport) -> None:
    """Record where the mirror's history comes from; a store listed at a new base URL (a new host
    name, a gateway) is the same store, so the mirror follows it, and says so. Another dialect is
    never the same API: refused before anything is imported."""
    recorded = Origin.read(mirror.path)
    if recorded is not None and recorded.dialect != client.dialect.value:
        raise ConfigError(
            f'{mirror.path} was made in the "{recorded.dialect}" dialect from {recorded.api_base};'
            f' api.dialect is "{client.dialect.value}": set api.dialect = "{recorded.dialect}", or give'
            " this API its own mirror.root"
        )
    moved = mirror.record_origin(Origin(client.dialect.value, client.base_url))
    if moved is not None:
        report.warnings.append(
            f"the API base moved from {moved.api_base} to {client.base_url}: the store is listed there,"
            " so its mirror follows it"
        )


class _Importer:
    def __init__(
        self,
        client: Client,
        store: Store,
        mirror: Mirror,
        report: PullReport,
        skip_versions: frozenset[str],
        progress: Progress | None,
    ) -> None:
        self.client = client
        self.store = store
        self.mirror = mirror
        self.report = report
        self.skip_versions = skip_versions
        self.progress = progress
        self.changed = False
        self.redacted: list[MemoryVersion] = []
        self.full_scan = False
        # A first import counts the memories whose listed history starts after their creation.
        self.truncation: TruncationCounter | None = None
        # The newest version of each memory this pull imports, as listed: what it touched. None when
        # the pull lists every memory anyway (first import, full scan, late versions).
        self.touched: dict[str, _Touch] | None = None
        self.source: MetadataSource = "unchanged"
        self.metadata_requests = 0
        # What the store serves now, as read or listed after the versions: by memory id.
        self.read: dict[str, Memory] = {}
        self.listed: set[str] | None = None  # every live memory's id, when a full scan listed them
        self.listing_complete = False  # every memory was listed: one not listed is gone
        self.metadata_behind = False
        self.metadata_done = False  # the memory documents follow the store (nothing failed)
        self.served: dict[str, str | None] = {}  # SHA-256 served now, of the memories looked at
        self.known_contents: dict[str, str] = {}  # version id → its content, read with its memory

    # --- choosing what to import -----------------------------------------------------------------

    def run(self, *, full_scan: bool) -> None:
        checkpoint = _checkpoint(self.mirror)
        self.full_scan = full_scan
        # A pull killed between its import and its metadata snapshot left the metadata behind the
        # tip: the versions it imported are no longer new, so only a listing of every memory catches up.
        self.metadata_behind = self.mirror.metadata_follows() != self.mirror.tip()
        if checkpoint is None:
            self.truncation = TruncationCounter()
        elif not full_scan:
            self.touched = {}
        with ReverseSpool[MemoryVersion]() as spool:
            complete = False if full_scan else self._list_incremental(checkpoint, spool)
            if not complete:
                spool.close()
                self.touched = None
                with ReverseSpool[MemoryVersion]() as everything:
                    self._list_everything(checkpoint, everything, full_scan=full_scan)
                    self._plan_metadata(imported=len(everything) > 0)
                    self._write(everything)
                return
            self._plan_metadata(imported=len(spool) > 0)
            self._write(spool)

    def _see(self, version: MemoryVersion) -> None:
        """A version this pull imports, seen newest first."""
        if self.truncation is not None:
            self.truncation.see(version.memory_id, version.operation.value)
        if self.touched is not None and version.memory_id not in self.touched:
            self.touched[version.memory_id] = _Touch(
                version.id, version.operation, version.path, version.content_sha256, version.has_content
            )

    def _list_incremental(self, checkpoint: Checkpoint | None, spool: ReverseSpool[MemoryVersion]) -> bool:
        """Spool the versions newer than the checkpoint; False when everything must be listed."""
        # Anthropic lists contents with the versions (20 a page): fewer requests than one per version.
        full = self.client.dialect is Dialect.ANTHROPIC
        listing = self.client.iter_versions(self.store.id, full=full)
        stop: MemoryVersion | None = None
        for version, is_new in newer_than_checkpoint(listing, _order_key, checkpoint):
            if is_new:
                spool.append(version)
                self._see(version)
            else:
                stop = version
        if listing.out_of_order:
            self.report.warnings.append(
                "the store listed versions out of order; listed every version to import late ones"
            )
            return False
        # The checkpoint itself was not listed: it expired through retention (fine), or a version
        # older than the tip turned up that was never imported (late: list everything).
        if (
            checkpoint is not None
            and stop is not None
            and stop.id != checkpoint.version_id
            and stop.id not in {version.version_id for version in self.mirror.imported_versions()}
        ):
            self.report.warnings.append(
                f"version {stop.id} turned up older than the mirror's tip; listed every version"
                " to import late ones at the tip"
            )
            return False
        return True

    def _list_everything(
        self, checkpoint: Checkpoint | None, spool: ReverseSpool[MemoryVersion], *, full_scan: bool
    ) -> None:
        """Spool every version not imported yet; on a full scan also note redactions and expiry."""
        # An inferred delete stands for no version of the API: it can be neither listed nor expired.
        imported: dict[str, ImportedVersion] = {
            v.version_id: v for v in self.mirror.imported_versions() if v.inferred is None
        }
        listed = 0
        for version in self.client.iter_versions(self.store.id):
            known = imported.pop(version.id, None)
            if known is None:
                spool.append(version)
                self._see(version)
                if checkpoint is not None and _order_key(version) < checkpoint.order_key:
                    self.report.late += 1
            elif version.redacted and not known.redacted:
                self.report.redacted_since_import.append(version.id)
                self.redacted.append(version)
            listed += 1
        # What stays in ``imported`` was imported once and is no longer listed: gone through retention.
        self.report.expired = len(imported)
        if self.report.late:
            self.report.warnings.append(
                f"{self.report.late} late version(s) imported at the tip, after newer ones"
                " (docs/api-contract.md §6): this mirror's commit ids now differ from a fresh import's"
            )
        if self.report.redacted_since_import:
            self.report.warnings.append(
                f"{len(self.report.redacted_since_import)} version(s) were redacted after their import;"
                " the mirror is rewritten so that their content leaves it"
            )
        log.debug("listed %d versions of %s", listed, self.store.id)

    # --- writing ---------------------------------------------------------------------------------

    def _write(self, spool: ReverseSpool[MemoryVersion]) -> None:
        if len(spool) == 0:
            return
        writer = self.mirror.history_writer(batch_commits=_batch_commits())
        try:
            versions = spool.reversed()
            while segment := list(itertools.islice(versions, SEGMENT)):
                if not self._write_segment(writer, segment):
                    break
        finally:
            # Whatever was written before a stop is a valid checkpoint: keep it.
            writer.flush()

    def _write_segment(self, writer: HistoryWriter, segment: list[MemoryVersion]) -> bool:
        wanted: set[str] = set()
        to_fetch: list[MemoryVersion] = []
        for version in segment:
            if self._needs_fetch(version, writer, wanted):
                to_fetch.append(version)
                wanted.add(version.content_sha256 or "")
        fetched = self.client.fetch_contents(self.store.id, to_fetch)
        fetch_ids = {version.id for version in to_fetch}
        for version in segment:
            if version.id in self.skip_versions:
                self._add(writer, version, None, skipped=True)
                continue
            if version.path_problem is not None:
                return self._stop(version, version.path_problem)
            content = version.content if version.content is not None else self.known_contents.get(version.id)
            current = version
            if version.id in fetch_ids:
                try:
                    current, content = next(fetched)
                except ContentMismatch as exc:
                    return self._stop(version, str(exc))
                except InvalidResponse as exc:
                    return self._stop(version, str(exc))
            elif version.redacted and version.operation is not Operation.DELETED:
                content = self._current_content_of_redacted(version)
            try:
                self._add(writer, current, content)
            except UnsafeInput as exc:
                return self._stop(version, str(exc))
        return True

    def _needs_fetch(self, version: MemoryVersion, writer: HistoryWriter, wanted: set[str]) -> bool:
        if version.content is not None or not version.has_content or version.id in self.skip_versions:
            return False
        if version.id in self.known_contents:
            return False  # read with its memory, for the memory's metadata
        sha = version.content_sha256
        if sha is None:
            return True
        return sha not in wanted and not writer.has_content(sha)

    def _current_content_of_redacted(self, version: MemoryVersion) -> str | None:
        """A redacted version's content is gone, unless it is what the live memory still holds.

        The head version of a live memory can be redacted on Forward while the memory's current
        content stays readable: that content is accepted only if it hashes to the version's kept hash.
        """
        if version.content_sha256 is None:
            return None
        memory = self.read.get(version.memory_id)
        if memory is None:
            try:
                memory = self.client.get_memory(self.store.id, version.memory_id)
            except NotFound:
                return None
        if memory.content_sha256 == version.content_sha256 and memory.content is not None:
            return memory.content
        return None

    def propagate_redactions(self, *, everything: bool, now: bool) -> None:
        """Rewrite redacted content out of the mirror (docs/design.md §2): the versions redacted since
        their import (a full scan finds them), and redacted versions whose commit no longer holds
        what a fresh import would: the content their live memory served, until it served another.

        Each is recorded exactly as a fresh import would record it now, so the rewritten history has
        a fresh import's commit ids. ``everything``: look at every redacted commit (a full scan, or
        a rewrite left pending), not only those of the memories this pull touched. ``now=False``
        (a reconcile owns the checkout, which a rewrite carries over) notes the rewrite for the next
        pull instead. Also finishes the pruning of an interrupted rewrite.
        """
        records = []
        for version in self.redacted:
            content = None
            if version.operation is not Operation.DELETED:
                content = self._current_content_of_redacted(version)
            records.append(_record(version, content))
        if not now:
            # Only what this pull touched: looking at everything again is the next pull's work.
            recontent = self._recontent(everything=False)
            if records or recontent:
                Rewriter(self.mirror).defer([r.version_id for r in records] + sorted(recontent))
            return
        recontent = self._recontent(everything=everything)
        dropped = sorted(v for v, content in recontent.items() if content is None)
        restored = sorted(v for v, content in recontent.items() if content is not None)
        if dropped:
            self.report.warnings.append(
                f"{len(dropped)} redacted version(s) kept the content their memory served then and no"
                f" longer serves: {', '.join(dropped)}; that content leaves the mirror"
            )
        if restored:
            self.report.warnings.append(
                f"{len(restored)} redacted version(s) hold the content their memory serves again:"
                f" {', '.join(restored)}; their commits write it, as a fresh import does"
            )
        result = Rewriter(self.mirror).redact(records, recontent=recontent)
        if result is None:
            return
        self.report.rewrite = result.to_json()
        self.report.warnings.append(result.summary())
        self.report.warnings.extend(result.warnings)
        if result.remaining:
            self.report.fail(
                f"redacted content is still in the mirror after the rewrite: {', '.join(result.remaining)}"
            )

    def _recontent(self, *, everything: bool) -> dict[str, bytes | None]:
        """``{version id: content}`` for redacted commits a fresh import would now write otherwise."""
        candidates = [
            r
            for r in self.mirror.facts().redacted
            if r.content_sha256 is not None
            and (everything or (self.touched is not None and r.memory_id in self.touched))
        ]
        if not candidates:
            return {}
        served = self._served_now({r.memory_id for r in candidates})
        changes = redacted_content_changes(
            ((r.version_id, r.memory_id, r.content_sha256, r.wrote) for r in candidates), served
        )
        recontent: dict[str, bytes | None] = {}
        for commit in candidates:
            if commit.version_id not in changes:
                continue
            content: bytes | None = None
            if changes[commit.version_id] and commit.content_sha256 is not None:
                content = self._served_content(commit.memory_id, commit.content_sha256)
                if content is None:
                    continue  # it changed again meanwhile: the next pull looks at it again
            recontent[commit.version_id] = content
        return recontent

    def _served_now(self, memory_ids: set[str]) -> dict[str, str | None]:
        """The SHA-256 each memory serves now (None: deleted), from what this pull saw, else read."""
        served: dict[str, str | None] = {}
        for memory_id in sorted(memory_ids):
            touch = (self.touched or {}).get(memory_id)
            if memory_id in self.served:
                served[memory_id] = self.served[memory_id]
            elif self.listing_complete or (touch is not None and touch.operation is Operation.DELETED):
                served[memory_id] = None  # not in a complete listing, or deleted by this pull
            else:
                try:
                    self.read[memory_id] = self.client.get_memory(self.store.id, memory_id)
                    served[memory_id] = self.read[memory_id].content_sha256
                except NotFound:
                    served[memory_id] = None
        return served

    def _served_content(self, memory_id: str, sha256: str) -> bytes | None:
        """The bytes a memory serves under ``sha256``: the mirror's copy, else read from the store."""
        blob = self.mirror.blob_for_sha256(sha256)
        if blob is not None:
            return self.mirror.content(blob)
        memory = self.read.get(memory_id)
        if memory is None or memory.content is None:
            try:
                memory = self.client.get_memory(self.store.id, memory_id)
            except NotFound:
                return None
        if memory.content is None or memory.content_sha256 != sha256:
            return None
        return memory.content.encode("utf-8")

    # --- memory metadata -------------------------------------------------------------------------

    def _plan_metadata(self, *, imported: bool) -> None:
        """Choose how the memories' metadata is refreshed; when reading, read before the contents
        are fetched: a read memory brings its head version's content along."""
        live = [t for t in (self.touched or {}).values() if t.operation is not Operation.DELETED]
        has_metadata = self.client.dialect is not Dialect.ANTHROPIC
        if not has_metadata and any(v.path is None for v in live):
            has_metadata = True  # a version without its path cannot say where its memory is
        # Newest versions whose content is new to the mirror: a read of their memory brings it.
        saved = sum(
            1
            for t in live
            if t.has_content
            and t.content_sha256 is not None
            and t.version_id not in self.skip_versions
            and self.client.dialect is not Dialect.ANTHROPIC
            and self.mirror.blob_for_sha256(t.content_sha256) is None
        )
        self.source = metadata_source(
            imported=imported,
            complete=self.touched is None or self.metadata_behind,
            has_metadata=has_metadata,
            live_touched=len(live),
            entry_count=self.store.entry_count,
            contents_saved=saved,
        )
        if self.source != "read":
            return
        before = self.client.request_count
        try:
            for memory_id, touch in sorted((self.touched or {}).items()):
                if touch.operation is Operation.DELETED:
                    continue
                try:
                    memory = self.client.get_memory(self.store.id, memory_id)
                except NotFound:
                    self.served[memory_id] = None  # deleted since the listing
                    continue
                self.read[memory.id] = memory
                self.served[memory.id] = memory.content_sha256
                if memory.content_sha256 == touch.content_sha256 and memory.content is not None:
                    self.known_contents[touch.version_id] = memory.content
        except ApiError as exc:
            log.warning("could not read the memories of %s for their metadata: %s", self.store.id, exc)
            self.source = "listed"
        finally:
            self.metadata_requests += self.client.request_count - before

    def snapshot_metadata(self) -> None:
        """Store and memory metadata on the metadata branch; a commit only when something changed.

        Store metadata comes with the store listing, free. Memory metadata follows every pull that
        imported versions (:meth:`_plan_metadata`). Listed memories are handed over as they are
        listed, not gathered into a dictionary first, so their documents are never all held at once
        beside the snapshot's own tree and blobs. (Measured at 10,000 memories, this did not lower a
        first import's peak, which the history writing sets.)
        """
        store = self.store
        document = {
            "id": store.id,
            "name": store.name,
            "description": store.description,
            "metadata": store.metadata,
            "system_managed": store.system_managed,
            "identity_id": store.identity_id,
            "archived": store.archived,
        }
        when = (store.updated_at or store.created_at).astimezone(UTC)
        if self.source == "listed":
            before = self.client.request_count
            listed: set[str] = set()
            redacted_memories = {r.memory_id for r in self.mirror.facts().redacted}

            def documents() -> Iterator[tuple[str, dict[str, Any]]]:
                for memory in self.client.list_memories(store.id):
                    if self.full_scan:
                        listed.add(memory.id)
                    if memory.id in redacted_memories:
                        self.served[memory.id] = memory.content_sha256
                    yield memory.id, _memory_document(memory)

            try:
                self.mirror.write_metadata(store=document, memories=documents(), when=when)
                self.listing_complete = self.metadata_done = True
                self.listed = listed if self.full_scan else None
                return
            except ApiError as exc:
                # Nothing was recorded: the store's document alone, and the memories' files as they were.
                log.warning("could not list the memories of %s for their metadata: %s", store.id, exc)
                self.served.clear()
            finally:
                self.metadata_requests += self.client.request_count - before
                self._report_metadata()
            self.mirror.write_metadata(store=document, memories=None, when=when)
            return
        changed: dict[str, dict[str, Any]] = {}
        removed: list[str] = []
        for memory_id, touch in sorted((self.touched or {}).items()):
            if touch.operation is Operation.DELETED:
                removed.append(memory_id)
            elif self.source == "from-versions" and touch.path is not None:
                changed[memory_id] = {"path": touch.path, "metadata": None}
            elif memory_id in self.read:
                changed[memory_id] = _memory_document(self.read[memory_id])
            elif self.served.get(memory_id, "") is None:
                removed.append(memory_id)  # deleted after the listing: its tombstone comes next
        self.mirror.write_metadata(store=document, memories=None, when=when, changed=changed, removed=removed)
        self.metadata_done = True
        self._report_metadata()

    def _report_metadata(self) -> None:
        self.report.metadata = {"memories": self.source, "requests": self.metadata_requests}

    # --- what the history says about itself ------------------------------------------------------

    def infer_deletes(self) -> None:
        """Delete the files of memories the store no longer lists and whose tombstones expired.

        Only after a complete listing of the memories (a full scan), and only for a memory whose own
        version listing holds no tombstone (one deleted after the scan listed versions is imported by
        the next pull instead). Each delete is one commit at the tip, by path order, dated like the
        tip and authored by the default identity: two mirrors at the same tip infer the same commits.
        """
        if self.listed is None:
            return
        tip = self.mirror.last_imported()
        if tip is None:
            return
        found: list[tuple[str, str]] = []
        for path, memory_id in inferred_deletes(self.mirror.paths(), self.listed):
            versions = self.client.iter_versions(self.store.id, memory_id=memory_id)
            if any(v.operation is Operation.DELETED for v in versions):
                continue
            found.append((path, memory_id))
        if not found:
            return
        with self.mirror.history_writer(batch_commits=_batch_commits()) as writer:
            for path, memory_id in found:
                writer.add(VersionRecord.inferred_delete(memory_id, path, tip.created_at, TOMBSTONE_EXPIRED))
        self.changed = True
        self.report.inferred_deletes = [{"memory_id": m, "path": p} for p, m in found]
        paths = ", ".join(escape_for_terminal(p) for p, _ in found)
        self.report.warnings.append(
            f"deleted {len(found)} file(s) whose memory the store no longer lists and whose tombstone"
            f" expired before it was imported: {paths} (Memsync-Inferred: {TOMBSTONE_EXPIRED})"
        )

    def note_history(self, *, first_import: bool) -> None:
        """Report what the first commit records about history lost before it (History-Truncated),
        and note the tip the memories' metadata now follows."""
        if self.metadata_done:
            self.mirror.note_metadata_follows(self.mirror.tip())
        facts = self.mirror.facts()
        if facts.truncated is None or facts.root is None:
            return
        self.report.history_truncated = {"commit": facts.root, "memories": facts.truncated}
        if first_import:
            n = facts.truncated
            self.report.warnings.append(
                "history starts after versions that expired before the first import:"
                f" {n} {'memory begins' if n == 1 else 'memories begin'} with an update or a delete"
                " instead of its creation (memories created and deleted before then left no trace);"
                f" recorded as History-Truncated: {n} on the first commit {facts.root}"
            )

    def _add(
        self, writer: HistoryWriter, version: MemoryVersion, content: str | None, *, skipped: bool = False
    ) -> None:
        record = _record(version, content, skipped=skipped)
        if not writer.started and self.truncation is not None and self.truncation.count:
            record = replace(record, history_truncated=self.truncation.count)
        writer.add(record)
        self.changed = True
        crash_point("pull.version")
        if skipped:
            self.report.skipped.append(version.id)
        else:
            self.report.imported += 1
        if self.progress is not None:
            self.progress(1)

    def _stop(self, version: MemoryVersion, why: str) -> bool:
        self.report.stopped_at_version = version.id
        self.report.stopped_because = why
        self.report.fail(
            f"stopped before version {version.id}: {why}. Nothing of it was written; to import past it,"
            f" run: memsync pull {self.store.id} --skip-version {version.id}"
        )
        return False


def _record(version: MemoryVersion, content: str | None, *, skipped: bool = False) -> VersionRecord:
    """The mirror's record of a version: the same function for an import and a redaction rewrite."""
    actor = version.created_by
    name, email = author_for(
        actor.type if actor else None, actor.id if actor else None, actor.name if actor else None
    )
    return VersionRecord(
        version_id=version.id,
        memory_id=version.memory_id,
        operation=version.operation.value,
        path=version.path,
        content=content.encode("utf-8") if content is not None else None,
        content_sha256=version.content_sha256,
        created_at=version.created_at,
        redacted=version.redacted,
        author_name=name,
        author_email=email,
        skipped=skipped,
        skip_reason="skip-version" if skipped else "unspecified",
    )


def _batch_commits() -> int:
    """Commits per pack (``MEMSYNC_IMPORT_BATCH``): each batch is a checkpoint an interrupted pull keeps."""
    raw = os.environ.get("MEMSYNC_IMPORT_BATCH", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else DEFAULT_BATCH_COMMITS


def _order_key(version: MemoryVersion) -> tuple[datetime, str]:
    return version.order_key


def _checkpoint(mirror: Mirror) -> Checkpoint | None:
    """The newest imported version: the tip, unless late versions were imported after it.

    Late versions (docs/api-contract.md §6) are imported at the tip although they are older, so after such an
    import the tip is not the newest. That shows as a parent newer than the tip; only then is the
    whole history read (a rare case, and it ends with the next import of a new version).
    """
    # Inferred deletes stand for no version of the API: the checkpoint is the newest real one.
    versions = (version for version in mirror.imported_versions() if version.inferred is None)
    tip = next(versions, None)
    if tip is None:
        return None
    best = Checkpoint(tip.version_id, tip.created_at)
    parent = next(versions, None)
    if parent is not None and Checkpoint(parent.version_id, parent.created_at).order_key > best.order_key:
        for version in itertools.chain([parent], versions):
            candidate = Checkpoint(version.version_id, version.created_at)
            if candidate.order_key > best.order_key:
                best = candidate
    return best


class _Touch(NamedTuple):
    """The newest version of a memory a pull imports, as much of it as the pull needs afterwards."""

    version_id: str
    operation: Operation
    path: str | None
    content_sha256: str | None
    has_content: bool


def _memory_document(memory: Memory) -> dict[str, Any]:
    """A memory's file on the metadata branch: the same whether it was listed or read."""
    return {"path": memory.path, "metadata": memory.metadata}


def _update_checkout(mirror: Mirror, report: PullReport) -> None:
    update = mirror.update_checkout()
    if update.updated:
        report.checkout = "updated"
    elif update.local_changes:
        report.checkout = "local-changes"
        report.local_changes = [escape_for_terminal(path) for path in update.local_changes]
    elif update.diverged:
        report.checkout = "diverged"
