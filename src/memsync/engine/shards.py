"""Which of N machines owns a store, with nothing to coordinate (docs/design.md §1.5, §5).

Rendezvous (highest random weight) hashing: shard ``i`` scores a store with the first 8 bytes of
SHA-256 of ``<store id>/<i>`` read big-endian, and the highest score owns the store. Every machine
computes the same answer from the store id alone, every store has exactly one owner, and going from N
to N+1 shards moves only the stores the new shard now outscores (about 1/(N+1) of them), all to it.

Which shard this process is comes from, first to last: ``--shard I/N``, ``$MEMSYNC_SHARD``, a
Kubernetes StatefulSet (``$MEMSYNC_SHARDS`` for N, the pod's ordinal for I), ``[fleet] shard``.
Pure: the caller hands in the environment and the host name.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from memsync.errors import UsageError

if TYPE_CHECKING:  # the config's models are built only where a shard is parsed
    from memsync.config import Shard

SHARD_ENV = "MEMSYNC_SHARD"
# Set by the StatefulSet next to `replicas`: a pod cannot read its set's replica count without API
# access, so the manifest states it twice and tests/test_kubernetes.py checks that the two agree.
SHARDS_ENV = "MEMSYNC_SHARDS"
# The `apps.kubernetes.io/pod-index` label, exposed through the downward API (Kubernetes ≥ 1.28);
# without it the ordinal is read from the host name, which a StatefulSet sets to `<name>-<ordinal>`.
POD_INDEX_ENV = "MEMSYNC_POD_INDEX"

_ORDINAL = re.compile(r"-(0|[1-9][0-9]*)\Z", re.ASCII)


def score(store_id: str, shard: int) -> int:
    """Shard ``shard``'s weight for ``store_id``: the first 8 bytes of SHA-256("<id>/<shard>"), big-endian."""
    return int.from_bytes(hashlib.sha256(f"{store_id}/{shard}".encode()).digest()[:8], "big")


def owner(store_id: str, count: int) -> int:
    """The shard of ``count`` that owns ``store_id``: the highest score."""
    if count < 1:
        raise ValueError(f"a shard count is at least 1, not {count}")
    # Ties (a 2**-64 chance) go to the lower index, so the answer never depends on iteration order.
    return max(range(count), key=lambda i: (score(store_id, i), -i))


def owns(shard: Shard, store_id: str) -> bool:
    return owner(store_id, shard.count) == shard.index


def assignment(store_ids: Iterable[str], count: int) -> dict[str, int]:
    """Each store id's owning shard of ``count``."""
    return {store_id: owner(store_id, count) for store_id in store_ids}


def resolve_shard(
    flag: str | None, environ: Mapping[str, str], hostname: str, configured: Shard | None
) -> tuple[Shard | None, str | None]:
    """This process's shard and where it came from (for messages); (None, None): no sharding.

    An empty environment variable counts as unset. A bad value is a UsageError (exit 2) naming its
    source, the value and the rule.
    """
    if flag is not None:
        return _parse(flag, "--shard"), "--shard"
    if environ.get(SHARD_ENV, "").strip():
        return _parse(environ[SHARD_ENV], SHARD_ENV), SHARD_ENV
    derived = statefulset_shard(environ, hostname)
    if derived is not None:
        return derived
    if configured is not None:
        return configured, "fleet.shard"
    return None, None


def statefulset_shard(environ: Mapping[str, str], hostname: str) -> tuple[Shard, str] | None:
    """The shard of a StatefulSet pod: N from ``$MEMSYNC_SHARDS``, I from the pod's ordinal.

    None without ``$MEMSYNC_SHARDS``: a host name ending in a number alone never shards anything.
    """
    count_text = environ.get(SHARDS_ENV, "").strip()
    if not count_text:
        return None
    if not (count_text.isascii() and count_text.isdigit()):
        raise UsageError(
            f"{SHARDS_ENV}={count_text!r} is not a shard count: set it to the StatefulSet's replicas,"
            " a whole number"
        )
    index_text = environ.get(POD_INDEX_ENV, "").strip()
    if index_text:
        if not (index_text.isascii() and index_text.isdigit()):
            raise UsageError(
                f"{POD_INDEX_ENV}={index_text!r} is not a pod ordinal: expose the pod's"
                " apps.kubernetes.io/pod-index label through the downward API, or leave it unset"
            )
        source = f"{POD_INDEX_ENV} and {SHARDS_ENV}"
    else:
        found = _ORDINAL.search(hostname)
        if found is None:
            raise UsageError(
                f"{SHARDS_ENV}={count_text} is set, but this pod's ordinal is unknown: the host name"
                f" {hostname!r} does not end in -<ordinal> as a StatefulSet pod's does, and"
                f" {POD_INDEX_ENV} is not set; set {SHARD_ENV}=I/N instead"
            )
        index_text = found.group(1)
        source = f"host name {hostname} and {SHARDS_ENV}"
    count = int(count_text)
    if int(index_text) >= count >= 1:
        raise UsageError(
            f"pod ordinal {int(index_text)} ({source}) is not below {SHARDS_ENV}={count}: the StatefulSet"
            f" runs more replicas than {SHARDS_ENV} says; set {SHARDS_ENV} to its replica count"
        )
    return _parse(f"{int(index_text)}/{count}", source), source


def _parse(value: str, source: str) -> Shard:
    from memsync.config import parse_shard

    try:
        return parse_shard(value)
    except ValueError as exc:
        raise UsageError(f"{source}: {exc}") from None
