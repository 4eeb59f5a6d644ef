"""Working on many stores at once (docs/design.md §5: stores are independent).

Every command that works on the selected stores (pull, backup, verify, sync, and the daemon's
``--once``) runs one store's work per task on a bounded pool of ``fleet.concurrency`` threads. Each
task gets its own :meth:`memsync.api.Client.share` copy of one client: the keep-alive connections are
shared, the request counters are the store's own, so a store's report counts its requests exactly as
when stores ran one at a time. Nothing else is shared between tasks: each store has its own mirror
and its own lock, and its work runs in the same order as before. Results come back in the order of
the input (the selection's order), whatever order the stores finish in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from memsync.api import Client

T = TypeVar("T")
R = TypeVar("R")


def for_each_store(
    client: Client,
    items: Sequence[T],
    work: Callable[[Client, T], R],
    *,
    jobs: int,
    done: Callable[[R], None] | None = None,
) -> list[R]:
    """``work(own_client, item)`` for every item, up to ``jobs`` at once; the results in input order.

    ``done`` hears each result as it finishes (progress; called from the worker threads). ``work``
    reports its failures in its result; an exception it raises anyway (a bug) lets the other items
    finish and is raised afterwards, the first in input order.
    """

    def one(item: T) -> R:
        own = client.share()
        try:
            return work(own, item)
        finally:
            own.close()

    return in_parallel(items, one, jobs=jobs, done=done)


def in_parallel(
    items: Sequence[T], work: Callable[[T], R], *, jobs: int, done: Callable[[R], None] | None = None
) -> list[R]:
    """``work(item)`` for every item, up to ``jobs`` at once; the results in input order (see
    :func:`for_each_store`, for work that brings its own client)."""

    def one(item: T) -> R:
        result = work(item)
        if done is not None:
            done(result)
        return result

    if not items:
        return []
    # One code path whatever ``jobs`` is (1 included): the same order, failures and progress.
    pool = ThreadPoolExecutor(max_workers=max(1, min(jobs, len(items))), thread_name_prefix="memsync-store")
    futures: list[Future[R]] = []
    try:
        futures = [pool.submit(one, item) for item in items]
        for future in futures:
            future.exception()  # wait for every item before raising any item's exception
        return [future.result() for future in futures]
    finally:
        # Ctrl-C while waiting: stores not started yet are not started; those running finish (a pull
        # interrupted anywhere resumes, but a thread cannot be interrupted).
        pool.shutdown(wait=True, cancel_futures=True)
