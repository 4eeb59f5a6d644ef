"""Splitting the stores between machines with no coordinator: rendezvous hashing, the shard spec and
where it comes from, and the commands that honour it (pull, backup, verify, sync, daemon, stores)."""

from __future__ import annotations

import hashlib
import json
import math
import random
import subprocess
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memsync.api import open_client
from memsync.config import Shard, parse_config, parse_shard
from memsync.engine.shards import (
    POD_INDEX_ENV,
    SHARD_ENV,
    SHARDS_ENV,
    assignment,
    owner,
    owns,
    resolve_shard,
    score,
    statefulset_shard,
)
from memsync.errors import ConfigError, UsageError
from memsync.rules import Dialect
from memsync.sync.pull import store_lock
from tests.support.server import ServerProcess
from tests.test_cli import memsync

# --- the hash -------------------------------------------------------------------------------------


def test_the_score_is_the_first_8_bytes_of_sha256_of_id_slash_index_big_endian() -> None:
    digest = hashlib.sha256(b"memstore_01/3").digest()
    assert score("memstore_01", 3) == int.from_bytes(digest[:8], "big")
    scores = {i: score("memstore_01", i) for i in range(5)}
    assert owner("memstore_01", 5) == max(scores, key=lambda i: scores[i])


def test_the_assignment_is_frozen() -> None:
    # Every machine of a fleet, whatever memsync version it runs, must agree: a change here moves
    # stores between machines. Computed once from the rule: sha256(b"memstore_01/0") starts c2a576e6...
    assert score("memstore_01", 0) == 0xC2A576E61D63F1C6
    ids = ["memstore_01", "memstore_02", "memstore_03", "memstore_0hello", "memstore_ünïcode"]
    assert [owner(i, 4) for i in ids] == [0, 1, 0, 3, 0]
    assert assignment(ids, 7) == dict(zip(ids, [5, 1, 0, 3, 0], strict=True))


store_ids = st.text(min_size=1, max_size=40).map(lambda s: f"memstore_{s}")


@given(store_id=store_ids, count=st.integers(min_value=1, max_value=64))
def test_every_store_has_exactly_one_owner(store_id: str, count: int) -> None:
    owning = [i for i in range(count) if owns(Shard(i, count), store_id)]
    assert owning == [owner(store_id, count)]


@given(store_id=store_ids, count=st.integers(min_value=1, max_value=64))
def test_adding_a_shard_moves_a_store_only_to_the_new_shard(store_id: str, count: int) -> None:
    before, after = owner(store_id, count), owner(store_id, count + 1)
    assert after in (before, count)


@given(seed=st.integers(min_value=0, max_value=2**32), count=st.integers(min_value=1, max_value=24))
def test_adding_a_shard_moves_about_one_in_n_plus_one(seed: int, count: int) -> None:
    rng = random.Random(seed)
    ids = [f"memstore_{rng.getrandbits(100):025x}" for _ in range(2000)]
    before, after = assignment(ids, count), assignment(ids, count + 1)
    moved = [i for i in ids if before[i] != after[i]]
    assert all(after[i] == count for i in moved)
    # Each store moves with probability 1/(N+1), independently: allow 6 standard deviations (a false
    # alarm about once in a billion checks).
    p = 1 / (count + 1)
    mean, sd = len(ids) * p, math.sqrt(len(ids) * p * (1 - p))
    assert abs(len(moved) - mean) <= 6 * sd, (len(moved), mean)
    # And every shard gets its share.
    sizes = [sum(1 for i in ids if after[i] == s) for s in range(count + 1)]
    assert all(abs(size - mean) <= 6 * sd for size in sizes), sizes


# --- the spec and where it comes from ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "shard"),
    [("0/1", Shard(0, 1)), ("3/4", Shard(3, 4)), (" 2/5 ", Shard(2, 5)), ("0/1024", Shard(0, 1024))],
)
def test_valid_specs(value: str, shard: Shard) -> None:
    assert parse_shard(value) == shard
    assert str(parse_shard(value)) == value.strip()


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("4/4", "the shard index I must be below the count N"),
        ("5/4", "the shards of 4 are 0/4 to 3/4"),
        ("0/0", "between 1 and 1024"),
        ("0/1025", "between 1 and 1024"),
        ("-1/4", "is not I/N"),
        ("1", "is not I/N"),
        ("a/b", "is not I/N"),
        ("1/4/2", "is not I/N"),
        ("١/٤", "is not I/N"),  # digits, but not ASCII ones
        ("", "is not I/N"),
    ],
)
def test_invalid_specs_name_the_value_and_the_rule(value: str, rule: str) -> None:
    with pytest.raises(UsageError) as info:
        resolve_shard(value, {}, "laptop", None)
    assert str(info.value).startswith(f"--shard: {value!r}") and rule in str(info.value)
    assert info.value.exit_code == 2


def test_the_flag_beats_the_environment_which_beats_the_statefulset_which_beats_the_config() -> None:
    env = {SHARD_ENV: "1/3", SHARDS_ENV: "5"}
    configured = Shard(0, 2)
    assert resolve_shard("2/4", env, "memsync-4", configured) == (Shard(2, 4), "--shard")
    assert resolve_shard(None, env, "memsync-4", configured) == (Shard(1, 3), SHARD_ENV)
    assert resolve_shard(None, {SHARDS_ENV: "5"}, "memsync-4", configured) == (
        Shard(4, 5),
        f"host name memsync-4 and {SHARDS_ENV}",
    )
    assert resolve_shard(None, {}, "memsync-4", configured) == (configured, "fleet.shard")
    assert resolve_shard(None, {}, "memsync-4", None) == (None, None)
    # Empty variables count as unset (a manifest may leave one empty).
    assert resolve_shard(None, {SHARD_ENV: " ", SHARDS_ENV: ""}, "memsync-4", None) == (None, None)
    with pytest.raises(UsageError, match=rf"^{SHARD_ENV}: '9/4'"):
        resolve_shard(None, {SHARD_ENV: "9/4"}, "memsync-0", None)


@pytest.mark.parametrize(
    ("env", "hostname", "shard"),
    [
        ({SHARDS_ENV: "3"}, "memsync-0", Shard(0, 3)),
        ({SHARDS_ENV: "3"}, "my-fleet-memsync-2", Shard(2, 3)),
        ({SHARDS_ENV: "12"}, "memsync-10", Shard(10, 12)),
        # The downward API's pod-index label wins over the host name (a pod may set spec.hostname).
        ({SHARDS_ENV: "3", POD_INDEX_ENV: "1"}, "worker", Shard(1, 3)),
        ({SHARDS_ENV: "3", POD_INDEX_ENV: "1"}, "memsync-2", Shard(1, 3)),
    ],
)
def test_a_statefulset_pod_derives_its_shard(env: dict[str, str], hostname: str, shard: Shard) -> None:
    found = statefulset_shard(env, hostname)
    assert found is not None and found[0] == shard


def test_without_memsync_shards_a_host_name_never_shards() -> None:
    assert statefulset_shard({}, "web-3") is None
    assert statefulset_shard({POD_INDEX_ENV: "3"}, "web-3") is None


@pytest.mark.parametrize(
    ("env", "hostname", "message"),
    [
        (
            {SHARDS_ENV: "3"},
            "memsync-3",
            "pod ordinal 3 (host name memsync-3 and MEMSYNC_SHARDS) is not below",
        ),
        ({SHARDS_ENV: "3", POD_INDEX_ENV: "7"}, "x", "set MEMSYNC_SHARDS to its replica count"),
        ({SHARDS_ENV: "3"}, "laptop", "the host name 'laptop' does not end in -<ordinal>"),
        ({SHARDS_ENV: "3"}, "memsync-01", "does not end in -<ordinal>"),
        ({SHARDS_ENV: "three"}, "memsync-0", "MEMSYNC_SHARDS='three' is not a shard count"),
        ({SHARDS_ENV: "0"}, "memsync-0", "between 1 and 1024"),
        (
            {SHARDS_ENV: "3", POD_INDEX_ENV: "one"},
            "memsync-0",
            "MEMSYNC_POD_INDEX='one' is not a pod ordinal",
        ),
    ],
)
def test_a_statefulset_that_cannot_be_read_is_a_usage_error(
    env: dict[str, str], hostname: str, message: str
) -> None:
    with pytest.raises(UsageError) as info:
        statefulset_shard(env, hostname)
    assert message in str(info.value)


def test_fleet_shard_in_the_config() -> None:
    data: dict[str, object] = {
        "api": {"dialect": "forward", "base_url": "http://127.0.0.1:1", "token_env": "T"},
        "mirror": {"root": "/tmp/m"},
    }
    assert parse_config(data).fleet.shard is None
    assert parse_config({**data, "fleet": {"shard": "1/3"}}).fleet.shard == Shard(1, 3)
    with pytest.raises(ConfigError, match=r"fleet\.shard: '3/3': the shard index I must be below"):
        parse_config({**data, "fleet": {"shard": "3/3"}})
    with pytest.raises(ConfigError, match=r"fleet\.shards: unknown key"):
        parse_config({**data, "fleet": {"shards": 3}})


# --- the commands -----------------------------------------------------------------------------------


def _create_stores(server: ServerProcess, count: int) -> list[str]:
    ids = []
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        for n in range(count):
            store = client.create_store(f"shards-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()))
            client.create_memory(store.id, "notes/a.md", f"store {n}\n")
            ids.append(store.id)
    return ids


def _config(folder: Path, server: ServerProcess, ids: list[str], extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    include = ", ".join(f'"{i}"' for i in ids)
    config = folder / "memsync.toml"
    config.write_text(
        f'[api]\ndialect = "forward"\nbase_url = "{server.base_url}"\ntoken_env = "MS_TOKEN"\n'
        f'[mirror]\nroot = "mirrors"\n[stores]\ninclude = [{include}]\n{extra}'
    )
    return config


def _run(
    config: Path, server: ServerProcess, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    # The test's own environment must not shard the command by accident.
    clean = {SHARD_ENV: "", SHARDS_ENV: "", POD_INDEX_ENV: ""}
    return memsync("--config", str(config), *args, env={**clean, "MS_TOKEN": server.token, **(env or {})})


def _ids(done: subprocess.CompletedProcess[str]) -> set[str]:
    assert done.returncode == 0, done.stderr + done.stdout
    return {entry["id"] for entry in json.loads(done.stdout)["stores"]}


@pytest.fixture(scope="module")
def six_stores(server: ServerProcess) -> list[str]:
    return _create_stores(server, 6)


@pytest.mark.e2e
def test_stores_shows_each_stores_shard_and_the_selection_of_one(
    six_stores: list[str], server: ServerProcess, tmp_path: Path
) -> None:
    config = _config(tmp_path, server, six_stores[:5])  # the sixth is listed but not selected
    union: set[str] = set()
    for index in range(3):
        done = _run(config, server, "stores", "--shard", f"{index}/3", "--json")
        assert done.returncode == 0, done.stderr
        rows = {row["id"]: row for row in json.loads(done.stdout)["stores"]}
        for store_id in six_stores:
            assert rows[store_id]["shard"] == owner(store_id, 3)
            expected = store_id in six_stores[:5] and owner(store_id, 3) == index
            assert rows[store_id]["selected"] is expected
        chosen = {sid for sid, row in rows.items() if row["selected"]}
        assert not chosen & union
        union |= chosen
    assert union == set(six_stores[:5])
    # Without a shard the rows have no shard field; the text form names the shard and its source.
    plain = _run(config, server, "stores", "--json")
    assert all("shard" not in row for row in json.loads(plain.stdout)["stores"])
    text = _run(config, server, "stores", env={SHARD_ENV: "1/3"})
    assert text.returncode == 0 and f"shard 1/3 (from {SHARD_ENV})" in text.stderr
    line = next(line for line in text.stdout.splitlines() if line.startswith(six_stores[5]))
    assert line.endswith(f"[not selected, shard {owner(six_stores[5], 3)}/3]")


@pytest.mark.e2e
def test_bad_shards_exit_2_naming_the_value_and_the_rule(
    six_stores: list[str], server: ServerProcess, tmp_path: Path
) -> None:
    config = _config(tmp_path, server, six_stores)
    for command in ("pull", "backup", "verify", "sync", "daemon", "stores"):
        done = _run(config, server, command, "--shard", "3/3")
        assert done.returncode == 2, (command, done.stderr)
        assert "--shard: '3/3': the shard index I must be below the count N" in done.stderr
    from_env = _run(config, server, "pull", env={SHARD_ENV: "x"})
    assert from_env.returncode == 2 and f"{SHARD_ENV}: 'x' is not I/N" in from_env.stderr
    pod = _run(config, server, "pull", env={SHARDS_ENV: "2", POD_INDEX_ENV: "2"})
    assert pod.returncode == 2 and "pod ordinal 2" in pod.stderr and "replica count" in pod.stderr


@pytest.mark.e2e
def test_pull_sync_verify_backup_and_the_daemon_take_only_their_shards_stores(
    six_stores: list[str], server: ServerProcess, tmp_path: Path
) -> None:
    backups = tmp_path / "backups"
    config = _config(
        tmp_path, server, six_stores, f'[[backup.remotes]]\nurl = "{backups}/{{store_id}}.git"\n'
    )
    mine = {sid for sid in six_stores if owner(sid, 2) == 1}
    assert _ids(_run(config, server, "pull", "--json", "--shard", "1/2")) == mine
    assert {p.name for p in (tmp_path / "mirrors").iterdir() if p.name.startswith("memstore_")} == mine
    # The flag beats the environment; the environment alone, and a StatefulSet pod, shard too.
    assert _ids(_run(config, server, "sync", "--json", "--shard", "1/2", env={SHARD_ENV: "0/2"})) == mine
    assert _ids(_run(config, server, "verify", "--json", env={SHARD_ENV: "1/2"})) == mine
    assert _ids(_run(config, server, "verify", "--json", env={SHARDS_ENV: "2", POD_INDEX_ENV: "1"})) == mine
    assert _ids(_run(config, server, "backup", "--json", "--shard", "1/2")) == mine
    assert {p.name.removesuffix(".git") for p in backups.iterdir()} == mine
    # The daemon's discovery honours it (--once: one cycle per store it selected).
    assert _ids(_run(config, server, "daemon", "--once", "--json", "--shard", "1/2")) == mine
    # One shard of one owns everything.
    assert _ids(_run(config, server, "pull", "--json", "--shard", "0/1")) == set(six_stores)


@pytest.mark.e2e
def test_fleet_shard_from_the_config_file_and_the_flag_over_it(
    six_stores: list[str], server: ServerProcess, tmp_path: Path
) -> None:
    config = _config(tmp_path, server, six_stores, '[fleet]\nshard = "0/2"\n')
    assert _ids(_run(config, server, "pull", "--json")) == {s for s in six_stores if owner(s, 2) == 0}
    assert _ids(_run(config, server, "pull", "--json", "--shard", "1/2")) == {
        s for s in six_stores if owner(s, 2) == 1
    }


@pytest.mark.e2e
def test_a_store_named_on_another_shard_is_a_usage_error(
    six_stores: list[str], server: ServerProcess, tmp_path: Path
) -> None:
    config = _config(tmp_path, server, six_stores)
    store_id = six_stores[0]
    theirs = owner(store_id, 3)
    other = (theirs + 1) % 3
    done = _run(config, server, "pull", store_id, "--shard", f"{other}/3")
    assert done.returncode == 2
    assert f"{store_id} (shard {theirs}/3): not in shard {other}/3" in done.stderr
    assert _ids(_run(config, server, "pull", store_id, "--json", "--shard", f"{theirs}/3")) == {store_id}


@pytest.mark.e2e
def test_a_moved_store_converges_to_the_same_commits_on_its_new_owner(
    server: ServerProcess, tmp_path: Path
) -> None:
    # Stores whose owner changes from 4 shards to 5: about one in five, so make stores until one moves.
    with open_client(Dialect.FORWARD, server.base_url, server.token) as client:
        for _ in range(60):
            store = client.create_store(f"moving-{uuid.uuid4().hex[:8]}", idempotency_key=str(uuid.uuid4()))
            if owner(store.id, 5) != owner(store.id, 4):
                break
        else:
            pytest.fail("no store of 60 moved from 4 to 5 shards")
        first = client.create_memory(store.id, "notes/a.md", "one\n")
        client.create_memory(store.id, "notes/b.md", "two\n")
        client.update_memory(store.id, first.id, "one, edited\n", expected_sha256=first.content_sha256)
        client.delete_memory(store.id, first.id, expected_sha256=None)
    was = owner(store.id, 4)
    assert owner(store.id, 5) == 4  # a moved store only ever moves to the new shard
    old = _config(tmp_path / "old-owner", server, [store.id])
    new = _config(tmp_path / "new-owner", server, [store.id])
    assert _ids(_run(old, server, "pull", "--json", "--shard", f"{was}/4")) == {store.id}
    # After the move the old owner leaves it alone (its mirror stays where it was).
    assert _ids(_run(old, server, "pull", "--json", "--shard", f"{was}/5")) == set()
    new_shard = "4/5"
    # The new owner starts from nothing: it imports the whole history from the API.
    assert _ids(_run(new, server, "pull", "--json", "--shard", new_shard)) == {store.id}

    def tip(config: Path) -> str:
        mirror = config.parent / "mirrors" / store.id
        rev = ["git", "-C", str(mirror), "rev-parse", "memstore/main"]
        return subprocess.run(rev, capture_output=True, text=True, check=True).stdout.strip()

    assert tip(new) == tip(old)
    # Where two owners share a mirror root during a handover, the store lock lets one write at a time.
    with store_lock(old.parent / "mirrors", store.id):
        busy = _run(old, server, "pull", "--json", "--shard", new_shard)
    assert busy.returncode == 75, busy.stderr
