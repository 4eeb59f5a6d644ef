"""memsync.daemon's public surface is exactly ``__all__``, and reading state stays cheap."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys

import pytest

import memsync.daemon as daemon


def _isort_key(name: str) -> tuple[int, str]:
    # ruff's RUF022 order: CONSTANTS, then Classes, then functions.
    if re.fullmatch(r"[A-Z0-9_]+", name):
        return (0, name)
    return (1, name) if name[0].isupper() else (2, name)


def test_all_is_sorted_unique_and_exactly_the_public_attributes() -> None:
    assert daemon.__all__ == sorted(daemon.__all__, key=_isort_key)
    assert len(set(daemon.__all__)) == len(daemon.__all__)
    public = {
        name
        for name, value in vars(daemon).items()
        if not name.startswith("_")
        and not inspect.ismodule(value)
        and name not in ("annotations", "TYPE_CHECKING")
    }
    assert public == set(daemon.__all__)


def test_private_modules_stay_private() -> None:
    for name in daemon.__all__:
        value = getattr(daemon, name)
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        module = value.__module__
        assert module == "memsync.daemon" or module.startswith("memsync.daemon._"), name


@pytest.mark.e2e
def test_reading_state_imports_neither_apscheduler_nor_watchdog() -> None:
    # `memsync status` reads state files; it must not pay for the daemon's machinery.
    probe = (
        "import sys, memsync.daemon\n"
        "heavy = ('apscheduler', 'watchdog', 'prometheus_client')\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in heavy)\n"
        "print(','.join(heavy))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
