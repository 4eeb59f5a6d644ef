"""The debouncer with an injected clock: quiet delay, maximum wait, keys independent."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memsync.daemon import Debouncer


def test_a_single_event_is_due_after_the_quiet_delay() -> None:
    d: Debouncer[str] = Debouncer(quiet=0.25, max_wait=5.0)
    d.note("a.md", now=10.0)
    assert d.next_deadline() == 10.25
    assert d.due(10.24) == []
    assert d.due(10.25) == ["a.md"]
    assert d.due(99.0) == []  # handed out once
    assert d.next_deadline() is None


def test_events_within_the_quiet_delay_postpone_it() -> None:
    d: Debouncer[str] = Debouncer(quiet=0.25, max_wait=5.0)
    for t in (0.0, 0.1, 0.2, 0.3):
        d.note("a.md", now=t)
    assert d.due(0.54) == []
    assert d.due(0.55) == ["a.md"]


def test_a_file_that_never_goes_quiet_is_due_at_the_maximum_wait() -> None:
    d: Debouncer[str] = Debouncer(quiet=0.25, max_wait=1.0)
    t = 0.0
    handed_out: list[float] = []
    while t < 2.5:
        d.note("log.md", now=t)
        if d.due(t):
            handed_out.append(t)
        t = round(t + 0.1, 3)
    # Written every 100 ms: due once per second after the burst's first event, never starved.
    assert handed_out == [1.0, 2.1]


def test_keys_are_independent_and_come_out_in_deadline_order() -> None:
    d: Debouncer[str] = Debouncer(quiet=0.25, max_wait=5.0)
    d.note("b.md", now=0.1)
    d.note("a.md", now=0.0)
    d.note("c.md", now=0.2)
    d.note("a.md", now=0.2)  # postpones a past b and c
    assert d.due(0.35) == ["b.md"]
    assert d.due(0.45) == ["c.md", "a.md"]


def test_expedite_makes_a_key_due_now() -> None:
    d: Debouncer[str] = Debouncer(quiet=0.25, max_wait=5.0)
    d.note("a.md", now=0.0)
    d.expedite("held.md", now=0.05)
    assert d.due(0.05) == ["held.md"]
    assert len(d) == 1


def test_a_maximum_wait_below_the_quiet_delay_is_the_quiet_delay() -> None:
    d: Debouncer[str] = Debouncer(quiet=0.5, max_wait=0.1)
    d.note("a.md", now=0.0)
    assert d.next_deadline() == 0.5


@given(
    st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 0.4)), min_size=1, max_size=40),
    st.floats(0.01, 1.0),
    st.floats(0.01, 3.0),
)
def test_each_key_is_due_at_min_of_quiet_after_last_and_max_wait_after_first(
    gaps: list[tuple[str, float]], quiet: float, max_wait: float
) -> None:
    """A model check: replay events in time order, polling between them, against the rule itself."""
    d: Debouncer[str] = Debouncer(quiet, max_wait)
    wait = max(max_wait, quiet)
    open_bursts: dict[str, tuple[float, float]] = {}  # key -> (first, last) of the current burst
    now = 0.0

    def expected(key: str) -> float:
        first, last = open_bursts[key]
        return min(last + quiet, first + wait)

    def drain(until: float) -> None:
        while (deadline := d.next_deadline()) is not None and deadline <= until:
            for key in d.due(deadline):
                assert abs(expected(key) - deadline) < 1e-9
                del open_bursts[key]

    for key, gap in gaps:
        now += gap
        drain(now)
        first, _ = open_bursts.get(key, (now, now))
        open_bursts[key] = (first, now)
        d.note(key, now)
    drain(now + wait + quiet + 1)
    assert open_bursts == {} and len(d) == 0
