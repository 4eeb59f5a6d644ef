"""Pull: import a store's new versions into its mirror, one deterministic commit per version.

The flow of one store (design.md §2, §5; api.md §6):

1. Read the checkpoint (the last imported version) from the tip of ``memstore/main``.
2. List versions newest first and stop at the checkpoint: a pull that finds nothing new costs one
   request. The new versions are spooled to disk (memory stays flat whatever the store's size) and
   imported oldest first. On Anthropic the listing carries the contents (``view=full``, 20 a page).
3. A listing out of order, or a version older than the tip that was never imported (a late version),
   switches to listing everything: every version not imported yet is imported at the tip, with a
   warning — the one documented case where two mirrors can differ. ``--full-scan`` does the same on
   purpose, and also reports versions redacted since their import and versions gone through retention;
   redacted ones are then rewritten out of the mirror (:func:`memsync.mirror.rewrite_redacted`).
4. Contents already in the repository (by hash) are not fetched; the others are fetched in a pipeline
   that overlaps with git writing.
5. Untrusted input — a path git must not see, a content that does not match its hash — stops the
   import just before that version (the checkpoint stays at the version before) and is reported with
   the version id; ``--skip-version ID`` imports past it, recording the skip in a trailer.
6. The checkout fast-forwards to the new tip unless the user has local changes, which are never
   overwritten; metadata gets a snapshot commit on its own branch when it changed.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memsync.api import (
    ApiError,
    Client,
    ContentMismatch,
    InvalidResponse,
    MemoryVersion,
    NotFound,
    Operation,
    Store,
)
from memsync.crashpoints import crash_point
from memsync.engine.importing import Checkpoint, author_for, newer_than_checkpoint
from memsync.engine.spool import ReverseSpool
from memsync.errors import MemsyncError, UnsafeInput
from memsync.mirror import (
    HistoryWriter,
    ImportedVersion,
    Mirror,
    VersionRecord,
    escape_for_terminal,
    rewrite_pending,
    rewrite_redacted,
)
from memsync.rules import Dialect
from memsync.sync.locks import held
from memsync.sync.report import StoreReport

log = logging.getLogger("memsync.pull")

# Versions handled per fetch segment: the fetch pipeline drains once per segment, so a segment is
# long enough to make that pause negligible and short enough to keep its metadata small.
SEGMENT = 2000
DEFAULT_BATCH_COMMITS = 1000

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
    redacted_since_import: list[str] = field(default_factory=list)
    expired: int = 0
    deleted_remotely: bool = False
    warnings: list[str] = field(default_factory=list)
    path: str = ""
    rewrite: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
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
            "warnings": self.warnings,
            "rewrite": self.rewrite,
        }


def mirror_path(root: Path, store_id: str) -> Path:
    return root / store_id


def store_lock(root: Path, store_id: str) -> Any:
    """The lock of one store's mirror, shared by the CLI and the daemon."""
    return held(root / ".memsync" / "locks" / f"{store_id}.lock", f"the mirror of {store_id}")


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
) -> PullReport:
    """Pull one store into ``root/<store id>``; errors are caught into the report, never raised.

    ``locked``: the caller already holds :func:`store_lock` (a whole sync cycle runs under it).
    ``checkout=False`` imports only: a reconcile in progress owns the checkout, ``main`` and the
    base until it ends, and a fast-forward in the middle of it would move the base under it.
    """
    report = PullReport(id=store.id, name=store.name, path=str(mirror_path(root, store.id)))
    before = client.request_count
    try:
        with contextlib.nullcontext() if locked else store_lock(root, store.id):
            mirror = open_mirror(root, store.id)
            first_import = mirror.tip() is None
            importer = _Importer(client, store, mirror, report, skip_versions, progress)
            importer.run(full_scan=full_scan)
            if full_scan or rewrite_pending(mirror):
                importer.propagate_redactions()
            # Store metadata comes with the store listing, free. Memory metadata costs a listing of
            # every memory, so it is refreshed on the first import and on full scans only: a pull that
            # imports V versions stays at the request count of design.md §5.
            _snapshot_metadata(client, store, mirror, with_memories=first_import or full_scan)
            if checkout:
                _update_checkout(mirror, report)
            report.tip = mirror.tip()
    except MemsyncError as exc:
        # The error's own exit code survives: a held lock is 75, a refused token 3 (design.md §4).
        report.fail(str(exc), exc.exit_code)
    report.requests = client.request_count - before
    return report


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

    # --- choosing what to import -----------------------------------------------------------------

    def run(self, *, full_scan: bool) -> None:
        checkpoint = _checkpoint(self.mirror)
        with ReverseSpool[MemoryVersion]() as spool:
            complete = False if full_scan else self._list_incremental(checkpoint, spool)
            if not complete:
                spool.close()
                with ReverseSpool[MemoryVersion]() as everything:
                    self._list_everything(checkpoint, everything, full_scan=full_scan)
                    self._write(everything)
                return
            self._write(spool)

    def _list_incremental(self, checkpoint: Checkpoint | None, spool: ReverseSpool[MemoryVersion]) -> bool:
        """Spool the versions newer than the checkpoint; False when everything must be listed."""
        # Anthropic lists contents with the versions (20 a page): fewer requests than one per version.
        full = self.client.dialect is Dialect.ANTHROPIC
        listing = self.client.iter_versions(self.store.id, full=full)
        stop: MemoryVersion | None = None
        for version, is_new in newer_than_checkpoint(listing, _order_key, checkpoint):
            if is_new:
                spool.append(version)
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
            and stop.id not in set(self.mirror.imported_version_ids())
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
        imported: dict[str, ImportedVersion] = {v.version_id: v for v in self.mirror.imported_versions()}
        listed = 0
        for version in self.client.iter_versions(self.store.id):
            known = imported.pop(version.id, None)
            if known is None:
                spool.append(version)
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
                f"{self.report.late} late version(s) imported at the tip, after newer ones (api.md §6):"
                " this mirror's commit ids now differ from a fresh import's"
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
            content: str | None = version.content
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
        try:
            memory = self.client.get_memory(self.store.id, version.memory_id)
        except NotFound:
            return None
        if memory.content_sha256 == version.content_sha256 and memory.content is not None:
            return memory.content
        return None

    def propagate_redactions(self) -> None:
        """Rewrite the versions redacted since their import out of the mirror (design.md §2).

        Each is recorded exactly as a fresh import would record it now, so the rewritten history has
        a fresh import's commit ids. Also finishes the pruning of an interrupted rewrite.
        """
        records = []
        for version in self.redacted:
            content = None
            if version.operation is not Operation.DELETED:
                content = self._current_content_of_redacted(version)
            records.append(_record(version, content))
        result = rewrite_redacted(self.mirror, records)
        if result is None:
            return
        self.report.rewrite = result.to_json()
        self.report.warnings.append(result.summary())
        self.report.warnings.extend(result.warnings)
        if result.remaining:
            self.report.fail(
                f"redacted content is still in the mirror after the rewrite: {', '.join(result.remaining)}"
            )

    def _add(
        self, writer: HistoryWriter, version: MemoryVersion, content: str | None, *, skipped: bool = False
    ) -> None:
        writer.add(_record(version, content, skipped=skipped))
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

    Late versions (api.md §6) are imported at the tip although they are older, so after such an
    import the tip is not the newest. That shows as a parent newer than the tip; only then is the
    whole history read (a rare case, and it ends with the next import of a new version).
    """
    versions = mirror.imported_versions()
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


def _snapshot_metadata(client: Client, store: Store, mirror: Mirror, *, with_memories: bool) -> None:
    """Store (and memory) metadata on the metadata branch; a commit only when something changed.

    The memories are handed over as they are listed, not gathered into a dictionary first, so their
    documents are never all held at once beside the snapshot's own tree and blobs. (Measured at
    10,000 memories, this did not lower a first import's peak, which the history writing sets.)
    """
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
    if with_memories:
        listed = (
            (memory.id, {"path": memory.path, "metadata": memory.metadata})
            for memory in client.list_memories(store.id)
        )
        try:
            mirror.write_metadata(store=document, memories=listed, when=when)
            return
        except ApiError as exc:
            # Nothing was recorded: the store's document alone, and the memories' files as they were.
            log.warning("could not list the memories of %s for their metadata: %s", store.id, exc)
    mirror.write_metadata(store=document, memories=None, when=when)


def _update_checkout(mirror: Mirror, report: PullReport) -> None:
    update = mirror.update_checkout()
    if update.updated:
        report.checkout = "updated"
    elif update.local_changes:
        report.checkout = "local-changes"
        report.local_changes = [escape_for_terminal(path) for path in update.local_changes]
    elif update.diverged:
        report.checkout = "diverged"
