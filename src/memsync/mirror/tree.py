"""An editable in-memory git tree that serialises only what changed, loaded lazily from the repository.

Each directory keeps its entries, the serialised line of each entry, the entries' git order and the
id of its last serialisation. Editing a file marks the directories on its path dirty and the changed
entry stale; :meth:`MutableTree.write` re-serialises exactly those, so a commit costs work in the
depth of the changed path, not in the size of the tree. A directory read from the repository stays
unread until an edit reaches into it, so opening a large mirror costs nothing until it changes.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import pygit2

from memsync.errors import MirrorError
from memsync.mirror.objects import MODE_DIR, MODE_FILE, TREE, object_id, tree_sort_key
from memsync.mirror.pack import PackBatch

# A file is kept as its serialised tree entry ("<mode> <name>\0<raw oid>"): the same bytes object is
# the entry and its line, and the id is its last 20 bytes. A (mode, oid) tuple beside the line cost
# ~110 bytes a file, 1 MiB of a 10,000-memory import's peak.
FileEntry = bytes


class _Dir:
    __slots__ = ("entries", "last_body", "last_oid", "lines", "oid", "order", "stale")

    def __init__(self, oid: bytes | None, entries: dict[bytes, _Dir | FileEntry] | None) -> None:
        self.oid = oid  # None while dirty
        self.entries = entries  # None until read from the repository
        self.order: list[bytes] = []  # git sort keys of the entries
        self.lines: dict[bytes, bytes] = {}  # sort key → serialised entry
        self.stale: set[bytes] = set()  # names whose serialised entry must be rebuilt
        self.last_body: bytes | None = None  # the last serialisation: a delta against the next
        self.last_oid: bytes | None = None


class MutableTree:
    """The tree of one commit, edited path by path (``components`` are the tree path's names as bytes)."""

    def __init__(self, repo: pygit2.Repository, root: bytes | None) -> None:
        self._repo = repo
        self._root = _Dir(root, None) if root is not None else _Dir(None, {})

    def rebind(self, repo: pygit2.Repository) -> None:
        """Read unloaded directories through ``repo`` from now on (after a repack reopened it)."""
        self._repo = repo

    def _entries(self, node: _Dir) -> dict[bytes, _Dir | FileEntry]:
        if node.entries is None:
            assert node.oid is not None
            loaded: dict[bytes, _Dir | FileEntry] = {}
            lines: dict[bytes, bytes] = {}
            for item in self._repo[pygit2.Oid(raw=node.oid)].peel(pygit2.Tree):
                name = item.raw_name or b""  # entries of a tree always have names
                line = b"%o %s\0%s" % (item.filemode, name, item.id.raw)
                if item.filemode == pygit2.GIT_FILEMODE_TREE:
                    loaded[name] = _Dir(item.id.raw, None)
                    lines[name + b"/"] = line
                else:
                    loaded[name] = line
                    lines[name] = line
            node.entries = loaded
            node.lines = lines
            node.order = sorted(lines)
        return node.entries

    def _walk(self, components: Sequence[bytes], create: bool) -> list[_Dir] | None:
        """The directories from the root to the parent of ``components``, marked dirty."""
        chain = [self._root]
        node = self._root
        for name in components[:-1]:
            child = self._entries(node).get(name)
            if child is None:
                if not create:
                    return None
                child = _Dir(None, {})
                self._insert(node, name, child)
            elif not isinstance(child, _Dir):
                raise MirrorError(f"tree path {b'/'.join(components)!r} runs through a file")
            chain.append(child)
            node = child
        self._entries(node)  # loaded before it is marked dirty: a dirty directory has no id to load
        for depth, directory in enumerate(chain):
            directory.oid = None
            if depth:
                chain[depth - 1].stale.add(components[depth - 1])
        return chain

    def _insert(self, node: _Dir, name: bytes, entry: _Dir | FileEntry) -> None:
        self._entries(node)[name] = entry
        bisect.insort(node.order, tree_sort_key(name, isinstance(entry, _Dir)))
        node.stale.add(name)

    def _delete(self, node: _Dir, name: bytes) -> None:
        entry = self._entries(node).pop(name)
        key = tree_sort_key(name, isinstance(entry, _Dir))
        del node.order[bisect.bisect_left(node.order, key)]
        node.lines.pop(key, None)
        node.stale.discard(name)

    def get(self, components: Sequence[bytes]) -> bytes | None:
        """The raw id of the file at ``components``, or None (also when it is a directory)."""
        node = self._root
        for name in components[:-1]:
            child = self._entries(node).get(name)
            if not isinstance(child, _Dir):
                return None
            node = child
        entry = self._entries(node).get(components[-1])
        if entry is None or isinstance(entry, _Dir):
            return None
        return entry[-20:]

    def set(self, components: Sequence[bytes], oid: bytes) -> None:
        """Put a regular file with blob ``oid`` at ``components``, creating directories."""
        chain = self._walk(components, create=True)
        assert chain is not None
        parent = chain[-1]
        name = components[-1]
        entries = self._entries(parent)
        existing = entries.get(name)
        if isinstance(existing, _Dir):
            raise MirrorError(f"tree path {b'/'.join(components)!r} is a directory")
        line = MODE_FILE + b" " + name + b"\0" + oid
        if existing is None:
            self._insert(parent, name, line)
        else:
            entries[name] = line
            parent.stale.add(name)

    def remove(self, components: Sequence[bytes]) -> bytes | None:
        """Remove the file at ``components`` and directories left empty; its old id, or None."""
        chain = self._walk(components, create=False)
        if chain is None:
            return None
        entry = self._entries(chain[-1]).get(components[-1])
        if entry is None or isinstance(entry, _Dir):
            return None
        self._delete(chain[-1], components[-1])
        # git trees hold no empty directories: prune upwards.
        for depth in range(len(chain) - 1, 0, -1):
            if self._entries(chain[depth]):
                break
            self._delete(chain[depth - 1], components[depth - 1])
        return entry[-20:]

    def write(self, pack: PackBatch) -> bytes:
        """Serialise dirty directories into ``pack``; the root tree's raw id."""
        return self._write(self._root, pack)

    def _write(self, node: _Dir, pack: PackBatch) -> bytes:
        if node.oid is not None:
            return node.oid
        entries = self._entries(node)
        lines = node.lines
        for name in node.stale:
            entry = entries[name]
            if isinstance(entry, _Dir):
                lines[name + b"/"] = MODE_DIR + b" " + name + b"\0" + self._write(entry, pack)
            else:
                lines[name] = entry
        node.stale.clear()
        body = b"".join(map(lines.__getitem__, node.order))
        oid = object_id(TREE, body)
        previous = (node.last_oid, node.last_body) if node.last_oid and node.last_body is not None else None
        pack.add_version(TREE, body, oid, previous)
        node.last_body = body
        node.last_oid = oid
        node.oid = oid
        return oid
