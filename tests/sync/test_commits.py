"""The spelling function behind a clone's push on macOS: a name git precomposed (NFC) is the store's
memory spelled in NFD, one to one, and nothing else is taken for it."""

from __future__ import annotations

from memsync.sync.commits import precomposed_twins

NFD, NFC = "cafe\u0301.md", "caf\u00e9.md"


def test_a_precomposed_name_is_the_known_decomposed_one() -> None:
    assert precomposed_twins({NFC, "x.md"}, {NFD, "x.md"}) == {NFC: NFD}
    assert precomposed_twins({f"notes/{NFC}/a.md"}, {f"notes/{NFD}/a.md"}) == {
        f"notes/{NFC}/a.md": f"notes/{NFD}/a.md"
    }


def test_two_memories_or_an_ambiguous_name_stay_as_they_are() -> None:
    # Both spellings committed, or both in the store: distinct memories, each by its own name.
    assert precomposed_twins({NFC, NFD}, {NFD}) == {}
    assert precomposed_twins({NFC}, {NFD, NFC}) == {}
    # Only a name the commit no longer has can be the one git precomposed.
    assert precomposed_twins({NFC, "y.md"}, {"y.md"}) == {}
    assert precomposed_twins({"a.md"}, {"b.md"}) == {}
