"""Pack files written directly: one ``.pack`` (version 2) and its ``.idx`` (version 2) per batch.

Objects are kept as they come until the batch is written, then zlib-compressed (level 1: as
small as level 6 for objects this size, and faster). A tree, or a memory's new content, can be
stored as an offset delta against its previous version in the same pack: a one-entry change to a
directory then costs a few dozen bytes instead of the whole directory again.
:meth:`PackBatch.write` writes the pack under a temporary name, then renames it into
``objects/pack`` with its index last: git and libgit2 find packs through their ``.idx``, so a pack
is either complete and visible or absent. Objects in a pack no ref reaches yet (after a kill at the
wrong moment) are harmless and pruned by a later repack.
"""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from memsync.crashpoints import crash_point
from memsync.errors import MirrorError

OFS_DELTA = 6
MAX_DELTA_DEPTH = 50  # git's default pack.depth: deeper chains make reads slow
_PACK_SIGNATURE = b"PACK"
_IDX_SIGNATURE = b"\377tOc"
_MAX_INSERT = 127
_MAX_COPY = 0xFFFFFF
_BLOCK = 4096


def _type_and_size(type_code: int, size: int) -> bytes:
    out = bytearray()
    byte = (type_code << 4) | (size & 0x0F)
    size >>= 4
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


def _offset_encoding(distance: int) -> bytes:
    """The negative offset of an OFS_DELTA base, in git's own variable-length encoding."""
    out = [distance & 0x7F]
    distance >>= 7
    while distance:
        distance -= 1
        out.append(0x80 | (distance & 0x7F))
        distance >>= 7
    return bytes(reversed(out))


def _size_varint(size: int) -> bytes:
    out = bytearray()
    while True:
        byte = size & 0x7F
        size >>= 7
        if size:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _common_prefix(a: bytes, b: bytes, limit: int) -> int:
    """Length of the common prefix of ``a`` and ``b``, at most ``limit``.

    Whole 4 KiB blocks first, then a binary search inside the first block that differs: each
    comparison is a C memcmp, and the bytes copied stay linear in the prefix length.
    """
    start = 0
    while start + _BLOCK <= limit and a[start : start + _BLOCK] == b[start : start + _BLOCK]:
        start += _BLOCK
    low, high = start, min(start + _BLOCK, limit)
    while low < high:
        mid = (low + high + 1) // 2
        if a[start:mid] == b[start:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def _common_suffix(a: bytes, b: bytes, limit: int) -> int:
    """Length of the common suffix of ``a`` and ``b``, at most ``limit`` (the mirror of the above)."""
    end_a, end_b = len(a), len(b)
    done = 0
    while (
        done + _BLOCK <= limit
        and a[end_a - done - _BLOCK : end_a - done] == b[end_b - done - _BLOCK : end_b - done]
    ):
        done += _BLOCK
    low, high = done, min(done + _BLOCK, limit)
    while low < high:
        mid = (low + high + 1) // 2
        if a[end_a - mid : end_a - done] == b[end_b - mid : end_b - done]:
            low = mid
        else:
            high = mid - 1
    return low


def _copy(offset: int, size: int) -> bytes:
    op = 0x80
    args = bytearray()
    for shift, bit in ((0, 0x01), (8, 0x02), (16, 0x04), (24, 0x08)):
        byte = (offset >> shift) & 0xFF
        if byte:
            op |= bit
            args.append(byte)
    for shift, bit in ((0, 0x10), (8, 0x20), (16, 0x40)):
        byte = (size >> shift) & 0xFF
        if byte:
            op |= bit
            args.append(byte)
    return bytes([op]) + bytes(args)


def make_delta(base: bytes, target: bytes) -> bytes:
    """A git delta turning ``base`` into ``target``: copy the common prefix and suffix, insert the middle.

    Tree versions differ in one place (an entry added, removed or changed), which this captures
    exactly; it is not a general diff and does not try to be.
    """
    shorter = min(len(base), len(target))
    prefix = _common_prefix(base, target, shorter)
    suffix = _common_suffix(base, target, shorter - prefix)
    ops = bytearray(_size_varint(len(base)) + _size_varint(len(target)))
    offset = 0
    while offset < prefix:
        size = min(prefix - offset, _MAX_COPY)
        ops += _copy(offset, size)
        offset += size
    middle = target[prefix : len(target) - suffix]
    for start in range(0, len(middle), _MAX_INSERT):
        chunk = middle[start : start + _MAX_INSERT]
        ops.append(len(chunk))
        ops += chunk
    base_offset = len(base) - suffix
    while suffix > 0:
        size = min(suffix, _MAX_COPY)
        ops += _copy(base_offset, size)
        base_offset += size
        suffix -= size
    return bytes(ops)


@dataclass(slots=True)
class _Packed:
    oid: bytes
    offset: int
    record: bytes  # type/size header (+ delta base offset) + compressed data


class PackBatch:
    """Objects collected in memory and written as one pack by :meth:`write`."""

    def __init__(self, *, compression: int = 1) -> None:
        self._compression = compression
        # (oid, type code, payload, base oid): payload is the object, or a delta against the base.
        self._items: list[tuple[bytes, int, bytes, bytes | None]] = []
        self._known: set[bytes] = set()
        self._size = 0
        self.depths: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, oid: bytes) -> bool:
        return oid in self._known

    @property
    def size(self) -> int:
        """Bytes of uncompressed payload held (what bounds the batch's memory)."""
        return self._size

    def add(self, type_code: int, body: bytes, oid: bytes) -> None:
        """Add a whole object (``oid`` is its id, computed by the caller who needed it anyway)."""
        if oid in self._known:
            return
        self._items.append((oid, type_code, body, None))
        self._known.add(oid)
        self._size += len(body)
        self.depths[oid] = 0

    def add_delta(self, body: bytes, oid: bytes, base_body: bytes, base_oid: bytes) -> bool:
        """Add ``body`` as a delta against ``base_body`` (already in this batch); False if unsuitable.

        Unsuitable: the base is not in this batch, its chain is already at git's depth limit, or the
        delta would not be clearly smaller than the object. The caller then uses :meth:`add`.
        """
        if oid in self._known:
            return True
        depth = self.depths.get(base_oid, MAX_DELTA_DEPTH)
        if base_oid not in self._known or depth >= MAX_DELTA_DEPTH:
            return False
        delta = make_delta(base_body, body)
        if len(delta) * 2 > len(body):
            return False
        self._items.append((oid, OFS_DELTA, delta, base_oid))
        self._known.add(oid)
        self._size += len(delta)
        self.depths[oid] = depth + 1
        return True

    def _packed(self) -> list[_Packed]:
        level = self._compression
        compressed = [zlib.compress(item[2], level) for item in self._items]
        offsets: dict[bytes, int] = {}
        packed: list[_Packed] = []
        offset = 12  # after the pack header
        for (oid, type_code, payload, base), data in zip(self._items, compressed, strict=True):
            size = len(payload)
            header = bytes(((type_code << 4) | size,)) if size < 16 else _type_and_size(type_code, size)
            if base is not None:
                header += _offset_encoding(offset - offsets[base])
            record = header + data
            packed.append(_Packed(oid, offset, record))
            offsets[oid] = offset
            offset += len(record)
        return packed

    def write(self, objects_dir: Path, *, indexer: str = "python") -> Path | None:
        """Write the pack and its index into ``objects_dir/pack``; return the ``.pack`` path.

        ``indexer="git"`` lets ``git index-pack`` write the index instead (kept to measure the
        choice; ``python`` is faster, see benchmarks/git_write_bench.py). Nothing to write → None.
        """
        if not self._items:
            return None
        objects = self._packed()
        pack_dir = objects_dir / "pack"
        pack_dir.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha1(usedforsecurity=False)
        header = _PACK_SIGNATURE + struct.pack(">II", 2, len(objects))
        tmp_pack = pack_dir / f"tmp_pack_memsync_{os.getpid()}_{id(self)}"
        with open(tmp_pack, "wb") as out:
            out.write(header)
            digest.update(header)
            for packed in objects:
                out.write(packed.record)
                digest.update(packed.record)
            pack_sum = digest.digest()
            out.write(pack_sum)
            out.flush()
            # The ref update that follows must never point at objects a crash could lose.
            os.fsync(out.fileno())
        final = pack_dir / f"pack-{pack_sum.hex()}.pack"
        index = final.with_suffix(".idx")
        if index.exists():
            tmp_pack.unlink()
            return final
        if indexer == "git":
            os.replace(tmp_pack, final)
            _index_with_git(final)
            return final
        tmp_idx = pack_dir / f"tmp_idx_memsync_{os.getpid()}_{id(self)}"
        with open(tmp_idx, "wb") as out:
            out.write(_index_bytes(objects, pack_sum))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp_pack, final)
        crash_point("mirror.pack_renamed")
        os.replace(tmp_idx, index)
        return final


def _index_bytes(objects: Iterable[_Packed], pack_sum: bytes) -> bytes:
    ordered = sorted(objects, key=lambda packed: packed.oid)
    fanout = [0] * 256
    for packed in ordered:
        fanout[packed.oid[0]] += 1
    running = 0
    for i in range(256):
        running += fanout[i]
        fanout[i] = running
    small: list[int] = []
    large: list[int] = []
    for packed in ordered:
        if packed.offset < 0x80000000:
            small.append(packed.offset)
        else:
            small.append(0x80000000 | len(large))
            large.append(packed.offset)
    count = len(ordered)
    body = b"".join(
        [
            _IDX_SIGNATURE,
            struct.pack(">I", 2),
            struct.pack(">256I", *fanout),
            b"".join(packed.oid for packed in ordered),
            struct.pack(f">{count}I", *(zlib.crc32(packed.record) for packed in ordered)),
            struct.pack(f">{count}I", *small),
            struct.pack(f">{len(large)}Q", *large),
            pack_sum,
        ]
    )
    return body + hashlib.sha1(body, usedforsecurity=False).digest()


def _index_with_git(pack: Path) -> None:
    result = subprocess.run(["git", "index-pack", str(pack)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise MirrorError(f"git index-pack failed for {pack.name}: {result.stderr.strip()}")
