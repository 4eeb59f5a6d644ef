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

import bisect
import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

T = TypeVar("T")

# A store's file set: memory path → blob id.
Files = Mapping[str, str]


def visible_holder(holders: Sequence[str]) -> str:
    """The store whose copy of a path the sandbox shows, of ``holders`` in mount order (Forward).

    The reference's assumption (docs/api-contract.md §6): the first holder in mount order wins.
    """
    return holders[0]


def cloud_visible_holder(holders: Sequence[str]) -> str:
    """The store whose copy of a path a Cloud session shows, of ``holders`` in the order the session
    (or ``--stores``) gives its stores.

    memsync's assumption (docs/api-contract.md §6; seed 004 is silent): the first store in the given
    order wins. A rule of its own, beside Forward's, so either can change alone.
    """
    return holders[0]


Rule = Callable[[Sequence[str]], str]


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

    def __init__(
        self, order: Sequence[str], files: Mapping[str, Files] | None = None, rule: Rule = visible_holder
    ) -> None:
        if len(set(order)) != len(order):
            raise ValueError(f"a store is mounted twice in {list(order)}")
        self._order = list(order)
        self._rule = rule
        self._rank = {store: rank for rank, store in enumerate(self._order)}
        self._files: dict[str, dict[str, str]] = {store: {} for store in self._order}
        # path → the ranks of the stores holding it, ascending
        self._holders: dict[str, list[int]] = {}
        # folder → {rank: files of that store below it}, and the paths that may collide: kept as files
        # come and go, so that an append costs what it changes, not the size of the namespace
        self._below: dict[str, dict[int, int]] = {}
        self._suspects: set[str] = set()
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

    def __len__(self) -> int:
        """How many paths the namespace shows."""
        return len(self._holders)

    def visible(self) -> dict[str, tuple[str, str]]:
        """The namespace: ``{path: (store id, blob id)}`` of the copy each path shows."""
        shown: dict[str, tuple[str, str]] = {}
        for path, ranks in self._holders.items():
            store = self._rule([self._order[rank] for rank in ranks])
            shown[path] = (store, self._files[store][path])
        return shown

    def owner(self, path: str) -> str | None:
        """The store whose copy of ``path`` is visible, or None."""
        holders = self.holders(path)
        return self._rule(holders) if holders else None

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
                winner = self._rule(holders)
                hidden.update(h for h in holders if h != winner)
        return Step(visible=visible, shadowed=tuple(s for s in self._order if s in hidden))

    def collisions(self) -> list[Collision]:
        """Every collision now, sorted by path: the same path in several stores, and a file in one
        store that is a folder in another."""
        found_collisions = []
        for path in sorted(self._suspects):
            under = set(self._below.get(path, ()))  # folders matter only where they are someone's file
            involved = sorted(set(self._holders[path]) | under)
            stores = [self._order[rank] for rank in involved]
            winner = self._rule(stores)
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
        store = self._rule([self._order[rank] for rank in ranks])
        return store, self._files[store][path]

    def _put(self, store: str, path: str, blob: str) -> None:
        files = self._files[store]
        if path not in files:
            rank = self._rank[store]
            ranks = self._holders.setdefault(path, [])
            ranks.append(rank)
            ranks.sort()
            self._count_below(path, rank, 1)
        files[path] = blob

    def _drop(self, store: str, path: str) -> None:
        if self._files[store].pop(path, None) is None:
            return
        rank = self._rank[store]
        ranks = self._holders[path]
        ranks.remove(rank)
        if not ranks:
            del self._holders[path]
        self._count_below(path, rank, -1)

    def _count_below(self, path: str, rank: int, delta: int) -> None:
        """Note a file of ``rank`` at ``path`` come (+1) or gone (-1), and look again at the paths whose
        collisions that can change: ``path`` and the folders it lies in."""
        for folder in _folders_of(path):
            counts = self._below.setdefault(folder, {})
            counts[rank] = counts.get(rank, 0) + delta
            if not counts[rank]:
                del counts[rank]
                if not counts:
                    del self._below[folder]
            self._recheck(folder)
        self._recheck(path)

    def _recheck(self, path: str) -> None:
        # A store holding both `a` and `a/b` collides with nobody but another store.
        files = self._holders.get(path)
        if files and len(set(files) | set(self._below.get(path, ()))) > 1:
            self._suspects.add(path)
        else:
            self._suspects.discard(path)


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


@dataclass(frozen=True)
class Placement:
    """Where one store's memories appear in a view: under ``folder`` (a memory-path prefix, "" for flat
    at the view's root), or nowhere, with ``refused`` saying why."""

    store_id: str
    folder: str
    refused: str | None = None


def place_stores(stores: Sequence[tuple[str, str | None]], root: str, *, unmounted: str) -> list[Placement]:
    """Each store's folder from its ``mount_path`` (absolute, as the API gives it) relative to ``root``.

    memsync never derives a mount path: a null one falls back to ``unmounted`` (``"id"``: a folder named
    by the store id; ``"flat"``: the view's root). A mount path outside ``root``, holding ``..`` (or an
    empty or ``.`` segment), or given to more than one store is refused for those stores alone.
    """
    prefix = root.rstrip("/") + "/"
    placed: list[Placement] = []
    for store_id, mount_path in stores:
        if mount_path is None:
            placed.append(Placement(store_id, store_id if unmounted == "id" else ""))
            continue
        relative = mount_path[len(prefix) :].rstrip("/") if mount_path.startswith(prefix) else None
        segments = relative.split("/") if relative else []
        if relative is None or not relative:
            why = f"its mount_path {mount_path!r} is not a folder inside {prefix}"
        elif ".." in segments:
            why = f"its mount_path {mount_path!r} holds '..'"
        elif any(segment in ("", ".") for segment in segments):
            why = f"its mount_path {mount_path!r} has an empty or '.' segment"
        else:
            placed.append(Placement(store_id, relative))
            continue
        placed.append(Placement(store_id, "", f"{why}; the store is left out of the view"))
    holders: dict[str, list[str]] = {}
    for place in placed:
        if place.refused is None and place.folder:
            holders.setdefault(place.folder, []).append(place.store_id)
    return [
        Placement(
            place.store_id,
            "",
            f"its folder {place.folder!r} is given to {', '.join(holders[place.folder])}: memsync does not"
            " guess which one a session shows, so each is left out of the view",
        )
        if place.refused is None and place.folder and len(holders[place.folder]) > 1
        else place
        for place in placed
    ]


def current_at(times: Sequence[datetime], instant: datetime) -> int:
    """The index of the last view commit whose version was created at or before ``instant`` (``times``:
    each commit's exact ``created_at``, in history order, never decreasing), or -1 when none was."""
    return bisect.bisect_right(times, instant) - 1


def inexact_reason(firsts: Mapping[str, tuple[datetime, int | None]], instant: datetime) -> str | None:
    """Why a view at ``instant`` may miss memories, or None when it is exact: a store whose history
    (``firsts``: its first imported version's ``created_at`` and ``History-Truncated`` count) begins after
    ``instant`` with versions missing (retention dropped them), so what it held then is unknown."""
    late = [
        f"{store} ({truncated} memories' first versions are gone; its history begins {first.isoformat()})"
        for store, (first, truncated) in sorted(firsts.items())
        if truncated and first > instant
    ]
    if not late:
        return None
    return "the history of " + "; of ".join(late) + " begins after that instant (version retention)"
