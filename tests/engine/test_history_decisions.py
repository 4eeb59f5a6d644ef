"""The pure decisions behind a history that tells the whole truth (memsync.engine.importing)."""

from __future__ import annotations

import pytest

from memsync.engine.importing import (
    TruncationCounter,
    inferred_deletes,
    metadata_source,
    redacted_content_changes,
)


def test_a_memory_listed_without_its_creation_counts_as_truncated() -> None:
    counter = TruncationCounter()
    # Newest first, as listed: mem_a has its creation, mem_b only an update, mem_c only its tombstone.
    for memory, operation in [
        ("mem_a", "updated"),
        ("mem_b", "updated"),
        ("mem_c", "deleted"),
        ("mem_b", "updated"),
        ("mem_a", "created"),
        ("mem_d", "created"),
    ]:
        counter.see(memory, operation)
    assert counter.count == 2
    assert TruncationCounter().count == 0


def test_a_redacted_commit_follows_what_its_memory_serves() -> None:
    redacted = [
        ("v1", "mem_a", "a" * 64, True),  # kept the content; the memory moved on: drop it
        ("v2", "mem_b", "b" * 64, True),  # kept it; still served: nothing to do
        ("v3", "mem_c", "c" * 64, False),  # no content; served again: write it
        ("v4", "mem_d", "d" * 64, True),  # kept it; the memory is deleted: drop it
        ("v5", "mem_e", "e" * 64, True),  # not looked at: nothing known
        ("v6", "mem_f", None, False),  # no hash kept (Anthropic): nothing a fresh import would write
    ]
    served = {"mem_a": "z" * 64, "mem_b": "b" * 64, "mem_c": "c" * 64, "mem_d": None, "mem_f": "f" * 64}
    assert redacted_content_changes(redacted, served) == {"v1": False, "v3": True, "v4": False}


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"imported": False, "complete": False, "has_metadata": True, "live_touched": 0}, "unchanged"),
        ({"imported": True, "complete": True, "has_metadata": True, "live_touched": 9}, "listed"),
        ({"imported": False, "complete": True, "has_metadata": False, "live_touched": 0}, "listed"),
        ({"imported": True, "complete": False, "has_metadata": False, "live_touched": 500}, "from-versions"),
        ({"imported": True, "complete": False, "has_metadata": True, "live_touched": 1}, "read"),
        ({"imported": True, "complete": False, "has_metadata": True, "live_touched": 2}, "read"),
        ({"imported": True, "complete": False, "has_metadata": True, "live_touched": 3}, "listed"),
        ({"imported": True, "complete": False, "has_metadata": True, "live_touched": 0}, "read"),
    ],
)
def test_metadata_is_refreshed_at_the_fewest_requests(kwargs: dict[str, object], expected: str) -> None:
    # 250 memories: a listing costs 3 pages, so reading 2 memories is cheaper and 3 is not.
    assert metadata_source(entry_count=250, **kwargs) == expected  # type: ignore[arg-type]


def test_a_read_that_brings_a_new_content_along_costs_nothing_extra() -> None:
    common = {"imported": True, "complete": False, "has_metadata": True, "entry_count": 40}
    # One page of memories against one read that also fetches the memory's new content: read.
    assert metadata_source(live_touched=1, contents_saved=1, **common) == "read"  # type: ignore[arg-type]
    # Known contents: the read would be a request of its own, as the listing is; a tie lists.
    assert metadata_source(live_touched=1, contents_saved=0, **common) == "listed"  # type: ignore[arg-type]
    assert metadata_source(live_touched=5, contents_saved=2, **common) == "listed"  # type: ignore[arg-type]


def test_an_unknown_store_size_lists_and_a_small_store_reads_nothing_for_deletes() -> None:
    common = {"imported": True, "complete": False, "has_metadata": True}
    assert metadata_source(entry_count=None, live_touched=1, **common) == "listed"
    assert metadata_source(entry_count=0, live_touched=1, **common) == "listed"
    assert metadata_source(entry_count=0, live_touched=0, **common) == "read"


def test_files_whose_memory_is_not_listed_are_inferred_deleted_by_path() -> None:
    tip = {"z.md": "mem_z", "a/b.md": "mem_b", "live.md": "mem_l"}
    assert inferred_deletes(tip, {"mem_l"}) == [("a/b.md", "mem_b"), ("z.md", "mem_z")]
    assert inferred_deletes(tip, {"mem_l", "mem_b", "mem_z"}) == []
