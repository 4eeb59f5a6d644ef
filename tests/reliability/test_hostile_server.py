"""``memsync pull`` against a server that answers with hostile data (tests/reliability/hostility.py).

Each case: an honest first pull makes the mirror; then the stand-in server turns hostile (paths that
escape or touch ``.git``, NUL bytes, over-long paths, contents that lie about their hash, 10 MB
bodies, broken JSON, listings that loop or never end). memsync must refuse with a clear error and a
non-zero exit, write nothing outside the store's repository and nothing hostile inside it, leave
the git directory's own files alone, and end by itself within seconds.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.reliability.hostility import HOSTILITIES, Hostility, Trial, honest_mirrors, pull_against

# Every test here runs memsync as a process: killed, faulted, or on a full disk.
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def trials(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Trial | BaseException]:
    """Every trial, three at a time (each is mostly a memsync subprocess and git's), from copies of
    one honest mirror per dialect."""
    honest = {d: honest_mirrors(d, tmp_path_factory.mktemp(f"honest-{d}")) for d in ("forward", "anthropic")}

    def run(hostility: Hostility) -> Trial | BaseException:
        try:
            return pull_against(hostility, tmp_path_factory.mktemp(hostility.name), honest[hostility.dialect])
        except Exception as failed:  # reported by the trial's own test
            return failed

    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip([h.name for h in HOSTILITIES], pool.map(run, HOSTILITIES), strict=True))


@pytest.mark.parametrize("hostility", HOSTILITIES, ids=[h.name for h in HOSTILITIES])
def test_a_hostile_answer_is_refused_and_leaves_nothing_behind(
    hostility: Hostility, trials: dict[str, Trial | BaseException]
) -> None:
    trial = trials[hostility.name]
    if isinstance(trial, BaseException):
        raise trial
    # pull_against checked every promise; legal input (a .git-looking path, a NUL in a content) is
    # the one kind that must end well.
    assert (trial.second.returncode == 0) is (hostility.refusal is None)
