"""Sessions of the Cloud and Anthropic dialects (docs/api-contract.md §3, §4, §6) and the reference-only
way to write as a session (docs/server.md), over raw HTTP."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from memsync.errors import ConfigError
from memsync.rules import Dialect
from memsync.server import wire
from memsync.server.problems import NotFound
from memsync.server.seeding import SeedFile, load_seed
from memsync.server.storage import Engine
from tests.server.checks import anthropic_store, cloud_store, expect_error, forward_store, ok
from tests.server.conftest import dialect_client
from tests.support.server import ServerProcess

SESSION_HEADER = "x-memsync-reference-session"
BETA = {"anthropic-beta": "managed-agents-2026-04-01"}


@pytest.fixture
def agent(server: ServerProcess) -> Iterator[httpx.Client]:
    """The Anthropic dialect as the SDK's sessions calls send it: with the sessions beta."""
    with dialect_client(server, "/v1", api_key=True) as client:
        client.headers.update(BETA)
        yield client


def resource(store_id: str, **fields: Any) -> dict[str, Any]:
    return {"type": "memory_store", "memory_store_id": store_id, **fields}


def new_session(client: httpx.Client, resources: list[dict[str, Any]], status: int = 200) -> dict[str, Any]:
    body = {"agent": "agent_1", "environment_id": "env_1", "resources": resources}
    session = ok(client.post("/sessions", json=body), status)
    wire.Session.model_validate(session)
    return dict(session)


# --- Anthropic ------------------------------------------------------------------------------


def test_anthropic_session_attaches_stores_as_they_were(agent: httpx.Client) -> None:
    prefs = anthropic_store(agent, name="User Preferences", description="likes and dislikes")
    notes = anthropic_store(agent, name="notes")
    session = new_session(
        agent,
        [resource(prefs["id"], instructions="Read first."), resource(notes["id"], access="read_only")],
    )
    assert session["id"].startswith("sesn_") and session["type"] == "session"
    assert session["resources"] == [
        {
            "type": "memory_store",
            "memory_store_id": prefs["id"],
            "access": "read_write",
            "instructions": "Read first.",
            "name": "User Preferences",
            "description": "likes and dislikes",
            "mount_path": "/mnt/memory/user-preferences",
        },
        {
            "type": "memory_store",
            "memory_store_id": notes["id"],
            "access": "read_only",
            "instructions": None,
            "name": "notes",
            "description": "",
            "mount_path": "/mnt/memory/notes",
        },
    ]
    # The store changes afterwards; the session keeps what it attached, and its exact created_at.
    ok(agent.post(f"/memory_stores/{prefs['id']}", json={"name": "renamed", "description": "new"}))
    again = ok(agent.get(f"/sessions/{session['id']}"))
    assert again == session
    assert datetime.fromisoformat(session["created_at"]).microsecond % 1000 == 0
    assert session["created_at"].endswith("Z") and len(session["created_at"]) == len(
        "2026-01-01T00:00:00.000Z"
    )


def test_names_that_derive_alike_get_distinct_mount_paths(agent: httpx.Client) -> None:
    names = ["User Preferences", "user  preferences!", "..", "记忆", "a" * 80, "Notes.v2"]
    stores = [anthropic_store(agent, name=name) for name in names]
    session = new_session(agent, [resource(s["id"]) for s in stores])
    assert [r["mount_path"] for r in session["resources"]] == [
        "/mnt/memory/user-preferences",
        "/mnt/memory/user-preferences-2",
        "/mnt/memory/store",
        "/mnt/memory/store-2",
        "/mnt/memory/" + "a" * 64,
        "/mnt/memory/notes.v2",
    ]


def test_at_most_eight_stores(agent: httpx.Client) -> None:
    stores = [anthropic_store(agent) for _ in range(9)]
    assert len(new_session(agent, [resource(s["id"]) for s in stores[:8]])["resources"]) == 8
    body = {"agent": "a", "environment_id": "e", "resources": [resource(s["id"]) for s in stores]}
    expect_error(agent.post("/sessions", json=body), 400, "invalid_request_error", "resources")


def test_refused_attachments(agent: httpx.Client, server: ServerProcess) -> None:
    agent_client = agent
    store = anthropic_store(agent)
    archived = anthropic_store(agent)
    ok(agent.post(f"/memory_stores/{archived['id']}/archive"))
    with dialect_client(server, "/api/v1/cloud") as cloud:
        elsewhere = cloud_store(cloud)

    def create(*resources: dict[str, Any], **extra: Any) -> httpx.Response:
        body = {"agent": "a", "environment_id": "e", "resources": list(resources), **extra}
        return agent.post("/sessions", json=body)

    expect_error(create(resource("memstore_unknown")), 404, "not_found_error")
    expect_error(create(resource(elsewhere["id"])), 404, "not_found_error")  # a store of another dialect
    expect_error(create(resource(archived["id"])), 409, "conflict_error")
    expect_error(
        create(resource(store["id"]), resource(store["id"])), 400, field="resources[1].memory_store_id"
    )
    expect_error(create(resource(store["id"], access="write")), 400, "invalid_request_error")
    expect_error(
        create(resource(store["id"], instructions="x" * 4097)), 400, field="resources[0].instructions"
    )
    assert new_session(agent, [resource(store["id"], instructions="x" * 4096)])["resources"][0][
        "instructions"
    ]
    expect_error(create(resource(store["id"]), vault_ids=["v"]), 400, "invalid_request_error")
    expect_error(create(resource(store["id"], mount_path="/mnt/memory/x")), 400, "invalid_request_error")
    for agent, field in (
        ("", "agent.id"),
        ({"type": "agent", "id": "a", "version": False}, "agent.object.version"),
        ({"type": "agent", "id": "a", "version": 2**64}, "agent.object.version"),
    ):
        body = {"agent": agent, "environment_id": "e", "resources": []}
        expect_error(agent_client.post("/sessions", json=body), 400, field=field)
    pinned = {
        "agent": {"type": "agent", "id": "agent_1", "version": 3},
        "environment_id": "e",
        "resources": [],
    }
    assert ok(agent_client.post("/sessions", json=pinned))["agent"] == {
        "type": "agent",
        "id": "agent_1",
        "version": 3,
    }


def test_the_sessions_beta_is_required(anthropic_http: httpx.Client) -> None:
    store = anthropic_store(anthropic_http)
    body = {"agent": "a", "environment_id": "e", "resources": [resource(store["id"])]}
    expect_error(anthropic_http.post("/sessions", json=body), 400, field="anthropic-beta")
    expect_error(anthropic_http.get("/sessions/sesn_x"), 400, field="anthropic-beta")
    session = ok(
        anthropic_http.post(
            "/sessions", json=body, headers={"anthropic-beta": "x, " + BETA["anthropic-beta"]}
        )
    )
    assert ok(anthropic_http.get(f"/sessions/{session['id']}", headers=BETA))["id"] == session["id"]
    # Both betas are one too many for a memory endpoint, not for the sessions endpoints.
    both = {"anthropic-beta": "managed-agents-2026-04-01,agent-memory-2026-07-22"}
    assert ok(anthropic_http.get(f"/sessions/{session['id']}", headers=both))["id"] == session["id"]
    expect_error(
        anthropic_http.get(f"/memory_stores/{store['id']}", headers=both), 400, field="anthropic-beta"
    )


def test_an_unknown_session_is_not_found(agent: httpx.Client, cloud: httpx.Client) -> None:
    expect_error(agent.get("/sessions/sesn_nothing"), 404, "not_found_error")
    session = new_session(agent, [])
    expect_error(
        cloud.get(f"/sessions/{session['id']}"), 404, "not_found_error"
    )  # sessions stay in their dialect


# --- Cloud ----------------------------------------------------------------------------------


def test_cloud_session_by_seed_004s_memory_store_ids(cloud: httpx.Client) -> None:
    first, second = cloud_store(cloud, description="one"), cloud_store(cloud)
    body = {"agent": "agent_xxx", "memory_store_ids": [first["id"], second["id"]]}
    session = ok(cloud.post("/sessions", json=body), 201)
    wire.Session.model_validate(session)
    assert [(r["memory_store_id"], r["access"], r["mount_path"]) for r in session["resources"]] == [
        (first["id"], "read_write", None),
        (second["id"], "read_write", None),
    ]
    assert session["resources"][0]["description"] == "one" and session["environment_id"] is None
    assert ok(cloud.get(f"/sessions/{session['id']}")) == session


def test_cloud_session_by_the_sdks_resources(cloud: httpx.Client) -> None:
    store = cloud_store(cloud)
    given = resource(store["id"], access="read_only", instructions="only look", mount_path="../anything")
    session = new_session(cloud, [given], 201)
    attached = session["resources"][0]
    assert (attached["access"], attached["instructions"], attached["mount_path"]) == (
        "read_only",
        "only look",
        "../anything",  # returned as given: the reference does not check it, a client must
    )
    both = {"agent": "a", "memory_store_ids": [store["id"]], "resources": [resource(store["id"])]}
    expect_error(cloud.post("/sessions", json=both), 400, field="memory_store_ids")
    nine = [cloud_store(cloud)["id"] for _ in range(9)]
    expect_error(
        cloud.post("/sessions", json={"agent": "a", "memory_store_ids": nine}), 400, field="resources"
    )
    archived = cloud_store(cloud)
    ok(cloud.post(f"/memory_stores/{archived['id']}/archive"))
    expect_error(cloud.post("/sessions", json={"agent": "a", "memory_store_ids": [archived["id"]]}), 409)


# --- writing as a session -------------------------------------------------------------------


def test_writes_as_a_session_carry_its_actor(agent: httpx.Client, cloud: httpx.Client) -> None:
    for client, prefix, listing, status in (
        (agent, "/", "memory_versions", 200),
        (cloud, "", "versions", 201),
    ):
        store = (anthropic_store if client is agent else cloud_store)(client)
        session = new_session(client, [resource(store["id"])], status)
        as_session = {SESSION_HEADER: session["id"]}
        memory = ok(
            client.post(
                f"/memory_stores/{store['id']}/memories",
                json={"path": prefix + "s.md", "content": "by the session"},
                headers=as_session,
            ),
            status,
        )
        ok(
            client.post(
                f"/memory_stores/{store['id']}/memories", json={"path": prefix + "k.md", "content": "key"}
            ),
            status,
        )
        url = f"/memory_stores/{store['id']}/{listing}"
        mine = ok(client.get(url, params={"session_id": session["id"]}))["data"]
        assert [v["memory_id"] for v in mine] == [memory["id"]]
        assert mine[0]["created_by"] == {"type": "session_actor", "session_id": session["id"]}
        everything = ok(client.get(url))["data"]
        assert {v["created_by"]["type"] for v in everything} == {"session_actor", "api_actor"}
        ok(client.delete(f"/memory_stores/{store['id']}/memories/{memory['id']}", headers=as_session))
        assert len(ok(client.get(url, params={"session_id": session["id"]}))["data"]) == 2


def test_a_session_writes_only_where_it_may(agent: httpx.Client, forward: httpx.Client) -> None:
    writable, read_only, unattached = (anthropic_store(agent) for _ in range(3))
    session = new_session(agent, [resource(writable["id"]), resource(read_only["id"], access="read_only")])

    def write(store: dict[str, Any], session_id: str) -> httpx.Response:
        body = {"path": "/x.md", "content": "x"}
        return agent.post(
            f"/memory_stores/{store['id']}/memories", json=body, headers={SESSION_HEADER: session_id}
        )

    expect_error(write(read_only, session["id"]), 400, field=SESSION_HEADER)
    expect_error(write(unattached, session["id"]), 400, field=SESSION_HEADER)
    expect_error(write(writable, "sesn_unknown"), 400, field=SESSION_HEADER)
    expect_error(write(writable, ""), 400, field=SESSION_HEADER)
    store = forward_store(forward)
    refused = forward.post(
        f"/memory_stores/{store['id']}/memories",
        json={"path": "x.md", "content": "x"},
        headers={SESSION_HEADER: session["id"]},
    )
    expect_error(refused, 400, field=SESSION_HEADER)  # Forward has no sessions, and a session its dialect
    for store_id in (read_only["id"], unattached["id"], writable["id"]):
        assert ok(agent.get(f"/memory_stores/{store_id}/memory_versions"))["data"] == []
    ok(write(writable, session["id"]))


# --- seeded sessions ------------------------------------------------------------------------

SEEDED = {
    "stores": [
        {
            "dialect": "anthropic",
            "name": "Team Notes",
            "memories": [
                {
                    "path": "/a.md",
                    "history": [
                        {"op": "create", "content": "before", "at": "2026-05-01T09:00:00Z"},
                        {
                            "op": "update",
                            "content": "by the session",
                            "at": "2026-05-01T10:00:00.001Z",
                            "actor": {"type": "session_actor", "session_id": "sesn_seeded"},
                        },
                    ],
                }
            ],
            "archived_at": "2026-06-01T00:00:00Z",
        },
        {"dialect": "cloud", "name": "flat", "description": "attached flat"},
        {"dialect": "cloud", "name": "placed", "description": "attached at a given mount path"},
    ],
    "sessions": [
        {
            "dialect": "anthropic",
            "id": "sesn_seeded",
            "created_at": "2026-05-01T10:00:00Z",
            "stores": [{"store": "Team Notes", "instructions": "Read first."}],
        },
        {
            "dialect": "cloud",
            "id": "sesn_cloud_seeded",
            "created_at": "2026-05-02T00:00:00Z",
            "stores": [
                {"store": "flat", "access": "read_only"},
                {"store": "placed", "mount_path": "/data/x"},
            ],
        },
    ],
}


def test_a_seed_makes_sessions_at_chosen_times(server_factory: Any, tmp_path: Path) -> None:
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps(SEEDED), encoding="utf-8")
    server = server_factory("--seed", str(seed))
    with dialect_client(server, "/v1", api_key=True) as agent:
        agent.headers.update(BETA)
        session = ok(agent.get("/sessions/sesn_seeded"))
        assert session["created_at"] == "2026-05-01T10:00:00.000Z"
        (attached,) = session["resources"]
        assert (attached["name"], attached["mount_path"], attached["instructions"]) == (
            "Team Notes",
            "/mnt/memory/team-notes",
            "Read first.",
        )
        store_id = attached["memory_store_id"]
        # Attached before it was archived, and the session's writes are its versions.
        assert ok(agent.get(f"/memory_stores/{store_id}"))["archived_at"] == "2026-06-01T00:00:00.000Z"
        written = ok(
            agent.get(f"/memory_stores/{store_id}/memory_versions", params={"session_id": "sesn_seeded"})
        )
        assert [v["created_at"] for v in written["data"]] == ["2026-05-01T10:00:00.001Z"]
    with dialect_client(server, "/api/v1/cloud") as cloud:
        stores = {s["name"]: s["id"] for s in ok(cloud.get("/memory_stores"))["data"]}
        seeded = ok(cloud.get("/sessions/sesn_cloud_seeded"))
        assert seeded["created_at"] == "2026-05-02T00:00:00.000Z"
        assert [(r["memory_store_id"], r["access"], r["mount_path"]) for r in seeded["resources"]] == [
            (stores["flat"], "read_only", None),
            (stores["placed"], "read_write", "/data/x"),
        ]
        created = ok(cloud.post("/sessions", json={"agent": "a", "memory_store_ids": [stores["flat"]]}), 201)
        assert created["id"].startswith("sesn_") and created["created_at"] > "2026-05-02"


@pytest.mark.parametrize(
    ("session", "message"),
    [
        (
            {"dialect": "cloud", "stores": [{"store": "nowhere"}]},
            "sessions[1].stores[0].store: no cloud store named 'nowhere'",
        ),
        (
            {"dialect": "anthropic", "stores": [{"store": "twice"}]},
            "several anthropic stores are named 'twice'",
        ),
        (
            {"dialect": "anthropic", "stores": [{"store": "old"}]},
            "'old' is archived before the session begins",
        ),
        (
            {
                "dialect": "anthropic",
                "created_at": "2026-01-01T00:00:00Z",
                "stores": [{"store": "x", "mount_path": "/m"}],
            },
            "mount_path: Anthropic derives mount paths",
        ),
        ({"dialect": "cloud", "id": "sesn_same"}, "sessions[1]: session sesn_same exists already"),
    ],
)
def test_a_bad_seeded_session_is_named(session: dict[str, Any], message: str, tmp_path: Path) -> None:
    stores = [
        {"dialect": "anthropic", "name": "twice"},
        {"dialect": "anthropic", "name": "twice"},
        {"dialect": "anthropic", "name": "old", "archived_at": "2026-01-01T00:00:00Z"},
        {"dialect": "anthropic", "name": "x"},
    ]
    sessions = [{"dialect": "cloud", "id": "sesn_same"}, session]
    engine = Engine(tmp_path / "seeded.sqlite3")
    try:
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_seed(engine, SeedFile.model_validate({"stores": stores, "sessions": sessions}))
        with pytest.raises(NotFound):
            engine.get_session(Dialect.CLOUD, "sesn_same")  # nothing of a bad seed stays
    finally:
        engine.close()
