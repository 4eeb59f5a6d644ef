"""Git objects serialised by hand: the exact bytes ``git hash-object`` hashes, and their ids.

Building trees and commits as bytes (instead of through libgit2 one loose object at a time) is what
lets the mirror write history as fast as ``git fast-import`` (benchmarks/git_write_bench.py): an
object id is the SHA-1 of ``b"<type> <size>\\0" + body``, and the body formats below are git's own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

# Object type codes as they appear in pack files.
COMMIT = 1
TREE = 2
BLOB = 3

TYPE_NAMES = {COMMIT: b"commit", TREE: b"tree", BLOB: b"blob"}

MODE_FILE = b"100644"
MODE_DIR = b"40000"


def object_id(type_code: int, body: bytes) -> bytes:
    """The raw 20-byte id of an object of ``type_code`` with ``body``."""
    return hashlib.sha1(
        b"%s %d\0%s" % (TYPE_NAMES[type_code], len(body), body), usedforsecurity=False
    ).digest()


def tree_sort_key(name: bytes, is_dir: bool) -> bytes:
    """git's tree order: by name bytes, a directory compared as if its name ended with ``/``."""
    return name + b"/" if is_dir else name


def serialise_tree(entries: Iterable[tuple[bytes, bytes, bytes]]) -> bytes:
    """A tree body from ``(mode, name, raw_oid)`` entries, sorted the way git requires."""
    ordered = sorted(entries, key=lambda entry: tree_sort_key(entry[1], entry[0] == MODE_DIR))
    return b"".join(mode + b" " + name + b"\0" + oid for mode, name, oid in ordered)


@dataclass(frozen=True, slots=True)
class Signature:
    """An author or committer line: name, email and whole seconds since the epoch, always UTC."""

    name: str
    email: str
    seconds: int

    def line(self) -> bytes:
        return f"{self.name} <{self.email}> {self.seconds} +0000".encode()


def serialise_commit(
    tree: bytes, parents: Iterable[bytes], author: Signature, committer: Signature, message: str
) -> bytes:
    """A commit body; ``tree`` and ``parents`` are raw ids, ``message`` is written as UTF-8."""
    lines = [b"tree " + tree.hex().encode()]
    lines.extend(b"parent " + parent.hex().encode() for parent in parents)
    identity = author.line()
    lines.append(b"author " + identity)
    # An imported version's committer is its author: one line serves both.
    lines.append(b"committer " + (identity if committer == author else committer.line()))
    return b"\n".join(lines) + b"\n\n" + message.encode("utf-8")
