"""Shared fixtures: an isolated git configuration, Hypothesis profiles and the real reference server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.support.server import ServerProcess
from tests.support.tiers import InnerLoopGuard, end_to_end, uses_end_to_end_fixture

# CI runs on 2 shared cores within a time budget; "quick" is the inner loop's (CONTRIBUTING.md), the
# soak profile is for scripts in benchmarks/.
_SLOW_OK = [HealthCheck.too_slow]
settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile("quick", max_examples=10, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile("soak", max_examples=3000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# The tiers (tests/support/tiers.py): a test is e2e by its marker, its folder's conftest, or a fixture
# wrapped in end_to_end; the rest is the inner loop, `pytest -m "not e2e"`, and is held to it.
_guard = InnerLoopGuard()


def pytest_configure(config: pytest.Config) -> None:
    _guard.install()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if uses_end_to_end_fixture(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)


def _watching(item: pytest.Item) -> str | None:
    return None if item.get_closest_marker("e2e") else item.nodeid


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    _guard.watch(_watching(item))
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    _guard.watch(_watching(item))
    return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    # Not watched: a teardown stops what its setup started (and was watched then), and the last test
    # of a worker also tears down the session's fixtures, whichever tier started them.
    _guard.watch(None)


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
@end_to_end
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
