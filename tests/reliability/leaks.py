"""Where a token could leak, and the search for it afterwards (docs/design.md §6).

Each :class:`SecretRun` is one ``memsync pull`` (or ``push``, ``backup``: :data:`COMMAND_SCENARIOS`)
with a distinctive token, every logger at DEBUG, in a directory of its own: against the real server
(a success, a wrong token), a server that fails every request, a closed port, and hostile servers
that echo the token back in their error answers (body message, error type, ``request_id``, the
``request-id`` header). Afterwards the token — and a backup remote's password — must appear
nowhere: no file under the run's directory (mirror root, git directories and local backup remotes
included, read byte for byte), no git object of any repository there or in the run's other places
(an http backup remote's repositories; ``git cat-file --batch-all-objects --batch``: packs are
compressed), no line of stdout (the JSON report) or stderr (errors and debug logs).

What a store *holds* (paths, contents, names) is mirrored or quoted as it is, even when it looks like
the token: memsync cannot tell a token in a user's data from a leak, and a store holding the token in
its data has leaked it already. The promise covers what memsync adds: headers, errors, logs.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.reliability.harness import (
    Finished,
    GitOracle,
    MemsyncCli,
    files_containing,
    finish,
    write_config,
)
from tests.reliability.loopback import LoopbackServer, Reply, Request

DIALECTS = ("forward", "cloud", "anthropic")
# Each way a pull can end, and the exit code it must end with (docs/design.md §4).
SCENARIOS = {
    "success": 0,
    "wrong-token": 3,
    "server-errors": 1,
    "connection-refused": 1,
    "echo-500": 1,
    "echo-401": 3,
}
# push and backup runs (tests/reliability/test_secrets.py): a push of a local edit, a backup to a
# local and an http remote (its password from an environment variable), and ways each fails.
COMMAND_SCENARIOS = {
    "push-success": 0,
    "push-wrong-token": 3,
    "push-echo-500": 1,
    "backup-success": 0,
    "backup-echo-401": 3,
    "backup-server-errors": 1,
    "backup-remote-refused": 1,
}


def presented_token(request: Request) -> str:
    """The token a request carries, whichever header the dialect puts it in."""
    bearer = request.headers.get("authorization", "")
    return request.headers.get("x-api-key") or bearer.removeprefix("Bearer ")


def echoing(status: int) -> Callable[[Request], Reply]:
    """A server that answers ``status`` with the caller's token in every field an error has."""

    def answer(request: Request) -> Reply:
        token = presented_token(request)
        body = {
            "type": "error",
            "error": {"type": f"api_error_{token}", "message": f"bad token {token}, Bearer {token}"},
            "request_id": token,
        }
        headers = {"content-type": "application/json", "request-id": token, "retry-after": "0"}
        return Reply(status, json.dumps(body).encode(), headers)

    return answer


def always_failing(request: Request) -> Reply:
    body = b'{"type": "error", "error": {"type": "api_error", "message": "down"}, "request_id": "req_1"}'
    return Reply(500, body, {"content-type": "application/json", "retry-after": "0"})


def closed_port() -> str:
    """A loopback URL nothing listens on: connections are refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@dataclass
class SecretRun:
    dialect: str
    scenario: str
    token: str
    directory: Path
    expected_exit: int
    finished: Finished | None = None
    command: tuple[str, ...] = ("pull", "--json")
    extra_config: str = ""
    env: dict[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()
    """Other credentials of the run (a backup remote's password), searched for like the token."""
    elsewhere: tuple[Path, ...] = ()
    """Repositories outside the run's directory it writes to (an http backup remote's)."""

    def leaks(self) -> list[str]:
        """Every place the token or another secret shows up (empty: none)."""
        assert self.finished is not None
        found = []
        for secret in (self.token, *self.secrets):
            needle = secret.encode()
            found += [f"file {p}" for p in files_containing(self.directory, needle)]
            for repo in git_repositories(self.directory, *self.elsewhere):
                if needle in GitOracle(repo).all_objects():
                    found.append(f"a git object of {repo}")
            if secret in self.finished.stdout:
                found.append("stdout")
            if secret in self.finished.stderr:
                found.append("stderr")
        return found


def git_repositories(*roots: Path) -> list[Path]:
    """Every git directory under ``roots``, bare ones (a backup remote) included."""
    found = []
    for root in roots:
        for head in sorted(root.rglob("HEAD")):
            if head.is_file() and (head.parent / "objects").is_dir() and (head.parent / "refs").is_dir():
                found.append(head.parent)
    return found


def start_runs(runs: list[tuple[SecretRun, str, list[str]]]) -> None:
    """Start every run at once (the refused connections back off for seconds: let them overlap)."""
    started = []
    for run, base_url, stores in runs:
        run.directory.mkdir(parents=True, exist_ok=True)  # a push's mirror may be there already
        config = write_config(
            run.directory,
            dialect=run.dialect,
            base_url=base_url,
            stores=stores,
            extra='[log]\nlevel = "debug"\n' + run.extra_config,
        )
        cli = MemsyncCli(config, run.token, env=run.env, debug_logging=True)
        started.append((run, cli.start(*run.command), time.monotonic()))
    for run, process, when in started:
        run.finished = finish(process, run.command, when)


def echo_servers() -> dict[str, LoopbackServer]:
    return {"echo-500": LoopbackServer(echoing(500)), "echo-401": LoopbackServer(echoing(401))}
