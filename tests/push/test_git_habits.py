"""What people do in a git checkout besides editing files: staging, editors' temporaries, their own
ignore rules, git operations left half done, and moving ``main`` back in history.

Each case runs against the real reference server with the ``git`` binary as the oracle (status,
fsck); the CLI cases run ``memsync`` as a subprocess, as a user would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from memsync.api import open_client
from memsync.errors import EXIT_ATTENTION, EXIT_BLOCKED, EXIT_OK
from memsync.mirror.ignores import EXCLUDE_BLOCK, OLD_EXCLUDE_BLOCKS
from memsync.rules import Dialect
from memsync.sync.push import predict_push
from memsync.sync.status import mirror_status
from tests.push.conftest import Side, git
from tests.support.server import ServerProcess
from tests.support.tiers import end_to_end

MakeSide = Callable[..., Side]


def git_env(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """git with extra environment (editors replaced), failures returned rather than raised."""
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env={**os.environ, **env}
    )


# --- 1. staging is an ordinary edit ----------------------------------------------------------------


@pytest.mark.parametrize("dialect", [Dialect.FORWARD, Dialect.ANTHROPIC])
@pytest.mark.parametrize("habit", ["add", "add-then-edit", "mv", "rm", "add-new"])
def test_staged_changes_are_ordinary_edits(make_side: MakeSide, dialect: Dialect, habit: str) -> None:
    side = make_side(dialect, {"a.md": "a\n", "b.md": "b\n"})
    expected = {"a.md": "a\n", "b.md": "b\n"}
    if habit == "add":
        side.write("a.md", "a\nstaged\n")
        git(side.repo, "add", "a.md")
        expected["a.md"] = "a\nstaged\n"
    elif habit == "add-then-edit":
        side.write("a.md", "a\nstaged\n")
        git(side.repo, "add", "a.md")
        side.write("a.md", "a\nstaged\nthen edited\n")
        expected["a.md"] = "a\nstaged\nthen edited\n"
    elif habit == "mv":
        git(side.repo, "mv", "a.md", "c.md")
        expected = {"c.md": "a\n", "b.md": "b\n"}
    elif habit == "rm":
        git(side.repo, "rm", "-q", "b.md")
        del expected["b.md"]
    else:
        side.write("n.md", "new\n")
        git(side.repo, "add", "n.md")
        expected["n.md"] = "new\n"

    report = side.sync()

    assert report.ok, report.error
    assert report.exit_code == EXIT_OK
    assert side.remote() == expected
    side.assert_in_step()
    # Nothing left over: the next sync has nothing to do.
    again = side.synced()
    assert again.pushed == 0 and again.exit_code == EXIT_OK


def test_a_staged_edit_and_a_remote_change_meet(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD, {"a.md": "one\ntwo\nthree\n", "b.md": "b\n"})
    side.write("a.md", "one\ntwo\nthree\nlocal\n")
    git(side.repo, "add", "a.md")
    side.put("b.md", "b remote\n")
    report = side.sync()
    assert report.ok and report.exit_code == EXIT_OK, report.error
    assert side.remote() == {"a.md": "one\ntwo\nthree\nlocal\n", "b.md": "b remote\n"}
    side.assert_in_step()


# --- 2. editor temporaries are never memories --------------------------------------------------------

# One of each kind docs/push.md lists: JetBrains' safe write, gedit's, Python's tempfile.mkstemp(),
# a C mkstemp() on ".tmpXXXXXX", GNU sed -i; and the ones that were already ignored.
TEMPORARIES = [
    "a.md___jb_tmp___",
    "a.md___jb_old___",
    "notes/.goutputstream-X1Y2Z3",
    "tmpk3j_9x2a",
    "notes/.tmpAb12Cd",
    "sedQ1w2E3",
    "notes/.n.md.swp",
    "a.md~",
    "4913",
    ".DS_Store",
]


def test_editor_temporaries_are_neither_pushed_nor_reported(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD, {"a.md": "a\n", "notes/n.md": "n\n"})
    for temporary in TEMPORARIES:
        side.write(temporary, "half a save\n")
    side.write("a.md", "saved\n")

    report = side.sync()

    assert report.ok and report.exit_code == EXIT_OK, report.error
    assert report.rejected == []
    assert side.remote() == {"a.md": "saved\n", "notes/n.md": "n\n"}
    assert side.status() == ""  # git ignores them as well
    status = mirror_status(side.repo, Dialect.FORWARD)
    assert (status.pending, status.rejected, status.exit_code) == ([], [], EXIT_OK)
    # The editor cleans up: no delete reaches the store.
    for temporary in TEMPORARIES:
        (side.repo / temporary).unlink()
    versions = side.version_count()
    again = side.synced()
    assert again.pushed == 0 and side.version_count() == versions


def test_a_memory_named_like_a_temporary_is_still_a_memory(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD, {"x.md___jb_old___": "kept\n", "tmpk3j_9x2a": "also kept\n"})
    assert (side.repo / "x.md___jb_old___").read_text() == "kept\n"
    side.write("x.md___jb_old___", "edited\n")
    (side.repo / "tmpk3j_9x2a").unlink()
    report = side.synced()
    assert report.exit_code == EXIT_OK
    assert side.remote() == {"x.md___jb_old___": "edited\n"}
    side.assert_in_step()


def test_an_older_mirrors_list_of_temporaries_is_replaced_in_place(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD, {"a.md": "a\n"})
    exclude = side.repo / ".git" / "info" / "exclude"
    exclude.write_text("# mine\n*.log\n" + OLD_EXCLUDE_BLOCKS[0] + "scratch/\n")
    side.write("a.md___jb_old___", "the old a\n")
    report = side.synced()
    text = exclude.read_text()
    assert text == "# mine\n*.log\n" + EXCLUDE_BLOCK + "scratch/\n"
    assert report.rejected == [] and side.remote() == {"a.md": "a\n"}


# --- 3. the user's own ignore rules ----------------------------------------------------------------


def test_the_users_ignore_rules_are_honoured_and_never_reported(make_side: MakeSide) -> None:
    # A memory whose path is .gitignore lives at %2Egitignore: a memory, not an ignore file.
    side = make_side(Dialect.FORWARD, {"a.md": "a\n", "notes/.gitignore": "a memory\n"})
    assert (side.repo / "notes" / "%2Egitignore").read_text() == "a memory\n"
    side.write(".gitignore", "drafts/\n*.bak\n")
    side.write("notes/.gitignore", "private.md\n")
    with open(side.repo / ".git" / "info" / "exclude", "a") as exclude:
        exclude.write("scratch.md\n")
    for ignored in ("drafts/d.md", "a.md.bak", "notes/private.md", "scratch.md"):
        side.write(ignored, "mine only\n")
    side.write("notes/public.md", "public\n")

    report = side.sync()

    assert report.ok and report.exit_code == EXIT_OK, report.error
    assert report.rejected == []
    assert side.remote() == {"a.md": "a\n", "notes/.gitignore": "a memory\n", "notes/public.md": "public\n"}
    assert side.status() == ""
    status = mirror_status(side.repo, Dialect.FORWARD)
    assert (status.rejected, status.pending, status.exit_code) == ([], [], EXIT_OK)
    # The checkout still fast-forwards to a remote change: nothing of the user's counts as local.
    side.put("a.md", "a remote\n")
    taken = side.synced()
    assert taken.to_json()["checkout"] == "updated" and side.read("a.md") == "a remote\n"
    assert (side.repo / ".gitignore").read_text() == "drafts/\n*.bak\n"
    assert (side.repo / "notes" / ".gitignore").read_text() == "private.md\n"
    side.assert_in_step()


def test_a_committed_gitignore_stays_the_users(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD, {"a.md": "a\n"})
    side.write(".gitignore", "*.log\n")
    side.write("debug.log", "noise\n")
    side.write("a.md", "a, committed\n")
    git(side.repo, "add", "-f", ".gitignore", "a.md")
    git(side.repo, "commit", "-qm", "my ignore rules and an edit")
    report = side.sync()
    assert report.ok and report.exit_code == EXIT_OK, report.error
    assert report.rejected == []
    assert side.remote() == {"a.md": "a, committed\n"}
    assert (side.repo / ".gitignore").read_text() == "*.log\n"


# --- 4. a git operation in progress, HEAD elsewhere ----------------------------------------------


def history(make_side: MakeSide) -> Side:
    """A store whose history has a few versions of a.md, mirrored and in step."""
    side = make_side(Dialect.FORWARD, {"a.md": "a1\n", "b.md": "b1\n"})
    side.put("a.md", "a2\n")
    side.put("a.md", "a3\n")
    side.synced()
    return side


def start_rebase(side: Side) -> None:
    side.write("c.md", "local\n")
    git(side.repo, "add", "c.md")
    git(side.repo, "commit", "-qm", "local")
    done = git_env(side.repo, "rebase", "-i", "HEAD~2", GIT_SEQUENCE_EDITOR="sed -i 1s/^pick/edit/")
    assert done.returncode == 0, done.stderr


def side_branch(side: Side) -> None:
    """A branch ``other`` from main~1 changing a.md to something main's tip conflicts with."""
    git(side.repo, "branch", "other", "HEAD~1")
    git(side.repo, "switch", "-q", "other")
    side.write("a.md", "other\n")
    git(side.repo, "commit", "-qam", "other")
    git(side.repo, "switch", "-q", "main")


def start_merge(side: Side) -> None:
    side_branch(side)
    assert git_env(side.repo, "merge", "other").returncode != 0  # stops on the conflict


def start_cherry_pick(side: Side) -> None:
    side_branch(side)
    assert git_env(side.repo, "cherry-pick", "other").returncode != 0


def start_revert(side: Side) -> None:
    assert git_env(side.repo, "revert", "--no-edit", "HEAD~1").returncode != 0  # a3 sits on a2


def start_bisect(side: Side) -> None:
    git(side.repo, "bisect", "start", "HEAD", "HEAD~3")


def detach(side: Side) -> None:
    git(side.repo, "switch", "-q", "--detach", "HEAD~1")


def other_branch(side: Side) -> None:
    git(side.repo, "switch", "-q", "-c", "elsewhere")


GIT_STATES = {
    "rebase": (start_rebase, ["`git rebase --continue`", "`git rebase --abort`"], ["rebase", "--abort"]),
    "merge": (start_merge, ["`git commit`", "`git merge --abort`"], ["merge", "--abort"]),
    "cherry-pick": (
        start_cherry_pick,
        ["`git cherry-pick --continue`", "`git cherry-pick --abort`"],
        ["cherry-pick", "--abort"],
    ),
    "revert": (start_revert, ["`git revert --continue`", "`git revert --abort`"], ["revert", "--abort"]),
    "bisect": (start_bisect, ["`git bisect reset`"], ["bisect", "reset"]),
    "detached": (detach, ["detached", "`git switch main`"], ["switch", "-q", "main"]),
    "branch": (other_branch, ["elsewhere", "`git switch main`"], ["switch", "-q", "main"]),
}


@pytest.mark.parametrize("state", sorted(GIT_STATES))
def test_each_git_state_names_the_command_that_ends_it(make_side: MakeSide, state: str) -> None:
    start, commands, end = GIT_STATES[state]
    side = history(make_side)
    start(side)
    side.put("b.md", "b remote\n")
    before = side.remote()

    report = side.sync()

    assert report.exit_code == EXIT_BLOCKED, (report.error, report.to_json())
    assert report.ok and report.error is None  # nothing failed: the store waits for the user
    blocked = report.to_json()["blocked"]
    assert blocked is not None
    for command in commands:
        assert command in blocked, blocked
    if state not in ("detached", "branch"):
        assert "git switch main" not in blocked  # git refuses that mid-operation
    assert side.remote() == before  # nothing pushed
    assert report.pull.imported == 1  # the store's history is still imported
    assert side.ref("refs/remotes/memstore/main") != side.ref("refs/memsync/base")
    status = mirror_status(side.repo, Dialect.FORWARD)
    assert status.exit_code == EXIT_BLOCKED and status.to_json()["blocked"] == blocked
    dry = predict_push(side.client, side.client.get_store(side.store.id), side.root)
    assert dry.exit_code == EXIT_BLOCKED and dry.to_json()["blocked"] == blocked

    # The command the message names ends it; the next sync goes on from there.
    git(side.repo, *end)
    report = side.sync()
    assert report.exit_code in (EXIT_OK, EXIT_ATTENTION), report.to_json()
    assert side.remote()["b.md"] == "b remote\n"
    git(side.repo, "fsck", "--strict")


# --- 5. moving main back in history ------------------------------------------------------------------


def agents_wrote_twice(make_side: MakeSide, dialect: Dialect = Dialect.FORWARD) -> Side:
    side = make_side(dialect, {"a.md": "a1\n", "c.md": "c1\n"})
    side.put("a.md", "a2\n")  # two versions the agents wrote: an update and a create
    side.put("d.md", "d1\n")
    side.synced()
    return side


def test_rewinding_main_withholds_what_would_undo_the_store(make_side: MakeSide) -> None:
    side = agents_wrote_twice(make_side)
    agents = {"a.md": "a2\n", "c.md": "c1\n", "d.md": "d1\n"}
    git(side.repo, "reset", "-q", "--hard", "HEAD~2")
    side.write("c.md", "c2, an edit after the reset\n")

    report = side.sync()

    assert report.ok and report.exit_code == EXIT_ATTENTION, report.error
    withheld = {w["path"]: w["reason"] for w in report.to_json()["withheld"]}
    assert set(withheld) == {"a.md", "d.md"}
    reason = withheld["a.md"]
    assert "main was moved back 2 version(s)" in reason
    assert "git reset --hard memstore/main" in reason and "--force" in reason
    # The unrelated edit went; the agents' versions are still what the store has.
    assert side.remote() == {**agents, "c.md": "c2, an edit after the reset\n"}
    assert side.read("a.md") == "a1\n" and not (side.repo / "d.md").exists()  # the checkout as left
    status = mirror_status(side.repo, Dialect.FORWARD)
    assert {w["path"] for w in status.withheld} == {"a.md", "d.md"} and status.exit_code == EXIT_ATTENTION
    assert status.pending == []
    dry = predict_push(side.client, side.client.get_store(side.store.id), side.root)
    assert {p["path"] for p in dry.predicted if p["outcome"] == "withheld"} == {"a.md", "d.md"}

    # Withheld until the user decides: the next sync (the daemon's, say) withholds them again.
    again = side.sync()
    assert again.exit_code == EXIT_ATTENTION and {w["path"] for w in again.to_json()["withheld"]} == {
        "a.md",
        "d.md",
    }
    assert side.remote() == {**agents, "c.md": "c2, an edit after the reset\n"}

    # "Discard my local changes".
    git(side.repo, "reset", "-q", "--hard", "memstore/main")
    settled = side.synced()
    assert settled.exit_code == EXIT_OK and settled.pushed == 0
    assert side.remote() == {**agents, "c.md": "c2, an edit after the reset\n"}
    side.assert_in_step()


@pytest.mark.parametrize("dialect", [Dialect.FORWARD, Dialect.ANTHROPIC])
def test_force_pushes_the_rewind(make_side: MakeSide, dialect: Dialect) -> None:
    side = agents_wrote_twice(make_side, dialect)
    git(side.repo, "reset", "-q", "--hard", "HEAD~2")
    report = side.sync(force=True)
    assert report.ok and report.exit_code == EXIT_OK, report.error
    assert side.remote() == {"a.md": "a1\n", "c.md": "c1\n"}
    side.assert_in_step()


def test_a_file_edited_after_the_rewind_is_an_edit(make_side: MakeSide) -> None:
    side = agents_wrote_twice(make_side)
    git(side.repo, "reset", "-q", "--hard", "HEAD~2")
    side.write("a.md", "a1, and my edit\n")
    report = side.sync()
    assert report.ok and report.exit_code == EXIT_ATTENTION
    assert {w["path"] for w in report.to_json()["withheld"]} == {"d.md"}
    assert side.remote()["a.md"] == "a1, and my edit\n"


def test_main_moved_forward_again_is_no_rewind(make_side: MakeSide) -> None:
    side = agents_wrote_twice(make_side)
    git(side.repo, "reset", "-q", "--soft", "HEAD~2")  # the files stay: nothing would be undone
    report = side.synced()
    assert report.exit_code == EXIT_OK and report.pushed == 0
    side.assert_in_step()


def test_git_revert_on_main_is_a_deliberate_undo(make_side: MakeSide) -> None:
    side = agents_wrote_twice(make_side)
    git(side.repo, "revert", "--no-edit", "HEAD")  # undo the create of d.md, as a new commit
    report = side.synced()
    assert report.exit_code == EXIT_OK
    assert "d.md" not in side.remote()


# --- what the command line prints ------------------------------------------------------------------


def memsync(*args: str, config: Path, token: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memsync", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        env={**os.environ, "MS_TOKEN": token},
        timeout=120,
    )


@pytest.fixture
@end_to_end
def cli_mirror(server: ServerProcess, tmp_path: Path) -> tuple[Path, Path, str]:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        store = client.create_store(f"habits-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()))
        client.create_memory(store.id, "a.md", "a1\n")
        client.create_memory(store.id, "b.md", "b1\n")
        memory = client.find_memory(store.id, "a.md")
        assert memory is not None
        client.update_memory(store.id, memory.id, "a2\n", expected_sha256=memory.content_sha256)
    config = tmp_path / "memsync.toml"
    config.write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{server.base_url}"\ntoken_env = "MS_TOKEN"\n'
        f'[mirror]\nroot = "{tmp_path / "mirrors"}"\n[stores]\ninclude = ["{store.id}"]\n'
    )
    first = memsync("sync", config=config, token=server.token)
    assert first.returncode == 0, first.stderr
    return config, tmp_path / "mirrors" / store.id, store.id


def test_the_cli_on_each_habit(cli_mirror: tuple[Path, Path, str], server: ServerProcess) -> None:
    config, repo, store_id = cli_mirror

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return memsync(*args, config=config, token=server.token)

    (repo / "a.md").write_text("a2\nstaged\n")
    git(repo, "add", "a.md")
    (repo / "a.md___jb_tmp___").write_text("half a save\n")
    (repo / ".gitignore").write_text("*.bak\n")
    (repo / "b.md.bak").write_text("mine\n")
    staged = run("sync")
    assert staged.returncode == 0, staged.stdout + staged.stderr
    assert "  pushed: update a.md" in staged.stdout
    assert "rejected" not in staged.stdout and "error" not in staged.stdout

    start = git_env(repo, "rebase", "-i", "HEAD~1", GIT_SEQUENCE_EDITOR="sed -i 1s/^pick/edit/")
    assert start.returncode == 0, start.stderr
    rebasing = run("sync")
    assert rebasing.returncode == EXIT_BLOCKED, rebasing.stdout + rebasing.stderr
    assert "git rebase --continue" in rebasing.stdout and "git rebase --abort" in rebasing.stdout
    assert "git switch main" not in rebasing.stdout
    status = run("status")
    assert status.returncode == EXIT_BLOCKED and "git rebase --abort" in status.stdout
    git(repo, "rebase", "--abort")

    git(repo, "reset", "-q", "--hard", "HEAD~1")
    rewound = run("sync")
    assert rewound.returncode == EXIT_ATTENTION, rewound.stdout + rewound.stderr
    assert "  withheld: a.md: not pushed: main was moved back 1 version(s)" in rewound.stdout
    forced = run("push", "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert "  pushed: update a.md" in forced.stdout
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        memory = client.find_memory(store_id, "a.md")
        assert memory is not None
        assert client.get_memory(store_id, memory.id).content == "a2\n"
