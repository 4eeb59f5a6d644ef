"""``memsync demo``: the embedded server, a store with a realistic history, and its git mirror.

The demo starts the reference server on a free loopback port with the seed file shipped in this
package (creates, edits, deletes, a path reused after a delete, nested paths and one redacted
version), pulls the store into a mirror, shows ``git log --stat``, and leaves behind everything needed
to continue: ``DIR/memsync.toml``, the server's database and a private token file. ``DIR`` is
``demo`` in memsync's data folder (``~/.local/share/memsync/demo`` on Linux) unless ``--dir`` names one.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import threading
from importlib import resources
from pathlib import Path

import click

from memsync.config import load_config
from memsync.errors import EXIT_OK, MemsyncError, UsageError, combine_exit_codes
from memsync.sync.permissions import restrict_new_files
from memsync.sync.pull import pull_store
from memsync.sync.stores import client_for, select_stores

START_DEADLINE_S = 30.0
DEMO_PORT = 8765


def default_directory() -> Path:
    """Where the demo goes unless ``--dir`` says: memsync's data folder, never the current one (run
    from a git checkout, as from memsync's own clone, it would be left there untracked)."""
    from platformdirs import user_data_path

    return user_data_path("memsync") / "demo"


def run_demo(directory: Path | None = None) -> int:
    directory = (directory or default_directory()).absolute()
    if directory.exists() and any(directory.iterdir()):
        raise UsageError(f"{directory} exists and is not empty; pass --dir NEW_FOLDER or remove it")
    restrict_new_files(group_readable=False)  # the demo's token, server database and mirrors
    directory.mkdir(parents=True, exist_ok=True)
    seed = directory / "seed.json"
    seed.write_bytes(resources.files("memsync.demo").joinpath("history.json").read_bytes())
    token_file = directory / "token"
    token_file.write_text(secrets.token_urlsafe(24) + "\n", encoding="utf-8")
    token_file.chmod(0o600)
    token = token_file.read_text(encoding="utf-8").strip()
    db = directory / "server.sqlite3"

    server, url = _start_server(db, seed, token)
    try:
        config_file = directory / "memsync.toml"
        _write_config(config_file, url)
        config = load_config(config_file)
        with client_for(config) as client:
            reports = [
                pull_store(client, store, config.mirror.root)
                for store in select_stores(client, config).stores
            ]
        # Later runs talk to a server the user starts on the default port (shown below).
        _write_config(config_file, f"http://127.0.0.1:{DEMO_PORT}")
    finally:
        server.terminate()
        server.wait(timeout=15)

    for report in reports:
        if not report.ok:
            click.echo(f"memsync demo: pulling {report.id} failed: {report.error}", err=True)
            continue
        click.echo(f"Imported {report.imported} versions of store {report.id} ({report.name}) into")
        click.echo(f"  {report.path}\n")
        click.echo("git log --stat (newest first, excerpt):")
        click.echo(_git_log_excerpt(Path(report.path)))
    mirror = reports[0].path if reports else str(directory / "mirrors")
    click.echo(
        "\nTo continue:\n"
        f"  cd {mirror} && git log --grep='Redacted: true' memstore/main   # a redacted version\n"
        f"  MEMSYNC_SERVER_TOKEN=$(cat {token_file}) memsync server --db {db} &   # port {DEMO_PORT}\n"
        f"  export MEMSYNC_CONFIG={directory / 'memsync.toml'}\n"
        "  memsync stores && memsync pull\n"
    )
    return combine_exit_codes([EXIT_OK, *(r.exit_code for r in reports)])


def _write_config(path: Path, url: str) -> None:
    path.write_text(
        "# Written by memsync demo. See config.example.toml for every key.\n"
        "[api]\n"
        'dialect = "forward"\n'
        f'base_url = "{url}"\n'
        'token_file = "token"\n'
        "[mirror]\n"
        'root = "mirrors"\n',
        encoding="utf-8",
    )


def _start_server(db: Path, seed: Path, token: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``memsync server`` on a free port; return it and its URL once it accepts connections."""
    args = [sys.executable, "-m", "memsync", "server", "--port", "0", "--db", str(db), "--seed", str(seed)]
    process = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MEMSYNC_SERVER_TOKEN": token},
    )
    found: list[str] = []
    ready = threading.Event()

    def watch() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("listening on "):
                found.append(line.removeprefix("listening on ").strip())
                ready.set()
        ready.set()

    threading.Thread(target=watch, daemon=True).start()
    if not ready.wait(START_DEADLINE_S) or not found:
        process.kill()
        _, errors = process.communicate(timeout=5)
        raise MemsyncError(f"the embedded server did not start: {errors.strip()[-500:]}")
    return process, found[0]


def _git_log_excerpt(repo: Path, lines: int = 40) -> str:
    git = shutil.which("git")
    if git is None:
        return "  (git is not installed)"
    out = subprocess.run(
        [git, "-C", str(repo), "log", "--stat", "--format=%h %ad %s", "--date=short", "memstore/main"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    excerpt = out[:lines] + (["  ..."] if len(out) > lines else [])
    return "\n".join("  " + line for line in excerpt)
