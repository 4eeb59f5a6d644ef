"""Shared fixtures: an isolated git configuration, Hypothesis profiles and the real reference server."""

from __future__ import annotations

import os
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


# What makes a test end-to-end: a process boundary (the reference server, the memsync CLI, a daemon,
# kills) or a real mount. The rest (the mirror against real git repositories, rules, config, the
# engine's pure parts, fuzzed pure properties) is the inner loop: `pytest -m "not e2e"`.
_E2E_FIXTURES = {"server", "server_factory"}
_E2E_FOLDERS = {"reliability", "platforms", "sdk", "daemon", "backup", "push", "sync", "awareness", "server"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    root = Path(__file__).parent
    for item in items:
        parts = Path(str(item.fspath)).relative_to(root).parts
        uses = set(getattr(item, "fixturenames", ()))
        if (
            uses & _E2E_FIXTURES
            or parts[0] in _E2E_FOLDERS
            or parts[-1] in ("test_cli.py", "test_kubernetes.py")
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
    """One reference server for the whole session (tests create their own stores in it)."""
    db = tmp_path_factory.mktemp("server") / "memstore.sqlite3"
    with ServerProcess(db=db) as proc:
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
