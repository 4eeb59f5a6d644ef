"""Every command's ``--json`` output is valid against the JSON Schema published in docs/json-schema/,
and those files are what ``memsync schema`` prints today.

The commands run in-process (``memsync.cli.main``) against the seeded reference server of this
package, which speaks every endpoint (mounts too); each output is checked by ``jsonschema`` against
the published file, not against the models that made it.
"""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from memsync.cli import main
from memsync.sync.outputs import DOCUMENTS
from tests.awareness.conftest import Pair

PUBLISHED = Path(__file__).resolve().parents[2] / "docs" / "json-schema"


def test_the_published_schema_is_what_memsync_schema_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["schema", "--write", str(tmp_path)])
    assert done.value.code == 0
    capsys.readouterr()
    written = {path.name: path.read_text(encoding="utf-8") for path in tmp_path.iterdir()}
    published = {path.name: path.read_text(encoding="utf-8") for path in PUBLISHED.iterdir()}
    assert written == published, "run: memsync schema --write docs/json-schema"
    assert sorted(written) == sorted(f"{name}.json" for name in DOCUMENTS)


class Runner:
    """``memsync --config CONFIG ARGS --json`` in-process: the exit code and the parsed output."""

    def __init__(self, config: Path, token: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.config, self.token, self.capsys = config, token, capsys
        self.checked: set[str] = set()

    def __call__(self, document: str, *args: str) -> tuple[int, dict[str, Any]]:
        # `daemon --once` configures the root logger as the daemon's process owns it: put it back,
        # or later tests of this worker would log into this test's closed capture stream.
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level
        try:
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("SCHEMA_TOKEN", self.token)
                with pytest.raises(SystemExit) as done:
                    main(["--config", str(self.config), *args, "--json"])
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)
        out = self.capsys.readouterr().out
        found = json.loads(out)
        schema = json.loads((PUBLISHED / f"{document}.json").read_text(encoding="utf-8"))
        jsonschema.validate(found, schema, cls=jsonschema.Draft202012Validator)
        self.checked.add(document)
        assert isinstance(done.value.code, int)
        return done.value.code, found


def test_every_commands_json_output_is_valid_against_its_published_schema(
    pair: Pair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = pair.store({"notes/a.md": "one\n", "b.md": "bee\n"})
    backups = tmp_path / "backups"
    config = tmp_path / "memsync.toml"
    config.write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{pair.server.base_url}"\ntoken_env = "SCHEMA_TOKEN"\n'
        f'[mirror]\nroot = "mirrors"\n[stores]\ninclude = ["{store.id}"]\n'
        f"[[backup.remotes]]\nurl = {json.dumps(str(backups))}\n"
    )
    run = Runner(config, pair.server.token, capsys)
    checkout = tmp_path / "mirrors" / store.id

    assert run("stores", "stores")[0] == 0
    assert run("pull", "pull")[1]["stores"][0]["imported"] == 2
    # A rename pushed, then a conflict: push's and sync's entries with every list filled.
    (checkout / "b.md").rename(checkout / "c.md")
    assert run("push", "push", "--dry-run")[1]["stores"][0]["predicted"]
    assert run("push", "push")[0] == 0
    (checkout / "notes" / "a.md").write_text("changed here\n")
    pair.write(store, "notes/a.md", "changed there\n")
    (checkout / "bad.md").write_bytes(b"\xff not text\n")
    code, synced = run("sync", "sync")
    assert code == 4 and synced["stores"][0]["conflicts"] == [{"path": "notes/a.md"}]
    assert run("daemon-once", "daemon", "--once")[0] == 4
    (checkout / "bad.md").unlink()
    # A view, so that status lists one beside the mirror.
    assert run("mount", "mount", pair.identity, pair.template, store.id)[0] == 0
    assert run("mounts", "mounts", pair.identity, pair.template)[1]["mounts"]
    assert run("awareness", "awareness", pair.identity, pair.template)[0] in (0, 4)
    code, status = run("status", "status")
    assert code == 4 and any(entry.get("view") for entry in status["stores"])
    assert run("resolve", "resolve", "--theirs", str(checkout / "notes" / "a.md"))[0] == 0
    assert run("sync", "sync")[0] == 0
    assert run("unmount", "unmount", pair.identity, pair.template, store.id)[0] == 0
    assert run("backup", "backup")[0] == 0
    assert run("verify", "verify")[0] == 0
    assert run("restore", "restore", str(backups), "--into-store", store.id, "--dry-run")[0] == 0
    # A run that fails as a whole prints the one object of failed-run.
    config.write_text(config.read_text().replace('dialect = "forward"', 'dialect = "klingon"'))
    assert run("failed-run", "pull")[0] == 2
    assert run.checked == set(DOCUMENTS)
    subprocess.run(["git", "-C", str(checkout), "fsck", "--no-progress"], check=True, capture_output=True)
