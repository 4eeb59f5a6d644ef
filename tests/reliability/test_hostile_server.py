"""``memsync pull`` against a server that answers with hostile data (tests/reliability/hostility.py).

Each case: an honest first pull makes the mirror; then the stand-in server turns hostile (paths that
escape or touch ``.git``, NUL bytes, over-long paths, contents that lie about their hash, 10 MB
bodies, broken JSON, listings that loop or never end). memsync must refuse with a clear error and a
non-zero exit, write nothing outside the store's repository and nothing hostile inside it, leave
the git directory's own files alone, and end by itself within seconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.hostility import HOSTILITIES, Hostility, honest_mirrors, pull_against


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Per dialect, the mirror root an honest first pull makes (each trial starts from a copy)."""
    return {d: honest_mirrors(d, tmp_path_factory.mktemp(f"honest-{d}")) for d in ("forward", "anthropic")}


@pytest.mark.timeout(90)
@pytest.mark.parametrize("hostility", HOSTILITIES, ids=[h.name for h in HOSTILITIES])
def test_a_hostile_answer_is_refused_and_leaves_nothing_behind(
    hostility: Hostility, tmp_path: Path, honest: dict[str, Path]
) -> None:
    trial = pull_against(hostility, tmp_path, honest[hostility.dialect])
    # pull_against checked every promise; legal input (a .git-looking path, a NUL in a content) is
    # the one kind that must end well.
    assert (trial.second.returncode == 0) is (hostility.refusal is None)
