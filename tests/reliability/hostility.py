"""Hostile answers a Memory Store server could give ``memsync pull``, and what memsync must do.

Each :class:`Hostility` turns an honest :class:`StandIn` hostile. :func:`pull_against` runs the
whole trial: an honest first pull makes the mirror, the hostility is injected, a second pull meets
it, and every promise of docs/design.md §2 and §6 is checked on what is left: a clear refusal, a
non-zero exit, nothing written outside the store's repository, no hostile path or content in the
working tree or the git objects, the git directory's own files untouched, and an end within
:data:`QUICK_S`. The soak runs the same trials.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.reliability.harness import (
    MEMSTORE_REF,
    Finished,
    GitOracle,
    MemsyncCli,
    changed_entries,
    git_dir_own_files,
    snapshot,
    write_config,
)
from tests.reliability.loopback import Reply, Request
from tests.reliability.standin import StandIn, reply_json, sha256

MARKER = "HOSTILE-PAYLOAD"
HONEST = {"notes/honest.md": "honest\n", "notes/second.md": "second honest\n"}
# Loopback, a handful of requests: a refusal that takes longer than this did not refuse, it gave up.
QUICK_S = 30.0
TEN_MB = 10 * 1024 * 1024
HOOK = "#!/bin/sh\ntouch hook-ran\n"
# A legal path that merely looks dangerous is a memory like any other (docs/design.md §2): stored under its
# escaped spelling (docs/mirror.md), never inside the real .git.
HOOK_STORED = (("%2Egit/hooks/post-checkout", HOOK.encode()),)


@dataclass(frozen=True)
class Hostility:
    name: str
    inject: Callable[[StandIn, Path], None]
    refusal: str | None
    """A phrase the error must contain; None for input that is legal and must be stored as is."""
    dialect: str = "forward"
    stored: tuple[tuple[str, bytes], ...] = ()
    """For legal input: the working-tree files (path, bytes) it must become, besides the honest ones."""


def _version_at(
    path: str, content: str = f"{MARKER} at a hostile path\n", *, raw: bool = False
) -> Callable[[StandIn, Path], None]:
    def inject(standin: StandIn, tmp: Path) -> None:
        standin.add(path, content, raw_path=raw)

    return inject


def _absolute(standin: StandIn, tmp: Path) -> None:
    standin.add(str(tmp / "hostile-absolute.md"), f"{MARKER} absolute\n", raw_path=True)


def _hash_lies(standin: StandIn, tmp: Path) -> None:
    standin.add(
        "notes/hostile-lie.md", f"{MARKER} not what the hash says\n", claimed_sha256=sha256("innocent\n")
    )


def _nul_content(standin: StandIn, tmp: Path) -> None:
    standin.add("notes/nul-b.md", "before\x00after a NUL\n")


def _nul_id(standin: StandIn, tmp: Path) -> None:
    standin.add("notes/hostile-id.md", f"{MARKER} with a NUL in its id\n", version_id="memver_\x00hostile")


def _on_route(suffix: str, reply: Callable[[Request], Reply | None]) -> Callable[[StandIn, Path], None]:
    """Add a hostile version, and answer ``reply`` to requests whose path ends with ``suffix``."""

    def inject(standin: StandIn, tmp: Path) -> None:
        version = standin.add("notes/hostile.md", f"{MARKER} behind a hostile answer\n")
        target = suffix.replace("{version}", version.id)

        def override(request: Request) -> Reply | None:
            return reply(request) if request.path.endswith(target) else None

        standin.override = override

    return inject


def _huge_declared(request: Request) -> Reply:
    return Reply(200, b'{"id": "' + b"x" * TEN_MB + b'"}')


def _huge_streamed(request: Request) -> Reply:
    def chunks() -> object:
        yield b'{"data": [{"id": "'
        for _ in range(TEN_MB // (64 * 1024) + 1):
            yield b"x" * (64 * 1024)
        yield b'"}], "has_more": false}'

    return Reply(200, chunks())  # type: ignore[arg-type]


def _malformed(request: Request) -> Reply:
    return Reply(200, b'{"data": [{"id": "memver_standin000000000003", "path": ')


def _cursor_repeats(standin: StandIn) -> Callable[[Request], Reply | None]:
    def answer(request: Request) -> Reply | None:
        newest = standin.version_object(standin.versions[-1], with_content=False)
        # Every page says "more after this one" and names the same cursor: a loop.
        return reply_json(
            {"data": [newest], "first_id": newest["id"], "last_id": "cursor-a", "has_more": True}
        )

    return answer


def _pages_never_end(standin: StandIn, *, empty: bool) -> Callable[[Request], Reply | None]:
    served = iter(range(1, 10**9))

    def answer(request: Request) -> Reply | None:
        newest = standin.version_object(standin.versions[-1], with_content=False)
        data = [] if empty else [newest]
        # A fresh cursor on every page, so no cursor ever repeats, and never an end.
        return reply_json(
            {"data": data, "first_id": None, "last_id": f"cursor-{next(served)}", "has_more": True}
        )

    return answer


def _listing(make: Callable[[StandIn], Callable[[Request], Reply | None]]) -> Callable[[StandIn, Path], None]:
    def inject(standin: StandIn, tmp: Path) -> None:
        standin.add("notes/hostile.md", f"{MARKER} in an endless listing\n")
        answer = make(standin)
        standin.override = lambda request: (
            answer(request) if request.path.endswith("/memory_versions") else None
        )

    return inject


def _store_id(bad: str) -> Callable[[StandIn, Path], None]:
    def inject(standin: StandIn, tmp: Path) -> None:
        def override(request: Request) -> Reply | None:
            if not request.path.endswith("/memory_stores"):
                return None
            store = {**standin.store_object(), "id": bad, "name": MARKER}
            return reply_json({"data": [store], "first_id": bad, "last_id": bad, "has_more": False})

        standin.override = override

    return inject


HOSTILITIES = [
    Hostility("dotdot-inside", _version_at("notes/../../hostile-escape.md"), "path rules"),
    Hostility("dotdot-leading", _version_at("../hostile-escape.md"), "path rules"),
    Hostility("absolute-on-relative-dialect", _absolute, "path rules"),
    Hostility("git-hooks-raw", _version_at(".git/hooks/post-checkout", HOOK), None, stored=HOOK_STORED),
    Hostility("git-hooks-backslash", _version_at(".git\\hooks\\hostile-post-checkout"), "path rules"),
    Hostility("nul-in-path", _version_at("notes/hostile\x00.md"), "path rules"),
    # A NUL in a content is just a byte to git: the archive keeps exactly what the store holds.
    Hostility("nul-in-content", _nul_content, None, stored=(("notes/nul-b.md", b"before\x00after a NUL\n"),)),
    Hostility("nul-in-version-id", _nul_id, "not a plausible id"),
    Hostility("overlong-path", _version_at("d/" * 600 + "hostile.md"), "path rules"),
    Hostility("overlong-segment", _version_at("hostile" * 40 + ".md"), "path rules"),
    Hostility("content-not-its-hash", _hash_lies, "does not match its content_sha256"),
    Hostility("ten-mb-declared", _on_route("/memory_versions/{version}", _huge_declared), "at most"),
    Hostility("ten-mb-streamed", _on_route("/memory_versions", _huge_streamed), "exceeds"),
    Hostility("malformed-json-listing", _on_route("/memory_versions", _malformed), "not valid JSON"),
    Hostility(
        "malformed-json-version", _on_route("/memory_versions/{version}", _malformed), "not valid JSON"
    ),
    Hostility("cursor-repeats", _listing(_cursor_repeats), "repeats the cursor"),
    Hostility("pages-never-end", _listing(lambda s: _pages_never_end(s, empty=False)), "no progress"),
    Hostility("empty-pages-never-end", _listing(lambda s: _pages_never_end(s, empty=True)), "no progress"),
    Hostility("store-id-escapes", _store_id("../../escape"), "not a plausible id"),
    Hostility(
        "relative-on-absolute-dialect", _version_at("notes/hostile.md", raw=True), "path rules", "anthropic"
    ),
    Hostility("anthropic-content-not-its-hash", _hash_lies, "does not match its content_sha256", "anthropic"),
    Hostility(
        "anthropic-git-hooks", _version_at(".git/hooks/post-checkout", HOOK), None, "anthropic", HOOK_STORED
    ),
]


@dataclass(frozen=True)
class Trial:
    hostility: Hostility
    second: Finished
    repo: Path


def honest_mirrors(dialect: str, directory: Path) -> Path:
    """A mirror root made by an honest first pull from a fresh stand-in: every trial starts from a copy.

    The stand-in is deterministic (ids and times derive from the order of versions), so a copy is
    exactly what a first pull in the trial's own directory would have made.
    """
    directory.mkdir(parents=True, exist_ok=True)
    standin = StandIn(dialect).start()
    try:
        standin.add("notes/honest.md", HONEST["notes/honest.md"])
        cli = MemsyncCli(write_config(directory, dialect=dialect, base_url=standin.base_url), "standin-token")
        first = cli.run("pull", "--json")
        assert first.returncode == 0, first.describe()
    finally:
        standin.stop()
    return directory / "mirrors"


def pull_against(hostility: Hostility, tmp: Path, honest: Path) -> Trial:
    """Run the trial of ``hostility`` in ``tmp``, from a copy of ``honest`` (:func:`honest_mirrors`
    of the same dialect); raises AssertionError naming any broken promise."""
    shutil.copytree(honest, tmp / "mirrors")
    standin = StandIn(hostility.dialect).start()
    try:
        standin.add("notes/honest.md", HONEST["notes/honest.md"])
        config = write_config(tmp, dialect=hostility.dialect, base_url=standin.base_url)
        cli = MemsyncCli(config, "standin-token")
        repo = tmp / "mirrors" / standin.store_id
        oracle = GitOracle(repo)
        own_before = git_dir_own_files(repo)
        outside_before = snapshot(tmp, exclude=[repo])
        tip_before = oracle.ref(MEMSTORE_REF)

        standin.add("notes/second.md", HONEST["notes/second.md"])
        hostility.inject(standin, tmp)
        second = cli.run("pull", "--json")
        assert not standin.http.errors, standin.http.errors
    finally:
        standin.stop()
    trial = Trial(hostility, second, repo)
    assert second.elapsed < QUICK_S, f"{hostility.name}: took {second.elapsed:.1f}s\n{second.describe()}"
    assert changed_entries(outside_before, snapshot(tmp, exclude=[repo])) == {}, hostility.name
    assert git_dir_own_files(repo) == own_before, f"{hostility.name}: the git directory's own files changed"
    assert not (tmp / "hook-ran").exists() and not (repo / "hook-ran").exists()
    if hostility.refusal is None:
        _assert_stored_safely(trial)
    else:
        _assert_refused(trial, tip_before)
    return trial


def _error_text(run: Finished) -> str:
    try:
        return json.dumps(run.json(), ensure_ascii=False) + run.stderr
    except AssertionError:
        return run.stdout + run.stderr


def _assert_refused(trial: Trial, tip_before: str | None) -> None:
    name, second = trial.hostility.name, trial.second
    assert trial.hostility.refusal is not None
    assert second.returncode not in (0, -9), second.describe()
    assert trial.hostility.refusal in _error_text(second), f"{name}: unclear error\n{second.describe()}"
    oracle = GitOracle(trial.repo)
    # Only honest versions may have been imported (those listed before the hostile one).
    assert set(oracle.tree_paths()) <= {p.encode() for p in HONEST}, name
    assert {p.decode() for p in oracle.all_tree_paths()} <= set(HONEST), name
    worktree = oracle.worktree()
    assert set(worktree) <= set(HONEST) and all(worktree[p] == HONEST[p].encode() for p in worktree), name
    objects = oracle.all_objects().lower()
    assert b"hostile" not in objects, f"{name}: a hostile path or content reached the git objects"
    if oracle.ref(MEMSTORE_REF) != tip_before:
        assert oracle.commits()[-2] == tip_before, name
    oracle.fsck()


def _assert_stored_safely(trial: Trial) -> None:
    second, oracle = trial.second, GitOracle(trial.repo)
    assert second.returncode == 0, second.describe()
    expected = {p: c.encode() for p, c in HONEST.items()} | dict(trial.hostility.stored)
    assert oracle.worktree() == expected
    assert set(oracle.tree_paths()) == {p.encode() for p in expected}
    assert not (trial.repo / ".git" / "hooks" / "post-checkout").exists()
    oracle.fsck()
