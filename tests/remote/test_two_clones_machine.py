"""A Hypothesis state machine of two git clones of one store, as two teammates use them: each edits,
creates, deletes and renames (case-only too, with git mv) its own files and commits, pushes
(accepted, or rejected because the other pushed first), and pulls (rebasing onto the store's
history). The first clone is on exFAT (a laptop's case-insensitive drive), the second on the test's
own filesystem.

After every step:

* a rejected push wrote nothing: the store holds what it held before;
* an accepted push left the store holding exactly the files of the pushed commit, and each of its
  "written:" lines is what the store then holds;
* after a pull, ``origin/main`` is the commit a fresh ``memsync pull`` of the store makes (the same
  ids), and the clone's files are the store's plus its own commits not yet pushed;
* ``git fsck`` stays clean.

At the end both clones pull and push until nothing is left: they stand on the same commit, the
mirror's tip, holding the store's files.

Budget: 3 examples of 8 steps on Forward in CI (each step runs git and the helper as processes);
``HYPOTHESIS_PROFILE=soak`` runs 40 of 25 in every dialect. Without a way to mount exFAT (root,
FUSE), the first clone is on the test's filesystem too.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from memsync.api import Client, open_client
from memsync.mirror import Mirror, decode_path
from memsync.rules import Dialect
from memsync.sync.pull import pull_store
from tests.support.filesystems import mounted
from tests.support.server import ServerProcess

PREFIX = {Dialect.FORWARD: "/api/v1/forward", Dialect.CLOUD: "/api/v1/cloud", Dialect.ANTHROPIC: "/v1"}
SOAK = os.environ.get("HYPOTHESIS_PROFILE") == "soak"
# Each clone writes its own files (a rebase never stops on a conflict), one of them in a folder.
NAMES = ("n0.md", "n1.md", "d/n2.md")
clones = st.sampled_from(["first", "second"])


class TwoClones(RuleBasedStateMachine):
    server: ClassVar[ServerProcess]
    dialect: ClassVar[Dialect] = Dialect.FORWARD
    laptop: ClassVar[Path | None] = None  # where the first clone goes: an exFAT mount

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
        first = self.tmp if self.laptop is None else Path(tempfile.mkdtemp(dir=self.laptop))
        self.clone = {"first": first / "first", "second": self.tmp / "second"}
        for name, path in self.clone.items():
            self.git(path.parent, "clone", "-q", self.url, name)
            self.git(path, "config", "user.name", name)

    def teardown(self) -> None:
        self.client.close()
        for path in self.clone.values():
            subprocess.run(["rm", "-rf", str(path.parent)], check=False)

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
        """``{memory path: content}`` of a commit of the clone, read from git's objects."""
        listed = self.git(clone, "ls-tree", "-r", "-z", "--name-only", revision).stdout.split("\0")
        return {decode_path(p): self.git(clone, "show", f"{revision}:{p}").stdout for p in listed if p}

    def mirror_tip(self) -> str | None:
        root = self.tmp / "oracle"
        report = pull_store(self.client, self.store, root)
        assert report.ok, report.error
        with Mirror.open(root / self.store.id) as mirror:
            return mirror.tip()

    # --- rules ---------------------------------------------------------------------------------------

    @rule(who=clones, name=st.sampled_from(NAMES))
    def write(self, who: str, name: str) -> None:
        target = self.listed(who, name)
        target.parent.mkdir(parents=True, exist_ok=True)
        # Each write has a size of its own: exFAT keeps times to 2 s, and git takes a file of the same
        # size and time for unchanged (a limit of git's on FAT drives, not of memsync's).
        n = next(self.counter)
        target.write_text(f"{who} wrote {n}\n{'.' * n}\n")
        self.git(self.clone[who], "add", "-A")
        self.git(self.clone[who], "commit", "-q", "-m", f"{who} writes {name}")

    @rule(who=clones, name=st.sampled_from(NAMES))
    def delete(self, who: str, name: str) -> None:
        target = self.listed(who, name)
        if not target.exists():
            return
        target.unlink()
        self.git(self.clone[who], "commit", "-q", "-am", f"{who} deletes {name}")

    def listed(self, who: str, name: str) -> Path:
        """The file a user opens for ``name``: on the laptop's drive, the one its folder lists under any
        case (exfat-fuse keeps each spelling's file attributes apart for a second, so a save under
        another case can look unchanged to git meanwhile: an artefact of FUSE, not of exFAT)."""
        target = self.clone[who] / who / name
        if who == "first" and self.laptop is not None and target.parent.is_dir():
            for listed in os.listdir(target.parent):
                if listed.lower() == target.name.lower():
                    return target.parent / listed
        return target

    @initialize()
    def start_with_a_case_only_rename(self) -> None:
        """Every run meets what laptops do: a file renamed by case only, on the first clone's drive."""
        self.rename("first", NAMES[0], upper=True)

    @rule(who=clones, name=st.sampled_from(NAMES), upper=st.booleans())
    def rename(self, who: str, name: str, upper: bool) -> None:
        """git mv to the other case of the name or to another name; a file is written first if there
        is none to rename. On the exFAT clone a case-only rename is made on top of a pull and pushed at
        once: git (2.39) cannot rebase one onto new commits on such a drive ("untracked working tree
        files would be overwritten"), a limit of git's own, on a Mac as here."""
        case_only = upper and who == "first" and self.laptop is not None
        if case_only:
            self.pull(who)
        folder, _, base = f"{who}/{name}".rpartition("/")
        where = self.clone[who] / folder
        found = [n for n in os.listdir(where) if n.lower() == base] if where.is_dir() else []
        if not found:
            self.write(who, name)
            found = [base]
        old = f"{folder}/{found[0]}"
        new = f"{folder}/{(base if found[0] != base else base.upper()) if upper else 'moved-' + base}"
        there = self.clone[who] / new
        if there.name in os.listdir(there.parent):
            return  # a file of its own there (a case-sensitive drive)
        self.git(self.clone[who], "mv", old, new)
        self.git(self.clone[who], "commit", "-q", "-m", f"{who} renames {old} to {new}")
        if case_only:
            self.push(who)

    @rule(who=clones)
    def push(self, who: str) -> None:
        clone = self.clone[who]
        before = self.store_files()
        done = self.git(clone, "push", check=False)
        stored, committed = self.store_files(), self.tree_files(clone)
        for line in done.stderr.splitlines():
            # Each "written:" line is what the store now holds, whether or not the push went through.
            if "memstore: written: " in line:
                action, _, rest = line.split("written: ", 1)[1].partition(" ")
                path, _, moved = rest.partition(" to ")
                memory = decode_path(moved or path)
                assert stored.get(memory) == (None if action == "delete" and not moved else committed[memory])
        if done.returncode == 0:
            assert stored == committed, done.stderr
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
@pytest.fixture(scope="module")
def laptop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path | None]:
    """An exFAT mount for the first clone; None where none can be made (the test then runs on one drive)."""
    try:
        with mounted("exfat", tmp_path_factory.mktemp("laptop")) as point:
            yield point
    except pytest.skip.Exception:
        yield None


@pytest.mark.timeout(3600 if SOAK else 300)
@pytest.mark.parametrize("dialect", list(Dialect) if SOAK else [Dialect.FORWARD], ids=lambda d: d.value)
def test_two_clones_push_pull_and_converge(
    server: ServerProcess, dialect: Dialect, laptop: Path | None
) -> None:
    class Machine(TwoClones):
        def teardown(self) -> None:
            try:
                self.converge()
            finally:
                super().teardown()

    Machine.server = server
    Machine.dialect = dialect
    Machine.laptop = laptop
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
