"""The token never lands in a mirror, a git object, a log line, an error or the JSON output (§6).

For each dialect's auth header (Forward and Cloud ``Authorization: Bearer``, Anthropic ``x-api-key``),
``memsync pull`` runs with a distinctive token and every logger at DEBUG: a success against the real
server, a wrong token (401), a server failing every request (500s, retried to the end), a closed
port, and hostile servers echoing the token in their error answers or in a path. All runs start at
once (their retry waits overlap); then each is searched for the token (tests/reliability/leaks.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from memsync.api import open_client
from memsync.rules import Dialect
from tests.reliability.leaks import (
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

# Cloud sends the same Bearer header as Forward: it runs against the real server only; the failure
# paths are the same code for both, so Forward covers Bearer and Anthropic covers x-api-key there.
CASES = [(d, s) for d in ("forward", "anthropic") for s in SCENARIOS] + [
    ("cloud", "success"),
    ("cloud", "wrong-token"),
]


def _token(label: str) -> str:
    return f"msk-leakcheck-{label}-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], SecretRun]]:
    token = _token("real")
    server = ServerProcess(db=tmp_path_factory.mktemp("leak-server") / "db.sqlite3", token=token).start()
    helpers = {"server-errors": LoopbackServer(always_failing), **echo_servers()}
    for helper in helpers.values():
        helper.start()
    try:
        stores: dict[str, str] = {}
        for dialect in DIALECTS:
            with open_client(Dialect(dialect), server.base_url, token) as client:
                store = client.create_store(f"leaks-{dialect}", request_id=f"leaks-{uuid.uuid4()}")
                client.create_memory(store.id, "notes/a.md", "a memory\n")
                stores[dialect] = store.id
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
        start_runs(planned)
        yield {(run.dialect, run.scenario): run for run, _, _ in planned}
    finally:
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
