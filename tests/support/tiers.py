"""The test tiers (CONTRIBUTING.md): which tests are end-to-end, and what an inner-loop test may not do.

A test is end-to-end (``e2e``) when it crosses a process boundary — it starts memsync, a server or
another Python as a process, sends a process a signal, traces one with strace — or mounts a
filesystem. It says so itself: by its marker (``@pytest.mark.e2e``; ``pytestmark`` for a module; a
folder's ``conftest.py`` for every test of a folder) or by a fixture it uses that does one of those
things (the fixture is wrapped in :func:`end_to_end`). Everything else is the inner loop, and an
inner-loop test that starts such a process anyway fails, naming what it started (:func:`crossing`),
so a test cannot leave the inner loop slower than it says, and no test is sent out of it by a word
in its source.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

Fixture = TypeVar("Fixture", bound=Callable[..., Any])

# The names of the fixtures wrapped in end_to_end: pytest shows a test's fixtures by name
# (``item.fixturenames``), and a fixture's name is its function's unless ``name=`` says otherwise.
_END_TO_END_NAMES: set[str] = set()
# Programs whose start is a process boundary of the kind the e2e tier holds. git, openssl and the
# like are tools the inner loop may run (git is the oracle of the mirror's tests).
_PROCESS_PROGRAMS = frozenset(
    {"memsync", "git-remote-memstore", "strace", "unshare", "mount", "umount", "losetup", "ntfs-3g"}
)


def end_to_end(fixture: Fixture) -> Fixture:
    """Make every test that uses ``fixture`` (directly or through another fixture) end-to-end.

    Apply it under ``@pytest.fixture``, to a fixture that starts a process, signals one, straces or
    mounts: the tier then follows the fixture wherever it is used."""
    _END_TO_END_NAMES.add(fixture.__name__)
    return fixture


def uses_end_to_end_fixture(fixture_names: Iterable[str]) -> bool:
    """Whether any of the fixtures a test uses (by name, closure included) was wrapped in
    :func:`end_to_end`. A fixture of the same name that is not wrapped counts too: the cost is a
    test in the slower tier, never an end-to-end test in the inner loop."""
    return not _END_TO_END_NAMES.isdisjoint(fixture_names)


def _program(executable: object, args: object) -> str:
    first = executable
    if first is None:
        if isinstance(args, (str, bytes, os.PathLike)):
            first = args
        elif isinstance(args, Sequence) and args:
            first = args[0]
    text = os.fsdecode(first) if isinstance(first, (str, bytes, os.PathLike)) else str(first)
    return text.split()[0] if text.strip() else ""


def crossing(
    event: str, args: tuple[Any, ...], own_pid: int, interpreter: str = sys.executable
) -> str | None:
    """What an audit event (:func:`sys.addaudithook`) does that only an e2e test may do, or None."""
    if event == "subprocess.Popen":
        program = _program(args[0], args[1])
        name = Path(program).name
        if program == interpreter or name.startswith("python") or name in _PROCESS_PROGRAMS:
            return f"starts {name} as a process"
    elif event in ("os.kill", "os.killpg"):
        target, signal_number = args[0], args[1]
        if signal_number != 0 and target != own_pid:
            return f"sends signal {signal_number} to process {target}"
    elif event in ("os.fork", "os.forkpty"):  # multiprocessing; subprocess says subprocess.Popen
        return f"starts a process ({event})"
    return None


class InnerLoopGuard:
    """Fails an inner-loop test at the moment it crosses a process boundary (see the module's doc)."""

    def __init__(self) -> None:
        self.test: str | None = None
        self._own_pid = os.getpid()

    def install(self) -> None:
        sys.addaudithook(self._audit)

    def watch(self, test: str | None) -> None:
        """Watch ``test`` (a node id), or nothing (an e2e test, or between tests)."""
        self.test = test

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if self.test is None:
            return
        what = crossing(event, args, self._own_pid)
        if what is None:
            return
        message = (
            f"{self.test} {what}, which makes it end-to-end: mark it @pytest.mark.e2e, or wrap the"
            " fixture that does it in tests.support.tiers.end_to_end"
        )
        raise RuntimeError(message)
