"""memsync backup against the real server, with real bare repositories (and git http-backend) as remotes."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from memsync.api import Client, Operation, Store, open_client
from memsync.errors import ConfigError
from memsync.mirror import BackupTarget
from memsync.rules import Dialect
from memsync.sync.backup import check_template, expand, slug
from tests.backup.helpers import blob_id, git, has_object, memsync, stores_json, write_config
from tests.backup.smart_http import smart_http
from tests.support.server import ServerProcess

SECRET = "token=ghp_0123456789abcdef\n"


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Client]:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as c:
        yield c


def new_store(client: Client, prefix: str = "bk") -> Store:
    store = client.create_store(
        f"{prefix}-{uuid.uuid4().hex[:8]}", metadata={"team": "ops"}, idempotency_key=str(uuid.uuid4())
    )
    client.create_memory(store.id, "notes/a.md", "alpha\n", metadata={"owner": "ana"})
    client.create_memory(store.id, "b.md", "bee\n")
    return store


@pytest.mark.e2e
def test_backup_creates_a_bare_repository_that_clones_to_the_memories(
    client: Client, server: ServerProcess, tmp_path: Path
) -> None:
    store = new_store(client)
    config = write_config(tmp_path, server.base_url, include=[store.id], remotes=["backups/{store_id}.git"])
    token = {"MS_TOKEN": server.token}
    done = memsync("--config", str(config), "backup", "--json", env=token)
    assert done.returncode == 0, done.stderr
    entry = stores_json(done)[store.id]
    assert entry["ok"] and entry["imported"] == 2 and entry["refs_pushed"] == 3
    (remote,) = entry["remotes"]
    backup = tmp_path / "backups" / f"{store.id}.git"
    assert remote["url"] == str(backup) and remote["created"] is True
    assert {ref["remote"]: ref["status"] for ref in remote["refs"]} == {
        "refs/heads/main": "created",
        "refs/heads/memsync/metadata": "created",
        "refs/memsync/base": "created",
    }
    assert git(backup, "rev-parse", "--is-bare-repository").strip() == "true"
    mirror = tmp_path / "mirrors" / store.id
    assert git(backup, "rev-parse", "main").strip() == git(mirror, "rev-parse", "memstore/main").strip()
    subprocess.run(["git", "clone", "-q", str(backup), str(tmp_path / "clone")], check=True)
    assert (tmp_path / "clone" / "notes" / "a.md").read_text() == "alpha\n"
    assert (tmp_path / "clone" / "b.md").read_text() == "bee\n"
    git(backup, "fsck", "--strict")
    # The next run is up to date; after a change it fast-forwards.
    again = stores_json(memsync("--config", str(config), "backup", "--json", env=token))[store.id]
    assert again["refs_pushed"] == 0
    assert {ref["status"] for ref in again["remotes"][0]["refs"]} == {"up-to-date"}
    client.create_memory(store.id, "c.md", "sea\n")
    third = memsync("--config", str(config), "backup", env=token)
    assert third.returncode == 0, third.stderr
    # main, refs/memsync/base and the metadata branch (the new memory's document).
    assert "3 updated" in third.stdout and "imported 1 version(s)" in third.stdout
    assert git(backup, "show", "main:c.md") == "sea\n"


@pytest.mark.e2e
def test_archived_and_deleted_stores_are_backed_up(
    client: Client, server: ServerProcess, tmp_path: Path
) -> None:
    archived = new_store(client, "archived")
    client.archive_store(archived.id)
    deleted = new_store(client, "deleted")
    config = write_config(
        tmp_path,
        server.base_url,
        include=[archived.id, deleted.id],
        remotes=["file://" + str(tmp_path / "b/{name}")],
    )
    token = {"MS_TOKEN": server.token}
    # A store pulled once, then deleted remotely: its last mirror still goes to the backup.
    assert memsync("--config", str(config), "pull", deleted.id, env=token).returncode == 0
    httpx.delete(
        f"{server.base_url}/api/v1/forward/memory_stores/{deleted.id}",
        headers={"Authorization": f"Bearer {server.token}"},
    ).raise_for_status()
    done = memsync("--config", str(config), "backup", "--json", env=token)
    assert done.returncode == 0, done.stderr
    entries = stores_json(done)
    assert entries[archived.id]["archived"] is True and entries[archived.id]["imported"] == 2
    assert entries[deleted.id]["deleted_remotely"] is True and entries[deleted.id]["ok"] is True
    for store in (archived, deleted):
        backup = tmp_path / "b" / slug(store.name)
        assert git(backup, "show", "main:b.md") == "bee\n"
        assert json.loads(git(backup, "show", "memsync/metadata:store.json"))["name"] == store.name


@pytest.mark.e2e
def test_a_redaction_force_updates_the_remotes_prunes_a_local_one_and_warns_for_a_network_one(
    client: Client, server: ServerProcess, tmp_path: Path
) -> None:
    store = new_store(client)
    leak = client.create_memory(store.id, "leak.md", SECRET)
    client.update_memory(store.id, leak.id, "token=<gone>\n", expected_sha256=leak.content_sha256)
    served = tmp_path / "served"
    subprocess.run(["git", "init", "-q", "--bare", str(served / f"{store.id}.git")], check=True)
    with smart_http(served, "u", "p") as http:
        network = f"{http.base_url.replace('http://', 'http://u:p@')}/{{store_id}}.git"
        config = write_config(
            tmp_path, server.base_url, include=[store.id], remotes=["backups/{store_id}.git", network]
        )
        token = {"MS_TOKEN": server.token}
        assert memsync("--config", str(config), "backup", env=token).returncode == 0
        backup = tmp_path / "backups" / f"{store.id}.git"
        assert has_object(backup, blob_id(SECRET))
        version = next(
            v
            for v in client.iter_versions(store.id)
            if v.memory_id == leak.id and v.operation is Operation.CREATED
        )
        client.redact_version(store.id, version.id)
        done = memsync("--config", str(config), "backup", "--full-scan", "--json", env=token)
    assert done.returncode == 0, done.stderr
    entry = stores_json(done)[store.id]
    assert entry["rewrite"]["removed"] == [blob_id(SECRET)]
    local, remote = entry["remotes"]
    for pushed in (local, remote):
        statuses = {ref["remote"]: ref["status"] for ref in pushed["refs"]}
        assert statuses["refs/heads/main"] == "forced" and statuses["refs/memsync/base"] == "forced"
    assert local["pruned"] is True and local["warnings"] == []
    assert remote["pruned"] is False and "may keep the old objects" in remote["warnings"][0]
    assert not has_object(tmp_path / "mirrors" / store.id, blob_id(SECRET))
    assert not has_object(backup, blob_id(SECRET))
    mirror_tip = git(tmp_path / "mirrors" / store.id, "rev-parse", "memstore/main").strip()
    assert git(backup, "rev-parse", "main").strip() == mirror_tip
    assert git(served / f"{store.id}.git", "rev-parse", "main").strip() == mirror_tip
    git(backup, "fsck", "--strict")


@pytest.mark.e2e
def test_a_backup_that_diverged_is_not_overwritten(
    client: Client, server: ServerProcess, tmp_path: Path
) -> None:
    store = new_store(client)
    config = write_config(tmp_path, server.base_url, include=[store.id], remotes=["backups/{store_id}.git"])
    token = {"MS_TOKEN": server.token}
    assert memsync("--config", str(config), "backup", env=token).returncode == 0
    backup = tmp_path / "backups" / f"{store.id}.git"
    tree = git(backup, "rev-parse", "main^{tree}").strip()
    foreign = git(backup, "commit-tree", tree, "-p", "main", "-m", "someone else's commit").strip()
    git(backup, "update-ref", "refs/heads/main", foreign)
    client.create_memory(store.id, "c.md", "sea\n")
    done = memsync("--config", str(config), "backup", "--json", env=token)
    assert done.returncode == 1
    entry = stores_json(done)[store.id]
    assert entry["ok"] is False and "not overwritten" in entry["error"]
    assert git(backup, "rev-parse", "main").strip() == foreign


@pytest.mark.e2e
def test_two_stores_on_one_url_are_refused(client: Client, server: ServerProcess, tmp_path: Path) -> None:
    first, second = new_store(client), new_store(client)
    config = write_config(
        tmp_path,
        server.base_url,
        include=[first.id, second.id],
        remotes=["backups/all.git", "per/{store_id}.git"],
    )
    done = memsync("--config", str(config), "backup", "--json", env={"MS_TOKEN": server.token})
    assert done.returncode == 2
    entries = stores_json(done)
    for store, other in ((first, second), (second, first)):
        assert "same repository" in entries[store.id]["error"] and other.id in entries[store.id]["error"]
        # The other remote, which does not collide, still got the backup.
        assert [r["url"] for r in entries[store.id]["remotes"]] == [str(tmp_path / "per" / f"{store.id}.git")]
    assert not (tmp_path / "backups" / "all.git").exists()


@pytest.mark.e2e
def test_https_credentials_go_through_the_callback_and_never_into_config_or_output(
    client: Client, server: ServerProcess, tmp_path: Path
) -> None:
    store = new_store(client)
    served = tmp_path / "served"
    subprocess.run(["git", "init", "-q", "--bare", str(served / f"{store.id}.git")], check=True)
    password = "pa55-" + uuid.uuid4().hex
    with smart_http(served, "backup-user", password) as http:
        host = http.base_url.removeprefix("http://")
        token = {"MS_TOKEN": server.token, "BACKUP_PASSWORD": password}
        urls = {
            "in the config": f"http://backup-user:{password}@{host}/{{store_id}}.git",
            "from the environment": f"http://backup-user:${{BACKUP_PASSWORD}}@{host}/{{store_id}}.git",
        }
        for how, url in urls.items():
            folder = tmp_path / how.replace(" ", "-")
            folder.mkdir()
            config = write_config(folder, server.base_url, include=[store.id], remotes=[url])
            done = memsync("--config", str(config), "backup", "--json", env=token)
            assert done.returncode == 0, (how, done.stderr)
            entry = stores_json(done)[store.id]
            assert entry["ok"], (how, entry)
            assert entry["remotes"][0]["url"] == f"http://backup-user@{host}/{store.id}.git"
            assert password not in done.stdout + done.stderr
            mirror_config = (config.parent / "mirrors" / store.id / ".git" / "config").read_text()
            assert password not in mirror_config and host not in mirror_config
        assert git(served / f"{store.id}.git", "show", "main:b.md") == "bee\n"
        # The password travelled only in Authorization headers, never in a request line.
        assert http.refused >= 1 and all(password not in r.splitlines()[0] for r in http.requests)
        bad_url = f"http://backup-user:wrong-{password}@{host}/{{store_id}}.git"
        wrong = write_config(tmp_path, server.base_url, include=[store.id], remotes=[bad_url])
        refused = memsync("--config", str(wrong), "backup", "--json", env=token)
        assert refused.returncode == 1
        assert password not in refused.stdout + refused.stderr
        assert "credentials" in stores_json(refused)[store.id]["error"]


def test_urls_templates_and_slugs() -> None:
    assert slug("Team Notes / Q3 ..draft") == "team-notes-q3-.draft"
    assert slug("Ünïcödé ✓ name") == "unicode-name"
    assert slug("../../etc") == "etc"
    assert slug("🙂") == ""
    assert expand("/b/{name}-{store_id}.git", "memstore_1", "🙂") == "/b/memstore_1-memstore_1.git"
    with pytest.raises(ConfigError, match=r"placeholder \{id\}"):
        check_template("/b/{id}.git")
    ssh = BackupTarget.parse("git@example.com:backups/x.git")
    assert (ssh.kind, ssh.username, ssh.display) == ("ssh", "git", "git@example.com:backups/x.git")
    https = BackupTarget.parse("https://me:p%40ss@example.com:8443/r.git")
    assert https.display == "https://me@example.com:8443/r.git" and https.password == "p@ss"
    assert "p@ss" not in repr(https)
    local = BackupTarget.parse("rel/x.git", base=Path("/srv"))
    assert local.path == Path("/srv/rel/x.git") and local.kind == "local"
    assert BackupTarget.parse("file:///srv/x.git").path == Path("/srv/x.git")
