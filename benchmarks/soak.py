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
- **push machine**: the push state machine (tests/push/test_machine.py: local edits, remote edits,
  racing writes, resolves) on Forward and Anthropic at a larger budget than CI's;
- **push crash**: random local updates, creates, deletes and renames in a checkout, ``memsync push``
  killed at random push crash points and passes (chains of up to four), then run to the end: the store
  holds exactly one new version per write the edits need, equals the checkout and the mirror's tip;
- **push faults**: a random plan of tests/reliability/faultruns.py's push runs (backup, edit, push,
  backup again through 10-30 % faults), compared with fault-free runs;
- **backup crash**: stores backed up to two remotes by ``memsync backup`` killed at random backup,
  pull and rewrite points (chains of up to four), the stores grown and a version redacted in
  between: the remotes' refs equal the mirror's, ``main`` at a fresh pull's tip, the redacted
  content gone from every remote;
- **daemon**: ``memsync daemon`` killed at its first store write (``push.store_write``), an edit made
  while it is down, restarted: both edits in the store once each, the mirror in step;
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
from hypothesis.stateful import run_state_machine_as_test
from tests.fuzz.budget import budget
from tests.fuzz.strategies import contents, relative_paths, round_trip, storable
from tests.push.test_machine import AnthropicPushMachine, PushMachine
from tests.reliability import harness
from tests.reliability.backups import assert_backup_matches, backup_config
from tests.reliability.crashes import CRASH_POINTS, CrashCase, assert_converged
from tests.reliability.faultruns import FaultPlan, run_fault_plan, run_push_fault_plan
from tests.reliability.harness import (
    BATCH_ENV,
    CRASH_ENV,
    MEMSTORE_REF,
    GitOracle,
    MemsyncCli,
    wait_until,
    write_config,
)
from tests.reliability.histories import History, build_history, decoded_worktree, grow_history
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

from memsync.api import Client, Operation, open_client
from memsync.mirror import encode_paths
from memsync.rules import Dialect, sha256_hex
from memsync.sync.backup import slug
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
    machine_examples: int = 0
    push_edits: int = 0
    daemon_kills: int = 0
    redactions_backed_up: int = 0
    openapi: str = "not run"
    failures: list[str] = field(default_factory=list)


def crash_round(server: ServerProcess, rng: random.Random, work: Path, tally: Tally) -> None:
    batch = rng.choice([2, 3, 5, 8, 13, 50])
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        histories: list[History] = []
        for _ in range(2):
            store = client.create_store(
                f"soak-crash-{uuid.uuid4().hex[:8]}",
                idempotency_key=str(uuid.uuid4()),
                description="made by tests",
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
                "mirror.created": len(histories),
                "checkout.file_written": 4,
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
                store = client.create_store(
                    f"soak-leaks-{dialect}", request_id=str(uuid.uuid4()), description="made by tests"
                )
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


# --- push ---------------------------------------------------------------------------------------------

MACHINE_EXAMPLES, MACHINE_STEPS = 30, 25  # per dialect and round; CI runs 20 x 15


def machine_round(server: ServerProcess, tally: Tally) -> None:
    for machine in (PushMachine, AnthropicPushMachine):
        machine.server = server
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=MACHINE_EXAMPLES,
                stateful_step_count=MACHINE_STEPS,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            ),
        )
        tally.machine_examples += MACHINE_EXAMPLES


def _store_contents(client: Client, store_id: str) -> dict[str, str]:
    found = {}
    for memory in client.list_memories(store_id):
        content = client.get_memory(store_id, memory.id).content
        assert content is not None
        found[memory.path] = content
    return found


def push_crash_round(server: ServerProcess, rng: random.Random, work: Path, tally: Tally) -> None:
    """Random edits, pushes killed at random points, one to the end: every write exactly once."""
    dialect = rng.choice([Dialect.FORWARD, Dialect.ANTHROPIC])
    with open_client(dialect, server.base_url, server.token) as client:
        store = client.create_store(f"soak-push-{uuid.uuid4().hex[:8]}", description="made by tests")
        history = build_history(client, store, versions=rng.randint(10, 40), seed=rng.randrange(10**6))
        config = write_config(work, dialect=dialect.value, base_url=server.base_url, stores=[store.id])
        cli = MemsyncCli(config, server.token)
        first = cli.run("pull", "--json")
        assert first.returncode == 0, first.describe()
        repo = work / "mirrors" / store.id
        live: dict[str, str | None] = dict(history.live)
        spelled = encode_paths(live)
        writes = 0
        paths = sorted(live)
        rng.shuffle(paths)
        # Deletes stay under the delete guard (fewer than 3); Forward moves are a create and a delete.
        for n, path in enumerate(paths[: rng.randint(1, 8)]):
            roll = rng.random()
            if roll < 0.5 or (roll < 0.8 and sum(1 for v in live.values() if v is None) >= 2):
                content = f"{live[path]}soak edit {n}\n"
                (repo / spelled[path]).write_text(content, encoding="utf-8", newline="")
                live[path] = content
                writes += 1
            elif roll < 0.8:
                (repo / spelled[path]).unlink()
                live[path] = None
                writes += 1
            else:
                target = f"soak-moved/{n}.md"
                (repo / target).parent.mkdir(exist_ok=True)
                (repo / spelled[path]).rename(repo / target)
                live[target], live[path] = live[path], None
                writes += 1 if dialect is Dialect.ANTHROPIC else 2
        for n in range(rng.randint(0, 4)):
            path = f"soak-new/{n}.md"
            (repo / path).parent.mkdir(exist_ok=True)
            live[path] = f"created {n}\n"
            (repo / path).write_text(live[path], encoding="utf-8", newline="")
            writes += 1
        expected = {p: c for p, c in live.items() if c is not None}
        before = sum(1 for _ in client.iter_versions(store.id))
        limits = {"push.store_write": max(1, writes), "push.imported": 2, "push.checkout_written": 2}
        for _ in range(rng.randint(1, 4)):
            point = rng.choice([p for p in CRASH_POINTS["push"] if p != "push.conflict_recorded"])
            case = CrashCase(point, rng.randint(1, limits.get(point, 1)))
            run = cli.run("push", "--json", env={CRASH_ENV: str(case)})
            if not run.killed:
                assert run.returncode == 0, f"{case}: {run.describe()}"
                break
            tally.crashes += 1
        final = cli.run("push", "--json")
        assert final.returncode == 0, final.describe()
        after = sum(1 for _ in client.iter_versions(store.id))
        tally.push_edits += writes
        tally.versions_written += writes
        tally.writes_lost += max(0, before + writes - after)
        tally.writes_doubled += max(0, after - before - writes)
        assert after - before == writes, f"{after - before} versions for {writes} writes"
        assert _store_contents(client, store.id) == expected
    oracle = GitOracle(repo)
    assert decoded_worktree(repo) == expected
    tip = oracle.ref(MEMSTORE_REF)
    assert oracle.ref("refs/heads/main") == oracle.ref("refs/memsync/base") == tip
    assert oracle.text("status", "--porcelain", "--untracked-files=all") == ""
    oracle.fsck()


def push_fault_round(rng: random.Random, work: Path, tally: Tally) -> None:
    stores = tuple((rng.choice(list(Dialect)), rng.randint(10, 40)) for _ in range(rng.randint(2, 3)))
    plan = FaultPlan(rng.choice([0.1, 0.2, 0.3]), rng.randrange(10**6), stores)
    outcome = run_push_fault_plan(plan, work)
    tally.faults.update(outcome.faults)
    tally.push_edits += outcome.edits
    tally.versions_written += sum(versions for _, versions in stores) + outcome.edits
    tally.writes_lost += outcome.writes_lost
    tally.writes_doubled += outcome.writes_doubled


# --- backup -------------------------------------------------------------------------------------------


def backup_crash_round(server: ServerProcess, rng: random.Random, work: Path, tally: Tally) -> None:
    """Backup chains killed at random points, before and after the stores grow and one version of
    each is redacted (backup --full-scan): remotes equal the mirrors, nothing redacted left."""
    batch = rng.choice([2, 5, 50])
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        histories = []
        for _ in range(rng.randint(1, 2)):
            store = client.create_store(
                f"soak-backup-{uuid.uuid4().hex[:8]}",
                idempotency_key=str(uuid.uuid4()),
                description="made by tests",
            )
            histories.append(
                build_history(client, store, versions=rng.randint(5, 30), seed=rng.randrange(10**6))
            )
    ids = [h.store.id for h in histories]
    cli = MemsyncCli(backup_config(work, server.base_url, ids), server.token)
    points = [*CRASH_POINTS["backup"], *CRASH_POINTS["pull"], "rewrite.history_written", "rewrite.tip_moved"]

    def chain(full_scan: bool) -> None:
        args = ["backup", "--json", *(["--full-scan"] if full_scan else [])]
        for _ in range(rng.randint(1, 4)):
            # Passes: a point runs at most once per store and remote, pull.version once per version.
            case = CrashCase(rng.choice(points), rng.randint(1, 2 * len(ids) if rng.random() < 0.8 else 10))
            run = cli.run(*args, env={CRASH_ENV: str(case), BATCH_ENV: str(batch)})
            if not run.killed:
                assert run.returncode == 0, f"{case}: {run.describe()}"
                return
            tally.crashes += 1
        final = cli.run(*args, env={BATCH_ENV: str(batch)})
        assert final.returncode == 0, final.describe()

    chain(False)
    redacted: list[str] = []
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        for history in histories:
            grow_history(client, history, rng.randint(3, 20))
            current = {sha256_hex(c) for c in history.live.values()}
            # A version whose content no live memory still serves: its content must leave everything.
            candidates = [
                v
                for v in client.iter_versions(history.store.id)
                if v.operation is not Operation.DELETED and v.content_sha256 not in current
            ]
            if candidates:
                version = rng.choice(candidates)
                content = client.get_version(history.store.id, version.id).content
                assert content is not None
                if sum(1 for v in candidates if v.content_sha256 == version.content_sha256) == 1:
                    redacted.append(
                        GitOracle(work).git("hash-object", "--stdin", input=content.encode()).decode().strip()
                    )
                client.redact_version(history.store.id, version.id)
                tally.redactions_backed_up += 1
    chain(True)
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        for history in histories:
            fresh = pull_store(client, history.store, work / "fresh")
            assert fresh.ok and fresh.tip is not None, fresh.error
            mirror = work / "mirrors" / history.store.id
            assert GitOracle(mirror).ref(MEMSTORE_REF) == fresh.tip
            for remote in (
                work / "backups" / f"{history.store.id}.git",
                work / "second" / f"{slug(history.store.name) or history.store.id}.git",
            ):
                assert_backup_matches(mirror, remote)
                objects = GitOracle(remote).text("cat-file", "--batch-all-objects", "--batch-check")
                assert not [blob for blob in redacted if blob in objects], f"redacted content in {remote}"
            tally.versions_written += history.versions


# --- daemon -------------------------------------------------------------------------------------------


def daemon_round(server: ServerProcess, work: Path, tally: Tally) -> None:
    """A daemon killed right after pushing one edit, a second edit made while it is down, restarted."""
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        store = client.create_store(
            f"soak-daemon-{uuid.uuid4().hex[:8]}",
            idempotency_key=str(uuid.uuid4()),
            description="made by tests",
        )
        client.create_memory(store.id, "a.md", "a\n")
        client.create_memory(store.id, "b.md", "b\n")
        config = write_config(work, dialect="forward", base_url=server.base_url, stores=[store.id])
        cli = MemsyncCli(config, server.token)
        repo = work / "mirrors" / store.id
        daemon = cli.start("daemon", env={CRASH_ENV: "push.store_write:1"})
        try:
            wait_until(lambda: (repo / "b.md").exists(), timeout=60, what="the daemon's first pull")
            (repo / "a.md").write_text("a, edited while the daemon runs\n")
            # It sends the edit, then kills itself at the write (before importing it).
            daemon.wait(timeout=60)
        finally:
            if daemon.poll() is None:
                daemon.kill()
            daemon.communicate()
        assert daemon.returncode == -9, f"the daemon exited {daemon.returncode}, not at its crash point"
        tally.daemon_kills += 1
        tally.crashes += 1
        (repo / "b.md").write_text("b, edited while the daemon was down\n")
        daemon = cli.start("daemon")
        expected = {
            "a.md": "a, edited while the daemon runs\n",
            "b.md": "b, edited while the daemon was down\n",
        }
        try:
            wait_until(
                lambda: (
                    _store_contents(client, store.id) == expected
                    and GitOracle(repo).ref("refs/memsync/base") == GitOracle(repo).ref(MEMSTORE_REF)
                    and decoded_worktree(repo) == expected
                ),
                timeout=60,
                interval=0.2,
                what="the restarted daemon to push the edit made while it was down",
            )
        finally:
            daemon.terminate()
            _, err = daemon.communicate(timeout=60)
        assert daemon.returncode == 0, err[-3000:]
        versions = sum(1 for _ in client.iter_versions(store.id))
        tally.versions_written += 4
        tally.writes_lost += max(0, 4 - versions)
        tally.writes_doubled += max(0, versions - 4)
        assert versions == 4, f"{versions} versions for two creates and two edits"
    GitOracle(repo).fsck()


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
            run_phase("push-machine", tally, work, lambda d: machine_round(server, tally), options.keep)
            for _ in range(2):
                run_phase(
                    "push-crash", tally, work, lambda d: push_crash_round(server, rng, d, tally), options.keep
                )
            run_phase("push-faults", tally, work, lambda d: push_fault_round(rng, d, tally), options.keep)
            for _ in range(2):
                run_phase(
                    "backup-crash",
                    tally,
                    work,
                    lambda d: backup_crash_round(server, rng, d, tally),
                    options.keep,
                )
            run_phase("daemon", tally, work, lambda d: daemon_round(server, d, tally), options.keep)
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
    print(f"  push machine examples: {tally.machine_examples}; local edits pushed: {tally.push_edits}")
    print(f"  daemon kills: {tally.daemon_kills}; redactions backed up: {tally.redactions_backed_up}")
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
