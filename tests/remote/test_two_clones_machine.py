"""A Hypothesis state machine of two git clones of one store, as two teammates use them: each edits,
creates and deletes its own files and commits, pushes (accepted, or rejected because the other
pushed first), and pulls (rebasing onto the store's history).

After every step:

* a rejected push wrote nothing: the store holds what it held before;
* an accepted push left the store holding exactly the files of the pushed commit;
* after a pull, ``origin/main`` is the commit a fresh ``memsync pull`` of the store makes (the same
  ids), and the clone's files are the store's plus its own commits not yet pushed;
* ``git fsck`` stays clean.

At the end both clones pull and push until nothing is left: they stand on the same commit, the
mirror's tip, holding the store's files.

Budget: 3 examples of 8 steps on Forward in CI (each step runs git and the helper as processes);
``HYPOTHESIS_PROFILE=soak`` runs 40 of 25 in every dialect.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from memsync.api import Client, open_client
from memsync.mirror import Mirror
from memsync.rules import Dialect
from memsync.sync.pull import pull_store
from tests.support.server import ServerProcess

PREFIX = {Dialect.FORWARD: "/api/v1/forward", Dialect.CLOUD: "/api/v1/cloud", Dialect.ANTHROPIC: "/v1"}
SOAK = os.environ.get("HYPOTHESIS_PROFILE") == "soak"
# Each clone writes its own files (a rebase never stops on a conflict), one of them in a folder.
NAMES = ("n0.md", "n1.md", "d/n2.md")
clones = st.sampled_from(["first", "second"])


class TwoClones(RuleBasedStateMachine):
    server: ClassVar[ServerProcess]
    dialect: ClassVar[Dialect] = Dialect.FORWARD

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="memsync-clones-"))
        self.client: Client = open_client(self.dialect, self.server.base_url, self.server.token)
        self.store = self.client.create_store(f"clones-{uuid.uuid4().hex[:8]}", description="made by tests")
        self.client.create_memory(self.store.id, "shared.md", "from the start\n")
        self.url = f"memstore::{self.server.base_url}{PREFIX[self.dialect]}/memory_stores/{self.store.id}"
        self.env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "MEMSYNC_TOKEN": self.server.token,
        }
        self.counter = itertools.count()
        self.clone = {name: self.tmp / name for name in ("first", "second")}
        for name, path in self.clone.items():
            self.git(self.tmp, "clone", "-q", self.url, name)
            self.git(path, "config", "user.name", name)

    def teardown(self) -> None:
        self.client.close()
        subprocess.run(["rm", "-rf", str(self.tmp)], check=False)

    # --- helpers -------------------------------------------------------------------------------------

    def git(self, where: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["git", *args], cwd=where, env=self.env, capture_output=True, text=True, timeout=120
        )
        if check:
            assert done.returncode == 0, f"git {' '.join(args)}: {done.stdout}{done.stderr}"
        return done

    def store_files(self) -> dict[str, str]:
        return {
            m.path.lstrip("/"): self.client.get_memory(self.store.id, m.id).content
            for m in self.client.list_memories(self.store.id)
        }

    def tree_files(self, clone: Path, revision: str = "HEAD") -> dict[str, str]:
        listed = self.git(clone, "ls-tree", "-r", "-z", "--name-only", revision).stdout.split("\0")
        return {path: self.git(clone, "show", f"{revision}:{path}").stdout for path in listed if path}

    def mirror_tip(self) -> str | None:
        root = self.tmp / "oracle"
        report = pull_store(self.client, self.store, root)
        assert report.ok, report.error
        with Mirror.open(root / self.store.id) as mirror:
            return mirror.tip()

    # --- rules ---------------------------------------------------------------------------------------

    @rule(who=clones, name=st.sampled_from(NAMES))
    def write(self, who: str, name: str) -> None:
        target = self.clone[who] / who / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"{who} wrote {next(self.counter)}\n")
        self.git(self.clone[who], "add", "-A")
        self.git(self.clone[who], "commit", "-q", "-m", f"{who} writes {name}")

    @rule(who=clones, name=st.sampled_from(NAMES))
    def delete(self, who: str, name: str) -> None:
        target = self.clone[who] / who / name
        if not target.exists():
            return
        target.unlink()
        self.git(self.clone[who], "commit", "-q", "-am", f"{who} deletes {name}")

    @rule(who=clones)
    def push(self, who: str) -> None:
        clone = self.clone[who]
        before = self.store_files()
        done = self.git(clone, "push", check=False)
        if done.returncode == 0:
            assert self.store_files() == self.tree_files(clone), done.stderr
        else:
            assert "(fetch first)" in done.stderr, done.stderr
            assert self.store_files() == before

    @rule(who=clones)
    def pull(self, who: str) -> None:
        clone = self.clone[who]
        self.git(clone, "pull", "-q")
        assert self.git(clone, "rev-parse", "origin/main").stdout.strip() == self.mirror_tip()
        # The clone holds the store's files, with its own unpushed changes on top.
        mine = {p: c for p, c in self.tree_files(clone).items() if p.startswith(f"{who}/")}
        theirs = {p: c for p, c in self.store_files().items() if not p.startswith(f"{who}/")}
        assert {p: c for p, c in self.tree_files(clone).items() if not p.startswith(f"{who}/")} == theirs
        assert mine == {p: c for p, c in self.tree_files(clone).items() if p.startswith(f"{who}/")}

    @invariant()
    def fsck_clean(self) -> None:
        for clone in self.clone.values():
            self.git(clone, "fsck", "--no-progress")

    def converge(self) -> None:
        """Both clones pull and push until neither has anything left to send."""
        for _ in range(3):
            for who in ("first", "second"):
                self.git(self.clone[who], "pull", "-q")
                self.git(self.clone[who], "push", "-q")
        for who in ("first", "second"):
            self.git(self.clone[who], "pull", "-q")
        tip = self.mirror_tip()
        heads = {self.git(clone, "rev-parse", "HEAD").stdout.strip() for clone in self.clone.values()}
        assert heads == {tip}
        assert self.tree_files(self.clone["first"]) == self.store_files()


# The soak's budget is an hour a dialect, beyond the suite's per-test timeout.
@pytest.mark.timeout(3600 if SOAK else 300)
@pytest.mark.parametrize("dialect", list(Dialect) if SOAK else [Dialect.FORWARD], ids=lambda d: d.value)
def test_two_clones_push_pull_and_converge(server: ServerProcess, dialect: Dialect) -> None:
    class Machine(TwoClones):
        def teardown(self) -> None:
            try:
                self.converge()
            finally:
                super().teardown()

    Machine.server = server
    Machine.dialect = dialect
    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=40 if SOAK else 3,
            stateful_step_count=25 if SOAK else 8,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
            # No shrinking: each step runs git and the helper as processes, and shrinking a failure
            # took over five minutes; the failing sequence is printed whole, and CI replays it.
            phases=[phase for phase in Phase if phase not in (Phase.explain, Phase.shrink)],
            derandomize=not SOAK,
        ),
    )
