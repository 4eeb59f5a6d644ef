"""``git clone memstore::…`` on a case-insensitive, case-preserving drive (exFAT over a loop device:
names behave as on NTFS, and as on APFS for case). A push writes exactly the committed files, whatever
the drive: each "written:" line is what the store then holds, both spellings of a name committed
apart are two memories, and case-only renames behave as on a Mac."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsync.api import Client, open_client
from memsync.mirror import decode_path
from memsync.rules import Dialect
from tests.remote.test_remote_helper import Remote
from tests.support.filesystems import mounted
from tests.support.server import ServerProcess

# Every test here mounts a real filesystem over a loop device.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def exfat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with mounted("exfat", tmp_path_factory.mktemp("exfat")) as point:
        yield point


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Client]:
    with open_client(Dialect.FORWARD, server.base_url, server.token) as opened:
        yield opened


def _remote(server: ServerProcess, client: Client, folder: Path, seed: dict[str, str]) -> Remote:
    folder.mkdir(parents=True, exist_ok=True)
    remote = Remote(server, client, Dialect.FORWARD, folder)
    for path, content in seed.items():
        client.create_memory(remote.store.id, path, content)
    return remote


@pytest.fixture
def laptop(server: ServerProcess, client: Client, exfat: Path) -> Remote:
    return _remote(server, client, exfat / uuid.uuid4().hex[:8], {})


def _committed(remote: Remote, clone: Path) -> dict[str, str]:
    """``{memory path: content}`` of the clone's HEAD, read from git's objects."""
    listed = remote.git("ls-tree", "-r", "-z", "--name-only", "HEAD", cwd=clone).stdout.split("\0")
    return {decode_path(p): remote.git("show", f"HEAD:{p}", cwd=clone).stdout for p in listed if p}


def _check_written(remote: Remote, clone: Path, stderr: str) -> list[str]:
    """Each "written:" line of a push, checked against the store and the pushed commit."""
    stored, committed = remote.contents(), _committed(remote, clone)
    lines = [line.split("written: ", 1)[1] for line in stderr.splitlines() if "memstore: written: " in line]
    for line in lines:
        action, _, rest = line.partition(" ")
        path, _, moved = rest.partition(" to ")
        memory = decode_path(moved or path)
        if action == "delete" and not moved:
            assert memory not in stored, line
        else:
            assert stored.get(memory) == committed[memory], line
    return lines


def _on_disk(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name != ".git")


def test_a_rename_and_edit_pushes_the_edit_and_the_clone_pulls_clean(laptop: Remote) -> None:
    laptop.client.create_memory(laptop.store.id, "a.md", "original\n")
    clone = laptop.clone("c")
    os.rename(clone / "a.md", clone / "A.md")
    with open(clone / "A.md", "a", encoding="utf-8") as out:
        out.write("EDITED after rename\n")
    laptop.git("add", "A.md", cwd=clone)
    # As on a Mac, git takes A.md for the a.md it tracks: the edit is a.md's, staged by -a.
    laptop.git("commit", "-q", "-m", "rename and edit", cwd=clone, check=False)
    laptop.git("commit", "-q", "-a", "-m", "rename and edit", cwd=clone)
    pushed = laptop.git("push", cwd=clone)
    assert _check_written(laptop, clone, pushed.stderr)
    assert list(laptop.contents().values()) == ["original\nEDITED after rename\n"]
    laptop.git("pull", "-q", cwd=clone)
    assert laptop.git("status", "--porcelain", cwd=clone).stdout == ""
    assert laptop.head(clone) == laptop.mirror_tip()
    (name,) = _on_disk(clone)
    assert (clone / name).read_text(encoding="utf-8") == "original\nEDITED after rename\n"


def _plumbing(remote: Remote, clone: Path, *args: str, stdin: str | None = None) -> str:
    """git run with a scratch index: a commit made without a file on the drive."""
    env = {**remote.env, "GIT_INDEX_FILE": str(clone / ".git" / "plumbing-index")}
    done = subprocess.run(
        ["git", *args], cwd=clone, env=env, input=stdin, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def _commit_tree(remote: Remote, clone: Path, files: dict[str, str], message: str) -> None:
    """A commit of exactly ``files`` on top of HEAD, made with git's plumbing."""
    for path, content in files.items():
        blob = _plumbing(remote, clone, "hash-object", "-w", "--stdin", stdin=content)
        _plumbing(remote, clone, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}")
    tree = _plumbing(remote, clone, "write-tree")
    commit = _plumbing(remote, clone, "commit-tree", tree, "-p", "HEAD", "-m", message)
    remote.git("update-ref", "refs/heads/main", commit, cwd=clone)


TWINS = {"a.md": "alpha\n", "b.md": "b", "B.md": "other content for B"}


def test_twins_committed_with_plumbing_are_two_memories_as_from_ext4(
    laptop: Remote, server: ServerProcess, client: Client, tmp_path: Path
) -> None:
    maps = []
    for remote in (laptop, _remote(server, client, tmp_path / "ext4", {})):
        remote.client.create_memory(remote.store.id, "a.md", "alpha\n")
        clone = remote.clone("c")
        _commit_tree(remote, clone, TWINS, "twins")
        pushed = remote.git("push", cwd=clone)
        assert len(_check_written(remote, clone, pushed.stderr)) == 2
        maps.append(remote.contents())
        # The drive held one file for the two names: the store's spelling gives each its own.
        remote.git("fetch", "-q", cwd=clone)
        remote.git("reset", "-q", "--hard", "origin/main", cwd=clone)
        assert remote.head(clone) == remote.mirror_tip()
        assert remote.git("status", "--porcelain", cwd=clone).stdout == ""
        assert {decode_path(name): (clone / name).read_text() for name in _on_disk(clone)} == TWINS
    assert maps[0] == maps[1] == TWINS


def test_a_case_only_rename_by_git_mv_pushes_and_pulls_under_the_new_name(laptop: Remote) -> None:
    laptop.client.create_memory(laptop.store.id, "keep.md", "kept\n")
    clone = laptop.clone("c")
    laptop.git("mv", "keep.md", "Keep.md", cwd=clone)
    laptop.git("commit", "-q", "-m", "rename", cwd=clone)
    pushed = laptop.git("push", cwd=clone)
    assert _check_written(laptop, clone, pushed.stderr)
    assert laptop.contents() == {"Keep.md": "kept\n"}
    laptop.git("pull", "-q", cwd=clone)
    assert _on_disk(clone) == ["Keep.md"]
    assert (clone / "Keep.md").read_text(encoding="utf-8") == "kept\n"
    assert laptop.git("status", "--porcelain", cwd=clone).stdout == ""


def test_a_finder_style_rename_loses_nothing(laptop: Remote) -> None:
    laptop.client.create_memory(laptop.store.id, "mem.md", "memory\n")
    clone = laptop.clone("c")
    os.rename(clone / "mem.md", clone / "Mem.md")
    laptop.git("add", "-A", cwd=clone)
    # As on a Mac, git takes the file for the one it tracks: nothing to commit, or a rename.
    laptop.git("commit", "-q", "-m", "finder rename", cwd=clone, check=False)
    pushed = laptop.git("push", cwd=clone)
    _check_written(laptop, clone, pushed.stderr)
    laptop.git("pull", "-q", cwd=clone)
    (name,) = _on_disk(clone)
    assert (clone / name).read_text(encoding="utf-8") == "memory\n"
    assert laptop.git("status", "--porcelain", cwd=clone).stdout == ""
    laptop.git("commit", "-q", "-a", "-m", "anything else", cwd=clone, check=False)
    laptop.git("push", "-q", cwd=clone)
    assert list(laptop.contents().values()) == ["memory\n"]


def test_a_clone_configured_with_the_mirrors_values_is_probed_again(laptop: Remote) -> None:
    laptop.client.create_memory(laptop.store.id, "a.md", "alpha\n")
    clone = laptop.clone("c")
    # What earlier versions wrote into every clone, whatever its drive.
    laptop.git("config", "--unset", "memstore.driveProbed", cwd=clone)
    laptop.git("config", "core.ignorecase", "false", cwd=clone)
    laptop.git("config", "core.precomposeunicode", "false", cwd=clone)
    laptop.git("fetch", "-q", cwd=clone)
    assert laptop.git("config", "core.ignorecase", cwd=clone).stdout.strip() == "true"
    assert laptop.git("config", "core.autocrlf", cwd=clone).stdout.strip() == "false"
    # A user's own choice afterwards stays.
    laptop.git("config", "core.ignorecase", "false", cwd=clone)
    laptop.git("fetch", "-q", cwd=clone)
    assert laptop.git("config", "core.ignorecase", cwd=clone).stdout.strip() == "false"


def test_an_index_holding_two_spellings_of_one_file_is_named_with_its_repair(laptop: Remote) -> None:
    laptop.client.create_memory(laptop.store.id, "a.md", "alpha\n")
    clone = laptop.clone("c")
    laptop.git("config", "core.ignorecase", "false", cwd=clone)
    os.rename(clone / "a.md", clone / "A.md")
    laptop.git("add", "A.md", cwd=clone)  # with ignorecase false: a second entry, a.md stays
    fetched = laptop.git("fetch", cwd=clone)
    assert "git rm --cached -- a.md" in fetched.stderr
    laptop.git("rm", "-q", "--cached", "--", "a.md", cwd=clone)
    assert "git rm --cached" not in laptop.git("fetch", cwd=clone).stderr


def test_a_commit_naming_one_memory_twice_is_refused_before_any_write(laptop: Remote) -> None:
    """Committed with plumbing (the drive cannot even hold ``a:b.md``): the memory a:b.md under its own
    name and under memsync's spelling ``a%3Ab.md``. It cannot be written as committed: refused,
    nothing written, both names given."""
    laptop.client.create_memory(laptop.store.id, "a.md", "alpha\n")
    clone = laptop.clone("c")
    _commit_tree(
        laptop, clone, {"a.md": "alpha\n", "b.md": "bee\n", "a:b.md": "one", "a%3Ab.md": "two"}, "twice"
    )
    refused = laptop.git("push", cwd=clone, check=False)
    assert refused.returncode != 0 and "refused, nothing written" in refused.stderr
    assert "a%3Ab.md and a:b.md are two spellings of the memory a:b.md" in refused.stderr
    assert laptop.contents() == {"a.md": "alpha\n"}
