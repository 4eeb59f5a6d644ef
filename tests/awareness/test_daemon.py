"""The daemon keeps `[[awareness]]` views current and reports their collisions on /metrics."""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsync.config import parse_config
from memsync.daemon._daemon import Daemon
from tests.awareness.conftest import Pair, git
from tests.support.waiting import wait_for


@pytest.fixture
def token_env() -> Iterator[str]:
    os.environ["AW_DAEMON_TOKEN"] = "test-token"
    yield "AW_DAEMON_TOKEN"
    del os.environ["AW_DAEMON_TOKEN"]


def test_the_daemon_refreshes_a_view_after_a_cycle_and_counts_collisions(
    pair: Pair, tmp_path: Path, token_env: str
) -> None:
    synced = pair.store({"shared.md": "shared, from the synced store\n"})
    unselected = pair.store({"u.md": "u\n"})
    for store in (synced, unselected):
        pair.client.mount_store(pair.identity, pair.template, store.id)
    root = tmp_path / "mirrors"
    config = parse_config(
        {
            "api": {"dialect": "forward", "base_url": pair.server.base_url, "token_env": token_env},
            "mirror": {"root": str(root)},
            "stores": {"include": [pair.default.id, synced.id]},
            "daemon": {"interval": "1h", "jitter": "0s", "http": {"listen": "127.0.0.1:0"}},
            "awareness": [{"identity": pair.identity, "template": pair.template}],
        }
    )
    view = root / "awareness" / pair.identity / pair.template
    daemon = Daemon(config)
    daemon.start()
    try:
        wait_for(lambda: (view / "u.md").exists() and (view / "shared.md").exists(), 60, "the first view")
        key = f"{pair.identity}/{pair.template}"
        assert daemon.awareness.wait_refreshed(key, 60)
        # The store the daemon does not sync was pulled by the refresh itself.
        assert (root / unselected.id / "u.md").exists()
        assert not daemon.watcher.watching(unselected.id)

        # An edit in the view is never pushed by the daemon's cycles.
        (view / "shared.md").write_text("edited in the view\n")
        pair.write(synced, "new.md", "written after the start\n")
        daemon.coordinator.request(synced.id, "test")
        written = view / "new.md"
        # The checkout creates the file, then fills it (as git does): wait for its content.
        wait_for(
            lambda: written.exists() and written.read_text() == "written after the start\n",
            60,
            "the view to follow the cycle",
        )
        assert pair.content(pair.default, "shared.md") == "shared, from the default store\n"
        assert pair.content(synced, "shared.md") == "shared, from the synced store\n"
        git(view, "fsck", "--strict", "--no-progress")

        assert daemon.http is not None
        address = daemon.http.address

        def metrics() -> str:
            with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as answer:
                return str(answer.read().decode())

        labels = (
            f'identity="{pair.identity}",template="{pair.template}",view="{pair.identity}/{pair.template}"'
        )
        # The files gauge follows the refresh that wrote new.md (it may still be finishing).
        wait_for(lambda: f"memsync_awareness_files{{{labels}}} 4.0" in metrics(), 30, "the files gauge")
        assert f"memsync_awareness_collisions{{{labels}}} 1.0" in metrics()
    finally:
        daemon.stop()
