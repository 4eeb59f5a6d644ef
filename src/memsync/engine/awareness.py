"""What an agent sees: the mounted stores' memories merged by path into one flat namespace (seed 000).

Forward injects every active mount of an (identity, template) into a session's sandbox at
``/data/.qoder/awareness/<memory.path>``. Where several stores hold the same path, one copy shadows the
others; seed 000 says only that the order is "stable by mount time, but not intuitive". The rule here
is the reference server's assumption (docs/api-contract.md §6, "awareness shadowing"), in exactly one place,
:func:`visible_holder`: **the first holder of a path in mount order wins** — the default store, then the
explicit mounts by mount time. Whatever the real rule is, every collision is reported.

A file in one store and a folder of the same name in another (``a`` beside ``a/b``) cannot both exist
in a sandbox. A view keeps both (memsync's path encoding spells them apart, as in one store) and
reports the collision, naming the holders in mount order.

Everything here is pure: store ids, memory paths and blob ids in, decisions out.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

# A store's file set: memory path → blob id.
Files = Mapping[str, str]


def visible_holder(holders: Sequence[str]) -> str:
    """The store whose copy of a path the sandbox shows, of ``holders`` in mount order.

    The reference's assumption (docs/api-contract.md §6): the first holder in mount order wins.
    """
    return holders[0]


@dataclass(frozen=True)
class Collision:
    """A path that more than one store holds, or that is a file in one and a folder in another.

    ``visible_from`` is the store the rule shows; ``shadowed`` the other holders, in mount order.
    ``folders`` are the stores that hold the path as a folder (``a/...``), empty for a plain collision.
    """

    path: str
    visible_from: str
    shadowed: tuple[str, ...]
    folders: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "visible_from": self.visible_from, "shadowed": list(self.shadowed)}


@dataclass(frozen=True)
class Step:
    """What one version of one store did to the namespace.

    ``visible`` maps each path whose visible copy changed to ``(store id, blob id)``, or None where
    the path left the namespace; empty when the version changed nothing an agent sees (it wrote a
    shadowed copy, or a redaction changed no file). ``shadowed`` are the stores whose copies of the
    version's paths stay hidden after it, in mount order.
    """

    visible: dict[str, tuple[str, str] | None]
    shadowed: tuple[str, ...]


class Namespace:
    """The merged namespace of the stores in ``order`` (mount order), changed one version at a time.

    ``files`` optionally gives each store's file set to start from (an incremental build resuming
    where the last one stopped); stores left out start empty.
    """

    def __init__(self, order: Sequence[str], files: Mapping[str, Files] | None = None) -> None:
        if len(set(order)) != len(order):
            raise ValueError(f"a store is mounted twice in {list(order)}")
        self._order = list(order)
        self._rank = {store: rank for rank, store in enumerate(self._order)}
        self._files: dict[str, dict[str, str]] = {store: {} for store in self._order}
        # path → the ranks of the stores holding it, ascending
        self._holders: dict[str, list[int]] = {}
        for store, found in (files or {}).items():
            if store not in self._rank:
                raise ValueError(f"store {store} has files but is not mounted")
            for path, blob in found.items():
                self._put(store, path, blob)

    @property
    def order(self) -> list[str]:
        return list(self._order)

    def files(self, store: str) -> dict[str, str]:
        """The file set of ``store`` now (a copy)."""
        return dict(self._files[store])

    def holders(self, path: str) -> list[str]:
        """The stores holding ``path`` as a file, in mount order."""
        return [self._order[rank] for rank in self._holders.get(path, ())]

    def visible(self) -> dict[str, tuple[str, str]]:
        """The namespace: ``{path: (store id, blob id)}`` of the copy each path shows."""
        shown: dict[str, tuple[str, str]] = {}
        for path, ranks in self._holders.items():
            store = visible_holder([self._order[rank] for rank in ranks])
            shown[path] = (store, self._files[store][path])
        return shown

    def owner(self, path: str) -> str | None:
        """The store whose copy of ``path`` is visible, or None."""
        holders = self.holders(path)
        return visible_holder(holders) if holders else None

    def apply(self, store: str, changes: Mapping[str, str | None]) -> Step:
        """Apply one version of ``store``: ``changes`` maps each path it touched to its new blob
        (None: the file went)."""
        if store not in self._rank:
            raise ValueError(f"store {store} is not mounted")
        before = {path: self._shown(path) for path in changes}
        for path, blob in changes.items():
            if blob is None:
                self._drop(store, path)
            else:
                self._put(store, path, blob)
        visible: dict[str, tuple[str, str] | None] = {}
        hidden: set[str] = set()
        for path in changes:
            after = self._shown(path)
            if after != before[path]:
                visible[path] = after
            holders = self.holders(path)
            if len(holders) > 1:
                winner = visible_holder(holders)
                hidden.update(h for h in holders if h != winner)
        return Step(visible=visible, shadowed=tuple(s for s in self._order if s in hidden))

    def collisions(self) -> list[Collision]:
        """Every collision now, sorted by path: the same path in several stores, and a file in one
        store that is a folder in another."""
        folders: dict[str, set[int]] = {}
        for store, found in self._files.items():
            rank = self._rank[store]
            for path in found:
                for prefix in _folders_of(path):
                    if prefix in self._holders:  # only folders that are also someone's file matter
                        folders.setdefault(prefix, set()).add(rank)
        found_collisions = []
        for path in sorted(self._holders):
            files = self._holders[path]
            under = folders.get(path, set())
            involved = sorted(set(files) | under)
            # A store holding both `a` and `a/b` collides with nobody but another store.
            if len(involved) < 2:
                continue
            stores = [self._order[rank] for rank in involved]
            winner = visible_holder(stores)
            found_collisions.append(
                Collision(
                    path=path,
                    visible_from=winner,
                    shadowed=tuple(s for s in stores if s != winner),
                    folders=tuple(self._order[rank] for rank in sorted(under)),
                )
            )
        return found_collisions

    # --- internals -------------------------------------------------------------------------------

    def _shown(self, path: str) -> tuple[str, str] | None:
        ranks = self._holders.get(path)
        if not ranks:
            return None
        store = visible_holder([self._order[rank] for rank in ranks])
        return store, self._files[store][path]

    def _put(self, store: str, path: str, blob: str) -> None:
        files = self._files[store]
        if path not in files:
            ranks = self._holders.setdefault(path, [])
            ranks.append(self._rank[store])
            ranks.sort()
        files[path] = blob

    def _drop(self, store: str, path: str) -> None:
        if self._files[store].pop(path, None) is None:
            return
        ranks = self._holders[path]
        ranks.remove(self._rank[store])
        if not ranks:
            del self._holders[path]


def _folders_of(path: str) -> Iterator[str]:
    """The folders ``path`` lies in: ``a`` and ``a/b`` for ``a/b/c``."""
    index = path.find("/")
    while index != -1:
        yield path[:index]
        index = path.find("/", index + 1)


def merged_history(histories: Sequence[Iterable[T]], key: Callable[[T], Any]) -> Iterator[T]:
    """The versions of every mounted store in one sequence, oldest first.

    Each store's history keeps its own order (a late version, imported at a store's tip, stays
    there); between stores the smaller ``key`` goes first — (``created_at``, version id, mount rank),
    so the sequence is a pure function of the histories and the mount order.
    """
    return heapq.merge(*histories, key=key)
