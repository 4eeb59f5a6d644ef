"""The test tiers say what they hold (CONTRIBUTING.md): a test is e2e by its marker or a fixture it uses,
an inner-loop test that crosses a process boundary fails, and under CI as root a test whose tools are
missing fails instead of skipping."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.support.machine import cannot_run_here, missing_fails
from tests.support.tiers import crossing, end_to_end

ROOT = Path(__file__).parent.parent


@pytest.mark.parametrize(
    ("environ", "euid", "fails"),
    [
        ({}, 0, False),  # root without CI: a developer's machine
        ({"CI": "true"}, 1000, False),  # CI as a user cannot mount or trace: skipping says why
        ({"CI": "true"}, 0, True),
        ({"CI": "TRUE"}, 0, True),
        ({"CI": "1"}, 0, True),
        ({"CI": "false"}, 0, False),
        ({"CI": ""}, 0, False),
        ({"CI": "true"}, None, False),  # no user ids (Windows)
    ],
)
def test_a_missing_tool_fails_only_under_ci_as_root(
    environ: Mapping[str, str], euid: int | None, fails: bool
) -> None:
    assert missing_fails(environ, euid) is fails


def test_cannot_run_here_skips_off_ci_and_fails_under_ci_as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="strace is not installed"):
        cannot_run_here("strace is not installed")
    monkeypatch.setenv("CI", "true")
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    expected = pytest.fail.Exception if as_root else pytest.skip.Exception
    with pytest.raises(expected, match="strace is not installed"):
        cannot_run_here("strace is not installed")


@pytest.mark.parametrize(
    ("event", "args", "named"),
    [
        ("subprocess.Popen", (sys.executable, [sys.executable, "-m", "memsync"], None, None), "python"),
        ("subprocess.Popen", (None, ["memsync", "pull"], None, None), "memsync"),
        ("subprocess.Popen", (None, ["/usr/bin/strace", "-f", "true"], None, None), "strace"),
        ("subprocess.Popen", (None, ["unshare", "--pid", "true"], None, None), "unshare"),
        ("subprocess.Popen", (None, ["mount", "-t", "tmpfs"], None, None), "mount"),
        ("subprocess.Popen", (None, "losetup -f", None, None), "losetup"),
        ("os.kill", (4242, 9), "signal 9"),
        ("os.fork", (), "os.fork"),
        # What the inner loop may do: run git (the oracle) and other tools, probe a process, signal itself.
        ("subprocess.Popen", (None, ["git", "log"], None, None), None),
        ("subprocess.Popen", (None, ["openssl", "req"], None, None), None),
        ("os.kill", (4242, 0), None),
        ("os.kill", (1, 15), None),
        ("open", ("notes.md", "r", 0), None),
    ],
)
def test_what_crosses_a_process_boundary(event: str, args: tuple[object, ...], named: str | None) -> None:
    what = crossing(event, args, own_pid=1)
    if named is None:
        assert what is None
    else:
        assert what is not None and named in what


def test_an_inner_loop_test_that_starts_a_process_fails_naming_it() -> None:
    with pytest.raises(RuntimeError, match=r"test_tiers\.py::.* starts python.* mark it @pytest.mark.e2e"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)


@pytest.fixture
@end_to_end
def a_process() -> Iterator[subprocess.CompletedProcess[str]]:
    yield subprocess.run([sys.executable, "-c", "print('up')"], capture_output=True, text=True, check=True)


def test_a_fixture_in_end_to_end_makes_its_users_e2e(
    request: pytest.FixtureRequest, a_process: subprocess.CompletedProcess[str]
) -> None:
    assert request.node.get_closest_marker("e2e") is not None
    assert a_process.stdout == "up\n"


@pytest.mark.e2e
def test_the_inner_loop_holds_the_mirrors_tests_and_the_awareness_views() -> None:
    """The two tests a word in their module's source once sent out of the inner loop: the mirror's
    history tests (one of them kills a process) and the awareness views ("mount")."""
    modules = ["tests/mirror/test_history.py", "tests/awareness/test_view.py", "tests/fuzz/test_paths.py"]

    def collected(*marks: str) -> set[str]:
        pytest_args = ["-q", "-n", "0", "-p", "no:cacheprovider", "--collect-only", *marks, *modules]
        done = subprocess.run(
            [sys.executable, "-m", "pytest", *pytest_args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return {line for line in done.stdout.splitlines() if "::" in line}

    everything, inner = collected(), collected("-m", "not e2e")
    assert everything - inner == {
        "tests/mirror/test_history.py::test_kill_9_mid_import_leaves_a_consistent_checkpoint"
    }
    assert {line.split("::")[0] for line in inner} == set(modules)
