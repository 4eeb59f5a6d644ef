"""A redaction rewrite under pending local work: what push keeps beside the mirror follows it.

The rewrite gives every commit from the redacted version on a new id. Push's state names commits
(``refs/memsync/base``, the base's ids kept in ``.git/memsync/base-ids-<commit>.json``) and the stat
cache names files; this checks, end to end against the real server, that a cycle which rewrites and
then pushes a pending edit ends in step, with the edit in the store and the secret nowhere.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Callable

from memsync.api import Operation
from memsync.rules import Dialect
from memsync.sync.cycle import run_cycle
from tests.push.conftest import Side

MakeSide = Callable[..., Side]

SECRET = "api_key=sk-live-123456\n"
REPLACED = "api_key=<removed by hand>\n"


def _blob(content: str) -> str:
    data = content.encode()
    return hashlib.sha1(b"blob %d\0%s" % (len(data), data), usedforsecurity=False).hexdigest()


def test_a_cycle_that_rewrites_still_pushes_the_pending_edit(make_side: MakeSide) -> None:
    side = make_side(Dialect.FORWARD, {"notes.md": "plain notes\n"})
    leak = side.client.create_memory(side.store.id, "config.md", SECRET)
    side.client.update_memory(side.store.id, leak.id, REPLACED, expected_sha256=leak.content_sha256)
    side.synced()
    side.assert_in_step()
    base_before = side.ref("refs/memsync/base")
    # Local work waits for the next cycle, while the store redacts the leaked version.
    side.write("notes.md", "my local edit\n")
    created = next(
        v
        for v in side.client.iter_versions(side.store.id)
        if v.memory_id == leak.id and v.operation is Operation.CREATED
    )
    side.client.redact_version(side.store.id, created.id)

    report = run_cycle(side.client, side.client.get_store(side.store.id), side.root, full_scan=True)

    assert report.ok, report.pull.error or (report.push.error if report.push else None)
    assert report.pull.rewrite is not None and report.pull.rewrite["versions"] == [created.id]
    assert report.pushed == 1
    assert side.remote() == {"notes.md": "my local edit\n", "config.md": REPLACED}
    assert side.ref("refs/memsync/base") != base_before  # the base moved to the rewritten history
    side.assert_in_step()
    gone = subprocess.run(["git", "-C", str(side.repo), "cat-file", "-e", _blob(SECRET)], capture_output=True)
    assert gone.returncode != 0
    # Nothing is left to do: no stale cache makes the next cycle push or import again.
    again = side.synced()
    assert again.pushed == 0 and again.pull.imported == 0
    side.assert_in_step()
