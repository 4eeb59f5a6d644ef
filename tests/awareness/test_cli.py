"""`memsync mounts`, `mount`, `unmount`, `awareness` and `status` as a user runs them (subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memsync.sync.pull import store_lock
from tests.awareness.conftest import Pair, git
from tests.support.server import ServerProcess

# Every test here runs the memsync CLI as a process.
pytestmark = pytest.mark.e2e


def memsync(config: Path, *args: str, token: str = "test-token") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memsync", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        env={**os.environ, "AW_TOKEN": token},
        timeout=120,
    )


def write_config(
    folder: Path, base_url: str, *, dialect: str = "forward", include: list[str] | None = None
) -> Path:
    config = folder / "memsync.toml"
    stores = "" if include is None else f"[stores]\ninclude = {json.dumps(include)}\n"
    config.write_text(
        f'[api]\ndialect = "{dialect}"\nbase_url = "{base_url}"\ntoken_env = "AW_TOKEN"\n'
        f'[mirror]\nroot = "mirrors"\n{stores}'
    )
    return config


def test_mounts_in_the_api_order_and_mount_unmount_change_them(pair: Pair, tmp_path: Path) -> None:
    config = write_config(tmp_path, pair.server.base_url)
    first, second = pair.store({"f.md": "f\n"}), pair.store({"s.md": "s\n"})
    done = memsync(config, "mount", pair.identity, pair.template, first.id)
    assert done.returncode == 0, done.stderr
    assert f"mounted {first.id}" in done.stdout and "read_only" in done.stdout
    assert memsync(config, "mount", pair.identity, pair.template, second.id).returncode == 0

    listed = memsync(config, "mounts", pair.identity, pair.template, "--json")
    assert listed.returncode == 0, listed.stderr
    document = json.loads(listed.stdout)
    assert document["identity"] == pair.identity and document["template"] == pair.template
    assert [(m["memory_store_id"], m["order"]) for m in document["mounts"]] == [
        (pair.default.id, 0),
        (first.id, 1),
        (second.id, 2),
    ]
    default = document["mounts"][0]
    assert set(default) == {
        "memory_store_id",
        "name",
        "access",
        "system_managed",
        "status",
        "created_at",
        "order",
    }
    assert (
        default["system_managed"] is True
        and default["access"] == "read_write"
        and default["status"] == "active"
    )
    assert document["mounts"][1]["access"] == "read_only"

    text = memsync(config, "mounts", pair.identity, pair.template)
    assert text.returncode == 0 and text.stdout.index(pair.default.id) < text.stdout.index(first.id)

    gone = memsync(config, "unmount", pair.identity, pair.template, first.id, "--json")
    assert gone.returncode == 0, gone.stderr
    assert [m["memory_store_id"] for m in json.loads(gone.stdout)["mounts"]] == [pair.default.id, second.id]
    # The default store's mount is the system's: refused, with the server's reason.
    refused = memsync(config, "unmount", pair.identity, pair.template, pair.default.id)
    assert refused.returncode == 1 and "default store" in refused.stderr
    unknown = memsync(config, "mount", pair.identity, pair.template, "memstore_nope")
    assert unknown.returncode == 1 and "memstore_nope" in unknown.stderr


def test_awareness_json_text_and_strict(pair: Pair, tmp_path: Path) -> None:
    config = write_config(tmp_path, pair.server.base_url, include=["nothing-matches-this"])
    clashing = pair.store({"shared.md": "a second shared\n", "own.md": "own\n"})
    pair.client.mount_store(pair.identity, pair.template, clashing.id)

    done = memsync(config, "awareness", pair.identity, pair.template, "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert set(document) == {
        *("kind", "identity", "template", "session", "path", "branch", "tip", "rebuilt", "mounts", "stores"),
        *("layout", "collisions", "start", "at", "wrote", "warnings"),
    }
    assert document["kind"] == "forward" and document["session"] is None and document["wrote"] is None
    assert [s["memory_store_id"] for s in document["stores"]] == [pair.default.id, clashing.id]
    view = Path(document["path"])
    assert view == tmp_path / "mirrors" / "awareness" / pair.identity / pair.template
    assert document["tip"] == git(view, "rev-parse", "main").strip() and document["rebuilt"] is False
    assert document["collisions"] == [
        {"path": "shared.md", "visible_from": pair.default.id, "shadowed": [clashing.id]}
    ]
    # Pulled although [stores] include selects neither store.
    assert (tmp_path / "mirrors" / clashing.id / "own.md").read_text() == "own\n"

    strict = memsync(config, "awareness", pair.identity, pair.template, "--strict")
    assert strict.returncode == 4, strict.stderr
    assert f"collision: shared.md: visible from {pair.default.id}; shadows {clashing.id}" in strict.stdout

    pair.client.unmount_store(pair.identity, pair.template, clashing.id)
    rebuilt = memsync(config, "awareness", pair.identity, pair.template, "--strict")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "history rebuilt: the mount list changed" in rebuilt.stdout
    again = json.loads(memsync(config, "awareness", pair.identity, pair.template, "--json").stdout)
    assert again["rebuilt"] is False and again["collisions"] == []


def test_an_edit_in_the_view_is_reported_and_never_pushed(pair: Pair, tmp_path: Path) -> None:
    mounted = pair.store({"m.md": "as the store has it\n"})
    pair.client.mount_store(pair.identity, pair.template, mounted.id)
    config = write_config(tmp_path, pair.server.base_url, include=[pair.default.id, mounted.id])
    assert memsync(config, "awareness", pair.identity, pair.template).returncode == 0
    view = tmp_path / "mirrors" / "awareness" / pair.identity / pair.template
    (view / "m.md").write_text("edited in the read-only view\n")
    (view / "new.md").write_text("a new file in the view\n")

    for command in (["push"], ["sync"]):
        ran = memsync(config, *command)
        assert ran.returncode == 0, ran.stdout + ran.stderr
    assert pair.content(mounted, "m.md") == "as the store has it\n"
    assert pair.client.find_memory(mounted.id, "new.md") is None
    assert pair.client.find_memory(pair.default.id, "new.md") is None

    status = memsync(config, "status", "--json")
    assert status.returncode == 4, status.stdout + status.stderr
    entries = json.loads(status.stdout)["stores"]
    assert {e["id"] for e in entries if not e.get("view")} == {pair.default.id, mounted.id}
    (shown,) = [e for e in entries if e.get("view")]
    assert shown["id"] == f"awareness/{pair.identity}/{pair.template}" and shown["path"] == str(view)
    assert shown["edits"] == [
        {
            "path": "m.md",
            "change": "modified",
            "store": mounted.id,
            "checkout": str(tmp_path / "mirrors" / mounted.id / "m.md"),
        },
        {"path": "new.md", "change": "added", "store": None, "checkout": None},
    ]
    text = memsync(config, "status")
    assert text.returncode == 4
    assert f"make it in the checkout of {mounted.id}" in text.stdout
    assert str(tmp_path / "mirrors" / mounted.id / "m.md") in text.stdout
    # A view is never taken for a store's mirror.
    assert not (tmp_path / "mirrors" / "awareness" / ".git").exists()


@pytest.mark.parametrize(
    ("dialect", "command"),
    [
        ("cloud", ["mounts", "i", "t"]),
        ("cloud", ["mount", "i", "t", "memstore_x"]),
        ("anthropic", ["awareness", "i", "t"]),
    ],
)
def test_other_dialects_have_no_mounts(
    server: ServerProcess, tmp_path: Path, dialect: str, command: list[str]
) -> None:
    config = write_config(tmp_path, server.base_url, dialect=dialect)
    done = memsync(config, *command, token=server.token)
    assert done.returncode == 2, done.stderr
    assert "Forward dialect only" in done.stderr


def test_a_bad_identity_is_a_usage_error(server: ServerProcess, tmp_path: Path) -> None:
    config = write_config(tmp_path, server.base_url)
    done = memsync(config, "awareness", "", "t", token=server.token)
    assert done.returncode == 2 and "IDENTITY" in done.stderr


def test_a_pull_failure_leaves_the_view_alone(pair: Pair, tmp_path: Path) -> None:
    config = write_config(tmp_path, pair.server.base_url)
    assert memsync(config, "awareness", pair.identity, pair.template).returncode == 0
    view = tmp_path / "mirrors" / "awareness" / pair.identity / pair.template
    before = git(view, "rev-parse", "main")
    pair.write(pair.default, "shared.md", "changed while the store is locked\n")
    with store_lock(tmp_path / "mirrors", pair.default.id):
        busy = memsync(config, "awareness", pair.identity, pair.template)
    assert busy.returncode == 75 and pair.default.id in busy.stderr
    assert git(view, "rev-parse", "main") == before
    assert memsync(config, "awareness", pair.identity, pair.template).returncode == 0
    assert (view / "shared.md").read_text() == "changed while the store is locked\n"


def test_a_mistyped_identity_makes_no_view(pair: Pair, tmp_path: Path) -> None:
    config = write_config(tmp_path, pair.server.base_url)
    typo = f"{pair.identity}x"  # no such identity: the API lists no mount for it
    done = memsync(config, "awareness", typo, pair.template)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "check the identity and template ids" in done.stderr and "no view was made" in done.stderr
    status = memsync(config, "status", "--json")
    assert typo not in status.stdout


def test_the_identity_template_form_takes_at(pair: Pair, tmp_path: Path) -> None:
    config = write_config(tmp_path, pair.server.base_url)
    versions = list(pair.client.iter_versions(pair.default.id))
    first = versions[-1]  # the seed wrote notes/a.md, then shared.md a second later
    done = memsync(
        config, "awareness", pair.identity, pair.template, "--at", first.created_at.isoformat(), "--json"
    )
    assert done.returncode == 0, done.stderr
    at = json.loads(done.stdout)["at"]
    assert at["ref"] == "refs/at/20260102T000000Z" and at["exact"] is True
    view = tmp_path / "mirrors" / "awareness" / pair.identity / pair.template
    listed = git(view, "ls-tree", "-r", "--name-only", at["ref"]).split()
    assert listed == ["notes/a.md"] and git(view, "rev-parse", at["ref"]).strip() == at["commit"]
    bad = memsync(config, "awareness", pair.identity, pair.template, "--at", "yesterday")
    assert bad.returncode == 2 and "RFC 3339" in bad.stderr
