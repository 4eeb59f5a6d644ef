"""Random version histories against a model of the store: what git holds is what the model says."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.mirror import Mirror, VersionRecord
from tests.mirror.oracle import fsck, git, record

LONG = "L" * 300
POOL = [
    "a",
    "a/b",
    "a/b/c",
    ".git",
    ".git/config",
    "x/.gitmodules",
    "100%",
    "n",
    "n/o",
    "é/ü 🙂",
    LONG,
    f"{LONG}/z",
    "git~1/x",
    " spaced ",
]

# An operation: (kind, memory slot, path slot, content number)
operations = st.lists(
    st.tuples(
        st.sampled_from(["create", "update", "move", "delete", "redact", "skip"]),
        st.integers(0, 5),
        st.integers(0, len(POOL) - 1),
        st.integers(0, 3),
    ),
    min_size=1,
    max_size=25,
)


def play(ops: list[tuple[str, int, int, int]]) -> tuple[list[VersionRecord], dict[str, tuple[str, bytes]]]:
    """Versions a store could produce for ``ops``, and the model state they lead to."""
    live: dict[str, tuple[str, bytes]] = {}  # memory id → (path, content)
    records: list[VersionRecord] = []
    born = 0
    for kind, slot, path_slot, number in ops:
        n = len(records) + 1
        taken = {path for path, _ in live.values()}
        path = POOL[path_slot]
        content = f"content {number} of {n}\n".encode()
        memory = sorted(live)[slot % len(live)] if live else None
        if kind == "create" or memory is None:
            if path in taken:
                continue
            born += 1
            memory = f"mem_{born}"
            live[memory] = (path, content)
            records.append(record(n, memory, "created", path, content))
        elif kind == "update":
            live[memory] = (live[memory][0], content)
            records.append(record(n, memory, "updated", live[memory][0], content))
        elif kind == "move":
            if path in taken:
                continue
            live[memory] = (path, content)
            records.append(record(n, memory, "updated", path, content))
        elif kind == "delete":
            old_path, old = live.pop(memory)
            records.append(record(n, memory, "deleted", old_path, None, sha=hashlib.sha256(old).hexdigest()))
        elif kind == "redact":
            records.append(record(n, memory, "updated", None, None, redacted=True, sha="a" * 64))
        else:
            records.append(record(n, memory, "updated", path, content, skipped=True, skip_reason="test"))
    return records, live


@settings(max_examples=30)
@given(operations)
def test_random_histories_match_the_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int, int]]
) -> None:
    records, live = play(ops)
    assert records  # the first operation always creates a memory
    base = tmp_path_factory.mktemp("model")
    mirror = Mirror.init(base / "one")
    with mirror.history_writer(batch_commits=4) as writer:
        for item in records:
            writer.add(item)
    tip = mirror.tip()
    assert tip is not None
    files = mirror.files(tip)
    assert {path: mirror.content(blob) for path, blob in files.items()} == {
        path: content for path, content in live.values()
    }
    assert mirror.paths() == {path: memory for memory, (path, _) in live.items()}
    # The map rebuilt from the trailers alone agrees with the writer's.
    mirror.git.state.drop_caches("paths")
    assert Mirror.open(mirror.path).paths() == mirror.paths()
    # Determinism: another mirror, other batch sizes, same commits.
    other = Mirror.init(base / "two")
    with other.history_writer(batch_commits=1000) as writer:
        for item in records:
            writer.add(item)
    assert other.tip() == tip
    assert git(mirror.path, "rev-list", "--count", tip).strip() == str(len(records))
    fsck(mirror.path)
