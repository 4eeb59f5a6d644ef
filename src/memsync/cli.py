"""The ``memsync`` command.

Each subcommand imports what it needs inside its body, so that ``memsync pull`` on a store with nothing
new does not pay for FastAPI, watchdog or APScheduler. Errors from the tree of :mod:`memsync.errors`
are printed as one line and mapped to their exit code here, and only here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import click

from memsync.errors import EXIT_USAGE, MemsyncError, UsageError, UserError


def _hoist_config(argv: list[str]) -> tuple[list[str], str | None]:
    """Pull ``--config FILE`` / ``--config=FILE`` out of argv wherever it stands (design.md §4)."""
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
def server(**options: Any) -> None:
    """Run the reference Memory Store server (Forward, Cloud and Anthropic dialects)."""
    from memsync.server import run

    tokens = list(options.pop("tokens")) or [t for t in [os.environ.get("MEMSYNC_SERVER_TOKEN")] if t]
    if not tokens:
        raise UsageError("the server needs a token: pass --token TOKEN or set MEMSYNC_SERVER_TOKEN")
    run(tokens=tokens, **options)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of the console script: run the command and exit with its code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        args, config = _hoist_config(args)
        code = cli.main(args=args, prog_name="memsync", standalone_mode=False, obj={"config": config})
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.ClickException as exc:
        exc.show()
        code = EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code
    except click.Abort:
        click.echo("aborted", err=True)
        code = 130
    except UserError as exc:
        click.echo(f"memsync: {exc}", err=True)
        code = exc.exit_code
    except MemsyncError as exc:
        click.echo(f"memsync: error: {exc}", err=True)
        code = exc.exit_code
    sys.exit(code if isinstance(code, int) else 0)
