"""The token never lands in a mirror, a git object, a log line, an error or the JSON output (§6).

For each dialect's auth header (Forward and Cloud ``Authorization: Bearer``, Anthropic ``x-api-key``),
``memsync pull`` runs with a distinctive token and every logger at DEBUG: a success against the real
server, a wrong token (401), a server failing every request (500s, retried to the end), a closed
port, and hostile servers echoing the token in their error answers or in a path. ``memsync push``
(of a local edit) and ``memsync backup`` (to a local and an http remote whose password comes from an
environment variable) run too, succeeding and failing (a wrong token, an echoing server, a server
failing every request, the remote refusing the password); the password is searched for like the
token, in the remotes as well. All runs start at once (their retry waits overlap); then each is
searched (tests/reliability/leaks.py).
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator

import pytest

from memsync.api import open_client
from memsync.rules import Dialect
from memsync.sync.pull import pull_store
from tests.backup.smart_http import smart_http
from tests.reliability.backups import assert_backup_matches, backup_remotes
from tests.reliability.leaks import (
    COMMAND_SCENARIOS,
    DIALECTS,
    SCENARIOS,
    SecretRun,
    always_failing,
    closed_port,
    echo_servers,
    start_runs,
)
from tests.reliability.loopback import LoopbackServer
from tests.support.server import ServerProcess

# Every test here runs memsync as a process: killed, faulted, or on a full disk.
pytestmark = pytest.mark.e2e

# Cloud sends the same Bearer header as Forward: it runs against the real server only; the failure
# paths are the same code for both, so Forward covers Bearer and Anthropic covers x-api-key there.
CASES = [(d, s) for d in ("forward", "anthropic") for s in SCENARIOS] + [
    ("cloud", "success"),
    ("cloud", "wrong-token"),
]
# Both headers for push and backup; the remote's refusal once (it does not depend on the header).
COMMAND_CASES = [(d, s) for d in ("forward", "anthropic") for s in COMMAND_SCENARIOS]
COMMAND_CASES.remove(("anthropic", "backup-remote-refused"))
PASSWORD_ENV = "LEAK_BACKUP_PASSWORD"


def _token(label: str) -> str:
    return f"msk-leakcheck-{label}-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], SecretRun]]:
    token = _token("real")
    server = ServerProcess(db=tmp_path_factory.mktemp("leak-server") / "db.sqlite3", token=token).start()
    helpers = {"server-errors": LoopbackServer(always_failing), **echo_servers()}
    for helper in helpers.values():
        helper.start()
    password = f"pw-leakcheck-{uuid.uuid4().hex}"
    served = tmp_path_factory.mktemp("leak-served")
    http = smart_http(served, "backup-user", password)
    remote = http.__enter__()
    try:
        stores: dict[str, str] = {}
        pushed_stores: dict[str, str] = {}  # push and backup runs write: stores of their own
        for dialect in DIALECTS:
            with open_client(Dialect(dialect), server.base_url, token) as client:
                store = client.create_store(
                    f"leaks-{dialect}", request_id=f"leaks-{uuid.uuid4()}", description="made by tests"
                )
                client.create_memory(store.id, "notes/a.md", "a memory\n")
                stores[dialect] = store.id
                store = client.create_store(
                    f"leaks-cmd-{dialect}", request_id=f"leaks-{uuid.uuid4()}", description="made by tests"
                )
                client.create_memory(store.id, "notes/a.md", "a memory\n")
                pushed_stores[dialect] = store.id
                subprocess.run(["git", "init", "-q", "--bare", str(served / f"{store.id}.git")], check=True)
        base = tmp_path_factory.mktemp("leak-runs")
        planned = []
        for dialect, scenario in CASES:
            run_token = token if scenario == "success" else _token(scenario)
            run = SecretRun(dialect, scenario, run_token, base / f"{dialect}-{scenario}", SCENARIOS[scenario])
            url = {
                "success": server.base_url,
                "wrong-token": server.base_url,
                "connection-refused": closed_port(),
            }.get(scenario) or helpers[scenario].base_url
            planned.append((run, url, [stores[dialect]]))
        for dialect, scenario in COMMAND_CASES:
            command, _, failure = scenario.partition("-")
            run_token = token if failure in ("success", "remote-refused") else _token(scenario)
            directory = base / f"{dialect}-{scenario}"
            run = SecretRun(dialect, scenario, run_token, directory, COMMAND_SCENARIOS[scenario])
            run.command = (command, "--json")
            store_id = pushed_stores[dialect]
            if command == "push":
                # A mirror with an edit to push, made with the real token before the run.
                with open_client(Dialect(dialect), server.base_url, token) as client:
                    assert pull_store(client, client.get_store(store_id), directory / "mirrors").ok
                (directory / "mirrors" / store_id / "notes" / "a.md").write_text(f"edited in {scenario}\n")
            else:
                host = remote.base_url.removeprefix("http://")
                http_url = f"http://backup-user:${{{PASSWORD_ENV}}}@{host}/{{store_id}}.git"
                run.extra_config = backup_remotes("backups/{store_id}.git", http_url)
                given = f"wrong-{password}" if failure == "remote-refused" else password
                run.env, run.secrets, run.elsewhere = {PASSWORD_ENV: given}, (given,), (served,)
            url = {
                "success": server.base_url,
                "wrong-token": server.base_url,
                "remote-refused": server.base_url,
            }.get(failure) or helpers[failure].base_url
            planned.append((run, url, [store_id]))
        start_runs(planned)
        yield {(run.dialect, run.scenario): run for run, _, _ in planned}
    finally:
        http.__exit__(None, None, None)
        for helper in helpers.values():
            helper.stop()
        server.stop()


@pytest.mark.parametrize(("dialect", "scenario"), CASES, ids=[f"{d}-{s}" for d, s in CASES])
def test_the_token_is_nowhere(runs: dict[tuple[str, str], SecretRun], dialect: str, scenario: str) -> None:
    run = runs[(dialect, scenario)]
    assert run.finished is not None
    assert run.finished.returncode == run.expected_exit, run.finished.describe()
    assert run.leaks() == [], f"the token leaked into {run.leaks()}\n{run.finished.describe()}"
    # The runs were real: their logs were captured, and a success left a mirror to search.
    assert " memsync." in run.finished.stderr or " httpx: " in run.finished.stderr
    if scenario == "success":
        (entry,) = run.finished.json()["stores"]
        assert entry["imported"] == 1
        assert (run.directory / "mirrors" / entry["id"] / "notes" / "a.md").read_text() == "a memory\n"


@pytest.mark.parametrize(("dialect", "scenario"), COMMAND_CASES, ids=[f"{d}-{s}" for d, s in COMMAND_CASES])
def test_push_and_backup_leave_the_token_and_password_nowhere(
    runs: dict[tuple[str, str], SecretRun], dialect: str, scenario: str
) -> None:
    run = runs[(dialect, scenario)]
    assert run.finished is not None
    assert run.finished.returncode == run.expected_exit, run.finished.describe()
    assert run.leaks() == [], f"a secret leaked into {run.leaks()}\n{run.finished.describe()}"
    assert " memsync." in run.finished.stderr or " httpx: " in run.finished.stderr
    if run.expected_exit != 0 and scenario != "backup-remote-refused":
        return  # the store listing itself failed: there is no report, only the error searched above
    (entry,) = run.finished.json()["stores"]
    mirror = run.directory / "mirrors" / entry["id"]
    if scenario == "push-success":
        assert (
            len(entry["pushed"]) == 1
            and (mirror / "notes" / "a.md").read_text() == "edited in push-success\n"
        )
    elif scenario == "backup-success":
        assert [r["ok"] for r in entry["remotes"]] == [True, True], entry
        assert_backup_matches(mirror, run.directory / "backups" / f"{entry['id']}.git")
        assert all(run.secrets[0] not in r["url"] for r in entry["remotes"])
    elif scenario == "backup-remote-refused":
        assert [r["ok"] for r in entry["remotes"]] == [True, False] and "credentials" in entry["error"]
