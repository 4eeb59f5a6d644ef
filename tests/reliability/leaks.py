"""Where a token could leak, and the search for it afterwards (design.md §6).

Each :class:`SecretRun` is one ``memsync pull`` with a distinctive token, every logger at DEBUG, in a
directory of its own: against the real server (a success, a wrong token), a server that fails every
request, a closed port, and hostile servers that echo the token back in their error answers (body
message, error type, ``request_id``, the ``request-id`` header). Afterwards the token
must appear nowhere: no file under the run's directory (mirror root and git directory included, read
byte for byte), no git object (``git cat-file --batch-all-objects --batch``: packs are compressed),
no line of stdout (the JSON report) or stderr (errors and debug logs).

What a store *holds* (paths, contents, names) is mirrored or quoted as it is, even when it looks like
the token: memsync cannot tell a token in a user's data from a leak, and a store holding the token in
its data has leaked it already. The promise covers what memsync adds: headers, errors, logs.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
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
# Each way a pull can end, and the exit code it must end with (design.md §4).
SCENARIOS = {
    "success": 0,
    "wrong-token": 3,
    "server-errors": 1,
    "connection-refused": 1,
    "echo-500": 1,
    "echo-401": 3,
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

    def leaks(self) -> list[str]:
        """Every place the token shows up (empty: none)."""
        assert self.finished is not None
        needle = self.token.encode()
        found = [f"file {p}" for p in files_containing(self.directory, needle)]
        for git_dir in sorted(self.directory.rglob(".git")):
            if needle in GitOracle(git_dir.parent).all_objects():
                found.append(f"a git object of {git_dir.parent}")
        if self.token in self.finished.stdout:
            found.append("stdout")
        if self.token in self.finished.stderr:
            found.append("stderr")
        return found


def start_runs(runs: list[tuple[SecretRun, str, list[str]]]) -> None:
    """Start every run at once (the refused connections back off for seconds: let them overlap)."""
    started = []
    for run, base_url, stores in runs:
        run.directory.mkdir(parents=True)
        config = write_config(
            run.directory,
            dialect=run.dialect,
            base_url=base_url,
            stores=stores,
            extra='[log]\nlevel = "debug"\n',
        )
        cli = MemsyncCli(config, run.token, debug_logging=True)
        started.append((run, cli.start("pull", "--json"), time.monotonic()))
    for run, process, when in started:
        run.finished = finish(process, ["pull", "--json"], when)


def echo_servers() -> dict[str, LoopbackServer]:
    return {"echo-500": LoopbackServer(echoing(500)), "echo-401": LoopbackServer(echoing(401))}
