"""The mirror's state database: caches and intents in one SQLite file, and older memsyncs' files."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from memsync.mirror import Mirror, Rewriter
from memsync.mirror.state import CACHES, INTENTS, State

NewMirror = Callable[..., Mirror]


def test_older_state_files_are_brought_in_once_and_then_removed(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    folder = mirror.state_dir
    mirror.close()
    (folder / "state.sqlite").unlink()
    old = "a" * 40
    legacy = {
        "superseded": f"{old}\n{'b' * 40}\n",
        "rewrite-pending": json.dumps({"versions": ["memver_1"], "blobs": {"c" * 40: "d" * 64}}),
        "backup-prune-pending": json.dumps(["/backups/one.git"]),
        "checkout-intent": json.dumps({"from": None, "to": old}),
        "checkout-pid": "4242",
        "paths.json": "{}",
        "history-facts.json": "{}",
        "packs.json": "{}",
        "worktree-stat.json": "{}",
        f"base-ids-{old}.json": "{}",
        "content-index": "memsync-content-index 1\n",
        "blob-sha256": "",
        "layout-checked": "x",
        "metadata-follows": old,
        "spelling-rules": "2",
    }
    for name, text in legacy.items():
        (folder / name).write_text(text)
    started = (folder / "checkout-intent").stat().st_mtime
    # Read as the next run reads it, before the checkout is settled by it.
    state = State(folder)
    assert state.get("checkout") == {"from": None, "to": old, "started": started}
    state.close()
    assert sorted(p.name for p in folder.iterdir()) == ["state.sqlite"]
    with Mirror.open(mirror.path) as reopened:
        assert Rewriter(reopened).superseded() == {old, "b" * 40}
        assert Rewriter(reopened).pending()
        assert reopened.git.state.get("backup-prune-pending") == ["/backups/one.git"]
        assert reopened.git.state.get("metadata-follows") is None, "a cache: rebuilt, not carried"


def test_caches_go_and_intents_stay(tmp_path: Path) -> None:
    state = State(tmp_path)
    state.put_many({"paths": {"format": 1}, "superseded": ["a" * 40], "packs": {"sealed": []}})
    state.drop_caches(*CACHES, content_index=True)
    assert [state.get(name) for name in ("paths", "packs", "superseded")] == [None, None, ["a" * 40]]
    with pytest.raises(ValueError, match="not caches"):
        state.drop_caches("checkout")
    with pytest.raises(ValueError, match="not an entry of memsync's state"):
        state.put("paths.json", {})
    assert not CACHES & INTENTS


def test_a_reader_writes_nothing_and_an_unchanged_value_is_not_written_again(tmp_path: Path) -> None:
    reader = State(tmp_path)
    assert reader.get("paths") is None and reader.get("checkout") is None
    reader.drop_caches("paths")
    assert not (tmp_path / "state.sqlite").exists(), "a reader made the database"
    state = State(tmp_path)
    state.put("metadata-follows", "e" * 40)
    before = os.stat(tmp_path / "state.sqlite")
    with sqlite3.connect(tmp_path / "state.sqlite") as db:
        changes = db.execute("PRAGMA data_version").fetchone()
        state.put("metadata-follows", "e" * 40)
        assert db.execute("PRAGMA data_version").fetchone() == changes, "an unchanged value was written"
        state.put("metadata-follows", None)
        assert db.execute("PRAGMA data_version").fetchone() != changes
    assert os.stat(tmp_path / "state.sqlite").st_ino == before.st_ino  # one file, changed in place
    assert state.get("metadata-follows") is None
