"""One contract, run against every dialect of the real reference server (vdirsyncer ``StorageTests`` style).

:class:`ClientContract` holds the tests; one subclass per dialect binds it. Every test makes its own
store in the session's server. Answers are lost on purpose (``LosingTransport``) to show that writes
whose outcome is unknown are settled, never doubled.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memsync.api import (
    AuthenticationError,
    Client,
    Conflict,
    MemoryVersion,
    NotFound,
    Operation,
    PathConflict,
    PreconditionFailed,
    Store,
    StoreArchived,
    TransportError,
    open_client,
)
from memsync.errors import EXIT_AUTH, RuleViolation
from memsync.rules import Dialect, sha256_hex
from tests.api.peers import FAST_RETRY, LosingTransport, writes_to
from tests.support.server import ServerProcess


def versions_of(client: Client, store: Store, memory_id: str | None = None) -> list[MemoryVersion]:
    """Every version, oldest first."""
    return list(reversed(list(client.iter_versions(store.id, memory_id=memory_id))))


class ClientContract:
    dialect: Dialect

    @pytest.fixture
    def client(self, server: ServerProcess) -> Iterator[Client]:
        with open_client(self.dialect, server.base_url, server.token, retry=FAST_RETRY) as client:
            yield client

    @pytest.fixture
    def store(self, client: Client) -> Store:
        return client.create_store(f"contract-{uuid.uuid4().hex[:8]}", description="made by tests")

    def losing_client(self, server: ServerProcess, transport: LosingTransport) -> Client:
        return open_client(self.dialect, server.base_url, server.token, retry=FAST_RETRY, transport=transport)

    # --- stores --------------------------------------------------------------------------------

    def test_store_round_trip(self, client: Client) -> None:
        name = f"round-trip-{uuid.uuid4().hex[:8]}"
        store = client.create_store(name, description="notes of team a", metadata={"team": "a"})
        fetched = client.get_store(store.id)
        assert (fetched.id, fetched.name, fetched.description) == (store.id, name, "notes of team a")
        assert fetched.metadata["team"] == "a" and not fetched.archived
        assert fetched.created_at.tzinfo is not None
        assert store.id in {s.id for s in client.list_stores()}
        assert store.id in {s.id for s in client.list_stores(system_managed=False)}
        assert store.id not in {s.id for s in client.list_stores(system_managed=True)}

    def test_archived_stores_are_listed_on_request(self, client: Client, store: Store) -> None:
        archived = client.archive_store(store.id)
        assert archived.archived and archived.archived_at is not None
        assert client.archive_store(store.id).archived  # archiving again is not an error
        assert store.id not in {s.id for s in client.list_stores()}
        assert store.id in {s.id for s in client.list_stores(include_archived=True)}

    def test_a_store_create_whose_answer_is_lost_makes_one_store(self, server: ServerProcess) -> None:
        name = f"lost-{uuid.uuid4().hex[:8]}"
        losing = LosingTransport(writes_to("POST", "/memory_stores"))
        with self.losing_client(server, losing) as client:
            store = client.create_store(name, metadata={"k": "v"}, description="made by tests")
            assert losing.lost and client.retry_count >= 1
            assert [s.id for s in client.list_stores() if s.name == name] == [store.id]

    def test_unknown_ids_are_not_found(self, client: Client, store: Store) -> None:
        with pytest.raises(NotFound) as caught:
            client.get_memory(store.id, "mem_doesnotexist")
        assert caught.value.status == 404 and caught.value.request_id
        with pytest.raises(NotFound):
            client.get_store("memstore_doesnotexist")

    def test_a_wrong_token_is_an_authentication_error(self, server: ServerProcess) -> None:
        with open_client(self.dialect, server.base_url, "wrong-token-42") as client:
            with pytest.raises(AuthenticationError) as caught:
                list(client.list_stores())
            assert client.request_count == 1
        assert caught.value.exit_code == EXIT_AUTH and caught.value.status == 401
        assert "wrong-token-42" not in str(caught.value)

    def test_the_token_never_reaches_the_logs(
        self, server: ServerProcess, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.DEBUG)
        token = server.token
        losing = LosingTransport(writes_to("POST", "/memories"))
        with self.losing_client(server, losing) as client:
            store = client.create_store(f"logs-{uuid.uuid4().hex[:8]}", description="made by tests")
            client.create_memory(store.id, "a.md", "text")
            with pytest.raises(NotFound) as caught:
                client.get_memory(store.id, "mem_nope")
        assert caplog.records and "retrying POST" in caplog.text
        assert token not in caplog.text and token not in str(caught.value) and token not in repr(client)

    # --- memories ------------------------------------------------------------------------------

    def test_memory_round_trip(self, client: Client, store: Store) -> None:
        created = client.create_memory(store.id, "notes/a.md", "hello\n")
        assert (created.path, created.content, created.content_sha256) == (
            "notes/a.md",
            "hello\n",
            sha256_hex("hello\n"),
        )
        fetched = client.get_memory(store.id, created.id)
        assert (fetched.id, fetched.path, fetched.content) == (created.id, "notes/a.md", "hello\n")
        listed = list(client.list_memories(store.id))
        assert [(m.id, m.content) for m in listed] == [(created.id, None)]
        if self.dialect is Dialect.CLOUD:
            assert fetched.version == 1
        if self.dialect is Dialect.ANTHROPIC:
            assert fetched.head_version_id == versions_of(client, store)[-1].id

    def test_update_with_a_precondition(self, client: Client, store: Store) -> None:
        memory = client.create_memory(store.id, "a.md", "one")
        updated = client.update_memory(store.id, memory.id, "two", expected_sha256=memory.content_sha256)
        assert updated.content == "two" and updated.content_sha256 == sha256_hex("two")
        with pytest.raises(PreconditionFailed) as caught:
            client.update_memory(store.id, memory.id, "three", expected_sha256=memory.content_sha256)
        assert caught.value.current_sha256 == sha256_hex("two")
        assert client.get_memory(store.id, memory.id).content == "two"
        assert client.update_memory(store.id, memory.id, "four", expected_sha256=None).content == "four"
        if self.dialect is Dialect.CLOUD:
            assert client.get_memory(store.id, memory.id).version == 3
        ops = [v.operation for v in versions_of(client, store)]
        assert ops == [Operation.CREATED, Operation.UPDATED, Operation.UPDATED]

    def test_an_update_the_store_already_holds_succeeds(self, client: Client, store: Store) -> None:
        memory = client.create_memory(store.id, "a.md", "one")
        client.update_memory(store.id, memory.id, "two", expected_sha256=memory.content_sha256)
        # The precondition is stale, but the store already holds what the caller wants.
        again = client.update_memory(store.id, memory.id, "two", expected_sha256=memory.content_sha256)
        assert again.content_sha256 == sha256_hex("two")

    def test_an_update_whose_answer_is_lost_writes_one_version(
        self, server: ServerProcess, store: Store
    ) -> None:
        losing = LosingTransport(lambda r: r.method in ("POST", "PUT") and "/memories/" in r.url.path)
        with self.losing_client(server, losing) as client:
            memory = client.create_memory(store.id, "a.md", "one")
            updated = client.update_memory(store.id, memory.id, "two", expected_sha256=memory.content_sha256)
            assert losing.lost and updated.content_sha256 == sha256_hex("two")
            assert [v.operation for v in versions_of(client, store)] == [Operation.CREATED, Operation.UPDATED]

    def test_a_create_whose_answer_is_lost_writes_one_version(
        self, server: ServerProcess, store: Store
    ) -> None:
        losing = LosingTransport(writes_to("POST", "/memories"))
        with self.losing_client(server, losing) as client:
            memory = client.create_memory(store.id, "notes/x.md", "content")
            assert losing.lost and memory.content == "content" and memory.path == "notes/x.md"
            assert [m.id for m in client.list_memories(store.id)] == [memory.id]
            assert len(versions_of(client, store)) == 1

    def test_a_taken_path_is_a_path_conflict(self, client: Client, store: Store) -> None:
        first = client.create_memory(store.id, "a/b.md", "one")
        with pytest.raises(PathConflict) as caught:
            client.create_memory(store.id, "a/b.md", "one")
        assert caught.value.path == "a/b.md" and first.id in str(caught.value)
        assert len(versions_of(client, store)) == 1

    def test_path_prefix_is_a_plain_string_prefix(self, client: Client, store: Store) -> None:
        for path in ("a/b.md", "a/bc.md", "a/b/c.md", "ab.md", "z.md"):
            client.create_memory(store.id, path, path)
        assert sorted(m.path for m in client.list_memories(store.id, "a/b")) == [
            "a/b.md",
            "a/b/c.md",
            "a/bc.md",
        ]
        assert sorted(m.path for m in client.list_memories(store.id, "a/")) == [
            "a/b.md",
            "a/b/c.md",
            "a/bc.md",
        ]
        assert sorted(m.path for m in client.list_memories(store.id, "a")) == [
            "a/b.md",
            "a/b/c.md",
            "a/bc.md",
            "ab.md",
        ]
        found = client.find_memory(store.id, "a/b.md")
        assert found is not None and found.path == "a/b.md"
        assert client.find_memory(store.id, "a/b") is None

    def test_rename_keeps_the_content(self, client: Client, store: Store) -> None:
        memory = client.create_memory(store.id, "old/name.md", "body")
        with pytest.raises(PreconditionFailed):
            client.rename_memory(store.id, memory.id, "new/name.md", expected_sha256=sha256_hex("other"))
        assert client.find_memory(store.id, "new/name.md") is None
        moved = client.rename_memory(
            store.id, memory.id, "new/name.md", expected_sha256=memory.content_sha256
        )
        assert moved.path == "new/name.md"
        assert [m.path for m in client.list_memories(store.id)] == ["new/name.md"]
        assert client.get_memory(store.id, moved.id).content == "body"
        if self.dialect is Dialect.ANTHROPIC:
            assert moved.id == memory.id  # a native rename keeps the id

    def test_a_rename_cut_off_midway_loses_nothing(
        self, client: Client, server: ServerProcess, store: Store
    ) -> None:
        memory = client.create_memory(store.id, "from.md", "keep me")
        # Forward and Cloud copy, then delete: cut the delete off and both copies stay, never neither.
        # Anthropic renames in one request: cut that off and nothing moved.
        native = self.dialect is Dialect.ANTHROPIC
        cut = LosingTransport(lambda r: r.method == ("POST" if native else "DELETE"), times=100, before=True)
        with self.losing_client(server, cut) as cut_off, pytest.raises(TransportError):
            cut_off.rename_memory(store.id, memory.id, "to.md", expected_sha256=memory.content_sha256)
        paths = {m.path: m.id for m in client.list_memories(store.id)}
        if native:
            assert paths == {"from.md": memory.id}
        else:
            assert set(paths) == {"from.md", "to.md"}
            assert {client.get_memory(store.id, i).content for i in paths.values()} == {"keep me"}

    def test_delete_with_a_precondition(self, client: Client, store: Store) -> None:
        memory = client.create_memory(store.id, "gone.md", "bye")
        with pytest.raises(PreconditionFailed):
            client.delete_memory(store.id, memory.id, expected_sha256=sha256_hex("something else"))
        assert client.get_memory(store.id, memory.id).content == "bye"
        client.delete_memory(store.id, memory.id, expected_sha256=memory.content_sha256)
        with pytest.raises(NotFound):
            client.get_memory(store.id, memory.id)
        tomb = versions_of(client, store)[-1]
        assert (tomb.operation, tomb.path, tomb.memory_id) == (Operation.DELETED, "gone.md", memory.id)
        # The path can be used again, by a new memory.
        again = client.create_memory(store.id, "gone.md", "back")
        assert again.id != memory.id

    def test_a_delete_whose_answer_is_lost_is_done(self, server: ServerProcess, store: Store) -> None:
        losing = LosingTransport(writes_to("DELETE", ""))
        with self.losing_client(server, losing) as client:
            memory = client.create_memory(store.id, "gone.md", "bye")
            client.delete_memory(store.id, memory.id, expected_sha256=memory.content_sha256)
            assert losing.lost and list(client.list_memories(store.id)) == []
            assert [v.operation for v in versions_of(client, store)] == [Operation.CREATED, Operation.DELETED]

    def test_rules_are_checked_before_sending(self, client: Client, store: Store) -> None:
        before = client.request_count
        with pytest.raises(RuleViolation):
            client.create_memory(store.id, "../escape.md", "x")
        with pytest.raises(RuleViolation):
            client.create_memory(store.id, "a.md", "bell\x07")
        with pytest.raises(RuleViolation):
            client.create_memory(store.id, "/abs.md", "x")
        assert client.request_count == before

    # --- versions ------------------------------------------------------------------------------

    def test_versions_are_listed_newest_first_and_lazily(self, client: Client, store: Store) -> None:
        memory = client.create_memory(store.id, "log.md", "v0")
        for n in range(1, 7):
            memory = client.update_memory(store.id, memory.id, f"v{n}", expected_sha256=memory.content_sha256)
        other = client.create_memory(store.id, "other.md", "o")
        listing = client.iter_versions(store.id, page_size=2)
        before = client.request_count
        newest = [next(listing) for _ in range(3)]
        assert client.request_count - before == 2 and listing.pages_fetched == 2
        assert newest[0].memory_id == other.id
        everything = [*newest, *listing]
        assert len(everything) == 8 and not listing.out_of_order
        keys = [v.order_key for v in everything]
        assert keys == sorted(keys, reverse=True)
        assert [v.operation for v in everything[1:]] == [Operation.UPDATED] * 6 + [Operation.CREATED]
        assert {v.memory_id for v in client.iter_versions(store.id, memory_id=other.id)} == {other.id}

    def test_fetch_contents_in_input_order(self, client: Client, store: Store) -> None:
        expected = []
        memory = client.create_memory(store.id, "a.md", "a0")
        expected.append("a0")
        for n in range(1, 25):
            memory = client.update_memory(store.id, memory.id, f"a{n}", expected_sha256=memory.content_sha256)
            expected.append(f"a{n}")
        client.delete_memory(store.id, memory.id, expected_sha256=memory.content_sha256)
        expected.append(None)
        oldest_first = versions_of(client, store)
        before = client.request_count
        fetched = list(client.fetch_contents(store.id, oldest_first, concurrency=4))
        assert [v.id for v, _ in fetched] == [v.id for v in oldest_first]
        assert [content for _, content in fetched] == expected
        requests = client.request_count - before
        if self.dialect is Dialect.ANTHROPIC:
            assert requests <= 4  # 25 contents, 20 per listing request
        else:
            assert requests == 25  # one per version with content; none for the tombstone

    def test_a_full_listing_carries_contents(self, client: Client, store: Store) -> None:
        for n in range(3):
            client.create_memory(store.id, f"f{n}.md", f"content {n}")
        listed = list(client.iter_versions(store.id, full=True))
        before = client.request_count
        contents = [content for _, content in client.fetch_contents(store.id, listed)]
        assert contents == ["content 2", "content 1", "content 0"]
        if self.dialect is Dialect.ANTHROPIC:
            assert all(v.content is not None for v in listed) and client.request_count == before
        else:
            assert client.request_count - before == 3

    def test_stopping_a_fetch_early_stops_its_requests(self, client: Client, store: Store) -> None:
        memory = client.create_memory(store.id, "a.md", "0")
        for n in range(1, 30):
            memory = client.update_memory(store.id, memory.id, str(n), expected_sha256=memory.content_sha256)
        oldest_first = versions_of(client, store)
        before = client.request_count
        fetch = client.fetch_contents(store.id, oldest_first, concurrency=2)
        assert next(fetch)[1] == "0"
        fetch.close()
        spent = client.request_count - before
        assert spent <= 4
        assert client.request_count - before == spent  # nothing left running after close

    def test_redaction(self, client: Client, store: Store) -> None:
        memory = client.create_memory(store.id, "secret.md", "password=hunter2")
        client.update_memory(store.id, memory.id, "password=<removed>", expected_sha256=memory.content_sha256)
        first, head = versions_of(client, store)
        redacted = client.redact_version(store.id, first.id)
        assert redacted.redacted and redacted.content is None and redacted.redacted_at is not None
        assert client.redact_version(store.id, first.id).redacted  # again: done, not an error
        fetched = dict((v.id, (v, c)) for v, c in client.fetch_contents(store.id, [first, head]))
        assert fetched[first.id][1] is None and fetched[first.id][0].redacted  # redacted since listed
        assert fetched[head.id][1] == "password=<removed>"
        assert client.get_memory(store.id, memory.id).content == "password=<removed>"
        if self.dialect is Dialect.ANTHROPIC:
            assert redacted.path is None and redacted.content_sha256 is None
            with pytest.raises(Conflict):
                client.redact_version(store.id, head.id)  # the head of a live memory
        else:
            assert redacted.path == "secret.md" and redacted.content_sha256 == first.content_sha256

    def test_a_redaction_whose_answer_is_lost_is_done(self, server: ServerProcess, store: Store) -> None:
        losing = LosingTransport(writes_to("POST", "/redact"))
        with self.losing_client(server, losing) as client:
            memory = client.create_memory(store.id, "s.md", "one")
            client.update_memory(store.id, memory.id, "two", expected_sha256=memory.content_sha256)
            first = versions_of(client, store)[0]
            assert client.redact_version(store.id, first.id).redacted and losing.lost

    # --- archived stores -----------------------------------------------------------------------

    def test_an_archived_store_is_read_only(self, client: Client, store: Store) -> None:
        memory = client.create_memory(store.id, "kept.md", "kept")
        client.update_memory(store.id, memory.id, "kept 2", expected_sha256=memory.content_sha256)
        client.archive_store(store.id)
        with pytest.raises(StoreArchived):
            client.create_memory(store.id, "new.md", "x")
        with pytest.raises(StoreArchived):
            client.update_memory(store.id, memory.id, "y", expected_sha256=sha256_hex("kept 2"))
        assert client.get_memory(store.id, memory.id).content == "kept 2"
        first, head = versions_of(client, store)
        assert [c for _, c in client.fetch_contents(store.id, [first, head])] == ["kept", "kept 2"]
        assert client.redact_version(store.id, first.id).redacted  # redaction works on archived stores

    def test_an_archive_whose_answer_is_lost_is_done(self, server: ServerProcess, store: Store) -> None:
        losing = LosingTransport(writes_to("POST", "/archive"))
        with self.losing_client(server, losing) as client:
            assert client.archive_store(store.id).archived and losing.lost


class TestForward(ClientContract):
    dialect = Dialect.FORWARD

    def test_system_managed_default_stores(self, server_factory: Any, tmp_path: Path) -> None:
        seed = tmp_path / "seed.json"
        default = {"dialect": "forward", "name": "default", "system_managed": True, "identity_id": "idn_1"}
        seed.write_text(json.dumps({"stores": [default, {"dialect": "forward", "name": "mine"}]}))
        seeded = server_factory("--seed", str(seed))
        with open_client(self.dialect, seeded.base_url, seeded.token) as client:
            assert [s.name for s in client.list_stores(system_managed=True)] == ["default"]
            assert [s.name for s in client.list_stores(system_managed=False)] == ["mine"]
            everything = {s.name: s for s in client.list_stores()}
            assert set(everything) == {"default", "mine"}
            assert everything["default"].system_managed and everything["default"].identity_id == "idn_1"

    def test_the_idempotency_key_makes_a_store_once(self, client: Client) -> None:
        name = f"idem-{uuid.uuid4().hex[:8]}"
        first = client.create_store(name, idempotency_key=f"key-{name}", description="made by tests")
        assert (
            client.create_store(name, idempotency_key=f"key-{name}", description="made by tests").id
            == first.id
        )
        by_request = client.create_store(name, request_id=f"req-{name}", description="made by tests")
        assert (
            client.create_store(name, request_id=f"req-{name}", description="made by tests").id
            == by_request.id
            != first.id
        )
        with pytest.raises(Conflict, match="Idempotency-Key"):
            client.create_store(name + "-other", idempotency_key=f"key-{name}", description="made by tests")


class TestCloud(ClientContract):
    dialect = Dialect.CLOUD

    def test_a_store_needs_a_description_and_a_short_name_checked_before_sending(
        self, client: Client
    ) -> None:
        before = len(list(client.list_stores()))
        with pytest.raises(RuleViolation, match="Field 'description' is required") as missing:
            client.create_store(f"bare-{uuid.uuid4().hex[:6]}")
        assert missing.value.field == "description"
        with pytest.raises(RuleViolation, match="at most 64") as long:
            client.create_store("n" * 65, description="d")
        assert long.value.field == "name"
        assert len(list(client.list_stores())) == before
        name = f"trimmed-{uuid.uuid4().hex[:6]}"
        assert client.create_store(f" {name} ", description="d").name == name


class TestAnthropic(ClientContract):
    dialect = Dialect.ANTHROPIC

    def test_paths_are_relative_here_and_absolute_on_the_wire(self, client: Client, store: Store) -> None:
        memory = client.create_memory(store.id, "deep/er/file.md", "x")
        assert memory.path == "deep/er/file.md"
        with pytest.raises(PathConflict):
            client.create_memory(store.id, "deep/er/file.md/child.md", "y")  # below another memory


def test_every_dialect_is_bound() -> None:
    bound = {cls.dialect for cls in ClientContract.__subclasses__()}
    assert bound == set(Dialect)
