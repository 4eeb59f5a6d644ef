"""Shared fixtures: an isolated git configuration, Hypothesis profiles and the real reference server."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.support.server import ServerProcess

# CI runs on 2 shared cores within a time budget; "quick" is the inner loop's (CONTRIBUTING.md), the
# soak profile is for scripts in benchmarks/.
_SLOW_OK = [HealthCheck.too_slow]
settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile("quick", max_examples=10, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile("soak", max_examples=3000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# What makes a test end-to-end: a process boundary (a server process, the memsync CLI or a daemon as a
# process, kills, strace) or a real mount. The rest — the mirror against real git repositories, rules,
# config, the engine, fuzzed properties, and whatever talks to the in-process reference server (the
# session's ``server``) — is the inner loop: `pytest -m "not e2e"`. A module is end-to-end when its
# text names a way to start a process or mount (itself, or the helpers it imports that do).
_E2E_FIXTURES = {"server_factory"}
_E2E_FOLDERS = {"reliability", "platforms", "sdk", "remote"}
_E2E_TEXT = re.compile(r"sys\.executable|os\.kill|signal\.SIG|strace|unshare|mount|ServerProcess\(")
_IMPORTS = re.compile(r"^from (tests(?:\.\w+)+) import", re.MULTILINE)


@functools.cache
def _starts_processes(module: Path) -> bool:
    text = module.read_text(encoding="utf-8")
    if _E2E_TEXT.search(text):
        return True
    root = Path(__file__).parent.parent
    for name in _IMPORTS.findall(text):
        helper = root.joinpath(*name.split(".")).with_suffix(".py")
        # tests.support.server starts the server as a process only for server_factory (above).
        if helper.is_file() and helper.name != "server.py" and helper != module and _starts_processes(helper):
            return True
    return False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    root = Path(__file__).parent
    for item in items:
        module = Path(str(item.fspath))
        uses = set(getattr(item, "fixturenames", ()))
        if (
            uses & _E2E_FIXTURES
            or module.relative_to(root).parts[0] in _E2E_FOLDERS
            or _starts_processes(module)
        ):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session", autouse=True)
def isolated_git(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The real git binary is our oracle: give it a clean, known configuration."""
    home = tmp_path_factory.mktemp("git-home")
    gitconfig = home / "gitconfig"
    gitconfig.write_text("[user]\n\tname = memsync tests\n\temail = tests@memsync.invalid\n")
    saved = {k: os.environ.get(k) for k in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM")}
    os.environ["GIT_CONFIG_GLOBAL"] = str(gitconfig)
    os.environ["GIT_CONFIG_NOSYSTEM"] = "1"
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One reference server for the whole session (tests create their own stores in it), in a thread
    of the test process: a test that needs the server's own process starts one (server_factory)."""
    db = tmp_path_factory.mktemp("server") / "memstore.sqlite3"
    with ServerProcess(db=db, in_process=True) as proc:
        yield proc


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[object]:
    """Start extra servers with their own flags (faults, retention); all stopped after the test."""
    started: list[ServerProcess] = []

    def start(*extra_args: str, db: Path | None = None, token: str = "test-token") -> ServerProcess:
        proc = ServerProcess(
            db=db or tmp_path / f"server{len(started)}.sqlite3", token=token, extra_args=list(extra_args)
        )
        started.append(proc)
        return proc.start()

    yield start
    for proc in started:
        proc.stop()
