"""memsync push, sync, status and resolve as a user runs them: subprocesses, real server, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memsync.api import open_client
from memsync.daemon._state import StoreState, write_state
from memsync.rules import Dialect
from tests.support.server import ServerProcess

# Every test here runs the memsync CLI as a process.
pytestmark = pytest.mark.e2e

BASE = "line 1\nline 2\nline 3\n"


def memsync(
    *args: str, config: Path, token: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memsync", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        env={**os.environ, "MS_TOKEN": token},
        cwd=cwd,
        timeout=120,
    )


def stores_of(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    found = json.loads(done.stdout)["stores"]
    assert isinstance(found, list)
    return found


@pytest.fixture
def setup(server: ServerProcess, tmp_path: Path) -> tuple[Path, str, Path]:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        store = client.create_store(f"cli-push-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()))
        client.create_memory(store.id, "notes/p.md", BASE)
        for i in range(4):
            client.create_memory(store.id, f"m{i}.md", f"memory {i}\n")
    config = tmp_path / "memsync.toml"
    config.write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{server.base_url}"\ntoken_env = "MS_TOKEN"\n'
        f'[mirror]\nroot = "{tmp_path / "mirrors"}"\n[stores]\ninclude = ["{store.id}"]\n'
    )
    return config, store.id, tmp_path / "mirrors" / store.id


def test_conflict_status_resolve_and_sync(setup: tuple[Path, str, Path], server: ServerProcess) -> None:
    config, store_id, repo = setup
    first = memsync("sync", "--json", config=config, token=server.token)
    assert first.returncode == 0, first.stderr
    (repo / "notes" / "p.md").write_text(BASE.replace("line 2", "line 2 local"))
    (repo / "bad.md").write_bytes(b"\xff\n")
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        memory = client.find_memory(store_id, "notes/p.md")
        assert memory is not None
        client.update_memory(
            store_id,
            memory.id,
            BASE.replace("line 2", "line 2 remote"),
            expected_sha256=memory.content_sha256,
        )

    pushed = memsync("push", "--json", config=config, token=server.token)
    assert pushed.returncode == 4, pushed.stderr
    (entry,) = stores_of(pushed)
    assert entry["ok"] is True and entry["conflicts"] == [{"path": "notes/p.md"}]
    assert [r["path"] for r in entry["rejected"]] == ["bad.md"]

    status = memsync("status", "--json", config=config, token=server.token)
    assert status.returncode == 4, status.stderr
    (mirror,) = stores_of(status)
    assert mirror["id"] == store_id and mirror["ok"] is True
    assert [c["path"] for c in mirror["conflicts"]] == ["notes/p.md"]
    assert mirror["conflicts"][0]["ref"].startswith("refs/memsync/conflicts/")
    assert mirror["rejected"] == [{"path": "bad.md", "reason": mirror["rejected"][0]["reason"]}]
    assert "UTF-8" in mirror["rejected"][0]["reason"]
    assert mirror["daemon"] is None

    text = memsync("status", config=config, token=server.token)
    assert "conflict: notes/p.md" in text.stdout and "memsync resolve notes/p.md" in text.stdout

    # From outside any mirror, PATH is relative to the root of the mirror that has the conflict.
    both = memsync("resolve", "notes/p.md", "--ours", "--theirs", config=config, token=server.token)
    assert both.returncode == 2 and "exclude each other" in both.stderr
    unknown = memsync("resolve", "nowhere.md", config=config, token=server.token, cwd=config.parent)
    assert unknown.returncode == 1 and "no mirror" in unknown.stderr
    resolved = memsync(
        "resolve", "notes/p.md", "--theirs", config=config, token=server.token, cwd=config.parent
    )
    assert resolved.returncode == 0, resolved.stderr
    assert "resolved notes/p.md with the store's content" in resolved.stdout
    (repo / "bad.md").unlink()

    synced = memsync("sync", "--json", config=config, token=server.token)
    assert synced.returncode == 0, synced.stderr
    (entry,) = stores_of(synced)
    assert entry["conflicts"] == [] and entry["rejected"] == [] and entry["error"] is None
    assert (repo / "notes" / "p.md").read_text() == BASE.replace("line 2", "line 2 remote")


def test_dry_run_then_delete_guard_and_force(setup: tuple[Path, str, Path], server: ServerProcess) -> None:
    config, store_id, repo = setup
    assert memsync("sync", config=config, token=server.token).returncode == 0
    for i in range(3):
        (repo / f"m{i}.md").unlink()
    (repo / "new.md").write_text("new\n")

    dry = memsync("push", "--dry-run", "--json", config=config, token=server.token)
    assert dry.returncode == 4, dry.stderr
    (entry,) = stores_of(dry)
    outcomes = {p["path"]: p["outcome"] for p in entry["predicted"]}
    assert outcomes == {"new.md": "push", "m0.md": "withheld", "m1.md": "withheld", "m2.md": "withheld"}

    refused = memsync("push", config=config, token=server.token)
    assert refused.returncode == 4
    assert "withheld: m0.md" in refused.stdout and "--force" in refused.stdout
    assert "pushed: create new.md" in refused.stdout

    forced = memsync("push", "--force", "--json", config=config, token=server.token)
    assert forced.returncode == 0, forced.stderr
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        assert sorted(m.path for m in client.list_memories(store_id)) == ["m3.md", "new.md", "notes/p.md"]


def test_status_shows_the_daemon_state(setup: tuple[Path, str, Path], server: ServerProcess) -> None:
    config, store_id, repo = setup
    assert memsync("sync", config=config, token=server.token).returncode == 0
    now = datetime.now(UTC)
    write_state(
        repo,
        StoreState(
            store_id=store_id,
            name="x",
            status="idle",
            daemon_pid=os.getpid(),
            daemon_started_at=now - timedelta(minutes=5),
            updated_at=now,
            last_success=now - timedelta(seconds=90),
            next_run=now + timedelta(minutes=4),
        ),
    )
    done = memsync("status", "--json", config=config, token=server.token)
    assert done.returncode == 0, done.stderr
    (mirror,) = stores_of(done)
    daemon = mirror["daemon"]
    assert daemon["running"] is True and daemon["status"] == "idle" and daemon["paused"] is False
    assert 89 <= daemon["lag_seconds"] < 200
    assert daemon["last_success"].endswith("Z") and daemon["next_run"] is not None
    assert mirror["conflicts"] == [] and mirror["rejected"] == [] and mirror["pending"] == []


def test_a_rejected_file_stays_where_it_is_and_a_respelling_is_named(
    setup: tuple[Path, str, Path], server: ServerProcess
) -> None:
    """A file the store refuses is never moved, renamed or rewritten; once its content is in the
    store, memsync moves it to its spelling and says so, old -> new and why, in text and JSON. The
    daemon's watcher does not take the move for an edit."""
    from memsync.daemon._baseline import CheckoutBaseline

    config, _, repo = setup
    assert memsync("sync", config=config, token=server.token).returncode == 0
    (repo / "nul.md").write_bytes(b"a NUL \x00 byte\n")
    (repo / "pad ").mkdir()
    (repo / "pad " / "x.md").write_text("folder ends in a space\n")
    (repo / "what?.md").write_text("a question\n")
    refused = memsync("sync", "--json", config=config, token=server.token)
    assert refused.returncode == 4, refused.stderr
    (entry,) = stores_of(refused)
    assert sorted(r["path"] for r in entry["rejected"]) == ["nul.md", "pad /x.md"]
    assert (repo / "nul.md").read_bytes() == b"a NUL \x00 byte\n"
    assert (repo / "pad " / "x.md").read_text() == "folder ends in a space\n"
    assert not (repo / "%6Eul.md").exists() and not (repo / "pad%20").exists()
    # Pushed, then moved to its spelling: named with the reason.
    (respelled,) = entry["push"]["respelled"]
    assert respelled["path"] == "what?.md" and respelled["to"] == "what%3F.md"
    assert "one of < > :" in respelled["reason"]
    assert (repo / "what%3F.md").read_text() == "a question\n"

    (repo / "nul.md").write_text("no NUL now\n")
    fixed = memsync("sync", config=config, token=server.token)
    assert fixed.returncode == 4, fixed.stderr  # pad /x.md still waits
    assert "respelled: nul.md -> %6Eul.md: its name holds what Windows" in fixed.stdout
    assert (repo / "%6Eul.md").read_text() == "no NUL now\n" and not (repo / "nul.md").exists()
    baseline = CheckoutBaseline(repo)
    try:
        assert baseline.changed(["nul.md", "%6Eul.md", "what?.md", "what%3F.md"]) == []
    finally:
        baseline.close()


def _advice(text: str, start: str) -> str:
    """The shell command a line of ``memsync status`` gives after ``start``."""
    (line,) = [line for line in text.splitlines() if line.strip().startswith(start)]
    return line.split(": ", 1)[1]


def test_status_gives_the_whole_discard_and_following_it_leaves_nothing_to_push(
    setup: tuple[Path, str, Path], server: ServerProcess
) -> None:
    config, store_id, repo = setup
    assert memsync("sync", config=config, token=server.token).returncode == 0
    (repo / "m0.md").write_text("changed\n")
    (repo / "fresh").mkdir()
    (repo / "fresh" / "new.md").write_text("a new file, never added\n")
    (repo / "staged.md").write_text("staged\n")
    subprocess.run(["git", "-C", str(repo), "add", "staged.md"], check=True)

    text = memsync("status", config=config, token=server.token)
    assert text.returncode == 0, text.stderr
    assert "3 change(s) to push" in text.stdout
    discard = _advice(text.stdout, "to discard your local changes")
    assert "git clean" in discard  # a reset alone leaves the new files, and the next sync pushes them
    subprocess.run(discard, shell=True, check=True, capture_output=True)

    after = memsync("status", "--json", config=config, token=server.token)
    (mirror,) = stores_of(after)
    assert mirror["pending"] == [] and mirror["rejected"] == []
    assert "to discard" not in memsync("status", config=config, token=server.token).stdout
    synced = memsync("sync", "--json", config=config, token=server.token)
    (entry,) = stores_of(synced)
    assert entry["push"]["pushed"] == []
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        paths = sorted(m.path for m in client.list_memories(store_id))
    assert paths == ["m0.md", "m1.md", "m2.md", "m3.md", "notes/p.md"]
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert "git reset --hard memstore/main && git clean -fd" in readme


def test_kept_local_commits_leave_status_once_the_store_has_them(
    setup: tuple[Path, str, Path], server: ServerProcess
) -> None:
    config, _, repo = setup
    assert memsync("sync", config=config, token=server.token).returncode == 0
    (repo / "m0.md").write_text("committed, then synced\n")
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "mine"], check=True)
    synced = memsync("sync", "--json", config=config, token=server.token)
    (entry,) = stores_of(synced)
    assert entry["kept_commits"] and entry["kept_commits"].startswith("refs/memsync/pushed/")
    # Its content is in the store's history now: nothing is kept that the store lacks.
    (mirror,) = stores_of(memsync("status", "--json", config=config, token=server.token))
    assert mirror["kept_commits"] == []
    assert "kept local commits" not in memsync("status", config=config, token=server.token).stdout

    # A commit holding a file the store refuses keeps content the store lacks: named, with the
    # command that drops it, until it is dropped.
    (repo / "m1.md").write_text("pushed\n")
    (repo / "bad.md").write_bytes(b"\xff\n")
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "with a bad file"], check=True)
    second = memsync("sync", "--json", config=config, token=server.token)
    (entry,) = stores_of(second)
    kept = entry["kept_commits"]
    assert kept and [r["path"] for r in entry["rejected"]] == ["bad.md"]
    (mirror,) = stores_of(memsync("status", "--json", config=config, token=server.token))
    assert mirror["kept_commits"] == [kept]
    text = memsync("status", config=config, token=server.token).stdout
    drop = _advice(text, "kept local commits").split("drop them: ", 1)[1].rstrip(")")
    subprocess.run(drop, shell=True, check=True, capture_output=True)
    (mirror,) = stores_of(memsync("status", "--json", config=config, token=server.token))
    assert mirror["kept_commits"] == []


def _conflict_at(config: Path, store_id: str, repo: Path, token: str, path: str, url: str) -> None:
    """An edit of ``path`` on each side, on the same line: the sync records a conflict."""
    (repo / path).write_text(f"{path} here\n")
    with open_client(Dialect.FORWARD, url, token) as client:
        memory = client.find_memory(store_id, path)
        assert memory is not None
        client.update_memory(store_id, memory.id, f"{path} there\n", expected_sha256=memory.content_sha256)
    done = memsync("sync", "--json", config=config, token=token)
    assert done.returncode == 4, done.stdout + done.stderr
    assert path in [c["path"] for c in stores_of(done)[0]["conflicts"]]


def test_resolve_says_whether_anything_is_left_to_send(
    setup: tuple[Path, str, Path], server: ServerProcess
) -> None:
    config, store_id, repo = setup
    assert memsync("sync", config=config, token=server.token).returncode == 0
    _conflict_at(config, store_id, repo, server.token, "m0.md", server.base_url)
    _conflict_at(config, store_id, repo, server.token, "m1.md", server.base_url)

    theirs = memsync("resolve", "m0.md", "--theirs", config=config, token=server.token, cwd=repo)
    assert theirs.returncode == 0, theirs.stderr
    assert "with the store's content" in theirs.stdout and "nothing is left to send" in theirs.stdout
    assert "sends it" not in theirs.stdout
    ours = memsync("resolve", "m1.md", "--ours", config=config, token=server.token, cwd=repo)
    assert ours.returncode == 0, ours.stderr
    assert "the next memsync push or sync sends it" in ours.stdout

    synced = memsync("sync", "--json", config=config, token=server.token)
    assert synced.returncode == 0, synced.stdout + synced.stderr
    (entry,) = stores_of(synced)
    assert [p["path"] for p in entry["push"]["pushed"]] == ["m1.md"]  # m0.md had nothing to send


def test_push_and_sync_name_the_memory_path_beside_its_spelling(
    setup: tuple[Path, str, Path], server: ServerProcess
) -> None:
    config, store_id, repo = setup
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        client.create_memory(store_id, "a:b.md", "one\n")
    assert memsync("sync", config=config, token=server.token).returncode == 0
    (repo / "a%3Ab.md").write_text("two\n")
    (repo / "m0.md").write_text("zero\n")
    pushed = memsync("push", "--json", config=config, token=server.token)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    (entry,) = stores_of(pushed)
    expected = [
        {"path": "a%3Ab.md", "memory_path": "a:b.md", "action": "update"},
        {"path": "m0.md", "memory_path": "m0.md", "action": "update"},
    ]
    assert sorted(entry["pushed"], key=lambda e: e["path"]) == expected
    assert sorted(entry["push"]["pushed"], key=lambda e: e["path"]) == expected

    (repo / "a%3Ab.md").write_text("three\n")
    (repo / "%63on.md").write_text("new\n")
    text = memsync("sync", config=config, token=server.token)
    assert text.returncode == 0, text.stdout + text.stderr
    assert "pushed 2 change(s)" in text.stdout
    assert "pushed: update a%3Ab.md (memory a:b.md)" in text.stdout
    assert "pushed: create %63on.md (memory con.md)" in text.stdout
    (entry,) = stores_of(memsync("sync", "--json", config=config, token=server.token))
    assert entry["pushed"] == [] and entry["push"]["pushed"] == []
