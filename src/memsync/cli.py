"""The ``memsync`` command.

Each subcommand imports what it needs inside its body, so that ``memsync pull`` on a store with nothing
new does not pay for FastAPI or APScheduler. Errors from the tree of :mod:`memsync.errors`
are printed as one line and mapped to their exit code here, and only here.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import click

from memsync.errors import EXIT_FAILED, EXIT_USAGE, MemsyncError, UsageError, UserError, storage_fault
from memsync.locations import default_config_path
from memsync.rules import MAX_ANTHROPIC_MEMORIES, MAX_ANTHROPIC_VERSIONS


def _hoist_config(argv: list[str]) -> tuple[list[str], str | None]:
    """Pull ``--config FILE`` / ``--config=FILE`` out of argv wherever it stands (docs/design.md §4)."""
    rest: list[str] = []
    config: str | None = None
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            rest.extend(argv[index:])
            break
        if arg == "--config":
            if index + 1 >= len(argv):
                raise UsageError("--config needs a file name: --config FILE")
            config = argv[index + 1]
            index += 2
            continue
        if arg.startswith("--config="):
            config = arg.split("=", 1)[1]
            index += 1
            continue
        rest.append(arg)
        index += 1
    return rest, config


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="memsync")
# Read by _hoist_config before click parses anything (it may stand after the subcommand too); listed
# here so that --help names it.
@click.option(
    "--config",
    metavar="FILE",
    expose_value=False,
    help="The config file (default: $MEMSYNC_CONFIG, else "
    f"{default_config_path()}); before or after the subcommand.",
)
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Keep agent Memory Stores in git: pull history, push edits, back up, verify, restore.

    --config FILE may stand before or after the subcommand; MEMSYNC_CONFIG names the file too.
    """
    ctx.ensure_object(dict)


def config_path(ctx: click.Context) -> str | None:
    """The config file named on the command line or in MEMSYNC_CONFIG (None: the platform default)."""
    root = ctx.find_root()
    named = root.obj.get("config") if isinstance(root.obj, dict) else None
    return named or os.environ.get("MEMSYNC_CONFIG") or None


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8765, show_default=True, type=int, help="Port; 0 picks a free one.")
@click.option(
    "--db",
    "db",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="SQLite database file (default: a file in the platform's data folder).",
)
@click.option(
    "--token", "tokens", multiple=True, help="Accepted API token; repeatable. Default: $MEMSYNC_SERVER_TOKEN."
)
@click.option(
    "--seed",
    "seed_file",
    default=None,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="JSON seed file loaded at start (stores, memories, versions at chosen times).",
)
@click.option(
    "--fault-rate",
    default=0.0,
    type=click.FloatRange(0.0, 1.0),
    show_default=True,
    help="Share of requests that get an injected fault.",
)
@click.option("--fault-seed", default=None, type=int, help="Seed of the fault injector's random choices.")
@click.option(
    "--version-retention",
    default=None,
    help="Versions older than this disappear (e.g. 30d, 12h, 90s); never a live memory's head.",
)
@click.option(
    "--anthropic-max-memories",
    default=MAX_ANTHROPIC_MEMORIES,
    type=click.IntRange(min=1),
    show_default=True,
    help="The most memories an Anthropic store holds (upstream's limit; lower it to test reaching it).",
)
@click.option(
    "--anthropic-max-versions",
    default=MAX_ANTHROPIC_VERSIONS,
    type=click.IntRange(min=1),
    show_default=True,
    help="The most versions an Anthropic store keeps (upstream's limit; lower it to test reaching it).",
)
@click.option(
    "--cloud-paging",
    type=click.Choice(["both", "next-page", "after-id"]),
    default="both",
    show_default=True,
    help="How Cloud listings page: next_page and after_id/before_id, next_page only, or the ids only.",
)
def server(**options: Any) -> None:
    """Run the reference Memory Store server (Forward, Cloud and Anthropic dialects)."""
    from memsync.server import run

    tokens = list(options.pop("tokens")) or [t for t in [os.environ.get("MEMSYNC_SERVER_TOKEN")] if t]
    if not tokens:
        raise UsageError("the server needs a token: pass --token TOKEN or set MEMSYNC_SERVER_TOKEN")
    run(tokens=tokens, **options)


def _load_config(ctx: click.Context) -> Any:
    from memsync.config import load_config
    from memsync.sync.permissions import exposure, restrict_new_files

    config = load_config(config_path(ctx))
    restrict_new_files(config.mirror.group_readable)
    warning = exposure(config.mirror.root, config.mirror.group_readable)
    if warning is not None and warning not in _WARNED:
        _WARNED.add(warning)
        click.echo(f"memsync: warning: {warning}", err=True)
    return config


_WARNED: set[str] = set()  # a warning about the config's folders, printed once per run


# pull, backup, verify, sync, daemon and stores work on one shard's stores when several machines
# split them (memsync.engine.shards; docs/kubernetes.md).
_shard_option = click.option(
    "--shard",
    "shard",
    metavar="I/N",
    default=None,
    help="Only the stores shard I of N owns (0 <= I < N; rendezvous hashing of store ids). Default:"
    " $MEMSYNC_SHARD, else a StatefulSet pod's ordinal with $MEMSYNC_SHARDS, else [fleet] shard.",
)


# pull, backup, verify, sync and daemon work on several stores at once ([fleet] concurrency).
_jobs_option = click.option(
    "--jobs",
    "jobs",
    metavar="N",
    type=click.IntRange(1, 256),
    default=None,
    help="Stores worked on at once (default: [fleet] concurrency, 8).",
)


def _sharded_config(ctx: click.Context, flag: str | None, jobs: int | None = None) -> tuple[Any, str | None]:
    """The config with the shard in force (flag > environment > StatefulSet > file), and its source;
    ``--jobs`` replaces ``fleet.concurrency``."""
    import socket

    from memsync.engine.shards import resolve_shard

    config = _load_config(ctx).with_concurrency(jobs)
    shard, source = resolve_shard(flag, os.environ, socket.gethostname(), config.fleet.shard)
    return config.with_shard(shard), source


def _emit(document: Any, reports: Sequence[Any], as_json: bool, describe: Any) -> None:
    """Print the command's JSON document (``document``, a model of memsync.sync.outputs, holding
    ``reports``: their outputs), or a line per store (untrusted text escaped by ``describe``)."""
    if as_json:
        _print_json(document.model_validate({"stores": list(reports)}))
        return
    for report in reports:
        click.echo(describe(report.to_json()))


def _say_if_nothing_listed(config: Any, selection: Any) -> None:
    """On stderr: a run that found no store at all says where it looked, rather than nothing."""
    note = selection.nothing_listed(config)
    if note is not None:
        click.echo(f"memsync: warning: {note}", err=True)


def _print_json(document: Any) -> None:
    """One JSON object: a model of memsync.sync.outputs, serialised as its schema says."""
    import json

    click.echo(json.dumps(document.to_json(), ensure_ascii=False, indent=2))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_shard_option
@click.pass_context
def stores(ctx: click.Context, as_json: bool, shard: str | None) -> None:
    """List the stores the token sees, which of them the config selects, and with a shard, each
    store's owning shard."""
    from memsync.engine.shards import owner
    from memsync.mirror import escape_for_terminal
    from memsync.sync.stores import client_for, select_stores

    config, shard_source = _sharded_config(ctx, shard)
    in_force = config.fleet.shard
    with client_for(config) as client:
        selection = select_stores(client, config)
        _say_if_nothing_listed(config, selection)
        selected = {store.id for store in selection.stores}
        listed = list(client.list_stores(include_archived=True))
    from memsync.sync.outputs import StoreRow, StoresListDocument

    rows: list[dict[str, Any]] = [
        {
            "id": store.id,
            "ok": True,
            "error": None,
            "name": store.name,
            "archived": store.archived,
            "system_managed": store.system_managed,
            "selected": store.id in selected,
            "mirror": str(config.mirror.root / store.id),
        }
        for store in listed
    ]
    if in_force is not None:
        for row in rows:
            row["shard"] = owner(row["id"], in_force.count)
        if not as_json:
            click.echo(
                f"shard {in_force} (from {shard_source}): {len(selected)} selected store(s) of"
                f" {len(rows)} listed",
                err=True,
            )

    def describe(row: dict[str, Any]) -> str:
        flags = [
            f
            for f, on in (
                ("selected", row["selected"]),
                ("archived", row["archived"]),
                ("system-managed", row["system_managed"]),
            )
            if on
        ]
        if in_force is not None:
            flags = [*([] if row["selected"] else ["not selected"]), *flags]
            flags.append(f"shard {row['shard']}/{in_force.count}")
        return f"{row['id']}  {escape_for_terminal(row['name'])}  [{', '.join(flags) or 'not selected'}]"

    _emit(StoresListDocument, [StoreRow.model_validate(row) for row in rows], as_json, describe)


@cli.command()
@click.argument("store_names", nargs=-1, metavar="[STORE]...")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--full-scan", is_flag=True, help="List every version again (redactions, retention, late ones)."
)
@click.option(
    "--skip-version",
    "skip_versions",
    multiple=True,
    metavar="ID",
    help="Import past this version (refused as unsafe) without its content; repeatable.",
)
@_shard_option
@_jobs_option
@click.pass_context
def pull(
    ctx: click.Context,
    store_names: tuple[str, ...],
    as_json: bool,
    full_scan: bool,
    skip_versions: tuple[str, ...],
    shard: str | None,
    jobs: int | None,
) -> None:
    """Import new versions of the selected stores into their git mirrors, several stores at once."""
    from memsync.errors import combine_exit_codes
    from memsync.sync.fleet import for_each_store
    from memsync.sync.pull import PullReport, not_listed, pull_store
    from memsync.sync.stores import client_for, select_stores

    config, _ = _sharded_config(ctx, shard, jobs)
    with client_for(config) as client:
        selection = select_stores(client, config, store_names)
        _say_if_nothing_listed(config, selection)
        with _progress(enabled=not as_json, total=len(selection.stores)) as progress:
            reports: list[PullReport] = for_each_store(
                client,
                selection.stores,
                lambda own, store: pull_store(
                    own,
                    store,
                    config.mirror.root,
                    full_scan=full_scan,
                    skip_versions=frozenset(skip_versions),
                    progress=progress.versions,
                ),
                jobs=config.fleet.concurrency,
                done=progress.store_done,
            )
    reports += [not_listed(selection, config.mirror.root, s) for s in selection.deleted_remotely]
    from memsync.sync.outputs import PullDocument

    _emit(PullDocument, [r.output() for r in reports], as_json, _describe_pull)
    ctx.exit(combine_exit_codes(r.exit_code for r in reports))


def _not_listed_lines(head: str, report: dict[str, Any]) -> str:
    """A mirror whose store the API does not list: where it is kept, and why it is not called deleted."""
    from memsync.mirror import escape_for_terminal

    lines = [f"{head}: not listed; mirror kept at {report['path']}"]
    return "\n".join(lines + [f"  warning: {escape_for_terminal(w)}" for w in report["warnings"]])


def _describe_pull(report: dict[str, Any]) -> str:
    from memsync.mirror import escape_for_terminal

    head = f"{report['id']} ({escape_for_terminal(report['name'])})" if report["name"] else report["id"]
    if report["deleted_remotely"]:
        return _not_listed_lines(head, report)
    parts = [f"imported {report['imported']} version(s)"]
    if report["skipped"]:
        parts.append(f"skipped {', '.join(report['skipped'])}")
    if report["checkout"] == "updated":
        parts.append("checkout updated")
    elif report["checkout"] == "local-changes":
        parts.append(f"checkout left alone: {len(report['local_changes'])} local change(s) to push")
    elif report["checkout"] == "diverged":
        parts.append("checkout has local commits: run memsync sync")
    lines = [f"{head}: {', '.join(parts)} -> {report['path']}"]
    lines += [f"  warning: {w}" for w in report["warnings"]]
    if report["error"]:
        lines.append(f"  error: {report['error']}")
    return "\n".join(lines)


class _Quiet:
    """Progress nobody sees (stderr is no terminal, or --json)."""

    def versions(self, n: int) -> None:
        pass

    def store_done(self, report: object = None) -> None:
        pass

    def total(self, n: int) -> None:
        pass


def _progress(*, enabled: bool, total: int | None = None) -> Any:
    """Stores done of ``total`` and versions imported, on stderr when it is a terminal; else nothing.

    ``versions`` and ``store_done`` are called from the threads working on the stores (rich's
    Progress takes its own lock).
    """
    from contextlib import contextmanager

    @contextmanager
    def quiet() -> Any:
        yield _Quiet()

    if not enabled or not sys.stderr.isatty():
        return quiet()

    @contextmanager
    def bar() -> Any:
        import threading

        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        imported = [0]
        lock = threading.Lock()
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.completed}/{task.total} stores"),
            BarColumn(),
            TextColumn("{task.fields[versions]} versions imported"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        ) as progress:
            task = progress.add_task("stores", total=total, versions=0)

            class Shown:
                def versions(self, n: int) -> None:
                    with lock:
                        imported[0] += n
                        count = imported[0]
                    progress.update(task, versions=count)

                def store_done(self, report: object = None) -> None:
                    progress.advance(task, 1)

                def total(self, n: int) -> None:
                    progress.update(task, total=n)

            yield Shown()

    return bar()


@cli.command()
@click.option(
    "--dir",
    "directory",
    default=None,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for the demo (must be new or empty); default: demo in memsync's data folder"
    " (~/.local/share/memsync/demo on Linux).",
)
@click.pass_context
def demo(ctx: click.Context, directory: Path | None) -> None:
    """Start the embedded server with a sample store, pull it into git, and show the history."""
    from memsync.demo import run_demo

    ctx.exit(run_demo(directory))


@cli.command()
@click.option("--once", is_flag=True, help="Run one cycle per store, then exit with its status.")
@click.option(
    "--max-failures",
    type=click.IntRange(min=1),
    default=None,
    help="Pause a store after this many failed cycles in a row (default: daemon.max_failures).",
)
@click.option("--json", "as_json", is_flag=True, help="With --once: print one JSON object.")
@_shard_option
@_jobs_option
@click.pass_context
def daemon(
    ctx: click.Context,
    once: bool,
    max_failures: int | None,
    as_json: bool,
    shard: str | None,
    jobs: int | None,
) -> None:
    """Keep the selected stores in sync: scheduled pulls, pushes on save, /healthz and /metrics.

    Stops on SIGTERM or SIGINT after the cycle in flight (within daemon.shutdown_deadline), exit 0;
    exits 1 only when every store is paused; 75 when another daemon serves the same mirror root.
    """
    from memsync.daemon import run_daemon, run_once

    if as_json and not once:
        raise UsageError("--json goes with --once (the daemon itself logs; see [log] format)")
    _leave_logs_to_the_daemon()
    config, _ = _sharded_config(ctx, shard, jobs)
    if once:
        from memsync.sync.outputs import CycleDocument

        reports, code = run_once(config)
        _emit(CycleDocument, reports, as_json, _describe_cycle)
        ctx.exit(code)
    ctx.exit(run_daemon(config, max_failures=max_failures))


@cli.command()
@click.argument("store_names", nargs=-1, metavar="[STORE]...")
@click.option(
    "--dry-run", is_flag=True, help="Predict per file (push, merge, conflict, rejected); write nothing."
)
@click.option(
    "--force",
    is_flag=True,
    help="Lift both guards for this push: deleting more than push.max_delete_share of a store, and"
    " the rewind guard (changes that put memories back as they were before main was moved back).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
def push(ctx: click.Context, store_names: tuple[str, ...], dry_run: bool, force: bool, as_json: bool) -> None:
    """Push the checkout's edits (created, modified, deleted, renamed files) to the selected stores.

    Pulls first, then reconciles three ways against the last reconciled state: clean merges are
    pushed, overlapping edits become conflicts (memsync status, memsync resolve). Exit 4 when
    conflicts, rejected files or withheld changes wait for you; exit 6 when a git operation in
    progress (or HEAD off main) keeps the checkout from being synced.
    """
    from memsync.errors import combine_exit_codes
    from memsync.sync.cycle import run_cycle
    from memsync.sync.push import predict_push
    from memsync.sync.stores import client_for, select_stores

    config = _load_config(ctx)
    share = config.push.max_delete_share
    from memsync.sync.outputs import Output, PushDocument

    reports: list[Output] = []
    codes: list[int] = []
    with client_for(config) as client:
        selection = select_stores(client, config, store_names)
        _say_if_nothing_listed(config, selection)
        for store in selection.stores:
            if dry_run:
                predicted = predict_push(
                    client, store, config.mirror.root, force=force, max_delete_share=share
                )
                reports.append(predicted.output())
                codes.append(predicted.exit_code)
            else:
                done = run_cycle(client, store, config.mirror.root, force=force, max_delete_share=share)
                reports.append(done.output())
                codes.append(done.exit_code)
    _emit(PushDocument, reports, as_json, _describe_prediction if dry_run else _describe_cycle)
    ctx.exit(combine_exit_codes(codes))


@cli.command()
@click.argument("store_names", nargs=-1, metavar="[STORE]...")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_shard_option
@_jobs_option
@click.pass_context
def sync(
    ctx: click.Context, store_names: tuple[str, ...], as_json: bool, shard: str | None, jobs: int | None
) -> None:
    """One full cycle per selected store: pull, reconcile the checkout, push, import what was pushed.
    Several stores at once (--jobs)."""
    from memsync.errors import combine_exit_codes
    from memsync.sync.cycle import CycleReport, run_cycle
    from memsync.sync.fleet import for_each_store
    from memsync.sync.pull import not_listed
    from memsync.sync.stores import client_for, select_stores

    config, _ = _sharded_config(ctx, shard, jobs)
    with client_for(config) as client:
        selection = select_stores(client, config, store_names)
        _say_if_nothing_listed(config, selection)
        with _progress(enabled=not as_json, total=len(selection.stores)) as progress:
            done: list[CycleReport] = for_each_store(
                client,
                selection.stores,
                lambda own, store: run_cycle(
                    own,
                    store,
                    config.mirror.root,
                    max_delete_share=config.push.max_delete_share,
                    withhold_over_limit=True,
                ),
                jobs=config.fleet.concurrency,
                done=progress.store_done,
            )
    done += [
        CycleReport(store_id=store_id, pull=not_listed(selection, config.mirror.root, store_id))
        for store_id in selection.deleted_remotely
    ]
    from memsync.sync.outputs import CycleDocument

    _emit(CycleDocument, [r.output() for r in done], as_json, _describe_cycle)
    ctx.exit(combine_exit_codes(r.exit_code for r in done))


def _describe_cycle(report: dict[str, Any]) -> str:
    from memsync.mirror import escape_for_terminal as esc

    head = f"{report['id']} ({esc(report['name'])})" if report["name"] else report["id"]
    if report["deleted_remotely"]:
        return _not_listed_lines(head, report)
    push = report["push"] or {}
    parts = [f"imported {report['imported']} version(s)", f"pushed {len(report['pushed'])} change(s)"]
    if push.get("checkout"):
        parts.append(f"{len(push['checkout'])} checkout file(s) written")
    lines = [f"{head}: {', '.join(parts)} -> {report['path']}"]

    def spelled(path: str, memory_path: str) -> str:
        """The file, and the memory it stands for where the spelling differs."""
        return esc(path) + ("" if path == memory_path else f" (memory {esc(memory_path)})")

    for item in report["pushed"]:
        moved = f" -> {spelled(item['to'], item['to_memory_path'])}" if "to" in item else ""
        lines.append(f"  pushed: {item['action']} {spelled(item['path'], item['memory_path'])}{moved}")
    for item in push.get("notices", []):
        lines.append(f"  note: {esc(item['path'])}: {esc(item['reason'])}")
    for item in push.get("conflicts", []):
        lines.append(
            f"  conflict: {esc(item['path'])}: {esc(item['reason'])}; edit it, then run"
            f" `memsync resolve {esc(item['path'])}` (or --ours / --theirs); sides kept in {esc(item['ref'])}"
        )
    if report.get("blocked"):
        lines.append(f"  blocked: {esc(report['blocked'])}")
    lines += _grouped("rejected", report["rejected"]) + _grouped("withheld", report["withheld"])
    if report.get("kept_commits"):
        lines.append(
            "  your local commits were pushed; main was reset to memstore/main and the old main is kept"
            f" as {report['kept_commits']}"
        )
    lines += [f"  warning: {esc(w)}" for w in report["warnings"] + push.get("warnings", [])]
    if report["error"]:
        lines.append(f"  error: {esc(report['error'])}")
    return "\n".join(lines)


def _grouped(label: str, items: list[dict[str, str]]) -> list[str]:
    """One line per reason: a mass delete withholds many paths for one reason."""
    from memsync.mirror import escape_for_terminal as esc

    by_reason: dict[str, list[str]] = {}
    for item in items:
        by_reason.setdefault(item["reason"], []).append(esc(item["path"]))
    return [f"  {label}: {', '.join(paths)}: {esc(reason)}" for reason, paths in by_reason.items()]


def _describe_prediction(report: dict[str, Any]) -> str:
    from memsync.mirror import escape_for_terminal as esc

    head = f"{report['id']} ({esc(report['name'])})" if report["name"] else report["id"]
    lines = [f"{head}: dry run, nothing written -> {report['path']}"]
    for item in report.get("predicted", []):
        moved = f" -> {esc(item['to'])}" if "to" in item else ""
        what = (
            f"{item['outcome']} {item['action']}" if item["outcome"] in ("push", "pull") else item["outcome"]
        )
        lines.append(f"  {what:<15} {esc(item['path'])}{moved}")
    if report.get("blocked"):
        lines.append(f"  blocked: {esc(report['blocked'])}")
    elif len(lines) == 1:
        lines.append("  nothing to push")
    lines += _grouped("rejected", report["rejected"]) + _grouped("withheld", report["withheld"])
    lines += [f"  warning: {esc(w)}" for w in report["warnings"]]
    if report["error"]:
        lines.append(f"  error: {esc(report['error'])}")
    return "\n".join(lines)


@cli.command()
@click.argument("store_names", nargs=-1, metavar="[STORE]...")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
def status(ctx: click.Context, store_names: tuple[str, ...], as_json: bool) -> None:
    """Conflicts, rejected files and pending pushes of each mirror, and the daemon's live state.

    Reads the mirrors only: no network, no lock (it works while the daemon runs). Exit 4 when
    conflicts, rejected files or withheld changes wait for you; exit 6 when a git operation in
    progress (or HEAD off main) keeps the checkout from being synced.
    """
    from memsync.daemon import read_state
    from memsync.errors import combine_exit_codes
    from memsync.sync.awareness import view_statuses
    from memsync.sync.status import mirror_status, select_mirrors

    config = _load_config(ctx)
    found = []
    for path in select_mirrors(config.mirror.root, store_names):
        report = mirror_status(path, config.api.dialect, max_delete_share=config.push.max_delete_share)
        report.daemon = _daemon_state(read_state(path))
        found.append(report)
    # Awareness views are read-only: status names edits made there (docs/awareness.md).
    views = [] if store_names else view_statuses(config.mirror.root)
    from memsync.sync.outputs import StatusDocument

    outputs = [r.output() for r in found] + [v.output() for v in views]
    _emit(StatusDocument, outputs, as_json, _describe_status_or_view)
    ctx.exit(combine_exit_codes([r.exit_code for r in found] + [v.exit_code for v in views]))


def _daemon_state(state: Any) -> dict[str, Any] | None:
    """The live fields of the daemon's state file (docs/daemon.md), or None without a daemon."""
    if state is None:
        return None
    # "stopped": the daemon that wrote the file exited (docs/daemon.md); a kill -9 leaves another
    # status behind, so the pid decides too.
    alive = state.status != "stopped" and _pid_alive(state.daemon_pid)
    lag = state.lag()
    last = state.last_cycle

    def iso(value: Any) -> str | None:
        return None if value is None else value.isoformat().replace("+00:00", "Z")

    return {
        "running": alive,
        "status": state.status if alive else "stopped",
        "last_success": iso(state.last_success),
        "lag_seconds": None if lag is None else round(lag, 3),
        "paused": state.paused,
        "pause_reason": state.pause_reason,
        "next_run": iso(state.next_run) if alive else None,
        "consecutive_failures": state.consecutive_failures,
        "last_result": last.result if last else None,
        "last_error": last.error if last else None,
        "updated_at": iso(state.updated_at),
    }


def _pid_alive(pid: int) -> bool:
    from memsync.processes import process_alive

    return process_alive(pid)


def _describe_status(report: dict[str, Any]) -> str:
    import shlex

    from memsync.mirror import escape_for_terminal as esc

    head = f"{report['id']} ({esc(report['name'])})" if report["name"] else report["id"]
    counts = [
        f"{len(report['conflicts'])} conflict(s)",
        f"{len(report['rejected'])} rejected",
        f"{len(report['pending'])} change(s) to push",
    ]
    if report["withheld"]:
        counts.append(f"{len(report['withheld'])} change(s) withheld")
    lines = [f"{head}: {', '.join(counts)} -> {report['path']}"]
    daemon_state = report["daemon"]
    if daemon_state is None:
        lines.append("  daemon: no state (not run for this store)")
    else:
        lag = daemon_state["lag_seconds"]
        bits = [daemon_state["status"]]
        if daemon_state["paused"]:
            bits.append(f"paused: {esc(daemon_state['pause_reason'] or '')}")
        if daemon_state["last_success"]:
            bits.append(f"last success {daemon_state['last_success']} ({lag:.0f} s ago)")
        if daemon_state["next_run"]:
            bits.append(f"next run {daemon_state['next_run']}")
        lines.append(f"  daemon: {', '.join(bits)}")
    if report.get("blocked"):
        lines.append(f"  blocked: {esc(report['blocked'])}")
    truncated = report.get("history_truncated")
    if truncated:
        lines.append(
            "  history: starts after versions that expired before the first import"
            f" ({truncated['memories']} memory(ies) begin without their creation; History-Truncated on"
            f" {truncated['commit']})"
        )
    for item in report["conflicts"]:
        lines.append(
            f"  conflict: {esc(item['path'])}: {esc(item['reason'])} (since {item['recorded_at']}; sides"
            f" in {esc(item['ref'])}); edit it and run `memsync resolve {esc(item['path'])}`, or --ours"
            " / --theirs"
        )
    lines += _grouped("rejected", report["rejected"]) + _grouped("withheld", report["withheld"])
    for item in report["pending"]:
        moved = f" -> {esc(item['to'])}" if "to" in item else ""
        lines.append(f"  to push: {item['action']} {esc(item['path'])}{moved}")
    where = shlex.quote(report["path"])
    if report["pending"] or report["rejected"] or report["withheld"]:
        lines.append(
            f"  to discard your local changes, new files too: cd {where} && git reset --hard"
            " memstore/main && git clean -fd"
        )
    for ref in report["kept_commits"]:
        lines.append(
            f"  kept local commits: {ref} (not all in the store; drop them: git -C {where} update-ref"
            f" -d {ref})"
        )
    if report["error"]:
        lines.append(f"  error: {esc(report['error'])}")
    return "\n".join(lines)


@cli.command()
@click.argument("path")
@click.option("--ours", is_flag=True, help="Take the checkout's content (the local side).")
@click.option("--theirs", is_flag=True, help="Take the store's content (the remote side).")
@click.option("--store", "store_id", default=None, metavar="ID", help="The store, when several have PATH.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
def resolve(
    ctx: click.Context, path: str, ours: bool, theirs: bool, store_id: str | None, as_json: bool
) -> None:
    """End the conflict at PATH; the next push or sync sends the resolution.

    --ours takes the checkout's content, --theirs the store's; without either, the file as you
    edited it. PATH is absolute, or relative to the current folder inside a mirror, or else to the
    root of the one mirror with a conflict there (--store ID when several have).
    """
    from memsync.mirror import escape_for_terminal as esc
    from memsync.sync.resolve import OURS, THEIRS, find_target, resolve_conflict

    if ours and theirs:
        raise UsageError(
            "--ours and --theirs exclude each other: pick one (or neither, after editing the file)"
        )
    config = _load_config(ctx)
    target = find_target(path, cwd=Path.cwd(), root=config.mirror.root, store=store_id)
    done = resolve_conflict(target, OURS if ours else THEIRS if theirs else None, config.api.dialect)
    words = {
        "ours": "with the checkout's content",
        "theirs": "with the store's content",
        "edited": "with the file as you edited it",
        "deleted": "as a delete",
    }
    from memsync.sync.outputs import ResolveDocument

    _emit(
        ResolveDocument,
        [done.output()],
        as_json,
        lambda r: (
            f"{r['id']}: resolved {esc(r['path'])} {words[r['resolution']]}; "
            + (
                "the next memsync push or sync sends it"
                if done.sends
                else "the file holds what the store has, so nothing is left to send"
            )
        ),
    )


# --- backup, verify, restore (memsync.sync.backup / verify / restore) ---
@cli.command()
@click.argument("store_names", nargs=-1, metavar="[STORE]...")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--full-scan", is_flag=True, help="List every version first (propagates redactions before pushing)."
)
@_shard_option
@_jobs_option
@click.pass_context
def backup(
    ctx: click.Context,
    store_names: tuple[str, ...],
    as_json: bool,
    full_scan: bool,
    shard: str | None,
    jobs: int | None,
) -> None:
    """Pull every selected store (archived ones too), then push each mirror to [[backup.remotes]].

    The imported history becomes the backup's main branch; the metadata branch and refs/memsync/*
    go alongside. Fast-forward only, except refs a redaction rewrote. Several stores at once (--jobs).
    """
    from memsync.errors import combine_exit_codes
    from memsync.sync.backup import backup_stores
    from memsync.sync.stores import client_for

    config, _ = _sharded_config(ctx, shard, jobs)
    with client_for(config) as client, _progress(enabled=not as_json) as progress:
        reports = backup_stores(
            client,
            config,
            store_names,
            full_scan=full_scan,
            progress=progress.versions,
            jobs=config.fleet.concurrency,
            selected=progress.total,
            done=progress.store_done,
        )
    from memsync.sync.outputs import BackupDocument

    _emit(BackupDocument, [r.output() for r in reports], as_json, _describe_backup)
    ctx.exit(combine_exit_codes(r.exit_code for r in reports))


def _describe_backup(report: dict[str, Any]) -> str:
    from memsync.mirror import escape_for_terminal

    head = f"{report['id']} ({escape_for_terminal(report['name'])})" if report["name"] else report["id"]
    flags = [
        f
        for f, on in (("archived", report["archived"]), ("deleted remotely", report["deleted_remotely"]))
        if on
    ]
    lines = [
        f"{head}{' [' + ', '.join(flags) + ']' if flags else ''}: imported {report['imported']} version(s)"
    ]
    for remote in report["remotes"]:
        counts: dict[str, int] = {}
        for ref in remote["refs"]:
            counts[ref["status"]] = counts.get(ref["status"], 0) + 1
        summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no refs"
        created = " (repository created)" if remote["created"] else ""
        pruned = "; pruned" if remote["pruned"] else ""
        lines.append(f"  -> {remote['url']}{created}: {summary}{pruned}")
    lines += [f"  warning: {w}" for w in report["warnings"]]
    if report["error"]:
        lines.append(f"  error: {report['error']}")
    return "\n".join(lines)


@cli.command()
@click.argument("store_names", nargs=-1, metavar="[STORE]...")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_shard_option
@_jobs_option
@click.pass_context
def verify(
    ctx: click.Context, store_names: tuple[str, ...], as_json: bool, shard: str | None, jobs: int | None
) -> None:
    """Check each mirror against its live store; exit 5 when they differ.

    Every imported commit's content against its version's hash, no version missing, and the tip's
    files against the store's memories. Each difference is named: mismatch, redacted, missing,
    behind, tree, unlisted, store-gone; expired, skipped, inferred (a delete memsync inferred)
    and truncated (history lost before the first import) are reported but are no drift.
    """
    from memsync.errors import combine_exit_codes
    from memsync.sync.fleet import for_each_store
    from memsync.sync.stores import client_for, select_stores
    from memsync.sync.verify import describe, verify_deleted, verify_store

    config, _ = _sharded_config(ctx, shard, jobs)
    with client_for(config) as client:
        selection = select_stores(client, config, store_names)
        _say_if_nothing_listed(config, selection)
        with _progress(enabled=not as_json, total=len(selection.stores)) as progress:
            reports = for_each_store(
                client,
                selection.stores,
                lambda own, store: verify_store(own, store, config.mirror.root),
                jobs=config.fleet.concurrency,
                done=progress.store_done,
            )
    reports += [verify_deleted(config.mirror.root, s, selection) for s in selection.deleted_remotely]
    from memsync.sync.outputs import VerifyDocument

    _emit(VerifyDocument, [r.output() for r in reports], as_json, describe)
    ctx.exit(combine_exit_codes(r.exit_code for r in reports))


@cli.command()
@click.argument("repo", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--into-store", "into_store", metavar="ID", help="Make this existing store equal to the commit."
)
@click.option("--new-store", "new_store", metavar="NAME", help="Create a store of this name and fill it.")
@click.option("--at", "at", metavar="COMMIT", help="The commit to restore (default: the imported tip).")
@click.option("--dry-run", is_flag=True, help="Show the writes it would make; write nothing.")
@click.option(
    "--force", is_flag=True, help="Let --into-store delete more than push.max_delete_share of the store."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
def restore(
    ctx: click.Context,
    repo: Path,
    into_store: str | None,
    new_store: str | None,
    at: str | None,
    dry_run: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Make a store equal to a commit of REPO (a mirror or a bare backup), with the fewest writes.

    History itself cannot be recreated: the store's versions start with the restore's writes.
    Running the same command again after an interruption finishes the same restore.
    """
    from memsync.sync.restore import describe
    from memsync.sync.restore import restore as run_restore
    from memsync.sync.stores import client_for

    if (into_store is None) == (new_store is None):
        raise UsageError("restore needs exactly one of --into-store ID or --new-store NAME")
    config = _load_config(ctx)
    with client_for(config) as client:
        report = run_restore(
            client,
            repo,
            state_dir=config.mirror.root / ".memsync",
            into_store=into_store,
            new_store=new_store,
            at=at,
            dry_run=dry_run,
            force=force,
            max_delete_share=config.push.max_delete_share,
        )
    from memsync.sync.outputs import RestoreDocument

    _emit(RestoreDocument, [report.output()], as_json, describe)
    ctx.exit(report.exit_code)


# --- end of backup, verify, restore ---


# --- mounts and awareness views (memsync.sync.awareness, docs/awareness.md) ---


def _forward_client(ctx: click.Context, identity: str, template: str) -> tuple[Any, Any]:
    """The config and a client, after refusing a dialect without mounts or a bad pair (exit 2)."""
    from memsync.sync.awareness import check_pair, require_mounts
    from memsync.sync.stores import client_for

    config = _load_config(ctx)
    require_mounts(config.api.dialect)
    check_pair(identity, template)
    return config, client_for(config)


def _print_mounts_after(
    ctx: click.Context,
    identity: str,
    template: str,
    as_json: bool,
    change: Callable[[Any], str] | None = None,
) -> None:
    """Make ``change`` (if any) with a Forward client, then print the mounts of IDENTITY and TEMPLATE
    it leaves, under the line ``change`` returns."""

    from memsync.sync.awareness import describe_mounts, mounts_document

    _, client = _forward_client(ctx, identity, template)
    with client:
        note = None if change is None else change(client)
        listed = client.list_mounts(identity, template)
    document = mounts_document(identity, template, listed)
    if as_json:
        _print_json(document)
        return
    if note:
        click.echo(note)
    click.echo(describe_mounts(document.to_json()))


@cli.command()
@click.argument("identity")
@click.argument("template")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
def mounts(ctx: click.Context, identity: str, template: str, as_json: bool) -> None:
    """List the stores mounted for IDENTITY and TEMPLATE (Forward), in the order sessions merge them:
    the default store first, then by mount time."""
    _print_mounts_after(ctx, identity, template, as_json)


@cli.command()
@click.argument("identity")
@click.argument("template")
@click.argument("store_id", metavar="STORE")
@click.option("--json", "as_json", is_flag=True, help="Print the mounts after the change as one JSON object.")
@click.pass_context
def mount(ctx: click.Context, identity: str, template: str, store_id: str, as_json: bool) -> None:
    """Mount STORE (a store id) read-only for IDENTITY and TEMPLATE (Forward); it comes last in the
    merge order. At most 10 explicit mounts per pair."""
    from memsync.mirror import escape_for_terminal as esc

    def change(client: Any) -> str:
        done = client.mount_store(identity, template, store_id)
        return f"mounted {done.store_id} for {esc(identity)}/{esc(template)} ({done.access})"

    _print_mounts_after(ctx, identity, template, as_json, change)


@cli.command()
@click.argument("identity")
@click.argument("template")
@click.argument("store_id", metavar="STORE")
@click.option("--json", "as_json", is_flag=True, help="Print the mounts after the change as one JSON object.")
@click.pass_context
def unmount(ctx: click.Context, identity: str, template: str, store_id: str, as_json: bool) -> None:
    """Unmount STORE from IDENTITY and TEMPLATE (Forward). The default store's mount cannot be removed."""
    from memsync.mirror import escape_for_terminal as esc

    def change(client: Any) -> str:
        client.unmount_store(identity, template, store_id)
        return f"unmounted {store_id} from {esc(identity)}/{esc(template)}"

    _print_mounts_after(ctx, identity, template, as_json, change)


@cli.command()
@click.argument("identity", required=False)
@click.argument("template", required=False)
@click.option("--stores", "store_list", metavar="ID[,ID...]", help="A view of these stores, in this order.")
@click.option("--session", "session_id", metavar="ID", help="A view of this session (Anthropic, Cloud).")
@click.option("--at", "at", metavar="TIME", help="Also pin the view commit current at TIME (RFC 3339).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--strict", is_flag=True, help="Exit 4 when two stores collide on a path.")
@click.pass_context
def awareness(
    ctx: click.Context,
    identity: str | None,
    template: str | None,
    store_list: str | None,
    session_id: str | None,
    at: str | None,
    as_json: bool,
    strict: bool,
) -> None:
    """Show what a session sees, as a read-only git view; report every path two stores collide on.

    IDENTITY TEMPLATE (Forward): pull every active mounted store, build <mirror.root>/awareness/IDENTITY/
    TEMPLATE. --stores ID,... (every dialect): the view a session given these stores would see.
    --session ID (Anthropic, Cloud): the session's stores laid out as the API says, its start pinned at
    refs/sessions/ID/start. --at TIME pins the view commit current at TIME under refs/at/.
    Nothing in a view is ever pushed: make edits in the stores' checkouts (docs/awareness.md).
    """

    from memsync.sync import awareness as views
    from memsync.sync.stores import client_for

    forms = [identity is not None, store_list is not None, session_id is not None]
    if sum(forms) != 1 or (identity is not None) != (template is not None):
        raise click.UsageError("give IDENTITY TEMPLATE, --stores ID[,ID...] or --session ID (one of them)")
    moment = None if at is None else views.parse_instant(at)
    if identity is not None and template is not None:
        config, client = _forward_client(ctx, identity, template)
        with client:
            report = views.refresh_awareness(client, config.mirror.root, identity, template, at=moment)
    else:
        config = _load_config(ctx)
        with client_for(config) as client:
            if store_list is not None:
                ids = [part.strip() for part in store_list.split(",")]
                report = views.refresh_stores(client, config.mirror.root, ids, at=moment)
            else:
                assert session_id is not None
                report = views.refresh_session(client, config.mirror.root, session_id, at=moment)
    if as_json:
        _print_json(report.output())
    else:
        click.echo(views.describe_awareness(report))
    ctx.exit(report.exit_code_for(strict=strict))


def _describe_status_or_view(report: dict[str, Any]) -> str:
    from memsync.sync.awareness import describe_view_status

    return describe_view_status(report) if report.get("view") else _describe_status(report)


# --- end of mounts and awareness views ---


@cli.command()
@click.argument("name", required=False, metavar="[COMMAND]")
@click.option(
    "--write",
    "folder",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write one COMMAND.json per document into this folder instead of printing.",
)
def schema(name: str | None, folder: Path | None) -> None:
    """Print the JSON Schema of what COMMAND prints with --json (every command's, by name, without
    COMMAND). daemon-once is daemon --once; failed-run is what any command prints when its whole run
    fails. docs/json-schema/ holds the same files."""
    import json

    from memsync.sync.outputs import DOCUMENTS, json_schema

    if name is not None and name not in DOCUMENTS:
        raise UsageError(f"no JSON document named {name!r}: one of {', '.join(sorted(DOCUMENTS))}")
    names = [name] if name is not None else sorted(DOCUMENTS)
    if folder is None:
        found = json_schema(names[0]) if name is not None else {n: json_schema(n) for n in names}
        click.echo(json.dumps(found, ensure_ascii=False, indent=2))
        return
    folder.mkdir(parents=True, exist_ok=True)
    for each in names:
        text = json.dumps(json_schema(each), ensure_ascii=False, indent=2) + "\n"
        (folder / f"{each}.json").write_text(text, encoding="utf-8")
    click.echo(f"wrote {len(names)} schema file(s) to {folder}")


class _RetryNotes(logging.Filter):
    """Lets through the API client's note of a call's first failed attempt (once per text: stores
    worked on at once fail alike), and, on a terminal, its notes of each retry: the progress of a run
    that waits for a server (up to a minute of backoff), which would otherwise look hung."""

    def __init__(self, every_retry: bool) -> None:
        super().__init__()
        self.every_retry = every_retry
        self.said: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if getattr(record, "first_failure", False):
            fresh = message not in self.said
            self.said.add(message)
            return fresh
        return self.every_retry and message.startswith("retrying ")


def _show_retries(every_retry: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("memsync: %(message)s"))
    handler.addFilter(_RetryNotes(every_retry))
    api_log = logging.getLogger("memsync.api")
    _drop_handlers(api_log, _RetryNotes)  # main() run again in one process (tests) says each note once
    api_log.addHandler(handler)
    if every_retry and api_log.getEffectiveLevel() > logging.INFO:
        api_log.setLevel(logging.INFO)


class _ConfigWarnings(logging.Filter):
    """Each warning about the configuration once per run (a run may read the token more than once)."""

    def __init__(self) -> None:
        super().__init__()
        self.said: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        fresh = message not in self.said
        self.said.add(message)
        return fresh


def _show_config_warnings() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("memsync: warning: %(message)s"))
    handler.setLevel(logging.WARNING)
    handler.addFilter(_ConfigWarnings())
    config_log = logging.getLogger("memsync.config")
    _drop_handlers(config_log, _ConfigWarnings)
    config_log.addHandler(handler)


def _drop_handlers(logger: logging.Logger, kind: type[logging.Filter]) -> None:
    for old in [h for h in logger.handlers if any(isinstance(f, kind) for f in h.filters)]:
        logger.removeHandler(old)


def _leave_logs_to_the_daemon() -> None:
    """The daemon logs every record itself, in its format (JSON lines, perhaps): the notes the command
    line prints would say them twice, once in another format."""
    _drop_handlers(logging.getLogger("memsync.config"), _ConfigWarnings)
    api_log = logging.getLogger("memsync.api")
    _drop_handlers(api_log, _RetryNotes)
    api_log.setLevel(logging.NOTSET)


def _wants_json(args: list[str]) -> bool:
    return "--json" in (args[: args.index("--")] if "--" in args else args)


def _skip_httpx_command_line() -> None:
    # httpx's package imports its own command line, and with it rich and pygments (~50 ms of every
    # start that makes a request); memsync never runs it. A process that imported httpx first keeps it.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of the console script: run the command and exit with its code.

    With ``--json``, a run that fails as a whole (no token, an unreachable server, a bad config) still
    prints one object on stdout, ``{"error": …, "exit_code": …, "stores": []}``, as every other run
    does; the line on stderr is printed either way.
    """
    _skip_httpx_command_line()
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = _wants_json(args)
    _show_retries(every_retry=not as_json and sys.stderr.isatty())
    _show_config_warnings()
    message: str | None = None
    try:
        args, config = _hoist_config(args)
        code = cli.main(args=args, prog_name="memsync", standalone_mode=False, obj={"config": config})
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.ClickException as exc:
        exc.show()
        message = exc.format_message()
        code = EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code
    except click.Abort:
        message = "aborted"
        click.echo(message, err=True)
        code = 130
    except UserError as exc:
        message = str(exc)
        click.echo(f"memsync: {message}", err=True)
        code = exc.exit_code
    except MemsyncError as exc:
        message = str(exc)
        click.echo(f"memsync: error: {message}", err=True)
        code = exc.exit_code
    except OSError as exc:  # a local write no layer translated: one line naming the fix, no traceback
        message = str(storage_fault(exc, "writing"))
        click.echo(f"memsync: error: {message}", err=True)
        code = EXIT_FAILED
    if as_json and message is not None:
        import json

        from memsync.sync.outputs import FailedRun

        failed = FailedRun(error=message, exit_code=code if isinstance(code, int) else EXIT_FAILED, stores=[])
        click.echo(json.dumps(failed.to_json(), ensure_ascii=False))
    sys.exit(code if isinstance(code, int) else 0)
