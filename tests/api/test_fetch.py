"""fetch_contents against answers the real server never gives: contents that do not match their hash,
the wrong version, and the pacing of requests in flight."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from memsync.api import ContentMismatch, InvalidResponse, MemoryVersion, open_client
from memsync.api._fetch import Pace
from memsync.api._wire import Wire
from memsync.rules import Dialect
from tests.api.wire_objects import forward_version, json_response, sha

FORWARD = Wire(Dialect.FORWARD)


def listed(version_id: str, content: str, **fields: object) -> MemoryVersion:
    return FORWARD.version(forward_version(version_id, content, **fields))


def serving(answers: dict[str, dict]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        return json_response(answers[request.url.path.rsplit("/", 1)[1]])

    return httpx.MockTransport(handle)


@pytest.mark.parametrize("concurrency", [1, 4])
def test_content_that_does_not_match_its_hash_is_refused(concurrency: int) -> None:
    tampered = forward_version("memver_2", "evil", with_content=True, content_sha256=sha("good"))
    transport = serving(
        {"memver_1": forward_version("memver_1", "fine", with_content=True), "memver_2": tampered}
    )
    versions = [listed("memver_1", "fine"), listed("memver_2", "good")]
    with open_client(Dialect.FORWARD, "http://h", "t", transport=transport) as client:
        fetched = client.fetch_contents("memstore_1", versions, concurrency=concurrency)
        assert next(fetched)[1] == "fine"
        with pytest.raises(ContentMismatch) as caught:
            next(fetched)
    assert caught.value.object_id == "memver_2" and "memver_2" in str(caught.value)
    assert caught.value.expected_sha256 == sha("good") and caught.value.actual_sha256 == sha("evil")


def test_content_must_match_the_hash_it_was_listed_with() -> None:
    # The server's answer is self-consistent, but not what the listing promised for this version.
    transport = serving({"memver_1": forward_version("memver_1", "swapped", with_content=True)})
    with (
        open_client(Dialect.FORWARD, "http://h", "t", transport=transport) as client,
        pytest.raises(ContentMismatch, match="memver_1"),
    ):
        list(client.fetch_contents("memstore_1", [listed("memver_1", "original")]))


def test_a_listed_content_is_checked_without_a_request() -> None:
    forged = listed("memver_1", "x").model_copy(update={"content": "not x"})
    with (
        open_client(Dialect.FORWARD, "http://h", "t", transport=serving({})) as client,
        pytest.raises(ContentMismatch),
    ):
        list(client.fetch_contents("memstore_1", [forged]))
        assert client.request_count == 0


def test_another_version_than_asked_is_refused() -> None:
    transport = serving({"memver_1": forward_version("memver_9", "text", with_content=True)})
    with (
        open_client(Dialect.FORWARD, "http://h", "t", transport=transport) as client,
        pytest.raises(InvalidResponse, match="asked for version memver_1"),
    ):
        list(client.fetch_contents("memstore_1", [listed("memver_1", "text")]))


def test_versions_without_content_cost_no_request() -> None:
    tomb = listed("memver_2", "gone", operation="deleted")
    redacted = listed("memver_3", "secret", redacted=True, redacted_at="2026-08-14T11:00:00Z")
    with open_client(Dialect.FORWARD, "http://h", "t", transport=serving({})) as client:
        assert list(client.fetch_contents("memstore_1", [tomb, redacted])) == [(tomb, None), (redacted, None)]
        assert client.request_count == 0


def test_a_fixed_pace_stays_fixed() -> None:
    pace = Pace(3, maximum=16)
    for _ in range(10):
        pace.record(0.050, 0.001)
    assert pace.window == 3 and not pace.sampling
    with pytest.raises(ValueError, match="at least 1"):
        Pace(0, maximum=16)
    assert Pace(None, maximum=2).floor == 2  # the floor never exceeds the maximum


@pytest.mark.parametrize(
    ("latency_s", "cpu_s", "window"),
    [
        (0.0010, 0.0006, 4),  # loopback: Little's law says 2, the measured floor is 4
        (0.0210, 0.0007, 16),  # 20 ms away: as many in flight as allowed
        (0.0060, 0.0010, 6),
        (0.0010, 0.0000, 5),  # CPU too small to measure: a floor on it keeps the ratio sane
    ],
)
def test_the_adaptive_pace_follows_littles_law(latency_s: float, cpu_s: float, window: int) -> None:
    pace = Pace(None, maximum=16)
    # The first requests go one at a time; the fastest of them shows the latency.
    times = [latency_s * 3, latency_s, latency_s * 2]
    for wall in times:
        assert pace.window == 1 and pace.sampling
        pace.record(wall, cpu_s)
    assert pace.window == window and not pace.sampling
    # Then the window holds: times measured with requests in flight include waits for the GIL, which
    # grow with the window (the feedback that took it to its ceiling on loopback).
    for _ in range(20):
        pace.record(latency_s * 40, cpu_s)
    assert pace.window == window


def test_sampled_requests_run_alone_then_the_window_opens() -> None:
    in_flight: list[int] = []
    running = 0
    lock = threading.Lock()
    release = threading.Event()
    answers = {
        f"memver_{n}": forward_version(f"memver_{n}", f"text {n}", with_content=True) for n in range(12)
    }

    def handle(request: httpx.Request) -> httpx.Response:
        nonlocal running
        with lock:
            running += 1
            in_flight.append(running)
        # Hold the later requests until several are running at once: proof the window opened.
        if len(in_flight) > 3:
            release.wait(timeout=10)
        with lock:
            running -= 1
        return json_response(answers[request.url.path.rsplit("/", 1)[1]])

    versions = [listed(f"memver_{n}", f"text {n}") for n in range(12)]
    with open_client(Dialect.FORWARD, "http://h", "t", transport=httpx.MockTransport(handle)) as client:
        fetched = client.fetch_contents("memstore_1", versions)
        for sent in (1, 2):
            next(fetched)
            # While the caller holds a sampled result, nothing else is sent.
            assert len(in_flight) == sent and running == 0
        next(fetched)  # the third sample: the window opens before its result is handed over
        assert in_flight[:3] == [1, 1, 1]
        deadline = time.monotonic() + 10
        while running < 4 and time.monotonic() < deadline:
            time.sleep(0.001)  # polling a condition with a deadline, not a fixed wait
        assert running == 4  # the floor of the window, once the samples are in
        release.set()
        assert [content for _, content in fetched] == [f"text {n}" for n in range(3, 12)]
