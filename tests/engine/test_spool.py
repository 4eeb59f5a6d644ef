from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memsync.engine.spool import ReverseSpool


@given(st.lists(st.one_of(st.text(), st.binary(), st.integers(), st.none()), max_size=200))
def test_spool_yields_items_in_reverse(items: list[object]) -> None:
    with ReverseSpool[object]() as spool:
        spool.extend(items)
        assert len(spool) == len(items)
        assert list(spool.reversed()) == list(reversed(items))
        # Reading twice gives the same answer: nothing is consumed.
        assert list(spool.reversed()) == list(reversed(items))


def test_spool_keeps_only_offsets_in_memory() -> None:
    with ReverseSpool[bytes]() as spool:
        for _ in range(100):
            spool.append(b"x" * 100_000)
        # 10 MB appended; the spool holds 100 offsets of 8 bytes in memory.
        assert spool._offsets.itemsize * len(spool._offsets) == 800
        first = next(spool.reversed())
        assert first == b"x" * 100_000
