"""Seed files (docs/server.md) and the command line of ``memsync server``."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from memsync.server.seeding import SeedFile, describe_seed_errors
from tests.server.checks import expect_error, ok
from tests.server.conftest import dialect_client
from tests.support.server import ServerProcess

Factory = Callable[..., ServerProcess]

SEED: dict[str, Any] = {
    "stores": [
        {
            "dialect": "forward",
            "name": "default of idn_1",
            "system_managed": True,
            "identity_id": "idn_1",
            "template_id": "tmpl_1",
            "created_at": "2026-01-01T00:00:00Z",
            "memories": [{"path": "agent/notes.md", "content": "from the agent"}],
        },
        {
            "dialect": "forward",
            "name": "team",
            "metadata": {"team": "backend"},
            "mounts": [{"identity_id": "idn_1", "template_id": "tmpl_1"}],
            "memories": [
                {
                    "path": "decisions/a.md",
                    "history": [
                        {"op": "create", "content": "first", "at": "2026-02-01T10:00:00Z"},
                        {"op": "update", "content": "second", "at": "2026-02-02T10:00:00Z"},
                        {"op": "update", "content": "third", "at": "2026-02-03T10:00:00Z"},
                    ],
                }
            ],
        },
        {
            "dialect": "anthropic",
            "name": "agent memory",
            "archived_at": "2026-03-10T00:00:00Z",
            "memories": [
                {
                    "path": "/notes/todo.md",
                    "history": [
                        {
                            "op": "create",
                            "content": "secret plan",
                            "at": "2026-03-01T00:00:00Z",
                            "actor": {"type": "session_actor", "session_id": "sesn_1"},
                            "redacted_at": "2026-03-05T00:00:00Z",
                            "redacted_by": {"type": "user_actor", "user_id": "user_1"},
                        },
                        {
                            "op": "update",
                            "path": "/notes/done.md",
                            "content": "done",
                            "at": "2026-03-02T00:00:00Z",
                            "actor": {"type": "service_account_actor", "service_account_id": "svac_1"},
                        },
                    ],
                }
            ],
        },
        {
            "dialect": "cloud",
            "name": "cloudy",
            "description": "a Cloud store",
            "memories": [
                {
                    "path": "a.md",
                    "history": [
                        {"op": "create", "content": "1", "at": "2026-04-01T00:00:00Z"},
                        {"op": "update", "content": "2", "at": "2026-04-01T00:00:01Z"},
                    ],
                }
            ],
        },
    ]
}


def test_seed_builds_stores_histories_mounts_and_actors(server_factory: Factory, tmp_path: Path) -> None:
    seed_file = tmp_path / "seed.json"
    seed_file.write_text(json.dumps(SEED))
    server = server_factory("--seed", str(seed_file))
    with dialect_client(server, "/api/v1/forward") as forward:
        system = ok(forward.get("/memory_stores", params={"system_managed": "true"}))["data"]
        assert [s["name"] for s in system] == ["default of idn_1"]
        assert system[0]["identity_id"] == "idn_1" and system[0]["created_at"] == "2026-01-01T00:00:00.000Z"
        assert system[0]["binding_info"]["identity_template_count"] == 1
        mounts = ok(forward.get("/identities/idn_1/templates/tmpl_1/memory_stores"))["data"]
        assert [(m["name"], m["access"], m["system_managed"]) for m in mounts] == [
            ("default of idn_1", "read_write", True),
            ("team", "read_only", False),
        ]
        default_id = system[0]["id"]
        expect_error(forward.delete(f"/identities/idn_1/templates/tmpl_1/memory_stores/{default_id}"), 409)
        team = ok(forward.get("/memory_stores", params={"system_managed": "false"}))["data"][0]
        assert team["metadata"] == {"team": "backend", "created_by": "forward"} and team["entry_count"] == 1
        versions = ok(forward.get(f"/memory_stores/{team['id']}/memory_versions"))["data"]
        assert [(v["operation"], v["created_at"]) for v in versions] == [
            ("updated", "2026-02-03T10:00:00.000Z"),
            ("updated", "2026-02-02T10:00:00.000Z"),
            ("created", "2026-02-01T10:00:00.000Z"),
        ]
    with dialect_client(server, "/v1", api_key=True) as agent:
        assert ok(agent.get("/memory_stores"))["data"] == []
        store = ok(agent.get("/memory_stores", params={"include_archived": "true"}))["data"][0]
        assert store["archived_at"] == "2026-03-10T00:00:00.000Z"
        versions = ok(agent.get(f"/memory_stores/{store['id']}/memory_versions", params={"view": "full"}))[
            "data"
        ]
        assert [v["created_by"] for v in versions] == [
            {"type": "service_account_actor", "service_account_id": "svac_1"},
            {"type": "session_actor", "session_id": "sesn_1"},
        ]
        assert versions[0]["path"] == "/notes/done.md" and versions[0]["content"] == "done"
        assert versions[1]["redacted_at"] == "2026-03-05T00:00:00.000Z" and versions[1]["content"] is None
        assert versions[1]["redacted_by"] == {"type": "user_actor", "user_id": "user_1"}
        by_session = ok(
            agent.get(f"/memory_stores/{store['id']}/memory_versions", params={"session_id": "sesn_1"})
        )
        assert [v["id"] for v in by_session["data"]] == [versions[1]["id"]]
    with dialect_client(server, "/api/v1/cloud") as cloud:
        store = ok(cloud.get("/memory_stores"))["data"][0]
        memory = ok(cloud.get(f"/memory_stores/{store['id']}/memories"))["data"][0]
        assert memory["version"] == 2 and memory["updated_at"] == "2026-04-01T00:00:01.000Z"
        # Live writes sort after everything seeded.
        created = ok(
            cloud.post(f"/memory_stores/{store['id']}/memories", json={"path": "b.md", "content": "x"}), 201
        )
        assert created["id"] > memory["id"]
    db = server.db
    server.stop()
    again = server_factory("--seed", str(seed_file), db=db)
    with dialect_client(again, "/api/v1/forward") as forward:
        assert len(ok(forward.get("/memory_stores"))["data"]) == 2, "a seed file is applied once per database"


def _run_server(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "memsync", "server", "--port", "0", "--token", "t", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.e2e
def test_a_bad_seed_names_the_element_and_changes_nothing(tmp_path: Path, server_factory: Factory) -> None:
    bad = {
        "stores": [
            {"dialect": "forward", "name": "fine", "memories": [{"path": "ok.md", "content": "x"}]},
            {"dialect": "forward", "name": "broken", "memories": [{"path": "/abs.md", "content": "x"}]},
        ]
    }
    seed_file = tmp_path / "bad.json"
    seed_file.write_text(json.dumps(bad))
    db = tmp_path / "bad.sqlite3"
    result = _run_server("--db", str(db), "--seed", str(seed_file))
    assert result.returncode == 2, result
    assert "stores[1].memories[0].history[0]: path:" in result.stderr and "listening" not in result.stdout
    server = server_factory(db=db)
    with dialect_client(server, "/api/v1/forward") as forward:
        assert ok(forward.get("/memory_stores"))["data"] == []
    # A misspelt required key is reported as the misspelling, paired with the key it stands for,
    # not as the required key's absence (which pydantic may list first).
    seed_file.write_text('{"stores": [{"dialect": "forward", "nmae": "typo"}]}')
    result = _run_server("--db", str(tmp_path / "typo.sqlite3"), "--seed", str(seed_file))
    assert result.returncode == 2, result
    assert result.stderr == (
        f"memsync: seed file {seed_file}: stores[0].nmae: unknown key (did you mean 'name'? it is required)\n"
    )


def _seed_errors(seed: Any) -> list[ErrorDetails]:
    """pydantic's errors for ``seed``, validated from JSON as the server does."""
    with pytest.raises(ValidationError) as caught:
        SeedFile.model_validate_json(json.dumps(seed))
    return caught.value.errors()


def test_seed_errors_name_misspelt_keys_first_whatever_order_pydantic_reports() -> None:
    misspelt = {
        "dialect": "cloud",
        "nmae": "typo",
        "descripton": "an optional key, misspelt",
        "memories": [{"pth": "a.md", "history": [{"op": "updte"}]}],
    }
    fine = {"dialect": "forward", "name": "fine"}
    errors = _seed_errors({"stores": [misspelt, *[fine] * 9, misspelt], "stroes": []})
    # Per misspelt store: 'nmae', 'descripton' and 'pth' unknown, 'name' and 'path' missing, 'op' invalid.
    assert len(errors) == 13
    expected = "; ".join(
        [
            "stores[0].descripton: unknown key (did you mean 'description'?)",
            "stores[0].memories[0].pth: unknown key (did you mean 'path'? it is required)",
            "stores[0].nmae: unknown key (did you mean 'name'? it is required)",
            "stores[10].descripton: unknown key (did you mean 'description'?)",
            "stores[10].memories[0].pth: unknown key (did you mean 'path'? it is required)",
            "stores[10].nmae: unknown key (did you mean 'name'? it is required)",
            "stroes: unknown key (did you mean 'stores'?)",
            "stores[0].memories[0].history[0].op: Input should be 'create', 'update' or 'delete'",
            "stores[10].memories[0].history[0].op: Input should be 'create', 'update' or 'delete'",
        ]
    )
    assert describe_seed_errors(errors) == expected
    # The same errors in other orders (pydantic's order changed between releases): the same message.
    shuffled = random.Random(16)
    for _ in range(50):
        reordered = errors[:]
        shuffled.shuffle(reordered)
        assert describe_seed_errors(reordered) == expected, [e["loc"] for e in reordered]
    assert describe_seed_errors(errors[::-1]) == expected


@pytest.mark.parametrize("order", ["extra first", "missing first"])
def test_a_misspelt_required_key_is_named_whichever_error_comes_first(order: str) -> None:
    errors = _seed_errors({"stores": [{"dialect": "forward", "nmae": "typo"}]})
    assert sorted(e["type"] for e in errors) == ["extra_forbidden", "missing"]
    errors.sort(key=lambda e: (e["type"] == "missing") == (order == "extra first"))
    assert errors[0]["type"] == ("extra_forbidden" if order == "extra first" else "missing")
    message = describe_seed_errors(errors)
    assert message == "stores[0].nmae: unknown key (did you mean 'name'? it is required)"


def test_seed_errors_without_a_close_key_list_the_valid_ones_and_what_is_missing() -> None:
    errors = _seed_errors({"stores": [{"dialect": "forward", "title": "x", "mounts": [{}]}]})
    assert describe_seed_errors(errors) == "; ".join(
        [
            "stores[0].title: unknown key (valid keys: dialect, name, description, metadata, created_at,"
            " system_managed, identity_id, template_id, archived_at, mounts, memories)",
            "stores[0].mounts[0].identity_id: required key missing",
            "stores[0].mounts[0].template_id: required key missing",
            "stores[0].name: required key missing",
        ]
    )
    assert describe_seed_errors(_seed_errors([])) == "the file: Input should be an object"


@pytest.mark.e2e
def test_command_line_refusals(tmp_path: Path) -> None:
    result = _run_server("--db", str(tmp_path / "r.sqlite3"), "--version-retention", "forever")
    assert result.returncode == 2 and "--version-retention" in result.stderr, result
    assert "Traceback" not in result.stderr


@pytest.mark.e2e
def test_sigterm_and_sigint_exit_cleanly(server_factory: Factory) -> None:
    import signal

    server = server_factory()
    assert server.process is not None
    server.process.send_signal(signal.SIGINT)
    assert server.process.wait(timeout=15) == 0
    assert server.output == [f"listening on {server.base_url}\n"], "one line on stdout, quiet access log"
    assert server_factory().stop() == 0
