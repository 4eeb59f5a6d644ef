"""A write that lands between push's decision to delete a memory and the delete itself.

The window cannot be hit on purpose with a timer, so a transport wrapped around the real one lands
another client's write on the server at the moment the push's DELETE is about to be sent. The server
is the real reference server; only the moment is chosen.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import httpx

from memsync.api import open_client
from memsync.rules import Dialect
from tests.push.conftest import Side, git
from tests.support.server import ServerProcess

MakeSide = Callable[..., Side]


class WriteBeforeDelete(httpx.BaseTransport):
    """Forwards every request to the network, running ``write`` once just before the first DELETE."""

    def __init__(self, write: Callable[[], None]) -> None:
        self._inner = httpx.HTTPTransport()
        self._write = write
        self.deletes: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "DELETE":
            if not self.deletes:
                self._write()
            self.deletes.append(request)
        return self._inner.handle_request(request)

    def close(self) -> None:
        self._inner.close()


def test_cloud_delete_carries_the_base_hash_so_a_racing_write_survives(
    make_side: MakeSide, server: ServerProcess
) -> None:
    side = make_side(Dialect.CLOUD, {"keep.md": "agents wrote this\n", "other.md": "x\n"})
    (side.repo / "keep.md").unlink()
    racing = "an agent's write that lands while the push is deciding\n"
    transport = WriteBeforeDelete(lambda: side.put("keep.md", racing))
    with open_client(Dialect.CLOUD, server.base_url, server.token, transport=transport) as pusher:
        report = side.sync(client=pusher)

    # The delete went out with the hash the push planned from, and the server refused it.
    first = transport.deletes[0]
    assert first.url.params["expected_content_sha256"] == sha256_of("agents wrote this\n")
    assert side.remote()["keep.md"] == racing
    # Nothing is lost. The agent's write is in the store and in the mirror's history, and the push
    # replanned against it: local delete against a remote change keeps the remote version in the
    # checkout (docs/push.md), so the user sees what they would have deleted.
    assert report.ok, report.error
    assert racing.strip() in git(side.repo, "log", "-p", "refs/remotes/memstore/main", "--", "keep.md")
    assert side.read("keep.md") == racing
    side.assert_in_step()


def test_forward_delete_reads_and_compares_first(make_side: MakeSide, server: ServerProcess) -> None:
    """Forward has no delete precondition: the memory is read and compared, and the DELETE carries no
    parameter the Forward API does not define."""
    side = make_side(Dialect.FORWARD, {"gone.md": "bye\n", "other.md": "x\n"})
    (side.repo / "gone.md").unlink()
    transport = WriteBeforeDelete(lambda: None)
    with open_client(Dialect.FORWARD, server.base_url, server.token, transport=transport) as pusher:
        report = side.sync(client=pusher)
    assert report.ok, report.error
    assert "expected_content_sha256" not in transport.deletes[0].url.params
    assert "gone.md" not in side.remote()
    side.assert_in_step()


def sha256_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
