"""Views of a session and of a store list (Anthropic, Cloud, Forward) against the reference server.

The oracle is the API: at a session's start (and at any ``--at`` instant) the view's tree is, file for
file, what the stores' version listings up to that instant (``created_at[lte]``) give; and git itself
answers the recipes of docs/awareness.md.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from memsync.api import Client, Store, open_client
from memsync.errors import UsageError
from memsync.mirror import encode_path
from memsync.rules import Dialect
from memsync.sync.awareness import describe_awareness, refresh_session, refresh_stores
from memsync.sync.pull import pull_store
from tests.awareness.conftest import git
from tests.awareness.test_cli import memsync, write_config
from tests.support.server import ServerProcess

SESSION_HEADER = "x-memsync-reference-session"  # the reference's own way to write as a session
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


class Sessions:
    """A client of one dialect, and plain HTTP for what a session (not memsync) does."""

    def __init__(self, server: ServerProcess, dialect: Dialect, client: Client) -> None:
        self.dialect, self.client, self.server = dialect, client, server
        if dialect is Dialect.ANTHROPIC:
            headers = {"x-api-key": server.token, "anthropic-beta": "managed-agents-2026-04-01"}
            base = "/v1"
        else:
            headers = {"Authorization": f"Bearer {server.token}"}
            base = "/api/v1/cloud"
        self.http = httpx.Client(base_url=server.base_url + base, headers=headers, timeout=10.0)

    def store(self, files: dict[str, str], name: str = "") -> Store:
        store = self.client.create_store(
            name or f"aw-{uuid.uuid4().hex[:8]}", description="an awareness test store"
        )
        for path, content in files.items():
            self.client.create_memory(store.id, path, content)
        return store

    def session(self, *stores: Store, **extra: dict[str, Any]) -> str:
        resources = [
            {"type": "memory_store", "memory_store_id": store.id, **extra.get(store.id, {})}
            for store in stores
        ]
        body = {"agent": "agent_aw", "environment_id": "env_aw", "resources": resources}
        answer = self.http.post("/sessions", json=body)
        assert answer.status_code in (200, 201), answer.text
        return str(answer.json()["id"])

    def write_as(self, session_id: str, store: Store, path: str, content: str) -> None:
        wire_path = "/" + path if self.dialect is Dialect.ANTHROPIC else path
        answer = self.http.post(
            f"/memory_stores/{store.id}/memories",
            json={"path": wire_path, "content": content},
            headers={SESSION_HEADER: session_id},
        )
        assert answer.status_code in (200, 201), answer.text

    def write(self, store: Store, path: str, content: str) -> None:
        existing = self.client.find_memory(store.id, path)
        if existing is None:
            self.client.create_memory(store.id, path, content)
        else:
            self.client.update_memory(store.id, existing.id, content, expected_sha256=None)

    def files_at(self, store: Store, instant: datetime) -> dict[str, str]:
        """The store's files at ``instant`` as its version listing up to then gives them."""
        latest: dict[str, Any] = {}
        for version in self.client.iter_versions(store.id, created_before=instant):
            latest.setdefault(version.memory_id, version)  # newest first
        files = {}
        for version in latest.values():
            if version.operation.value == "deleted" or version.path is None:
                continue
            content = self.client.get_version(store.id, version.id).content
            assert content is not None
            files[version.path] = content
        return files


@pytest.fixture(params=[Dialect.ANTHROPIC, Dialect.CLOUD], ids=["anthropic", "cloud"])
def sessions(request: pytest.FixtureRequest, server: ServerProcess) -> Iterator[Sessions]:
    dialect = request.param
    with open_client(dialect, server.base_url, server.token) as client:
        peer = Sessions(server, dialect, client)
        with peer.http:
            yield peer


def tree_at(repo: Path, commit: str) -> dict[str, str]:
    listed = git(repo, "ls-tree", "-r", "-z", "--name-only", commit).split("\0")
    return {path: git(repo, "show", f"{commit}:{path}") for path in listed if path}


def placed(folder: str, files: dict[str, str]) -> dict[str, str]:
    return {encode_path(f"{folder}/{p}" if folder else p): c for p, c in files.items()}


def test_a_session_view_is_pinned_at_its_start_byte_for_byte(sessions: Sessions, tmp_path: Path) -> None:
    root = tmp_path / "mirrors"
    notes = sessions.store({"a.md": "a before\n", "dir/b.md": "b before\n"}, name="Team Notes")
    other = sessions.store({"c.md": "c before\n"})
    mounted = {notes.id: {"access": "read_only", "instructions": "Look here first."}}
    if sessions.dialect is Dialect.CLOUD:
        mounted[notes.id]["mount_path"] = "/data/.qoder/awareness/team-notes"
    session_id = sessions.session(notes, other, **mounted)
    session = sessions.client.get_session(session_id)
    sessions.write_as(session_id, other, "by/session.md", "c by the session\n")
    sessions.write(notes, "a.md", "a after\n")

    report = refresh_session(sessions.client, root, session_id)

    view = Path(report.path)
    assert view == root / "awareness" / "sessions" / session_id
    folders = [s["folder"] for s in report.stores]
    if sessions.dialect is Dialect.ANTHROPIC:
        assert folders == ["team-notes", session.stores[1].mount_path.removeprefix("/mnt/memory/")]  # type: ignore[union-attr]
    else:
        assert folders == ["team-notes", ""]
    # The start, file for file, is what the listings up to the session's created_at give.
    assert report.start is not None and report.start["exact"] and report.start["reason"] is None
    assert report.start["instant"] == session.created_at.isoformat().replace("+00:00", "Z")
    expected = {
        **placed(folders[0], sessions.files_at(notes, session.created_at)),
        **placed(folders[1], sessions.files_at(other, session.created_at)),
    }
    start = f"refs/sessions/{session_id}/start"
    assert git(view, "rev-parse", start).strip() == report.start["commit"]
    assert tree_at(view, start) == expected
    assert "a before\n" in expected.values() and "c before\n" in expected.values()
    # What changed since it began, and what it wrote.
    changed = git(view, "diff", "--name-only", start, f"sessions/{session_id}").split()
    expected_changes = [
        f"{folders[0]}/a.md",
        f"{folders[1]}/by/session.md" if folders[1] else "by/session.md",
    ]
    assert changed == sorted(expected_changes)
    assert report.wrote is not None
    assert [(w["memory_path"], w["visible"]) for w in report.wrote] == [("by/session.md", True)]
    wrote = report.wrote[0]
    assert git(view, "show", f"{wrote['commit']}:{wrote['path']}") == "c by the session\n"
    by_session = git(view, "log", "--format=%H", f"--author={session_id}", f"sessions/{session_id}").split()
    if sessions.dialect is Dialect.ANTHROPIC:
        assert by_session == [wrote["commit"]]
    # Each store's facts, instructions in the JSON only.
    first = report.output().to_json()["stores"][0]
    assert (first["access"], first["instructions"], first["name"]) == (
        "read_only",
        "Look here first.",
        "Team Notes",
    )
    assert "Look here first." not in describe_awareness(report)


def test_nothing_visible_at_the_start_pins_the_empty_tree(sessions: Sessions, tmp_path: Path) -> None:
    empty = sessions.store({})
    session_id = sessions.session(empty)
    sessions.write_as(session_id, empty, "later.md", "after the start\n")
    report = refresh_session(sessions.client, tmp_path / "mirrors", session_id)
    view = Path(report.path)
    assert git(view, "rev-parse", f"refs/sessions/{session_id}/start^{{tree}}").strip() == EMPTY_TREE
    assert git(view, "log", "--format=%s", f"refs/sessions/{session_id}/start").strip() == "Nothing visible"
    assert report.files == 1


def test_two_sessions_share_one_repository(sessions: Sessions, tmp_path: Path) -> None:
    root = tmp_path / "mirrors"
    store = sessions.store({"x.md": "x1\n"})
    first = sessions.session(store)
    sessions.write(store, "x.md", "x2\n")
    second = sessions.session(store)
    one = refresh_session(sessions.client, root, first)
    two = refresh_session(sessions.client, root, second)
    view = Path(one.path)
    diff = git(view, "diff", f"refs/sessions/{first}/start", f"refs/sessions/{second}/start")
    assert "-x1" in diff and "+x2" in diff
    # Either checkout sees both sessions' refs: one repository.
    assert git(Path(two.path), "rev-parse", f"refs/sessions/{first}/start").strip() == one.start["commit"]  # type: ignore[index]
    assert git(view, "rev-parse", "--git-common-dir").strip() == str(root / "awareness" / "sessions.git")


def test_a_bad_mount_path_leaves_that_store_out(tmp_path: Path, server: ServerProcess) -> None:
    with open_client(Dialect.CLOUD, server.base_url, server.token) as client:
        peer = Sessions(server, Dialect.CLOUD, client)
        with peer.http:
            good, outside, dotted = (peer.store({f"{n}.md": f"{n}\n"}) for n in ("good", "out", "dots"))
            twin_a, twin_b = peer.store({"t.md": "a\n"}), peer.store({"t.md": "b\n"})
            session_id = peer.session(
                good,
                outside,
                dotted,
                twin_a,
                twin_b,
                **{
                    outside.id: {"mount_path": "/etc/passwd"},
                    dotted.id: {"mount_path": "/data/.qoder/awareness/x/../../y"},
                    twin_a.id: {"mount_path": "/data/.qoder/awareness/twin"},
                    twin_b.id: {"mount_path": "/data/.qoder/awareness/twin/"},
                },
            )
            report = refresh_session(client, tmp_path / "mirrors", session_id)
    refused = {s["memory_store_id"]: s["refused"] for s in report.stores}
    assert refused[good.id] is None
    assert "/etc/passwd" in refused[outside.id] and "'..'" in refused[dotted.id]
    assert "twin" in refused[twin_a.id] and twin_b.id in refused[twin_a.id] and refused[twin_b.id]
    assert git(Path(report.path), "ls-tree", "-r", "--name-only", "HEAD").split() == ["good.md"]
    assert sum("left out" in w for w in report.warnings) == 4


def test_cloud_collisions_first_store_in_the_given_order_wins(tmp_path: Path, server: ServerProcess) -> None:
    with open_client(Dialect.CLOUD, server.base_url, server.token) as client:
        peer = Sessions(server, Dialect.CLOUD, client)
        one, two = peer.store({"same.md": "one\n"}), peer.store({"same.md": "two\n", "own.md": "own\n"})
        for order in ([one, two], [two, one]):
            report = refresh_stores(client, tmp_path / "mirrors", [s.id for s in order])
            assert (Path(report.path) / "same.md").read_text() == ("one\n" if order[0] is one else "two\n")
            collision = report.to_json()["collisions"]
            assert collision == [{"path": "same.md", "visible_from": order[0].id, "shadowed": [order[1].id]}]


def test_anthropic_stores_each_in_a_folder_named_by_id(tmp_path: Path, server: ServerProcess) -> None:
    with open_client(Dialect.ANTHROPIC, server.base_url, server.token) as client:
        peer = Sessions(server, Dialect.ANTHROPIC, client)
        one, two = peer.store({"same.md": "one\n"}), peer.store({"same.md": "two\n"})
        report = refresh_stores(client, tmp_path / "mirrors", [one.id, two.id])
        assert report.layout is not None and "mount path" in report.layout and "unknown" in report.layout
        view = Path(report.path)
        assert tree_at(view, "HEAD") == {f"{one.id}/same.md": "one\n", f"{two.id}/same.md": "two\n"}
        assert report.collisions == []
        client.archive_store(two.id)
        with pytest.raises(UsageError, match="archived"):
            refresh_stores(client, tmp_path / "mirrors", [one.id, two.id])


def test_an_archived_store_stays_in_its_session_view(tmp_path: Path, server: ServerProcess) -> None:
    with open_client(Dialect.ANTHROPIC, server.base_url, server.token) as client:
        peer = Sessions(server, Dialect.ANTHROPIC, client)
        store = peer.store({"kept.md": "kept\n"}, name="kept")
        session_id = peer.session(store)
        client.archive_store(store.id)
        report = refresh_session(client, tmp_path / "mirrors", session_id)
    assert tree_at(Path(report.path), "HEAD") == {"kept/kept.md": "kept\n"}
    assert report.stores[0]["status"] == "archived"


@pytest.mark.e2e  # runs memsync as a process
def test_an_unknown_session_exits_2(tmp_path: Path, server: ServerProcess) -> None:
    config = write_config(tmp_path, server.base_url, dialect="anthropic")
    done = memsync(config, "awareness", "--session", "sesn_nobody", token=server.token)
    assert done.returncode == 2 and "does not know session sesn_nobody" in done.stderr
    assert not (tmp_path / "mirrors" / "awareness" / "sessions" / "sesn_nobody").exists()
    (tmp_path / "f").mkdir()
    forward = write_config(tmp_path / "f", server.base_url)
    refused = memsync(forward, "awareness", "--session", "sesn_x", token=server.token)
    assert refused.returncode == 2 and "anthropic and cloud" in refused.stderr
    both = memsync(config, "awareness", "--session", "sesn_x", "--stores", "a", token=server.token)
    assert both.returncode == 2 and "one of them" in both.stderr


@pytest.mark.e2e  # runs memsync as a process
def test_the_cli_json_and_status_offline(tmp_path: Path, server: ServerProcess) -> None:
    config = write_config(tmp_path, server.base_url, dialect="anthropic")
    with open_client(Dialect.ANTHROPIC, server.base_url, server.token) as client:
        peer = Sessions(server, Dialect.ANTHROPIC, client)
        with peer.http:
            store = peer.store({"n.md": "n\n"}, name="notes")
            session_id = peer.session(store, **{store.id: {"instructions": "secret-ish guidance"}})
            peer.write_as(session_id, store, "w.md", "written\n")
    done = memsync(config, "awareness", "--session", session_id, "--json", token=server.token)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["kind"] == "session" and document["identity"] is None and document["template"] is None
    assert document["stores"][0]["instructions"] == "secret-ish guidance"
    assert [w["path"] for w in document["wrote"]] == ["notes/w.md"]
    text = memsync(config, "awareness", "--session", session_id, token=server.token)
    assert "secret-ish guidance" not in text.stdout and f"refs/sessions/{session_id}/start" in text.stdout
    # status reads the build record: no token, no network.
    view = Path(document["path"])
    (view / "notes" / "n.md").write_text("edited in the view\n")
    status = memsync(config, "status", "--json", token="")
    entry = next(s for s in json.loads(status.stdout)["stores"] if s.get("view"))
    assert entry["kind"] == "session" and entry["session"] == session_id
    assert entry["stores"][0]["folder"] == "notes"
    assert {"ref": f"refs/sessions/{session_id}/start", "commit": document["start"]["commit"]} in entry[
        "pins"
    ]
    (edit,) = entry["edits"]
    assert edit["store"] == store.id and edit["checkout"] == str(tmp_path / "mirrors" / store.id / "n.md")
    assert status.returncode == 4


def test_at_pins_by_the_exact_created_at(tmp_path: Path, server: ServerProcess) -> None:
    with open_client(Dialect.CLOUD, server.base_url, server.token) as client:
        peer = Sessions(server, Dialect.CLOUD, client)
        store = peer.store({"t.md": "1\n"})
        for n in range(2, 5):
            peer.write(store, "t.md", f"{n}\n")
        versions = list(reversed(list(client.iter_versions(store.id))))
        root = tmp_path / "mirrors"
        report = refresh_stores(client, root, [store.id])
        view = Path(report.path)
        for version in versions:
            at = refresh_stores(client, root, [store.id], at=version.created_at).at
            assert at is not None and at["exact"]
            assert tree_at(view, at["ref"]) == placed("", peer.files_at(store, version.created_at))
        before = refresh_stores(
            client, root, [store.id], at=versions[0].created_at - timedelta(microseconds=1)
        )
        assert before.at is not None
        assert git(view, "rev-parse", f"{before.at['ref']}^{{tree}}").strip() == EMPTY_TREE
        # Every pin is still there, each by its instant.
        assert len(git(view, "for-each-ref", f"refs/at/stores/{store.id}/").splitlines()) == 5


def test_a_redaction_repins_and_prunes(tmp_path: Path, server: ServerProcess) -> None:
    secret = "the secret\n"
    with open_client(Dialect.ANTHROPIC, server.base_url, server.token) as client:
        peer = Sessions(server, Dialect.ANTHROPIC, client)
        store = peer.store({"s.md": secret}, name="vault")
        session_id = peer.session(store)
        peer.write(store, "s.md", "public now\n")
        root = tmp_path / "mirrors"
        first = refresh_session(client, root, session_id, at=datetime.now().astimezone())
        view = Path(first.path)
        blob = git(view, "rev-parse", f"refs/sessions/{session_id}/start:vault/s.md").strip()
        oldest = list(client.iter_versions(store.id))[-1]
        client.redact_version(store.id, oldest.id)
        assert pull_store(client, store, root, full_scan=True).ok  # rewrites the store's mirror
        again = refresh_session(client, root, session_id)
    assert again.rebuilt and again.start is not None and again.start["commit"] != first.start["commit"]  # type: ignore[index]
    probe = subprocess.run(["git", "-C", str(view), "cat-file", "-e", blob], capture_output=True, check=False)
    assert probe.returncode != 0, "a ref still keeps the redacted blob alive"
    (pinned,) = git(view, "for-each-ref", "--format=%(objectname)", f"refs/at/sessions/{session_id}/").split()
    assert pinned in git(view, "rev-list", f"sessions/{session_id}").split()


def test_views_of_forward_store_lists_and_at(tmp_path: Path, server: ServerProcess) -> None:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        a = client.create_store(f"aw-{uuid.uuid4().hex[:8]}", description="an awareness test store")
        b = client.create_store(f"aw-{uuid.uuid4().hex[:8]}", description="an awareness test store")
        client.create_memory(a.id, "same.md", "from a\n")
        client.create_memory(b.id, "same.md", "from b\n")
        report = refresh_stores(client, tmp_path / "mirrors", [b.id, a.id])
    assert (Path(report.path) / "same.md").read_text() == "from b\n"
    assert report.collisions[0].visible_from == b.id


def test_config_takes_each_form_where_its_dialect_has_it() -> None:
    from memsync.config import parse_config

    def config(dialect: str, *views: dict[str, Any]) -> Any:
        api = {"dialect": dialect, "base_url": "http://127.0.0.1:1", "token_env": "T"}
        return parse_config({"api": api, "mirror": {"root": "/tmp/m"}, "awareness": list(views)})

    assert [v.key for v in config("anthropic", {"session": "sesn_1"}, {"stores": ["a", "b"]}).awareness] == [
        "sessions/sesn_1",
        "stores/a,b",
    ]
    assert config("forward", {"identity": "i", "template": "t"}, {"stores": ["a"]}).awareness[0].key == "i/t"
    refusals = [
        ("cloud", {"identity": "i", "template": "t"}, "only the forward dialect"),
        ("forward", {"session": "s"}, "anthropic or cloud"),
        ("cloud", {"session": "s", "stores": ["a"]}, "exactly one"),
        ("cloud", {"identity": "i"}, "exactly one"),
        ("cloud", {"stores": []}, "each once"),
        ("cloud", {"stores": ["a"]}, "same view twice"),
    ]
    for dialect, view, message in refusals:
        views = [view, view] if message == "same view twice" else [view]
        with pytest.raises(Exception, match=message):
            config(dialect, *views)


def test_the_daemon_keeps_a_session_view_the_api_forgot(
    tmp_path: Path, server: ServerProcess, server_factory: Any
) -> None:
    with open_client(Dialect.ANTHROPIC, server.base_url, server.token) as client:
        peer = Sessions(server, Dialect.ANTHROPIC, client)
        with peer.http:
            store = peer.store({"k.md": "kept\n"}, name="kept")
            session_id = peer.session(store)

    def daemon_once(base_url: str) -> subprocess.CompletedProcess[str]:
        config = write_config(tmp_path, base_url, dialect="anthropic", include=["nothing-matches-this"])
        with config.open("a") as table:
            table.write(f'[[awareness]]\nsession = "{session_id}"\n')
        return memsync(config, "daemon", "--once", token=server.token)

    built = daemon_once(server.base_url)
    assert built.returncode == 0, built.stderr
    view = tmp_path / "mirrors" / "awareness" / "sessions" / session_id
    assert (view / "kept" / "k.md").read_text() == "kept\n"
    start = git(view, "rev-parse", f"refs/sessions/{session_id}/start").strip()

    forgetful = server_factory()  # another server: it never heard of the session
    kept = daemon_once(forgetful.base_url)
    assert kept.returncode == 0, kept.stderr
    assert f"does not know session {session_id}" in kept.stderr and "kept as last built" in kept.stderr
    assert (view / "kept" / "k.md").read_text() == "kept\n"
    assert git(view, "rev-parse", f"refs/sessions/{session_id}/start").strip() == start


def test_at_before_a_history_retention_cut_is_not_exact(tmp_path: Path, server_factory: Any) -> None:
    from tests.support.waiting import wait_for

    server = server_factory("--version-retention", "2s")
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        store = client.create_store(f"aw-{uuid.uuid4().hex[:8]}", description="an awareness test store")
        memory = client.create_memory(store.id, "a.md", "a1\n")
        created = next(iter(client.iter_versions(store.id))).created_at
        client.update_memory(store.id, memory.id, "a2\n", expected_sha256=memory.content_sha256)
        wait_for(lambda: len(list(client.iter_versions(store.id))) == 1, 30, "retention to expire a1")
        config = write_config(tmp_path, server.base_url)
        done = memsync(config, "awareness", "--stores", store.id, "--at", created.isoformat(), "--json")
        assert done.returncode == 0, done.stderr
        at = json.loads(done.stdout)["at"]
        assert at["exact"] is False and store.id in at["reason"] and "retention" in at["reason"]
        now = datetime.now().astimezone().isoformat()
        later = json.loads(memsync(config, "awareness", "--stores", store.id, "--at", now, "--json").stdout)
        assert later["at"]["exact"] is True and later["at"]["reason"] is None


@pytest.mark.e2e  # runs memsync as a process
def test_forward_at_pins_finer_than_git_dates(tmp_path: Path, server: ServerProcess) -> None:
    """`git rev-list --before` only knows whole seconds; a pin goes by the exact created_at."""
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        store = client.create_store(f"aw-{uuid.uuid4().hex[:8]}", description="an awareness test store")
        memory = client.create_memory(store.id, "t.md", "v0\n")
        sha = memory.content_sha256
        # Versions until two fall within one second: the pins tell them apart, git's dates cannot.
        for n in range(1, 40):
            sha = client.update_memory(store.id, memory.id, f"v{n}\n", expected_sha256=sha).content_sha256
            newest = list(client.iter_versions(store.id))[:2]
            if newest[0].created_at.replace(microsecond=0) == newest[1].created_at.replace(microsecond=0):
                break
        later, earlier = newest
        assert later.created_at > earlier.created_at
        config = write_config(tmp_path, server.base_url)
        done = memsync(
            config, "awareness", "--stores", store.id, "--at", earlier.created_at.isoformat(), "--json"
        )
        assert done.returncode == 0, done.stderr
        document = json.loads(done.stdout)
        view = Path(document["path"])
        content = client.get_version(store.id, earlier.id).content
        assert git(view, "show", f"{document['at']['ref']}:t.md") == content
        seconds = int(earlier.created_at.timestamp())
        coarse = git(view, "rev-list", "-1", f"--before={seconds}", document["branch"]).strip()
        assert git(view, "show", f"{coarse}:t.md") == client.get_version(store.id, later.id).content
