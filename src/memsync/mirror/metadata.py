"""Store and memory metadata, on their own branch ``refs/heads/memsync/metadata`` (docs/mirror.md).

The same metadata always makes the same blobs, and commit times come from the caller: snapshots are
deterministic.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pygit2

from memsync.errors import UnsafeInput
from memsync.mirror.errors import translated
from memsync.mirror.fastimport import Change, Put, Remove, blob_id, ident
from memsync.mirror.refs import METADATA_REF
from memsync.mirror.trailers import ID_PATTERN

if TYPE_CHECKING:
    from memsync.mirror.gitstore import GitStore

STORE_FILE = "store.json"
MEMORIES_DIR = "memories"
MESSAGE = "metadata snapshot\n\nMemsync-Format: 1\n"


def _document(value: Mapping[str, Any], what: str) -> bytes:
    try:
        return (json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError) as exc:
        raise UnsafeInput(f"the metadata of {what} cannot be stored as JSON: {exc}") from None


def write_metadata(
    mirror: GitStore,
    store: Mapping[str, Any] | None,
    memories: Mapping[str, Mapping[str, Any]] | Iterable[tuple[str, Mapping[str, Any]]] | None,
    when: datetime,
    author_name: str,
    author_email: str,
    changed: Mapping[str, Mapping[str, Any]] | None,
    removed: Iterable[str],
) -> str | None:
    """Record a snapshot; the new commit id, or None when nothing changed.

    ``memories`` (all documents; None keeps them) is consumed one pair at a time, so a large store's
    documents are never all held at once; if it raises nothing is recorded. Without it, ``changed``
    documents replace theirs and the ``removed`` memories' files go."""
    if when.tzinfo is None:
        raise UnsafeInput("a metadata snapshot needs a timezone-aware time")
    parent = mirror.ref_target(METADATA_REF)
    current = mirror.tree_files(parent)
    changes: list[Change] = []
    with mirror.fast_import() as stream:

        def put(path: str, data: bytes) -> None:
            if current.get(path) != blob_id(data):
                changes.append(Put(path, stream.blob(data)))

        if store is not None:
            put(STORE_FILE, _document(store, "the store"))
        documents: Iterable[tuple[str, Mapping[str, Any]]] = sorted((changed or {}).items())
        if memories is not None:
            documents = memories.items() if isinstance(memories, Mapping) else memories
        seen: set[str] = set()
        for memory_id, document in documents:
            path = _memory_file(memory_id)
            seen.add(path)
            put(path, _document(document, f"memory {memory_id}"))
        if memories is not None:
            gone = [path for path in sorted(current) if path.startswith(f"{MEMORIES_DIR}/")]
        else:
            gone = [_memory_file(memory_id) for memory_id in sorted(set(removed))]
        changes += [Remove(path) for path in gone if path in current and path not in seen]
        if not changes:
            stream.abort()
            return None
        who = ident(author_name, author_email, math.floor(when.timestamp()))
        mark = stream.commit(
            parent=parent, author=who, committer=who, message=MESSAGE.encode(), changes=changes
        )
        commit = stream.finish()[mark]
    mirror.set_ref_if_equals(METADATA_REF, commit, parent, message="memsync: metadata snapshot")
    return commit


def _memory_file(memory_id: str) -> str:
    if ID_PATTERN.fullmatch(memory_id) is None:
        raise UnsafeInput(f"metadata for {memory_id!r} is not stored: not a memory id")
    return f"{MEMORIES_DIR}/{memory_id}.json"


def read_metadata(
    repository: GitStore, commit: str | None = None
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """``(store document or None, {memory id: document})`` at ``commit`` (default: the branch tip)."""
    target = commit or repository.ref_target(METADATA_REF)
    if target is None:
        return None, {}
    with translated("reading the metadata branch"):
        tree = repository.tree(target)
        store = json.loads(tree[STORE_FILE].peel(pygit2.Blob).data) if STORE_FILE in tree else None
        memories: dict[str, Any] = {}
        if MEMORIES_DIR in tree:
            for item in tree[MEMORIES_DIR].peel(pygit2.Tree):
                name = item.name or ""
                if name.endswith(".json") and isinstance(item, pygit2.Blob):
                    memories[name.removesuffix(".json")] = json.loads(item.data)
    return store, memories
