"""The watcher with real file writes in a real mirror: save styles, ignores, memsync's own writes.

"No request" is asserted with a barrier: after the action, a new file is written; the debouncer hands
paths out in deadline order, so once the barrier's change arrives, anything the action caused would
have arrived before it.
"""

from __future__ import annotations

import itertools
import os
import queue
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from memsync.api import Client, Store
from memsync.daemon._watcher import Backend, CheckoutWatcher
from memsync.sync.cycle import run_cycle
from memsync.sync.pull import pull_store
from tests.support.waiting import wait_for

QUIET = 0.1
MAX_WAIT = 2.0


@dataclass
class Recorder:
    checkout: Path
    changes: queue.Queue[tuple[str, list[str]]] = field(default_factory=queue.Queue)
    busy: set[str] = field(default_factory=set)
    seen: list[str] = field(default_factory=list)
    barriers: Iterator[int] = field(default_factory=itertools.count)

    def on_change(self, store_id: str, paths: list[str]) -> None:
        self.changes.put((store_id, paths))

    def next_change(self, timeout: float = 10.0) -> list[str]:
        _, paths = self.changes.get(timeout=timeout)
        self.seen.extend(paths)
        return paths

    def until_barrier(self) -> list[str]:
        """Write a barrier file; every path reported up to and including it (the barrier excluded)."""
        name = f"barrier-{next(self.barriers)}.md"
        (self.checkout / name).write_text("barrier\n")
        reported: list[str] = []
        while name not in reported:
            reported.extend(self.next_change())
        reported.remove(name)
        return reported


# Every backend runs through the same tests: watchdog on Linux uses its inotify emitter (FSEvents and
# ReadDirectoryChangesW cannot run here), the poller stats every POLL seconds.
BACKENDS: tuple[Backend, ...] = ("inotify", "watchdog", "poll")
POLL = 0.05


@pytest.fixture(params=BACKENDS)
def watched(
    request: pytest.FixtureRequest,
    mirrored: Callable[..., tuple[Store, Path]],
) -> Iterator[tuple[Store, Path, Recorder, CheckoutWatcher]]:
    store, checkout = mirrored()
    recorder = Recorder(checkout)
    watcher = CheckoutWatcher(
        recorder.on_change,
        lambda s: s in recorder.busy,
        quiet=QUIET,
        max_wait=MAX_WAIT,
        backend=request.param,
        poll_interval=POLL,
        fallback=False,
    )
    watcher.start()
    assert watcher.backend == request.param
    assert watcher.watch(store.id, checkout)
    yield store, checkout, recorder, watcher
    watcher.stop()


def test_in_place_write_is_one_change(watched: tuple[Store, Path, Recorder, CheckoutWatcher]) -> None:
    _, checkout, recorder, _ = watched
    with open(checkout / "notes" / "a.md", "w") as handle:  # opened, modified (twice), closed
        handle.write("two\n")
        handle.flush()
        handle.write("more\n")
    assert recorder.next_change() == ["notes/a.md"]
    assert recorder.until_barrier() == []


def open_files_under(folder: Path) -> list[str]:
    """The files under ``folder`` this process holds open (its descriptors, as /proc lists them)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed by now
            continue
        if target.startswith(f"{folder}{os.sep}"):
            found.append(target)
    return found


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="lists descriptors through /proc")
def test_a_compared_save_leaves_no_file_of_the_mirror_open(
    watched: tuple[Store, Path, Recorder, CheckoutWatcher],
) -> None:
    # A repository kept open between comparisons keeps every pack the cycles write, and later
    # consolidate away, open: descriptors and memory that grow with the imports.
    _, checkout, recorder, _ = watched
    (checkout / "notes" / "a.md").write_text("edited\n")
    assert recorder.next_change() == ["notes/a.md"]
    assert open_files_under(checkout / ".git") == []


def test_temp_file_and_rename_is_one_change_of_the_real_name(
    watched: tuple[Store, Path, Recorder, CheckoutWatcher],
) -> None:
    _, checkout, recorder, _ = watched
    temp = checkout / "notes" / ".a.md.tmp-4242"
    temp.write_text("atomic\n")
    os.replace(temp, checkout / "notes" / "a.md")
    assert recorder.next_change() == ["notes/a.md"]
    assert recorder.until_barrier() == []


def test_vim_style_backup_rename_and_new_file_is_one_change(
    watched: tuple[Store, Path, Recorder, CheckoutWatcher],
) -> None:
    _, checkout, recorder, _ = watched
    notes = checkout / "notes"
    probe = notes / "4913"  # vim checks it may create files here
    probe.write_text("")
    probe.unlink()
    os.rename(notes / "a.md", notes / "a.md~")
    (notes / "a.md").write_text("written by vim\n")
    (notes / "a.md~").unlink()
    assert recorder.next_change() == ["notes/a.md"]
    assert recorder.until_barrier() == []


def test_touch_and_reads_request_nothing(watched: tuple[Store, Path, Recorder, CheckoutWatcher]) -> None:
    _, checkout, recorder, _ = watched
    os.utime(checkout / "b.md")
    (checkout / "notes" / "a.md").read_text()
    # Rewriting the same bytes is a save of nothing.
    (checkout / "b.md").write_text("bee\n")
    assert recorder.until_barrier() == []


def test_git_dir_temporaries_and_ignored_files_are_ignored(
    watched: tuple[Store, Path, Recorder, CheckoutWatcher],
) -> None:
    _, checkout, recorder, _ = watched
    (checkout / ".git" / "scratch").write_text("not a memory\n")
    with (checkout / ".git" / "info" / "exclude").open("a") as exclude:
        exclude.write("*.log\n")
    (checkout / "notes" / ".a.md.swp").write_text("vim swap\n")
    (checkout / "b.md~").write_text("emacs backup\n")
    (checkout / ".#b.md").write_text("emacs lock\n")
    (checkout / "debug.log").write_text("git-ignored\n")
    assert recorder.until_barrier() == []


def test_deletes_and_new_files_in_new_folders_are_changes(
    watched: tuple[Store, Path, Recorder, CheckoutWatcher],
) -> None:
    _, checkout, recorder, _ = watched
    (checkout / "b.md").unlink()
    (checkout / "new" / "deeper").mkdir(parents=True)
    (checkout / "new" / "deeper" / "c.md").write_text("sea\n")
    reported = recorder.until_barrier()
    assert sorted(reported) == ["b.md", "new/deeper/c.md"]


def test_the_same_content_is_requested_once_and_a_revert_not_at_all(
    watched: tuple[Store, Path, Recorder, CheckoutWatcher],
) -> None:
    _, checkout, recorder, _ = watched
    target = checkout / "b.md"
    target.write_text("edited\n")
    assert recorder.next_change() == ["b.md"]
    # memsync rewriting what it already was asked about (e.g. the same conflict markers): no request.
    target.write_text("edited\n")
    assert recorder.until_barrier() == []
    # Back to the base content: nothing to push.
    target.write_text("bee\n")
    assert recorder.until_barrier() == []
    # A new edit after that is a change again.
    target.write_text("edited\n")
    assert recorder.next_change() == ["b.md"]


def test_memsync_own_checkout_writes_are_not_changes(
    watched: tuple[Store, Path, Recorder, CheckoutWatcher], client: Client
) -> None:
    store, checkout, recorder, watcher = watched
    memory = client.find_memory(store.id, "notes/a.md")
    assert memory is not None
    client.update_memory(store.id, memory.id, "changed remotely\n", expected_sha256=memory.content_sha256)
    client.create_memory(store.id, "fresh/d.md", "new remotely\n")
    # What the daemon does: the store is busy while its cycle runs, and the watcher hears the end.
    recorder.busy.add(store.id)
    report = pull_store(client, store, checkout.parent)
    assert report.ok and report.checkout == "updated", report
    recorder.busy.discard(store.id)
    watcher.cycle_finished(store.id)
    assert (checkout / "notes" / "a.md").read_text() == "changed remotely\n"
    assert recorder.until_barrier() == []


def test_conflict_markers_a_cycle_wrote_are_not_a_change(
    watched: tuple[Store, Path, Recorder, CheckoutWatcher], client: Client
) -> None:
    store, checkout, recorder, watcher = watched
    recorder.busy.add(store.id)
    (checkout / "b.md").write_text("changed here\n")
    memory = client.find_memory(store.id, "b.md")
    assert memory is not None
    client.update_memory(store.id, memory.id, "changed there\n", expected_sha256=memory.content_sha256)
    report = run_cycle(client, store, checkout.parent)
    assert report.conflicts == ["b.md"], report
    assert "<<<<<<<" in (checkout / "b.md").read_text()
    recorder.busy.discard(store.id)
    watcher.cycle_finished(store.id)
    # The save before the cycle and the markers it wrote: neither is left for another cycle.
    assert recorder.until_barrier() == []
    # The user editing the markers away is a change.
    (checkout / "b.md").write_text("changed on both sides\n")
    assert recorder.next_change() == ["b.md"]


def test_saves_during_a_cycle_are_held_until_it_ends(
    watched: tuple[Store, Path, Recorder, CheckoutWatcher],
) -> None:
    store, checkout, recorder, watcher = watched
    recorder.busy.add(store.id)
    (checkout / "b.md").write_text("saved during the cycle\n")
    # Held, not dropped: the barrier is held too, so wait until both have settled.
    wait_for(lambda: len(watcher._held.get(store.id, ())) == 1, what="the save to be held")
    assert recorder.changes.empty()
    recorder.busy.discard(store.id)
    watcher.cycle_finished(store.id)
    assert recorder.next_change() == ["b.md"]


def test_a_checkout_that_does_not_exist_yet_is_not_watched(tmp_path: Path) -> None:
    watcher = CheckoutWatcher(lambda s, p: None, lambda s: False, quiet=QUIET, max_wait=MAX_WAIT)
    watcher.start()
    try:
        assert not watcher.watch("memstore_x", tmp_path / "memstore_x")
        assert not watcher.watching("memstore_x")
    finally:
        watcher.stop()
