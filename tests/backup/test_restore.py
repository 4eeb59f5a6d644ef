"""memsync restore: round trips into new stores (also across dialects), into existing ones, and reruns."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from memsync.api import Client, open_client
from memsync.engine.restore_plan import (
    CreateMemory,
    DeleteMemory,
    Present,
    RenameMemory,
    UpdateMemory,
    Wanted,
    plan_restore,
)
from memsync.rules import MAX_ANTHROPIC_MEMORIES, MAX_CLOUD_STORE_NAME_CHARS, Dialect, sha256_hex
from tests.backup.helpers import git, memsync, write_config
from tests.support.server import ServerProcess
from tests.support.tiers import end_to_end

MEMORIES = {
    "notes/a.md": "alpha\n",
    "notes/deep/b.md": "bee\n",
    "c.md": "sea\n",
    "émoji 🙂.md": "unicode path\n",
}


def contents(client: Client, store_id: str) -> dict[str, str]:
    found = {}
    for memory in client.list_memories(store_id):
        found[memory.path] = client.get_memory(store_id, memory.id).content or ""
    return found


@pytest.fixture(scope="module")
@end_to_end
def source(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A Forward store with history and metadata, pulled once for the module; (store id, mirror)."""
    return source_mirror(server, tmp_path_factory.mktemp("source"))


def source_mirror(server: ServerProcess, tmp_path: Path) -> tuple[str, Path]:
    """A Forward store with history and metadata, pulled; (store id, its mirror)."""
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        store = client.create_store(
            f"src-{uuid.uuid4().hex[:8]}",
            description="the team's notes",
            metadata={"team": "ops"},
            idempotency_key=str(uuid.uuid4()),
        )
        for path in MEMORIES:
            client.create_memory(
                store.id, path, "draft\n", metadata={"owner": "ana"} if "a.md" in path else None
            )
        for memory in client.list_memories(store.id):
            client.update_memory(
                store.id, memory.id, MEMORIES[memory.path], expected_sha256=sha256_hex("draft\n")
            )
    (tmp_path / "src").mkdir()
    config = write_config(tmp_path / "src", server.base_url, include=[store.id])
    done = memsync("--config", str(config), "pull", env={"MS_TOKEN": server.token})
    assert done.returncode == 0, done.stderr
    return store.id, config.parent / "mirrors" / store.id


def restore(
    config: Path, token: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return memsync(
        "--config", str(config), "restore", *args, "--json", env={"MS_TOKEN": token, **(env or {})}
    )


def entry(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    (found,) = json.loads(done.stdout)["stores"]
    assert isinstance(found, dict)
    return found


def test_a_mirror_restores_into_a_new_store_with_equal_contents_and_metadata(
    server: ServerProcess, tmp_path: Path, source: tuple[str, Path]
) -> None:
    _, mirror = source
    config = write_config(tmp_path, server.base_url)
    name = f"restored-{uuid.uuid4().hex[:6]}"
    done = restore(config, server.token, str(mirror), "--new-store", name)
    assert done.returncode == 0, done.stdout + done.stderr
    found = entry(done)
    assert found["ok"] is True and found["new_store"] is True
    assert found["planned"] == {
        "create": 4,
        "update": 0,
        "rename": 0,
        "delete": 0,
        "unchanged": 0,
        "rejected": 0,
    }
    assert "history cannot be recreated" in " ".join(found["warnings"])  # type: ignore[arg-type]
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        new = client.get_store(str(found["id"]))
        assert new.name == name and new.description == "the team's notes"
        assert new.metadata["team"] == "ops" and new.metadata["memsync-restore"]
        assert contents(client, new.id) == MEMORIES
        metadata = {m.path: m.metadata for m in client.list_memories(new.id)}
        assert metadata["notes/a.md"] == {"owner": "ana"}
        # Equal: a rerun has nothing to do and makes no second store.
        again = entry(restore(config, server.token, str(mirror), "--new-store", name))
        assert again["id"] == new.id and again["done"] == {"create": 0, "update": 0, "rename": 0, "delete": 0}
        assert [s.id for s in client.list_stores() if s.name == name] == [new.id]


def test_a_bare_backup_restores_into_another_dialect(
    server: ServerProcess, tmp_path: Path, source: tuple[str, Path]
) -> None:
    store_id, mirror = source
    backup = tmp_path / "backup.git"
    subprocess.run(["git", "init", "-q", "--bare", str(backup)], check=True)
    git(mirror, "push", "-q", str(backup), "refs/remotes/memstore/main:refs/heads/main", "memsync/metadata")
    name = f"migrated-{uuid.uuid4().hex[:6]}"
    for dialect in (Dialect.ANTHROPIC, Dialect.CLOUD):
        folder = tmp_path / dialect.value
        folder.mkdir()
        config = write_config(folder, server.base_url, dialect=dialect)
        done = restore(config, server.token, str(backup), "--new-store", name)
        assert done.returncode == 0, done.stdout + done.stderr
        with open_client(dialect, server.base_url, server.token) as client:
            assert contents(client, str(entry(done)["id"])) == MEMORIES
    assert store_id  # the source store is untouched
    warnings = " ".join(entry(done)["warnings"])  # type: ignore[arg-type]
    assert "history cannot be recreated" in warnings


def test_into_an_existing_store_fewest_writes_delete_guard_and_dry_run(
    server: ServerProcess, tmp_path: Path, source: tuple[str, Path]
) -> None:
    _, mirror = source
    config = write_config(tmp_path, server.base_url, dialect=Dialect.ANTHROPIC)
    with open_client(Dialect.ANTHROPIC, server.base_url, server.token) as client:
        target = client.create_store(f"target-{uuid.uuid4().hex[:6]}", description="made by tests")
        client.create_memory(target.id, "c.md", "sea\n")  # already right
        client.create_memory(target.id, "notes/a.md", "stale\n")  # an update
        client.create_memory(target.id, "moved/b.md", "bee\n")  # a rename to notes/deep/b.md
        for n in range(4):
            client.create_memory(target.id, f"extra/{n}.md", f"extra {n}\n")  # deletes
        dry = restore(config, server.token, str(mirror), "--into-store", target.id, "--dry-run")
        assert dry.returncode == 1
        planned = entry(dry)
        assert planned["planned"] == {
            "create": 1,
            "update": 1,
            "rename": 1,
            "delete": 4,
            "unchanged": 1,
            "rejected": 0,
        }
        assert "--force" in str(planned["error"])
        assert len(contents(client, target.id)) == 7  # nothing written
        done = restore(config, server.token, str(mirror), "--into-store", target.id, "--force")
        assert done.returncode == 0, done.stdout
        assert entry(done)["done"] == {"create": 1, "update": 1, "rename": 1, "delete": 4}
        assert contents(client, target.id) == MEMORIES
        text = memsync(
            "--config",
            str(config),
            "restore",
            str(mirror),
            "--into-store",
            target.id,
            env={"MS_TOKEN": server.token},
        )
        assert text.returncode == 0 and "0 create, 0 update, 0 rename, 0 delete, 4 unchanged" in text.stdout
        # The store existed: its own versions stay, the restore's writes follow them.
        assert "history cannot be recreated" not in text.stdout
        assert "the store keeps its own history" in text.stdout
        assert len(list(client.iter_versions(target.id))) > 7  # its first versions are still there


def test_a_dry_run_into_a_store_that_does_not_exist_prints_its_error_and_no_plan(
    server: ServerProcess, tmp_path: Path, source: tuple[str, Path]
) -> None:
    _, mirror = source
    config = write_config(tmp_path, server.base_url)
    for flags in (["--dry-run"], []):
        text = memsync(
            "--config",
            str(config),
            "restore",
            str(mirror),
            "--into-store",
            "memstore_nosuchstore",
            *flags,
            env={"MS_TOKEN": server.token},
        )
        assert text.returncode == 2, text.stdout + text.stderr
        assert "no store memstore_nosuchstore" in text.stdout
        assert "would restore" not in text.stdout and "restored" not in text.stdout
        assert "0 create" not in text.stdout and "history" not in text.stdout
        assert text.stdout.startswith(f"cannot restore {mirror} into memstore_nosuchstore\n")
        found = entry(
            restore(config, server.token, str(mirror), "--into-store", "memstore_nosuchstore", *flags)
        )
        assert found["planned"] == {} and found["warnings"] == []


def test_restore_at_an_older_commit(server: ServerProcess, tmp_path: Path, source: tuple[str, Path]) -> None:
    _, mirror = source
    first = git(mirror, "rev-list", "--reverse", "memstore/main").split()[0]
    config = write_config(tmp_path, server.base_url)
    done = restore(
        config, server.token, str(mirror), "--new-store", f"old-{uuid.uuid4().hex[:6]}", "--at", first
    )
    assert done.returncode == 0, done.stdout
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        assert contents(client, str(entry(done)["id"])) == {"notes/a.md": "draft\n"}
    unknown = restore(config, server.token, str(mirror), "--new-store", "x", "--at", "no-such-commit")
    assert unknown.returncode == 1 and "no commit 'no-such-commit'" in str(entry(unknown)["error"])
    both = memsync("--config", str(config), "restore", str(mirror), "--new-store", "x", "--into-store", "y")
    assert both.returncode == 2 and "exactly one of" in both.stderr


@pytest.mark.parametrize(
    ("dialect", "crash", "forget_record"),
    [
        (Dialect.FORWARD, "restore.write:2", False),
        (Dialect.FORWARD, "restore.store_created:1", True),  # the Idempotency-Key finds it
        (Dialect.ANTHROPIC, "restore.write:1", True),  # the metadata marker finds it
    ],
)
def test_a_rerun_of_an_interrupted_restore_makes_no_second_store(
    server: ServerProcess,
    tmp_path: Path,
    source: tuple[str, Path],
    dialect: Dialect,
    crash: str,
    forget_record: bool,
) -> None:
    _, mirror = source
    config = write_config(tmp_path, server.base_url, dialect=dialect)
    name = f"rerun-{uuid.uuid4().hex[:6]}"
    killed = restore(config, server.token, str(mirror), "--new-store", name, env={"MEMSYNC_CRASH_AT": crash})
    assert killed.returncode == -9, killed.stdout + killed.stderr
    if forget_record:
        for record in (tmp_path / "mirrors" / ".memsync" / "restores").glob("*.json"):
            record.unlink()
    done = restore(config, server.token, str(mirror), "--new-store", name)
    assert done.returncode == 0, done.stdout + done.stderr
    with open_client(dialect, server.base_url, server.token) as client:
        same_name = [s.id for s in client.list_stores() if s.name == name]
        assert same_name == [entry(done)["id"]]
        assert contents(client, same_name[0]) == MEMORIES


def test_the_planner_makes_the_fewest_writes_and_rejects_what_the_dialect_cannot_hold() -> None:
    def want(path: str, text: str, problem: str | None = None) -> Wanted:
        return Wanted(path, sha256_hex(text), problem)

    wanted = {
        w.path: w
        for w in (
            want("a", "x"),
            want("a/b", "y"),
            want("same", "s"),
            want("new", "n"),
            want("bad", "", "empty"),
        )
    }
    present = {
        p.path: p
        for p in (
            Present("same", "mem_1", sha256_hex("s")),
            Present("a/b", "mem_2", sha256_hex("old")),
            Present("elsewhere", "mem_3", sha256_hex("n")),
            Present("bad", "mem_4", sha256_hex("kept")),
        )
    }
    forward = plan_restore(wanted, present, dialect=Dialect.FORWARD, delete_others=True)
    assert forward.actions == (
        CreateMemory("a", sha256_hex("x")),
        CreateMemory("new", sha256_hex("n")),
        UpdateMemory("a/b", "mem_2", sha256_hex("old"), sha256_hex("y")),
        DeleteMemory("elsewhere", "mem_3", sha256_hex("n")),
    )
    assert [(r.path, r.reason) for r in forward.rejected] == [("bad", "empty")]
    anthropic = plan_restore(wanted, present, dialect=Dialect.ANTHROPIC, delete_others=True)
    assert anthropic.actions == (
        RenameMemory("elsewhere", "new", "mem_3", sha256_hex("n")),
        UpdateMemory("a/b", "mem_2", sha256_hex("old"), sha256_hex("y")),
    )
    assert [r.path for r in anthropic.rejected] == ["a", "bad"]
    many = {f"x{n}": Present(f"x{n}", f"mem_{n}", sha256_hex(str(n))) for n in range(4)}
    guarded = plan_restore({}, many, dialect=Dialect.FORWARD, delete_others=True, max_delete_share=0.5)
    assert guarded.refused is not None and "--force" in guarded.refused
    assert plan_restore({}, many, dialect=Dialect.FORWARD, delete_others=True, force=True).refused is None
    assert plan_restore({}, many, dialect=Dialect.FORWARD, delete_others=False).actions == ()


def _user_commit(mirror: Path, files: dict[str, str], scratch: Path) -> str:
    """A commit of ``files`` in the mirror's object store that no ref names (a commit of the user's)."""
    scratch.mkdir()
    for path, content in files.items():
        (scratch / path).parent.mkdir(parents=True, exist_ok=True)
        (scratch / path).write_text(content)
    env = {"GIT_INDEX_FILE": str(scratch.parent / "index"), "GIT_WORK_TREE": str(scratch)}
    base = ["git", f"--git-dir={mirror / '.git'}"]
    subprocess.run([*base, "add", "-A"], env={**os.environ, **env}, check=True)
    tree = subprocess.run(
        [*base, "write-tree"], env={**os.environ, **env}, check=True, capture_output=True, text=True
    )
    commit = subprocess.run(
        [*base, "commit-tree", "-m", "many", tree.stdout.strip()], check=True, capture_output=True, text=True
    )
    return commit.stdout.strip()


def test_a_restore_past_anthropics_memory_limit_writes_nothing_not_even_the_store(
    server: ServerProcess, tmp_path: Path, source: tuple[str, Path]
) -> None:
    _, mirror = source
    many = {f"m/{n:04d}.md": f"memory {n}\n" for n in range(MAX_ANTHROPIC_MEMORIES + 1)}
    commit = _user_commit(mirror, many, tmp_path / "files")
    config = write_config(tmp_path, server.base_url, dialect=Dialect.ANTHROPIC)
    name = f"too-many-{uuid.uuid4().hex[:6]}"
    for dry_run in (("--dry-run",), ()):
        done = restore(config, server.token, str(mirror), "--at", commit, "--new-store", name, *dry_run)
        assert done.returncode == 1, done.stdout + done.stderr
        found = entry(done)
        assert found["ok"] is False and found["done"] == {}
        error = str(found["error"])
        for said in ("2001 memories", "2,000", "nothing was written", "1 fewer"):
            assert said in error, error
    with open_client(Dialect.ANTHROPIC, server.base_url, server.token) as client:
        assert [s.id for s in client.list_stores(include_archived=True) if s.name == name] == []


def test_a_cloud_restore_keeps_the_description_says_the_source_without_one_and_checks_the_name(
    server: ServerProcess, tmp_path: Path, source: tuple[str, Path]
) -> None:
    _, described = source
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        bare = client.create_store(f"bare-{uuid.uuid4().hex[:6]}", idempotency_key=str(uuid.uuid4()))
        client.create_memory(bare.id, "a.md", "alpha\n")
    (tmp_path / "src").mkdir()
    pulled = memsync(
        "--config",
        str(write_config(tmp_path / "src", server.base_url, include=[bare.id])),
        "pull",
        env={"MS_TOKEN": server.token},
    )
    assert pulled.returncode == 0, pulled.stderr
    undescribed = tmp_path / "src" / "mirrors" / bare.id
    config = write_config(tmp_path, server.base_url, dialect=Dialect.CLOUD)
    with open_client(Dialect.CLOUD, server.base_url, server.token) as client:
        kept = entry(
            restore(config, server.token, str(described), "--new-store", f"kept-{uuid.uuid4().hex[:6]}")
        )
        assert kept["ok"] is True, kept["error"]
        assert client.get_store(str(kept["id"])).description == "the team's notes"
        said = entry(
            restore(config, server.token, str(undescribed), "--new-store", f"said-{uuid.uuid4().hex[:6]}")
        )
        assert said["ok"] is True, said["error"]
        description = client.get_store(str(said["id"])).description
        assert description.startswith(f"Restored by memsync from store {bare.name} ({bare.id}) at commit ")
        assert str(said["commit"])[:12] in description
        # Cloud trims a name and allows 64 characters of it: a longer one is refused before any write.
        stores = len(list(client.list_stores(include_archived=True)))
        long_name = "n" * (MAX_CLOUD_STORE_NAME_CHARS + 1)
        refused = restore(config, server.token, str(described), "--new-store", long_name)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        error = str(entry(refused)["error"])
        assert "65 characters" in error and "at most 64" in error and "--new-store" in error
        assert len(list(client.list_stores(include_archived=True))) == stores
        trimmed = entry(restore(config, server.token, str(described), "--new-store", f"  {'t' * 64}  "))
        assert trimmed["ok"] is True and client.get_store(str(trimmed["id"])).name == "t" * 64
