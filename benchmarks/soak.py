"""The reliability suite at soak budgets, in a loop, for a chosen time.

    python benchmarks/soak.py --minutes 5 [--seed N] [--keep]

Runs the same scenarios as ``tests/reliability`` and ``tests/fuzz`` (it imports them), with larger
and randomised budgets, round after round until the time is up:

- **crash** (three a round): two stores of 15-75 versions, imported in random batches by ``memsync
  pull`` killed at random crash points (chains of up to six kills, before and after the stores grow
  by 5-75 versions); the last run must end on the tip an uninterrupted pull makes, fsck clean,
  checkout at the tip;
- **faults**: three or four stores of the three dialects written and pulled through 10-30 % injected
  faults with a random seed; same commit ids as fault-free pulls, no write doubled or lost;
- **hostile**: every hostile-server trial (tests/reliability/hostility.py);
- **round trip**: Hypothesis-generated memories through the real server and back out of the
  working tree (Forward and Anthropic), at the soak profile's budget;
- **secrets** (every third round): the token searched for after pulls that succeed and fail;
- **openapi** (once): schemathesis' CLI against the server's schema, all phases.

It prints runs, faults injected, crashes survived, hostile inputs tried and writes lost (which must
be zero), and exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HYPOTHESIS_PROFILE", "soak")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.fuzz.budget import budget
from tests.fuzz.strategies import contents, relative_paths, round_trip, storable
from tests.reliability import harness
from tests.reliability.crashes import CRASH_POINTS, CrashCase, assert_converged
from tests.reliability.faultruns import FaultPlan, run_fault_plan
from tests.reliability.harness import BATCH_ENV, CRASH_ENV, GitOracle, MemsyncCli, write_config
from tests.reliability.histories import History, build_history, grow_history
from tests.reliability.hostility import HOSTILITIES, honest_mirrors, pull_against
from tests.reliability.leaks import (
    DIALECTS,
    SCENARIOS,
    SecretRun,
    always_failing,
    closed_port,
    echo_servers,
    start_runs,
)
from tests.reliability.loopback import LoopbackServer
from tests.support.server import ServerProcess

from memsync.api import open_client
from memsync.rules import Dialect
from memsync.sync.pull import pull_store

OPENAPI_CHECKS = (
    "not_a_server_error,status_code_conformance,content_type_conformance,"
    "response_headers_conformance,response_schema_conformance"
)


@dataclass
class Tally:
    rounds: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    crashes: int = 0
    hostile: int = 0
    versions_written: int = 0
    writes_lost: int = 0
    writes_doubled: int = 0
    round_trip_examples: int = 0
    secret_runs: int = 0
    openapi: str = "not run"
    failures: list[str] = field(default_factory=list)


def crash_round(server: ServerProcess, rng: random.Random, work: Path, tally: Tally) -> None:
    batch = rng.choice([2, 3, 5, 8, 13, 50])
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        histories: list[History] = []
        for _ in range(2):
            store = client.create_store(
                f"soak-crash-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4())
            )
            histories.append(
                build_history(client, store, versions=rng.randint(15, 75), seed=rng.randrange(10**6))
            )
    config = write_config(
        work, dialect="forward", base_url=server.base_url, stores=[h.store.id for h in histories]
    )
    cli = MemsyncCli(config, server.token)

    def chain() -> None:
        for _ in range(rng.randint(1, 6)):
            # Passes of each point in the next run: what is still to import, in batches, per store.
            left = [h.versions - len(GitOracle(work / "mirrors" / h.store.id).commits()) for h in histories]
            flushes = sum(math.ceil(n / batch) for n in left)
            limits = {
                "pull.version": max(1, sum(left)),
                "mirror.pack_written": max(1, flushes),
                "mirror.ref_moved": max(1, flushes),
                "mirror.pack_renamed": flushes + 2,
                "checkout.tree_written": 2,
                "checkout.main_moved": 2,
            }
            point = rng.choice(CRASH_POINTS["pull"])
            # Mostly in the first half, so that the chain goes on; sometimes anywhere, the end included.
            last = limits[point] if rng.random() < 0.3 else max(1, limits[point] // 2)
            case = CrashCase(point, rng.randint(1, last))
            run = cli.run("pull", "--json", env={CRASH_ENV: str(case), BATCH_ENV: str(batch)})
            if not run.killed:
                assert run.returncode == 0, f"{case}: {run.describe()}"
                return  # the run got past its last pass of that point: nothing left to interrupt
            tally.crashes += 1
        final = cli.run("pull", "--json", env={BATCH_ENV: str(batch)})
        assert final.returncode == 0, final.describe()

    chain()
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        for history in histories:
            grow_history(client, history, rng.randint(5, 75))
    chain()
    tips = {}
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        for history in histories:
            reference = pull_store(client, history.store, work / "reference")
            assert reference.ok and reference.tip is not None, reference.error
            tips[history.store.id] = reference.tip
    root = work / "mirrors"
    for history in histories:
        commits = len(GitOracle(root / history.store.id).commits())
        tally.writes_lost += max(0, history.versions - commits)
        tally.versions_written += history.versions
    assert_converged({s: GitOracle(root / s) for s in tips}, tips)


def fault_round(rng: random.Random, work: Path, tally: Tally) -> None:
    stores = tuple((rng.choice(list(Dialect)), rng.randint(30, 120)) for _ in range(rng.randint(3, 4)))
    plan = FaultPlan(rng.choice([0.1, 0.2, 0.3]), rng.randrange(10**6), stores)
    outcome = run_fault_plan(plan, work)
    tally.faults.update(outcome.faults)
    tally.versions_written += outcome.versions
    tally.writes_lost += outcome.writes_lost
    tally.writes_doubled += outcome.writes_doubled


def hostile_round(work: Path, tally: Tally) -> None:
    honest = {d: honest_mirrors(d, work / f"honest-{d}") for d in ("forward", "anthropic")}
    for number, hostility in enumerate(HOSTILITIES):
        trial_dir = work / f"{number}-{hostility.name}"
        trial_dir.mkdir()
        pull_against(hostility, trial_dir, honest[hostility.dialect])
        tally.hostile += 1


def round_trip_round(server: ServerProcess, tally: Tally) -> None:
    for dialect in (Dialect.FORWARD, Dialect.ANTHROPIC):
        with open_client(dialect, server.base_url, server.token) as client:

            @settings(
                max_examples=budget().round_trips,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(files=st.dictionaries(relative_paths, contents, min_size=1, max_size=12))
            def prop(files: dict[str, str]) -> None:
                kept = storable(files, client.dialect)
                if kept:
                    tally.round_trip_examples += 1
                    rewrites = {p: f"rewritten {n}\n" for n, p in enumerate(sorted(kept)) if n % 3 == 0}
                    round_trip(client, f"soak-fuzz-{uuid.uuid4().hex[:10]}", kept, rewrites)

            prop()


def secrets_round(work: Path, tally: Tally) -> None:
    token = f"msk-soak-{uuid.uuid4().hex}"
    server = ServerProcess(db=work / "db.sqlite3", token=token).start()
    helpers = {"server-errors": LoopbackServer(always_failing), **echo_servers()}
    for helper in helpers.values():
        helper.start()
    try:
        planned = []
        for dialect in DIALECTS:
            with open_client(Dialect(dialect), server.base_url, token) as client:
                store = client.create_store(f"soak-leaks-{dialect}", request_id=str(uuid.uuid4()))
                client.create_memory(store.id, "notes/a.md", "a\n")
            for scenario, code in SCENARIOS.items():
                run_token = token if scenario == "success" else f"msk-soak-{scenario}-{uuid.uuid4().hex}"
                own = {"success": server.base_url, "wrong-token": server.base_url}
                base = own.get(scenario) or (closed_port() if scenario == "connection-refused" else "")
                base = base or helpers[scenario].base_url
                run = SecretRun(dialect, scenario, run_token, work / f"{dialect}-{scenario}", code)
                planned.append((run, base, [store.id]))
        start_runs(planned)
        for run, _, _ in planned:
            tally.secret_runs += 1
            assert run.finished is not None
            assert run.finished.returncode == run.expected_exit, run.finished.describe()
            assert run.leaks() == [], f"{run.dialect} {run.scenario}: token in {run.leaks()}"
    finally:
        for helper in helpers.values():
            helper.stop()
        server.stop()


def openapi_round(server: ServerProcess, examples: int, tally: Tally, work: Path) -> None:
    done = subprocess.run(
        [
            shutil.which("st") or "st",
            "run",
            f"{server.base_url}/openapi.json",
            "-H",
            f"Authorization: Bearer {server.token}",
            "--checks",
            OPENAPI_CHECKS,
            "--max-examples",
            str(examples),
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "--report-dir",
            str(work / "report"),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=work,
    )
    summary = [line for line in done.stdout.splitlines() if "passed" in line or "failed" in line]
    tally.openapi = summary[-1].strip("= ") if summary else f"exit {done.returncode}"
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def run_phase(name: str, tally: Tally, work: Path, action: Callable[[Path], None], keep: bool) -> None:
    directory = Path(tempfile.mkdtemp(prefix=f"soak-{name}-", dir=work))
    started = time.monotonic()
    try:
        action(directory)
        tally.rounds[name] += 1
    except Exception:
        tally.failures.append(f"{name} (kept in {directory}):\n{traceback.format_exc()}")
        keep = True
    finally:
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)
    print(f"  {name}: {time.monotonic() - started:.1f}s", flush=True)


def isolate_git(work: Path) -> None:
    """The tests' clean git configuration: the user's own must not change what git reports."""
    gitconfig = work / "gitconfig"
    gitconfig.write_text("[user]\n\tname = memsync soak\n\temail = soak@memsync.invalid\n")
    os.environ["GIT_CONFIG_GLOBAL"] = str(gitconfig)
    os.environ["GIT_CONFIG_NOSYSTEM"] = "1"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="how long to keep starting rounds")
    parser.add_argument("--seed", type=int, default=None, help="seed of the random choices")
    parser.add_argument(
        "--openapi-examples", type=int, default=40, help="schemathesis examples per operation"
    )
    parser.add_argument("--keep", action="store_true", help="keep every round's directory")
    options = parser.parse_args()
    seed = options.seed if options.seed is not None else random.randrange(10**6)
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="memsync-soak-"))
    isolate_git(work)
    tally = Tally()
    deadline = time.monotonic() + options.minutes * 60
    started = time.monotonic()
    print(f"soak: seed {seed}, {options.minutes} min, work in {work}", flush=True)
    server = ServerProcess(db=work / "server.sqlite3", token="soak-token").start()
    try:
        run_phase(
            "openapi",
            tally,
            work,
            lambda d: openapi_round(server, options.openapi_examples, tally, d),
            options.keep,
        )
        number = 0
        while number == 0 or time.monotonic() < deadline:
            number += 1
            print(f"round {number} ({(time.monotonic() - started) / 60:.1f} min)", flush=True)
            for _ in range(3):  # cheap next to the others: three crash chains a round
                run_phase("crash", tally, work, lambda d: crash_round(server, rng, d, tally), options.keep)
            run_phase("faults", tally, work, lambda d: fault_round(rng, d, tally), options.keep)
            run_phase("hostile", tally, work, lambda d: hostile_round(d, tally), options.keep)
            run_phase("round-trip", tally, work, lambda d: round_trip_round(server, tally), options.keep)
            if number % 3 == 1:
                run_phase("secrets", tally, work, lambda d: secrets_round(d, tally), options.keep)
    finally:
        server.stop()
    elapsed = (time.monotonic() - started) / 60
    faults = ", ".join(f"{kind} {count}" for kind, count in sorted(tally.faults.items()))
    print(f"\nsoak finished after {elapsed:.1f} min (seed {seed})")
    rounds = sum(tally.rounds.values())
    print(f"  runs: {rounds} rounds ({dict(tally.rounds)}), {harness.runs_started} memsync processes")
    print(f"  faults injected: {sum(tally.faults.values())} ({faults})")
    print(f"  crashes survived: {tally.crashes}")
    print(f"  hostile inputs tried: {tally.hostile}")
    print(f"  round-trip examples: {tally.round_trip_examples}; secret runs: {tally.secret_runs}")
    print(f"  openapi: {tally.openapi}")
    print(f"  versions written: {tally.versions_written}")
    print(f"  writes lost: {tally.writes_lost}; writes doubled: {tally.writes_doubled}")
    print(f"  failures: {len(tally.failures)}")
    for failure in tally.failures:
        print(failure)
    if not options.keep and not tally.failures:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if tally.failures or tally.writes_lost or tally.writes_doubled else 0


if __name__ == "__main__":
    sys.exit(main())
