"""``git clone memstore::<store URL>``: the real git binary drives git-remote-memstore against the
reference server, in each dialect; a fresh ``memsync pull`` mirror of the same store is the oracle
for commit ids, the API for what the store holds."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsync.api import Client, Operation, Store, open_client
from memsync.mirror import Mirror
from memsync.remote import RemoteHelper, parse_store_url
from memsync.rules import Dialect
from memsync.sync.pull import pull_store
from tests.api.test_network import NAME, PROXY_ENV, _named, _serving, certificate, tls_front
from tests.support.server import ServerProcess
from tests.support.waiting import wait_for

__all__ = ["certificate", "tls_front"]  # fixtures, shared with tests/api/test_network.py

PREFIX = {Dialect.FORWARD: "/api/v1/forward", Dialect.CLOUD: "/api/v1/cloud", Dialect.ANTHROPIC: "/v1"}


class Remote:
    """One store of the reference server, and git run against it as a user would."""

    def __init__(self, server: ServerProcess, client: Client, dialect: Dialect, folder: Path) -> None:
        self.server, self.client, self.dialect, self.folder = server, client, dialect, folder
        self.store: Store = client.create_store(
            f"rh-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()), description="made by tests"
        )
        self.url = f"memstore::{server.base_url}{PREFIX[dialect]}/memory_stores/{self.store.id}"
        # git finds the helper on PATH, beside the interpreter that runs the tests.
        self.env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "MEMSYNC_TOKEN": server.token,
        }

    def git(
        self, *args: str, cwd: Path | None = None, check: bool = True, crash_at: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = self.env if crash_at is None else {**self.env, "MEMSYNC_CRASH_AT": crash_at}
        done = subprocess.run(
            ["git", *args], cwd=cwd or self.folder, env=env, capture_output=True, text=True, timeout=120
        )
        if check:
            assert done.returncode == 0, f"git {' '.join(args)}: {done.stdout}{done.stderr}"
        return done

    def clone(self, name: str) -> Path:
        self.git("clone", "-q", self.url, name)
        return self.folder / name

    def commit(self, clone: Path, files: dict[str, str | bytes | None], message: str = "edit") -> None:
        for path, content in files.items():
            target = clone / path
            if content is None:
                target.unlink()
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content.encode() if isinstance(content, str) else content)
        self.git("add", "-A", cwd=clone)
        self.git("commit", "-q", "-m", message, cwd=clone)

    def contents(self) -> dict[str, str]:
        return {
            m.path.lstrip("/"): self.client.get_memory(self.store.id, m.id).content
            for m in self.client.list_memories(self.store.id)
        }

    def mirror_tip(self) -> str | None:
        """The tip a fresh ``memsync pull`` of the store makes: the oracle of commit ids."""
        root = self.folder / f"mirror-{uuid.uuid4().hex[:6]}"
        report = pull_store(self.client, self.store, root)
        assert report.ok, report.error
        with Mirror.open(root / self.store.id) as mirror:
            return mirror.tip()

    def head(self, clone: Path) -> str:
        return self.git("rev-parse", "HEAD", cwd=clone).stdout.strip()


@pytest.fixture(params=list(Dialect), ids=lambda d: d.value)
def remote(request: pytest.FixtureRequest, server: ServerProcess, tmp_path: Path) -> Iterator[Remote]:
    with open_client(request.param, server.base_url, server.token) as client:
        yield Remote(server, client, request.param, tmp_path)


def test_a_clone_has_the_commits_a_mirror_has_and_the_bytes_of_the_store(remote: Remote) -> None:
    alpha = remote.client.create_memory(remote.store.id, "notes/a.md", "alpha\n")
    remote.client.create_memory(remote.store.id, "crlf.md", "line\r\nnext\r\n")
    clone = remote.clone("notes")
    assert remote.head(clone) == remote.mirror_tip()
    assert (clone / "crlf.md").read_bytes() == b"line\r\nnext\r\n"  # a memory's \r is content
    assert remote.git("status", "--porcelain", cwd=clone).stdout == ""
    remote.git("fsck", "--no-progress", cwd=clone)
    config = (clone / ".git" / "config").read_text()
    assert remote.server.token not in config and "autocrlf = false" in config
    # A fetch with nothing new changes nothing; a new version arrives with the mirror's id.
    assert remote.git("fetch", cwd=clone).stdout == ""
    remote.client.create_memory(remote.store.id, "later.md", "later\n")
    remote.git("pull", "-q", cwd=clone)
    assert remote.head(clone) == remote.mirror_tip() and (clone / "later.md").read_text() == "later\n"
    # git blame names each line's version, as in a mirror.
    remote.client.update_memory(remote.store.id, alpha.id, "alpha\nbeta\n", expected_sha256=None)
    remote.git("pull", "-q", cwd=clone)
    blame = remote.git("blame", "--line-porcelain", "notes/a.md", cwd=clone).stdout.splitlines()
    summaries = [line.removeprefix("summary ") for line in blame if line.startswith("summary ")]
    assert summaries == ["created notes/a.md", "updated notes/a.md"]


def test_pushes_write_the_change_and_pull_brings_the_stores_history(remote: Remote) -> None:
    remote.client.create_memory(remote.store.id, "a.md", "alpha\n")
    clone = remote.clone("notes")
    remote.commit(clone, {"a.md": "alpha, edited\n", "topic/b.md": "bee\n"}, "two files")
    remote.git("push", "-q", cwd=clone)
    assert remote.contents() == {"a.md": "alpha, edited\n", "topic/b.md": "bee\n"}
    # A second push before any pull builds on the first: only its own change is sent.
    remote.commit(clone, {"topic/b.md": None}, "drop b")
    remote.git("push", "-q", cwd=clone)
    assert remote.contents() == {"a.md": "alpha, edited\n"}
    remote.git("pull", "-q", cwd=clone)
    assert remote.head(clone) == remote.mirror_tip()
    log = remote.git("log", "--format=%s", cwd=clone).stdout.splitlines()
    # One commit per version, in the order memsync wrote them; the user's commits are gone.
    assert log[0] == "deleted topic/b.md" and log[-1] == "created a.md"
    assert sorted(log[1:3]) == ["created topic/b.md", "updated a.md"]
    assert remote.git("status", "--porcelain", cwd=clone).stdout == ""


def test_a_push_after_pulling_ones_own_push_builds_on_the_stores_commits(remote: Remote) -> None:
    """Found by the two-clone state machine: push, pull (rebased onto the store's commits), commit,
    push. The second push builds on the store's tip, not on the first pushed commit."""
    remote.client.create_memory(remote.store.id, "first.md", "there first\n")
    clone = remote.clone("notes")
    remote.commit(clone, {"a.md": "one\n"})
    remote.git("push", "-q", cwd=clone)
    remote.git("pull", "-q", cwd=clone)
    remote.commit(clone, {"b.md": "two\n"})
    remote.git("push", "-q", cwd=clone)
    assert remote.contents() == {"first.md": "there first\n", "a.md": "one\n", "b.md": "two\n"}


def test_an_empty_store_clones_empty_and_takes_a_first_push_to_main(remote: Remote) -> None:
    clone = remote.folder / "empty"
    cloned = remote.git("-c", "init.defaultBranch=master", "clone", remote.url, "empty")
    assert "empty repository" in cloned.stderr
    # git names the first branch after init.defaultBranch; a store's branch is main.
    remote.git("switch", "-q", "-c", "main", cwd=clone)
    remote.commit(clone, {"a.md": "the first memory\n"})
    remote.git("push", "-q", "-u", "origin", "main", cwd=clone)
    assert remote.contents() == {"a.md": "the first memory\n"}
    remote.git("pull", "-q", cwd=clone)
    assert remote.head(clone) == remote.mirror_tip()


def test_a_push_behind_the_store_is_rejected_then_rebased_and_two_clones_converge(remote: Remote) -> None:
    remote.client.create_memory(remote.store.id, "a.md", "alpha\n")
    first, second = remote.clone("first"), remote.clone("second")
    remote.commit(first, {"one.md": "from the first\n"})
    remote.git("push", "-q", cwd=first)
    remote.commit(second, {"two.md": "from the second\n"})
    refused = remote.git("push", cwd=second, check=False)
    assert refused.returncode != 0
    assert "! [rejected]        main -> main (fetch first)" in refused.stderr
    assert "two.md" not in remote.contents()  # nothing written
    remote.git("pull", "-q", cwd=second)
    remote.git("push", "-q", cwd=second)
    remote.git("pull", "-q", cwd=first)
    remote.git("pull", "-q", cwd=second)
    assert remote.head(first) == remote.head(second) == remote.mirror_tip()
    assert set(remote.contents()) == {"a.md", "one.md", "two.md"}


def test_a_file_that_is_no_memory_refuses_the_whole_push(remote: Remote) -> None:
    remote.client.create_memory(remote.store.id, "a.md", "alpha\n")
    clone = remote.clone("notes")
    remote.commit(clone, {"a.md": "alpha, edited\n", "bad.md": b"\xff\xfe not UTF-8\n"})
    refused = remote.git("push", cwd=clone, check=False)
    assert refused.returncode != 0 and "[remote rejected]" in refused.stderr
    assert "bad.md" in refused.stderr and "nothing written" in refused.stderr
    assert remote.contents() == {"a.md": "alpha\n"}
    # Nothing of the refused push stays behind: a fetch finds the private mirror clean.
    fetched = remote.git("fetch", cwd=clone)
    assert fetched.stdout == fetched.stderr == ""
    remote.commit(clone, {"bad.md": None})
    remote.git("push", "-q", cwd=clone)
    assert remote.contents() == {"a.md": "alpha, edited\n"}


def test_deleting_most_of_a_store_needs_force(remote: Remote) -> None:
    for n in range(4):
        remote.client.create_memory(remote.store.id, f"m{n}.md", f"{n}\n")
    clone = remote.clone("notes")
    remote.commit(clone, {f"m{n}.md": None for n in range(3)})
    refused = remote.git("push", cwd=clone, check=False)
    assert refused.returncode != 0 and "git push --force" in refused.stderr
    assert len(remote.contents()) == 4
    remote.git("push", "-q", "--force", cwd=clone)
    assert remote.contents() == {"m3.md": "3\n"}


def test_a_url_that_names_no_store_is_a_clear_error(remote: Remote) -> None:
    done = remote.git("clone", f"memstore::{remote.server.base_url}/api/v1/elsewhere/x", "bad", check=False)
    assert done.returncode != 0 and "names no store" in done.stderr
    assert remote.server.token not in done.stderr


def test_a_push_killed_half_way_is_finished_after_a_pull(remote: Remote) -> None:
    remote.client.create_memory(remote.store.id, "a.md", "alpha\n")
    clone = remote.clone("notes")
    remote.commit(clone, {"b.md": "bee\n", "c.md": "sea\n", "d.md": "dee\n"})
    # The helper killed (SIGKILL) after its second write to the store.
    killed = remote.git("push", cwd=clone, check=False, crash_at="push.store_write:2")
    assert killed.returncode != 0
    written = remote.contents()
    assert 1 < len(written) < 4
    # The store moved under the clone: git refuses, a pull brings what was written, the push the rest.
    assert "(fetch first)" in remote.git("push", cwd=clone, check=False).stderr
    remote.git("pull", "-q", cwd=clone)
    remote.git("push", "-q", cwd=clone)
    assert remote.contents() == {"a.md": "alpha\n", "b.md": "bee\n", "c.md": "sea\n", "d.md": "dee\n"}
    remote.git("pull", "-q", cwd=clone)
    assert remote.head(clone) == remote.mirror_tip()


def test_a_rename_keeps_the_memory_where_the_dialect_can(remote: Remote) -> None:
    made = remote.client.create_memory(remote.store.id, "old.md", "kept content\n")
    clone = remote.clone("notes")
    remote.git("mv", "old.md", "new.md", cwd=clone)
    remote.git("commit", "-q", "-m", "rename", cwd=clone)
    remote.git("push", "-q", cwd=clone)
    assert remote.contents() == {"new.md": "kept content\n"}
    found = remote.client.find_memory(remote.store.id, "new.md")
    assert found is not None
    # Native on Anthropic; create then delete on Forward and Cloud.
    assert (found.id == made.id) is (remote.dialect is Dialect.ANTHROPIC)
    remote.git("pull", "-q", cwd=clone)
    follow = remote.git("log", "--follow", "--format=%s", "--", "new.md", cwd=clone).stdout.splitlines()
    assert follow[-1] == "created old.md"


def test_the_token_comes_from_a_token_file_or_a_credential_helper(remote: Remote, tmp_path: Path) -> None:
    remote.client.create_memory(remote.store.id, "a.md", "alpha\n")
    del remote.env["MEMSYNC_TOKEN"]
    refused = remote.git("clone", remote.url, "none", check=False)
    assert refused.returncode != 0 and "no API token" in refused.stderr
    token_file = tmp_path / "token"
    token_file.write_text(remote.server.token + "\n")
    remote.git("clone", "-q", "-c", f"memstore.tokenFile={token_file}", remote.url, "by-file")
    assert (tmp_path / "by-file" / "a.md").read_text() == "alpha\n"
    answer = tmp_path / "credential"
    answer.write_text(f"username=memsync\npassword={remote.server.token}\n")
    helper = f"!cat {answer}"  # a credential helper answering from a file: no token in the config
    remote.git("clone", "-q", "-c", f"credential.helper={helper}", remote.url, "by-helper")
    assert (tmp_path / "by-helper" / "a.md").read_text() == "alpha\n"
    for clone in ("by-file", "by-helper"):
        assert remote.server.token not in (tmp_path / clone / ".git" / "config").read_text()


def test_what_a_no_op_fetch_and_a_one_file_push_cost_in_requests(remote: Remote, tmp_path: Path) -> None:
    """The helper driven in-process with git's own command lines, to count its requests."""
    for n in range(3):
        remote.client.create_memory(remote.store.id, f"m{n}.md", f"{n}\n")
    clone = remote.clone("notes")
    git_dir = clone / ".git"
    location = parse_store_url(remote.url.removeprefix("memstore::"))

    def run(commands: str) -> tuple[RemoteHelper, str]:
        out = io.StringIO()
        helper = RemoteHelper(location, git_dir, out)
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("MEMSYNC_TOKEN", remote.server.token)
            helper.serve(io.StringIO(commands))
        helper.close()
        return helper, out.getvalue()

    listed, said = run("list\n\n")
    assert said.startswith(f"{remote.head(clone)} refs/heads/main\n")
    assert listed.client().request_count == 1  # the versions since the tip (the store is known)
    remote.commit(clone, {"m0.md": "changed\n"})
    pushed, said = run("list for-push\npush refs/heads/main:refs/heads/main\n\n")
    assert said.endswith("ok refs/heads/main\n\n")
    # list for-push: the one listing. The push: one conditional write, and the import of what
    # it wrote, which costs each dialect what a memsync pull of one new version costs it.
    push_requests = {Dialect.FORWARD: 3, Dialect.CLOUD: 4, Dialect.ANTHROPIC: 2}[remote.dialect]
    assert pushed.client().request_count == 1 + push_requests
    assert remote.contents()["m0.md"] == "changed\n"


def test_a_full_scan_falls_due_by_memstore_full_scan_interval(remote: Remote) -> None:
    # More versions than one page holds (100): a full scan lists pages an incremental pull does not.
    for n in range(101):
        remote.client.create_memory(remote.store.id, f"m{n:03d}.md", f"{n}\n")
    clone = remote.clone("notes")
    location = parse_store_url(remote.url.removeprefix("memstore::"))

    def listed() -> tuple[int, str]:
        out = io.StringIO()
        helper = RemoteHelper(location, clone / ".git", out)
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("MEMSYNC_TOKEN", remote.server.token)
            helper.serve(io.StringIO("list\n\n"))
        helper.close()
        return helper.client().request_count, out.getvalue().split()[0]

    incremental = listed()
    remote.git("config", "memstore.fullScanInterval", "daily", cwd=clone)
    refused = remote.git("fetch", cwd=clone, check=False)
    assert refused.returncode != 0 and "memstore.fullScanInterval is 'daily', not a number" in refused.stderr
    remote.git("config", "memstore.fullScanInterval", "0", cwd=clone)
    full = listed()
    # The whole history listed again (more requests), and nothing about the commits changes.
    assert full[0] > incremental[0] and full[1] == incremental[1] == remote.head(clone)


def _behind_a_name(server: ServerProcess, client: Client, folder: Path, content: str) -> tuple[Remote, str]:
    """A Forward store holding ``a.md``, and its URL under a host name only the test proxy knows
    (the environment's proxy settings dropped, so git's own settings alone route the helper)."""
    remote = Remote(server, client, Dialect.FORWARD, folder)
    client.create_memory(remote.store.id, "a.md", content)
    for variable in PROXY_ENV:
        remote.env.pop(variable, None)
    return remote, f"memstore::{_named(server)}/api/v1/forward/memory_stores/{remote.store.id}"


def test_git_http_proxy_carries_the_helpers_requests(server: ServerProcess, tmp_path: Path) -> None:
    """The store under a host name only the proxy knows: a clone works through ``http.proxy`` alone."""
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        remote, named = _behind_a_name(server, client, tmp_path, "through the proxy\n")
        refused = remote.git("clone", "-c", "memstore.allowPlainHttp=true", named, "direct", check=False)
        assert refused.returncode != 0 and "cannot reach" in refused.stderr
        with _serving(server) as proxy:
            proxied = f"http.proxy=http://127.0.0.1:{proxy.server_address[1]}"
            remote.git("clone", "-q", "-c", proxied, "-c", "memstore.allowPlainHttp=true", named, "proxied")
            assert proxy.requests and all(NAME in request for request in proxy.requests)
        assert (tmp_path / "proxied" / "a.md").read_text() == "through the proxy\n"


def test_git_http_ssl_ca_info_is_the_helpers_trust(
    server: ServerProcess, tls_front: str, certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    """The store behind TLS with a private certificate: refused by default, trusted through
    ``http.sslCAInfo`` as git itself would trust it."""
    cert, _ = certificate
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        remote = Remote(server, client, Dialect.FORWARD, tmp_path)
        client.create_memory(remote.store.id, "a.md", "over tls\n")
        for variable in ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", *PROXY_ENV):
            remote.env.pop(variable, None)
        url = f"memstore::{tls_front}/api/v1/forward/memory_stores/{remote.store.id}"
        refused = remote.git("clone", url, "untrusted", check=False)
        assert refused.returncode != 0 and "cannot trust" in refused.stderr
        remote.git("clone", "-q", "-c", f"http.sslCAInfo={cert}", url, "trusted")
        assert (tmp_path / "trusted" / "a.md").read_text() == "over tls\n"


@pytest.mark.parametrize("other_path", ["m0.md", "m1.md"], ids=["same-file", "another-file"])
def test_a_store_written_between_listing_and_pushing_loses_nothing(remote: Remote, other_path: str) -> None:
    """Another writer between git's ``list for-push`` and its ``push``: the writes' preconditions
    catch it. The same file refuses the push (the user merges in the clone, as after any rejected
    push); another file is pushed beside it. Either way the next pull and push go through."""
    for n in range(2):
        remote.client.create_memory(remote.store.id, f"m{n}.md", f"{n}\n")
    clone = remote.clone("notes")
    remote.commit(clone, {"m0.md": "from the clone\n"})
    location = parse_store_url(remote.url.removeprefix("memstore::"))
    out = io.StringIO()
    helper = RemoteHelper(location, clone / ".git", out)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MEMSYNC_TOKEN", remote.server.token)
        helper.serve(io.StringIO("list for-push\n\n"))
        memory = next(
            m for m in remote.client.list_memories(remote.store.id) if m.path.lstrip("/") == other_path
        )
        remote.client.update_memory(
            remote.store.id, memory.id, content="from another writer\n", expected_sha256=None
        )
        helper.serve(io.StringIO("push refs/heads/main:refs/heads/main\n\n"))
    helper.close()
    said = out.getvalue().split("\n\n", 1)[1]  # the push's answer, after the listing's
    if other_path == "m0.md":
        assert said.startswith("error refs/heads/main ") and "m0.md" in said
        assert remote.contents()["m0.md"] == "from another writer\n"  # never overwritten
        # The clone merges as after any rejected push; the next push builds on the store's history.
        rebased = remote.git("pull", cwd=clone, check=False)
        assert rebased.returncode != 0 and "CONFLICT" in rebased.stdout
        (clone / "m0.md").write_text("merged\n")
        remote.git("add", "m0.md", cwd=clone)
        remote.git("-c", "core.editor=true", "rebase", "--continue", cwd=clone)
        remote.git("push", "-q", cwd=clone)
        assert remote.contents() == {"m0.md": "merged\n", "m1.md": "1\n"}
    else:
        assert said == "ok refs/heads/main\n\n"
        assert remote.contents() == {"m0.md": "from the clone\n", "m1.md": "from another writer\n"}
    remote.git("pull", "-q", cwd=clone)
    assert remote.head(clone) == remote.mirror_tip()
    assert remote.git("status", "--porcelain", cwd=clone).stdout == ""


@pytest.mark.parametrize("crash_at", ["pull.version:3", "mirror.ref_moved:1"])
def test_a_clone_or_fetch_killed_half_way_runs_again(remote: Remote, crash_at: str) -> None:
    """The helper killed (SIGKILL) while importing, or once the import is written: git removes
    the clone it could not finish, and a second ``git clone`` makes the mirror's commits. A fetch
    into a repository resumes from what the first one imported."""
    for n in range(5):
        remote.client.create_memory(remote.store.id, f"m{n}.md", f"{n}\n")
    tip = remote.mirror_tip()
    killed = remote.git("clone", "-q", remote.url, "notes", check=False, crash_at=crash_at)
    assert killed.returncode != 0
    # git removes the clone; the killed helper's git fast-import, orphaned, ends its pack at end of
    # input and may make part of the folder again. Once it is done, a user deletes what is left.
    wait_for(lambda: not _working_in(remote.folder / "notes"), 30, "the orphaned fast-import")
    shutil.rmtree(remote.folder / "notes", ignore_errors=True)
    clone = remote.clone("notes")
    assert remote.head(clone) == tip
    assert remote.git("status", "--porcelain", cwd=clone).stdout == ""

    fetched = remote.folder / "fetched"
    remote.git("init", "-q", "fetched")
    remote.git("remote", "add", "origin", remote.url, cwd=fetched)
    assert remote.git("fetch", "-q", cwd=fetched, check=False, crash_at=crash_at).returncode != 0
    # The next fetch may start while the orphan still writes: it makes the private mirror again
    # where what is left is not a repository.
    remote.git("fetch", "-q", cwd=fetched)
    assert remote.git("rev-parse", "origin/main", cwd=fetched).stdout.strip() == tip
    remote.git("fsck", "--no-progress", cwd=fetched)


def test_a_version_memsync_cannot_import_is_skipped_by_git_config(
    server_factory: object, tmp_path: Path
) -> None:
    """A version a mirror needs ``memsync pull --skip-version`` for (its path escapes the store:
    the server's storage was tampered with): the clone stops before it, names the git config key
    that imports past it, and the clone made with it has the commits a mirror skipping it has."""
    assert callable(server_factory)
    db = tmp_path / "tampered.sqlite3"
    served: ServerProcess = server_factory(db=db)
    with open_client(Dialect.FORWARD, served.base_url, served.token) as client:
        remote = Remote(served, client, Dialect.FORWARD, tmp_path)
        client.create_memory(remote.store.id, "ok.md", "fine\n")
        bad = client.create_memory(remote.store.id, "bad.md", "original\n")
        client.create_memory(remote.store.id, "after.md", "later\n")
        version = next(v for v in client.iter_versions(remote.store.id) if v.memory_id == bad.id)
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE versions SET path = ? WHERE id = ?", ("../escape.md", version.id))

        refused = remote.git("clone", remote.url, "notes", check=False)
        assert refused.returncode != 0
        assert f"git clone -c memstore.skipVersion={version.id}" in refused.stderr
        assert not (tmp_path / "escape.md").exists()

        clone = remote.folder / "notes"
        remote.git("clone", "-q", "-c", f"memstore.skipVersion={version.id}", remote.url, "notes")
        assert sorted(p.name for p in clone.iterdir() if p.name != ".git") == ["after.md", "ok.md"]
        mirror = pull_store(client, remote.store, tmp_path / "m", skip_versions=frozenset({version.id}))
        assert mirror.ok and mirror.tip == remote.head(clone)
        # The key stays in the clone's config: later fetches import past the version too.
        client.create_memory(remote.store.id, "later.md", "more\n")
        remote.git("pull", "-q", cwd=clone)
        assert (clone / "later.md").read_text() == "more\n"


def test_a_redaction_is_a_forced_update_that_says_why(remote: Remote) -> None:
    """A version redacted after the clone fetched it: the full scan finds it, the private mirror's
    history is rewritten without its content, and git reports a forced update of origin/main,
    which the helper explains; a pull then stands on the mirror's commits, the secret unreachable."""
    memory = remote.client.create_memory(remote.store.id, "a.md", "a secret\n")
    remote.client.update_memory(remote.store.id, memory.id, "nothing to see\n", expected_sha256=None)
    remote.client.create_memory(remote.store.id, "b.md", "bee\n")
    clone = remote.clone("notes")
    remote.git("config", "memstore.fullScanInterval", "0", cwd=clone)
    created = next(
        v
        for v in remote.client.iter_versions(remote.store.id)
        if v.memory_id == memory.id and v.operation is Operation.CREATED
    )
    remote.client.redact_version(remote.store.id, created.id)

    fetched = remote.git("fetch", cwd=clone)
    assert "(forced update)" in fetched.stderr
    assert "history was rewritten" in fetched.stderr
    remote.git("pull", "-q", cwd=clone)
    assert remote.head(clone) == remote.mirror_tip()
    remote.git("reflog", "expire", "--expire=now", "--all", cwd=clone)
    remote.git("gc", "-q", "--prune=now", cwd=clone)
    everything = remote.git("log", "--all", "-p", "--format=%H", cwd=clone).stdout
    assert "nothing to see" in everything and "a secret" not in everything


def test_a_push_refused_half_way_says_what_it_wrote_and_a_pull_brings_it(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The store refuses writes after the first (a grant revoked mid-push, through a proxy): the
    push fails naming what it wrote, origin/main stays a commit of the store's history (never the
    pushed one), and once writes are allowed again a pull and a push send the rest."""
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        remote, named = _behind_a_name(server, client, tmp_path, "alpha\n")
        with _serving(server) as proxy:
            settings = ["-c", f"http.proxy=http://127.0.0.1:{proxy.server_address[1]}"]
            settings += ["-c", "memstore.allowPlainHttp=true"]
            remote.git("clone", "-q", *settings, named, "notes")
            clone = tmp_path / "notes"
            for setting in settings[1::2]:
                remote.git("config", *setting.split("=", 1), cwd=clone)
            before = remote.git("rev-parse", "origin/main", cwd=clone).stdout
            remote.commit(clone, {"b.md": "bee\n", "c.md": "sea\n"})
            proxy.writes_left = 1
            failed = remote.git("push", cwd=clone, check=False)
            assert failed.returncode != 0 and "writes revoked" in failed.stderr
            written = set(remote.contents()) - {"a.md"}
            assert len(written) == 1
            assert f"memstore: written: create {written.pop()}" in failed.stderr
            assert remote.git("rev-parse", "origin/main", cwd=clone).stdout == before
            proxy.writes_left = None
            remote.git("pull", "-q", cwd=clone)
            remote.git("push", "-q", cwd=clone)
            remote.git("pull", "-q", cwd=clone)
    assert remote.contents() == {"a.md": "alpha\n", "b.md": "bee\n", "c.md": "sea\n"}
    assert remote.head(clone) == remote.mirror_tip()


def _working_in(folder: Path) -> bool:
    """Whether a process names ``folder`` on its command line (git fast-import's --git-dir)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if str(folder).encode() in cmdline.read_bytes():
                return True
    return False


def test_a_private_mirror_left_as_no_repository_is_imported_again(remote: Remote) -> None:
    """What an orphaned git fast-import can leave where the private mirror was (a pack folder, no
    repository): the next fetch says so and imports the store again, to the same commits."""
    remote.client.create_memory(remote.store.id, "a.md", "alpha\n")
    clone = remote.clone("notes")
    (private,) = (clone / ".git" / "memstore").glob(f"*/{remote.store.id}")
    shutil.rmtree(private)
    (private / ".git" / "objects" / "pack").mkdir(parents=True)
    fetched = remote.git("fetch", cwd=clone)
    assert "left incomplete by a killed run" in fetched.stderr
    assert remote.git("rev-parse", "origin/main", cwd=clone).stdout.strip() == remote.mirror_tip()
