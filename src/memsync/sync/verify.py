"""``memsync verify``: prove that a mirror matches its live store, or say precisely where it does not.

Three things are checked (docs/design.md §1.3):

1. every imported commit's content matches its version's ``content_sha256``, where the API still
   lists that version (and the commit does not still hold content the store has since redacted);
2. no version is missing: every version the store lists is imported, unless it is newer than
   everything imported (then the mirror is *behind*);
3. the tip's tree equals the store's current memories, paths and hashes (skipped when behind: the
   tree is then expected to differ, and the fix is a pull).

Each difference has a kind:

========== ======= ==========================================================================
kind        drift   meaning
========== ======= ==========================================================================
mismatch    yes     a commit's content (or its Content-SHA256 trailer, or its operation) is not
                    the version's as the store lists it
redacted    yes     the store redacted the version; the mirror still holds its content (run
                    ``memsync pull --full-scan``), or holds the content its memory served then and
                    serves no more (run ``memsync pull``)
missing     yes     the store lists a version the mirror never imported, older than its newest
behind      yes     the store has versions newer than the mirror's newest (run ``memsync pull``)
tree        yes     the tip's files differ from the store's memories
unlisted    yes     the store no longer lists an imported version that its retention should keep
store-gone  yes     the store itself is gone (deleted remotely); the mirror is all that is left
expired     no      an imported version the store no longer lists, older than the dialect's
                    retention (30 days on Anthropic; not documented elsewhere, so any unlisted
                    version counts as expired there): the mirror outlives the API, as intended
skipped     no      imported past with ``--skip-version``: the commit holds no content by choice
inferred    no      a delete memsync inferred (``Memsync-Inferred``): the store no longer lists the
                    memory and its tombstone expired before it was imported
truncated   no      the first commit records ``History-Truncated``: versions expired before the
                    first import, so the history starts after them
========== ======= ==========================================================================

Any drift makes the exit code 5 (docs/design.md §4). The comparison itself is the pure function
:func:`find_differences`; :func:`verify_store` only gathers what it compares.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memsync.api import Client, MemoryVersion, Store
from memsync.errors import EXIT_DRIFT, EXIT_USAGE, MemsyncError
from memsync.mirror import BackupRepository, escape_for_terminal
from memsync.mirror.backups import ImportedCommit
from memsync.rules import Dialect
from memsync.sync.outputs import VerifyOutput
from memsync.sync.pull import mirror_path, store_lock
from memsync.sync.report import StoreReport
from memsync.sync.stores import Selection

# How long each dialect keeps versions that are not a live memory's head (docs/api-contract.md §4);
# None: unknown.
RETENTION: dict[Dialect, timedelta | None] = {
    Dialect.ANTHROPIC: timedelta(days=30),
    Dialect.FORWARD: None,
    Dialect.CLOUD: None,
}
NOT_DRIFT = frozenset({"expired", "skipped", "inferred", "truncated"})


@dataclass(frozen=True)
class Difference:
    """One way the mirror and the store disagree (see the module docstring for the kinds)."""

    kind: str
    detail: str
    version: str | None = None
    commit: str | None = None
    path: str | None = None

    @property
    def drift(self) -> bool:
        return self.kind not in NOT_DRIFT

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "drift": self.drift,
            "version": self.version,
            "commit": self.commit,
            "path": self.path,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Listed:
    """A version as the store lists it, reduced to what verification compares."""

    id: str
    operation: str
    content_sha256: str | None
    redacted: bool
    created_at: datetime

    @classmethod
    def of(cls, version: MemoryVersion) -> Listed:
        return cls(
            version.id, version.operation.value, version.content_sha256, version.redacted, version.created_at
        )


@dataclass(frozen=True)
class Held:
    """An imported commit, with the SHA-256 of the content it wrote (None: it wrote none)."""

    commit: ImportedCommit
    sha256: str | None


def find_differences(
    held: Iterable[Held],
    listed: Iterable[Listed],
    *,
    tip_files: Mapping[str, str] | None,
    memories: Mapping[str, str],
    retention: timedelta | None,
    now: datetime,
    served: Mapping[str, str] | None = None,
) -> list[Difference]:
    """Compare an imported history (any order) with a store's versions and current memories.

    ``tip_files`` and ``memories`` are ``{memory path: content SHA-256}`` of the tip and the store;
    ``served`` is ``{memory id: content SHA-256}`` of the store's live memories (None: not compared).
    """
    by_id = {version.id: version for version in listed}
    found: list[Difference] = []
    imported: set[str] = set()
    newest: tuple[datetime, str] | None = None
    for item in sorted(held, key=lambda h: (h.commit.created_at, h.commit.version_id)):
        commit = item.commit
        if commit.history_truncated is not None:
            found.append(
                Difference(
                    "truncated",
                    f"the history starts after versions that expired before the first import:"
                    f" {commit.history_truncated} memory(ies) begin without their creation, and memories"
                    " created and deleted before then left no trace",
                    commit.version_id,
                    commit.commit,
                    commit.memory_path,
                )
            )
        if commit.inferred is not None:
            found.append(
                Difference(
                    "inferred",
                    f"deleted by memsync ({commit.inferred}): the store no longer lists the memory and"
                    " its tombstone expired before it was imported",
                    commit.version_id,
                    commit.commit,
                    commit.memory_path,
                )
            )
            continue
        imported.add(commit.version_id)
        key = (commit.created_at, commit.version_id)
        newest = key if newest is None or key > newest else newest
        version = by_id.get(commit.version_id)
        if version is None:
            found.append(_unlisted(commit, retention, now))
            continue
        if commit.skipped is not None:
            found.append(
                Difference(
                    "skipped",
                    f"imported past with --skip-version ({commit.skipped}); the commit holds no content",
                    commit.version_id,
                    commit.commit,
                    commit.memory_path,
                )
            )
            continue
        found.extend(_compare(item, version, served))
    for version in sorted(by_id.values(), key=lambda v: (v.created_at, v.id)):
        if version.id in imported:
            continue
        if newest is None or (version.created_at, version.id) > newest:
            kind, detail = (
                "behind",
                "the store has this version and the mirror's newest is older: run memsync pull",
            )
        else:
            kind, detail = "missing", "the store lists this version; the mirror never imported it"
        found.append(Difference(kind, detail, version.id))
    behind = any(d.kind == "behind" for d in found)
    if tip_files is not None and not behind:
        found.extend(_compare_trees(tip_files, memories))
    return found


def _unlisted(commit: ImportedCommit, retention: timedelta | None, now: datetime) -> Difference:
    age = now - commit.created_at
    if retention is None:
        return Difference(
            "expired",
            "no longer listed by the store; this dialect documents no retention, so it is taken as expired",
            commit.version_id,
            commit.commit,
            commit.memory_path,
        )
    if age > retention:
        return Difference(
            "expired",
            f"no longer listed: {age.days} days old, beyond the store's {retention.days}-day retention",
            commit.version_id,
            commit.commit,
            commit.memory_path,
        )
    return Difference(
        "unlisted",
        f"the store no longer lists this version although it is only {age.days} days old (retention"
        f" {retention.days} days)",
        commit.version_id,
        commit.commit,
        commit.memory_path,
    )


def _compare(item: Held, version: Listed, served: Mapping[str, str] | None) -> list[Difference]:
    commit = item.commit
    where = (commit.version_id, commit.commit, commit.memory_path)
    found: list[Difference] = []
    if (
        version.redacted
        and commit.redacted
        and item.sha256 is not None
        and served is not None
        and served.get(commit.memory_id) != item.sha256
    ):
        # A redacted version's commit may hold the content its live memory served then (and still
        # serves under the kept hash); once the memory serves something else, that content is gone
        # from the API and must leave the mirror too.
        found.append(
            Difference(
                "redacted",
                "the store redacted this version and its memory no longer serves the content the commit"
                " holds: run memsync pull to rewrite it out",
                *where,
            )
        )
        return found
    if commit.operation != version.operation:
        found.append(
            Difference(
                "mismatch", f"the commit says {commit.operation}, the store says {version.operation}", *where
            )
        )
    if version.redacted and not commit.redacted and item.sha256 is not None:
        found.append(
            Difference(
                "redacted",
                "the store redacted this version; the mirror still holds its content: run memsync pull"
                " --full-scan to rewrite it out",
                *where,
            )
        )
        return found
    expected = version.content_sha256
    if expected is not None and item.sha256 is not None and item.sha256 != expected:
        found.append(
            Difference(
                "mismatch", f"the commit's content hashes to {item.sha256}, the store's to {expected}", *where
            )
        )
    elif expected is not None and commit.content_sha256 is not None and commit.content_sha256 != expected:
        found.append(
            Difference(
                "mismatch",
                f"the commit's Content-SHA256 is {commit.content_sha256}, the store's hash {expected}",
                *where,
            )
        )
    return found


def _compare_trees(tip: Mapping[str, str], memories: Mapping[str, str]) -> list[Difference]:
    found: list[Difference] = []
    for path in sorted(set(tip) | set(memories)):
        mine, theirs = tip.get(path), memories.get(path)
        if mine == theirs:
            continue
        if mine is None:
            detail = "the store has this memory; the mirror's tip does not"
        elif theirs is None:
            detail = "the mirror's tip has this file; the store has no such memory"
        else:
            detail = f"the tip's content hashes to {mine}, the store's memory to {theirs}"
        found.append(Difference("tree", detail, path=path))
    return found


# --- gathering ---------------------------------------------------------------------------------------


@dataclass
class VerifyReport(StoreReport):
    """One store's verification; ``to_json`` is its entry in ``--json`` output."""

    path: str = ""
    tip: str | None = None
    commits: int = 0
    versions: int = 0
    differences: list[Difference] = field(default_factory=list)

    @property
    def drift(self) -> bool:
        return any(d.drift for d in self.differences)

    def conclude(self) -> None:
        """Set ``ok``, ``error`` and the exit code from the differences found."""
        drifting = [d for d in self.differences if d.drift]
        if drifting:
            counts: dict[str, int] = {}
            for difference in drifting:
                counts[difference.kind] = counts.get(difference.kind, 0) + 1
            listed = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
            self.fail(f"the mirror differs from the store: {listed}", EXIT_DRIFT)

    def output(self) -> VerifyOutput:
        return VerifyOutput.model_validate(
            {
                "id": self.id,
                "name": self.name,
                "ok": self.ok,
                "error": self.error,
                "path": self.path,
                "tip": self.tip,
                "commits": self.commits,
                "versions": self.versions,
                "drift": self.drift,
                "differences": [d.to_json() for d in self.differences],
            }
        )


def verify_store(client: Client, store: Store, root: Path, *, now: datetime | None = None) -> VerifyReport:
    """Verify the mirror of ``store`` under ``root``; errors and drift land in the report."""
    path = mirror_path(root, store.id)
    report = VerifyReport(id=store.id, name=store.name, path=str(path))
    if not (path / ".git").is_dir():
        report.fail(f"no mirror at {path}: run memsync pull {store.id} first")
        return report
    try:
        with store_lock(root, store.id):
            listed = [Listed.of(version) for version in client.iter_versions(store.id)]
            memories: dict[str, str] = {}
            served: dict[str, str] = {}
            for memory in client.list_memories(store.id):
                memories[memory.path] = memory.content_sha256
                served[memory.id] = memory.content_sha256
            with BackupRepository.open(path) as repo:
                report.tip = repo.tip()
                held = _held(repo)
                tip_files, odd = _tip_files(repo, report.tip)
        report.commits = len(held)
        report.versions = len(listed)
        report.differences = find_differences(
            held,
            listed,
            tip_files=tip_files,
            memories=memories,
            retention=RETENTION.get(client.dialect),
            now=now or datetime.now(UTC),
            served=served,
        )
        report.differences.extend(odd)
        report.conclude()
    except MemsyncError as exc:
        report.fail(str(exc), exc.exit_code)
    return report


def verify_deleted(root: Path, store_id: str, selection: Selection) -> VerifyReport:
    """A mirror whose store the API does not list: nothing to compare with. Where the API does list
    other stores mirrored here, it is the mirrors' API and the store is gone from it: drift, which a
    restore can mend. Where it lists none of them, the config may point elsewhere (another server,
    dialect or token): that is said first, and no restore is suggested on such evidence."""
    path = mirror_path(root, store_id)
    report = VerifyReport(id=store_id, path=str(path))
    if selection.mirrors_listed == 0:
        report.fail(selection.absence(store_id), EXIT_USAGE)
        return report
    report.differences.append(
        Difference(
            "store-gone",
            f"{selection.absence(store_id)}; other stores mirrored here are listed there, so this one"
            " is gone from it: memsync restore can recreate it from the mirror",
        )
    )
    report.conclude()
    return report


def _held(repo: BackupRepository) -> list[Held]:
    hashes: dict[str, str] = {}
    held: list[Held] = []
    for commit in repo.imported():
        sha: str | None = None
        if commit.blob is not None:
            sha = hashes.get(commit.blob)
            if sha is None:
                sha = hashlib.sha256(repo.content(commit.blob)).hexdigest()
                hashes[commit.blob] = sha
        held.append(Held(commit, sha))
    return held


def _tip_files(repo: BackupRepository, tip: str | None) -> tuple[dict[str, str] | None, list[Difference]]:
    """``{memory path: SHA-256}`` at the tip, and a difference per file no memory path spells."""
    if tip is None:
        return {}, []
    files = repo.files(tip)
    odd = [
        Difference("tree", f"the tip holds a file that is no memory path's spelling: {why}", path=tree_path)
        for tree_path, why in files.problems.items()
    ]
    hashes = {path: hashlib.sha256(repo.content(blob)).hexdigest() for path, blob in files.files.items()}
    return hashes, odd


def describe(report: Mapping[str, Any]) -> str:
    """The human-readable lines of one store's verification (untrusted text escaped)."""
    head = f"{report['id']} ({escape_for_terminal(report['name'])})" if report["name"] else report["id"]
    differences = report["differences"]
    drifting = [d for d in differences if d["drift"]]
    if report["error"] and not drifting:
        return f"{head}: error: {report['error']}"
    state = "DRIFT" if drifting else "ok"
    lines = [
        f"{head}: {state}: {report['commits']} commit(s) checked against {report['versions']} version(s)"
    ]
    for difference in differences:
        where = " ".join(
            part
            for part in (
                difference["version"],
                escape_for_terminal(difference["path"]) if difference["path"] else None,
            )
            if part
        )
        lines.append(f"  {difference['kind']}: {where + ': ' if where else ''}{difference['detail']}")
    return "\n".join(lines)
