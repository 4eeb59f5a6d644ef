"""The repository per store: creation, configuration, refs, git's view of it, and the git binary check."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memsync.errors import EnvironmentProblem, MirrorError
from memsync.mirror import Mirror
from memsync.mirror.gitbinary import require_git
from tests.mirror.oracle import fsck, git, record

NewMirror = Callable[..., Mirror]


def test_init_makes_a_plain_repository_with_main_checked_out(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    assert git(mirror.path, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
    assert git(mirror.path, "rev-parse", "--is-bare-repository").strip() == "false"
    expected = {
        "core.autocrlf": "false",
        "core.filemode": "false",
        "core.longpaths": "true",
        "core.fsync": "committed",
        "branch.main.remote": "memstore",
        "branch.main.merge": "refs/heads/main",
        "remote.memstore.fetch": "+refs/heads/main:refs/remotes/memstore/main",
        "memsync.mirrorformat": "1",
    }
    for key, value in expected.items():
        assert git(mirror.path, "config", "--local", "--get", key).strip() == value
    exclude = (mirror.git_dir / "info" / "exclude").read_text()
    assert "*.swp" in exclude and "4913" in exclude and ".#*" in exclude
    assert "-text -filter" in (mirror.git_dir / "info" / "attributes").read_text()
    for temporary in ("a.swp", "b~", ".#c", "4913"):
        assert git(mirror.path, "check-ignore", temporary).strip() == temporary
    fsck(mirror.path)


def test_init_and_open_refuse_what_is_not_theirs(tmp_path: Path, new_mirror: NewMirror) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "file").write_text("x")
    with pytest.raises(MirrorError, match="not an empty directory"):
        Mirror.init(tmp_path / "full")
    with pytest.raises(MirrorError, match=r"no \.git directory"):
        Mirror.open(tmp_path / "full")
    subprocess.run(["git", "init", "-q", str(tmp_path / "plain")], check=True)
    with pytest.raises(MirrorError, match="not a memsync mirror"):
        Mirror.open(tmp_path / "plain")
    mirror = new_mirror()
    git(mirror.path, "config", "memsync.mirrorformat", "2")
    with pytest.raises(MirrorError, match=r"format 2.*upgrade memsync"):
        Mirror.open(mirror.path)


def test_plain_git_push_fetch_and_pull_fail_with_a_hint(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    with mirror.history_writer() as writer:
        writer.add(record(1, "mem_a", "created", "a.md", b"a\n"))
    mirror.update_checkout()
    (mirror.path / "a.md").write_text("edit\n")
    git(mirror.path, "commit", "-qam", "edit")
    tip = mirror.tip()
    for command in (["push"], ["push", "memstore", "main"], ["fetch"], ["pull"]):
        result = subprocess.run(["git", "-C", str(mirror.path), *command], capture_output=True, text=True)
        assert result.returncode != 0, command
        assert "run 'memsync sync' instead of git fetch, pull or push" in result.stderr
    assert mirror.tip() == tip  # a fetch can never overwrite the imported history


def test_set_ref_if_equals_refuses_names_outside_refs(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    with pytest.raises(MirrorError, match="not a full ref name"):
        mirror.git.set_ref_if_equals("HEAD", "0" * 40, None)


def test_metadata_lives_on_its_own_branch(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    with mirror.history_writer() as writer:
        writer.add(record(1, "mem_a", "created", "a.md", b"a\n"))
    tip = mirror.tip()
    when = datetime(2026, 3, 2, tzinfo=UTC)
    store = {"id": "memstore_1", "name": "Notes", "metadata": {"team": "ünïcode"}}
    memories = {"mem_a": {"path": "a.md", "metadata": {"k": "v"}}, "mem_b": {"path": "b.md", "metadata": {}}}
    first = mirror.write_metadata(store=store, memories=memories, when=when)
    assert first is not None
    assert mirror.write_metadata(store=store, memories=memories, when=when) is None  # nothing changed
    assert mirror.read_metadata() == (store, memories)
    second = mirror.write_metadata(store=None, memories={"mem_a": memories["mem_a"]}, when=when)
    assert second is not None
    assert mirror.read_metadata() == (store, {"mem_a": memories["mem_a"]})
    assert git(mirror.path, "rev-parse", "refs/heads/memsync/metadata~1").strip() == first
    assert git(mirror.path, "ls-tree", "-r", "--name-only", "refs/heads/memsync/metadata").split() == [
        "memories/mem_a.json",
        "store.json",
    ]
    assert mirror.tip() == tip  # never on memstore/main
    assert '"team": "ünïcode"' in git(mirror.path, "show", "refs/heads/memsync/metadata:store.json")
    fsck(mirror.path)


@pytest.fixture
def fresh_git_check() -> Iterator[None]:
    require_git.cache_clear()
    yield
    require_git.cache_clear()


def test_metadata_pairs_are_streamed_and_a_failing_listing_records_nothing(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    when = datetime(2026, 3, 2, tzinfo=UTC)
    store = {"id": "memstore_1", "name": "Notes"}
    documents = {f"mem_{n}": {"path": f"n{n}.md", "metadata": {}} for n in range(3)}
    first = mirror.write_metadata(store=store, memories=iter(documents.items()), when=when)
    assert first is not None and mirror.read_metadata() == (store, documents)

    def listing_that_fails() -> Iterator[tuple[str, dict[str, object]]]:
        yield "mem_0", {"path": "renamed.md", "metadata": {}}
        raise ConnectionError("the listing broke after one page")

    with pytest.raises(ConnectionError):
        mirror.write_metadata(store={**store, "name": "Renamed"}, memories=listing_that_fails(), when=when)
    # A partial listing must not drop the files of the memories it did not reach: nothing moved.
    assert mirror.git.ref_target(mirror.METADATA_REF) == first
    assert mirror.read_metadata() == (store, documents)


def test_a_missing_git_binary_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_git_check: None
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(EnvironmentProblem, match="git binary was not found on PATH"):
        Mirror.init(tmp_path / "store")


def test_an_old_git_binary_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_git_check: None
) -> None:
    bin_dir = tmp_path / "old-git"
    bin_dir.mkdir()
    old_git = bin_dir / "git"
    old_git.write_text("#!/bin/sh\necho 'git version 2.25.1'\n")
    old_git.chmod(old_git.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(EnvironmentProblem, match=r"git 2\.25; memsync needs git 2\.30 or newer"):
        Mirror.init(tmp_path / "store")


def test_pygit2_errors_arrive_as_mirror_errors(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    with pytest.raises(MirrorError, match="reading the tree of"):
        mirror.files("0" * 40)
    with pytest.raises(MirrorError, match="reading blob"):
        mirror.content("not-hex")
