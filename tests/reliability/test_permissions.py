"""Owner-only by default: mirrors, their git files and local backup remotes are created 0700/0600 (or
group-readable when the config says so), and a root others can read gets one warning naming the fix.
The CLI in a subprocess against the real server; modes read back with ``os.lstat``."""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path

import pytest

from memsync.api import open_client
from memsync.rules import Dialect
from tests.backup.helpers import memsync
from tests.support.server import ServerProcess

# Every test here runs memsync as a process: killed, faulted, or on a full disk.
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def store_id(server: ServerProcess) -> str:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        store = client.create_store(f"modes-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()))
        client.create_memory(store.id, "notes/private.md", "not for other users\n")
    return store.id


def _config(folder: Path, server: ServerProcess, store_id: str, mirror_extra: str = "") -> Path:
    config = folder / "memsync.toml"
    config.write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{server.base_url}"\ntoken_env = "MS_TOKEN"\n'
        f'[mirror]\nroot = "mirrors"\n{mirror_extra}[stores]\ninclude = ["{store_id}"]\n'
        '[[backup.remotes]]\nurl = "backups/{store_id}.git"\n'
    )
    return config


def _modes(*roots: Path) -> dict[str, int]:
    """Every file and folder under ``roots`` (the roots too), by path, with its permission bits."""
    found = {}
    for root in roots:
        found[str(root)] = stat.S_IMODE(os.lstat(root).st_mode)
        for folder, dirs, files in os.walk(root):
            for name in dirs + files:
                path = os.path.join(folder, name)
                found[path] = stat.S_IMODE(os.lstat(path).st_mode)
    return found


@pytest.mark.parametrize(("setting", "forbidden"), [("", 0o077), ("group_readable = true\n", 0o027)])
def test_what_memsync_creates_is_owner_only_unless_shared_with_the_group(
    tmp_path: Path, server: ServerProcess, store_id: str, setting: str, forbidden: int
) -> None:
    # The test process's own umask is the usual 022: the modes below are memsync's doing.
    config = _config(tmp_path, server, store_id, setting)
    env = {"MS_TOKEN": server.token}
    for command in ("pull", "backup"):
        done = memsync("--config", str(config), command, env=env)
        assert done.returncode == 0, done.stderr
        assert "warning" not in done.stderr
    modes = _modes(tmp_path / "mirrors", tmp_path / "backups")
    assert len(modes) > 30  # the working tree, .git (packs, refs, config) and the bare backup
    exposed = {path: f"{mode:o}" for path, mode in modes.items() if mode & forbidden}
    assert exposed == {}
    assert modes[str(tmp_path / "mirrors" / store_id / "notes" / "private.md")] & 0o600 == 0o600
    if forbidden == 0o027:  # shared: the group reads what the owner does
        assert modes[str(tmp_path / "mirrors")] & 0o050 == 0o050


def test_a_root_others_can_read_is_named_once_with_the_fix(
    tmp_path: Path, server: ServerProcess, store_id: str
) -> None:
    root = tmp_path / "mirrors"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    config = _config(tmp_path, server, store_id)
    env = {"MS_TOKEN": server.token}
    done = memsync("--config", str(config), "sync", env=env)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "can be read by other users" in line]
    assert len(warnings) == 1 and f"chmod -R go-rwx {root}" in warnings[0], done.stderr
    # The fix it names silences it; the mirror was created owner-only all the same.
    assert stat.S_IMODE(os.lstat(root / store_id).st_mode) == 0o700
    os.chmod(root, 0o700)
    again = memsync("--config", str(config), "pull", env=env)
    assert again.returncode == 0 and "warning" not in again.stderr, again.stderr
