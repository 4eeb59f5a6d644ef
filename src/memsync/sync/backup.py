"""``memsync backup``: pull every selected store (archived ones too), then push each mirror to the
git remotes of ``[[backup.remotes]]`` (docs/design.md §1.3).

A remote's ``url`` is a template: ``{store_id}`` and ``{name}`` (the store's name made a safe slug)
are filled in per store. Two stores that would land on one URL are refused, and said so, rather than
mixed into one repository. A store deleted remotely still gets its last mirror backed up (its name
comes from the mirror's metadata branch). How a push works, what it pushes and how it authenticates
is :mod:`memsync.mirror.backups`'s business; this module decides which store goes where and reports.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memsync.api import Client, Store
from memsync.config import Config
from memsync.crashpoints import crash_point
from memsync.errors import (
    EXIT_FAILED,
    EXIT_LOCKED,
    EXIT_USAGE,
    ConfigError,
    MemsyncError,
    MirrorError,
    UsageError,
    combine_exit_codes,
    storage_fault,
    storage_fault_hint,
)
from memsync.mirror import BackupTarget, Mirror
from memsync.mirror.backups import PushResult
from memsync.sync.fleet import for_each_store
from memsync.sync.outputs import BackupOutput
from memsync.sync.pull import PullReport, mirror_path, pull_store, store_lock
from memsync.sync.report import StoreReport
from memsync.sync.stores import select_stores

PLACEHOLDERS = ("store_id", "name")
_PLACEHOLDER = re.compile(r"(?<!\$)\{([^{}]*)\}")  # ${VARIABLE} names an environment variable
_SLUG_UNSAFE = re.compile(r"[^a-z0-9._-]+")
MAX_SLUG = 64


@dataclass
class BackupReport(StoreReport):
    """One store's backup: the pull's outcome and one push result per remote."""

    imported: int = 0
    archived: bool = False
    deleted_remotely: bool = False
    remotes: list[PushResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    rewrite: dict[str, Any] | None = None

    def fail(self, message: str, code: int = EXIT_FAILED) -> None:
        # A backup goes on to its other remotes after a failure: every failure is kept, and the
        # worst exit code. A full disk quoted by libgit2 or git gets its fix named, as in every report.
        self.ok = False
        hint = storage_fault_hint(message)
        if hint is not None and hint not in message:
            message = f"{message}: {hint}"
        self.error = message if self.error is None else f"{self.error}; {message}"
        self.code = combine_exit_codes([self.code, code])

    def output(self) -> BackupOutput:
        return BackupOutput.model_validate(
            {
                "id": self.id,
                "name": self.name,
                "ok": self.ok,
                "error": self.error,
                "imported": self.imported,
                "archived": self.archived,
                "deleted_remotely": self.deleted_remotely,
                "refs_pushed": sum(result.pushed for result in self.remotes),
                "remotes": [result.to_json() for result in self.remotes],
                "rewrite": self.rewrite,
                "warnings": self.warnings,
            }
        )


def slug(name: str) -> str:
    """``name`` as a safe path/URL segment: ASCII lower case, digits and ``._-``; '' if nothing is left."""
    ascii_only = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii").lower()
    cleaned = _SLUG_UNSAFE.sub("-", ascii_only).strip("-._")
    cleaned = re.sub(r"\.{2,}", ".", cleaned)  # never a '..' that could climb out of a directory
    return cleaned[:MAX_SLUG].rstrip("-._")


def check_template(url: str) -> None:
    """Refuse a URL template with a placeholder memsync does not fill in."""
    for found in _PLACEHOLDER.findall(url):
        if found not in PLACEHOLDERS:
            raise ConfigError(
                f"backup.remotes: url {url!r} has the placeholder {{{found}}}; only {{store_id}} and"
                " {name} are filled in"
            )


def expand(url: str, store_id: str, name: str) -> str:
    """The template filled in for one store; ``{name}`` falls back to the id when its slug is empty."""
    return url.replace("{store_id}", store_id).replace("{name}", slug(name) or store_id)


Progress = Callable[[int], None]


def backup_stores(
    client: Client,
    config: Config,
    named: tuple[str, ...] = (),
    *,
    full_scan: bool = False,
    progress: Progress | None = None,
    jobs: int = 1,
    selected: Callable[[int], None] | None = None,
    done: Callable[[BackupReport], None] | None = None,
) -> list[BackupReport]:
    """Pull and push every selected store (archived included) and every mirror of a deleted store.

    ``jobs`` stores at once (memsync.sync.fleet); the reports come in the selection's order.
    ``selected`` hears how many stores there are once they are known, ``done`` each finished report.
    """
    remotes = [remote.url for remote in config.backup.remotes]
    if not remotes:
        raise UsageError(
            'no backup remote is configured: add [[backup.remotes]] with url = "/path/{store_id}.git"'
            " (or an ssh:// or https:// URL) to the config"
        )
    for url in remotes:
        check_template(url)
    root = config.mirror.root
    selection = select_stores(client, config, named, include_archived=True)
    stores: list[tuple[Store | None, BackupReport]] = [
        (store, BackupReport(id=store.id, name=store.name, archived=store.archived))
        for store in selection.stores
    ]
    for store_id in selection.deleted_remotely:
        gone = BackupReport(id=store_id, name=_name_from_mirror(root, store_id), deleted_remotely=True)
        gone.warnings.append(f"{selection.absence(store_id)}; its last mirror is backed up")
        stores.append((None, gone))
    targets = _targets(stores, remotes, config)
    if selected is not None:
        selected(len(stores))

    def back_up(own: Client, item: tuple[Store | None, BackupReport]) -> BackupReport:
        store, report = item
        if store is not None:
            pulled = pull_store(own, store, root, full_scan=full_scan, progress=progress)
            _take_pull(report, pulled)
            # The mirror is up to date and nothing is pushed yet: a kill here leaves the remotes behind.
            crash_point("backup.pulled")
            if pulled.exit_code == EXIT_LOCKED:
                return report  # another memsync is writing this mirror: push nothing half-written
        _push_all(root, report, targets.get(report.id, []))
        return report

    return for_each_store(client, stores, back_up, jobs=jobs, done=done)


def _name_from_mirror(root: Path, store_id: str) -> str:
    try:
        with Mirror.open(mirror_path(root, store_id)) as mirror:
            document, _ = mirror.read_metadata()
    except MemsyncError:
        return ""
    name = document.get("name") if document else None
    return name if isinstance(name, str) else ""


def _targets(
    stores: list[tuple[Store | None, BackupReport]], remotes: list[str], config: Config
) -> dict[str, list[BackupTarget]]:
    """Every store's targets; stores that would share a target are refused (and get none of them)."""
    base = config.source.parent if config.source is not None else Path.cwd()
    found: dict[str, list[BackupTarget]] = {}
    owners: dict[str, list[str]] = {}
    for _, report in stores:
        for url in remotes:
            try:
                target = BackupTarget.parse(expand(url, report.id, report.name), base=base)
            except MirrorError as exc:
                report.fail(f"backup remote {url!r}: {exc}", EXIT_USAGE)
                continue
            found.setdefault(report.id, []).append(target)
            owners.setdefault(target.identity, []).append(report.id)
    for identity, ids in owners.items():
        unique = sorted(set(ids))
        if len(unique) < 2:
            continue
        for store_id in unique:
            report = next(r for _, r in stores if r.id == store_id)
            shown = next(t.display for t in found[store_id] if t.identity == identity)
            others = ", ".join(other for other in unique if other != store_id)
            report.fail(
                f"not backed up to {shown}: {others} would land on the same repository; put {{store_id}}"
                " in the [[backup.remotes]] url (a {name} slug can repeat)",
                EXIT_USAGE,
            )
            found[store_id] = [t for t in found[store_id] if t.identity != identity]
    return found


def _take_pull(report: BackupReport, pulled: PullReport) -> None:
    report.imported = pulled.imported
    report.warnings.extend(pulled.warnings)
    report.rewrite = pulled.rewrite
    if not pulled.ok:
        report.fail(f"pull: {pulled.error}", pulled.exit_code)


def _push_all(root: Path, report: BackupReport, targets: list[BackupTarget]) -> None:
    if not targets:
        return
    path = mirror_path(root, report.id)
    if not (path / ".git").is_dir():
        report.fail(f"no mirror at {path} to back up: run memsync pull first")
        return
    try:
        with store_lock(root, report.id), Mirror.open(path) as mirror:
            if mirror.tip() is None:
                report.warnings.append("nothing imported yet: only metadata is backed up")
            for target in targets:
                result = target.push(mirror)
                report.remotes.append(result)
                report.warnings.extend(result.warnings)
                if not result.ok:
                    rejected = [ref for ref in result.refs if ref.status == "rejected"]
                    reasons = [result.error] if result.error else [ref.message or "" for ref in rejected]
                    report.fail(f"{target.display}: {'; '.join(reasons)}")
    except MemsyncError as exc:
        report.fail(str(exc), exc.exit_code)
    except OSError as exc:  # a local write no layer below translated: one line, never a traceback
        report.fail(str(storage_fault(exc, "backing up")))
