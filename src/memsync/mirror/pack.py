"""Pack files written directly: one ``.pack`` (version 2) and its ``.idx`` (version 2) per batch.

Objects are kept as they come until the batch is written, then compressed at level 1 (as small as
level 6 for objects this size, and faster): by ISA-L (``isal``) where it is installed, else by one
long-lived zlib deflater (:class:`_Deflater`). A payload under ``STORED_BELOW`` bytes (a delta, nearly
all of them) is written as a stored deflate block instead: such a delta is mostly a raw object id,
which deflate cannot shrink, and a stored block costs 0.3 µs and five more bytes where deflating
costs several µs. The figures behind these choices are in docs/mirror.md ("Performance").

When a tree, or a memory's content, gets a new version in the same batch, the new version is stored
whole and the previous one becomes an offset delta against it: a one-entry change to a directory
then costs a few dozen bytes instead of the whole directory again. Newest whole, as git's own packs
do: reading the latest versions (what a checkout reads) resolves no delta chain, so libgit2's per-
pack cache of delta bases stays empty instead of filling with every chain's intermediate versions —
with older-to-newer chains that cache made a checkout cost memory in proportion to the packs and
memories.
:meth:`PackBatch.write` writes the pack under a temporary name, then renames it into
``objects/pack`` with its index last: git and libgit2 find packs through their ``.idx``, so a pack
is either complete and visible or absent. Objects in a pack no ref reaches yet (after a kill at the
wrong moment) are harmless and pruned by a later repack.
"""

from __future__ import annotations

import functools
import hashlib
import os
import struct
import subprocess
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from memsync.crashpoints import crash_point
from memsync.errors import MirrorError

isal_zlib: ModuleType | None
try:  # ISA-L's deflate: half zlib's time for these objects, and as small (see _compressor)
    from isal import isal_zlib
except ImportError:  # a platform without its wheels: zlib, through _Deflater
    isal_zlib = None

OFS_DELTA = 6
MAX_DELTA_DEPTH = 50  # git's default pack.depth: deeper chains make reads slow
_PACK_SIGNATURE = b"PACK"
_IDX_SIGNATURE = b"\377tOc"
_MAX_INSERT = 127
_MAX_COPY = 0xFFFFFF
_BLOCK = 4096
STORED_BELOW = 128


def _type_and_size(type_code: int, size: int) -> bytes:
    if size < 0x800:  # most objects here: one or two bytes, without the loop
        if size < 0x10:
            return _BYTE[(type_code << 4) | size]
        return bytes((0x80 | (type_code << 4) | (size & 0x0F), size >> 4))
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
    if distance < 0x80:
        return _BYTE[distance]
    if distance < 0x4000:  # a base a few objects back: two bytes (each continuation byte is off by one)
        return bytes((0x80 | ((distance >> 7) - 1), distance & 0x7F))
    out = [distance & 0x7F]
    distance >>= 7
    while distance:
        distance -= 1
        out.append(0x80 | (distance & 0x7F))
        distance >>= 7
    return bytes(reversed(out))


def _size_varint(size: int) -> bytes:
    if size < 0x80:  # most deltas' sizes: trees and notes of a few hundred bytes take two bytes
        return _BYTE[size]
    if size < 0x4000:
        return bytes((0x80 | (size & 0x7F), size >> 7))
    out = bytearray()
    while True:
        byte = size & 0x7F
        size >>= 7
        if size:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


_BYTE = [bytes((n,)) for n in range(256)]


def _leading_equal(a: bytes, b: bytes) -> int:
    """How many bytes equal-length ``a`` and ``b`` share at their start: one XOR of two integers
    (C speed) instead of a binary search of slice comparisons."""
    x = int.from_bytes(a, "big") ^ int.from_bytes(b, "big")
    return len(a) if not x else len(a) - 1 - (x.bit_length() - 1) // 8


def _trailing_equal(a: bytes, b: bytes) -> int:
    """How many bytes equal-length ``a`` and ``b`` share at their end."""
    x = int.from_bytes(a, "big") ^ int.from_bytes(b, "big")
    return len(a) if not x else ((x & -x).bit_length() - 1) // 8


def _common_prefix(a: bytes, b: bytes, limit: int) -> int:
    """Length of the common prefix of ``a`` and ``b``, at most ``limit``.

    Whole 4 KiB blocks first (a C memcmp each), then the first block that differs byte by byte:
    the bytes examined stay linear in the prefix length.
    """
    start = 0
    while start + _BLOCK <= limit and a[start : start + _BLOCK] == b[start : start + _BLOCK]:
        start += _BLOCK
    end = min(start + _BLOCK, limit)
    return start + _leading_equal(a[start:end], b[start:end])


def _common_suffix(a: bytes, b: bytes, limit: int) -> int:
    """Length of the common suffix of ``a`` and ``b``, at most ``limit`` (the mirror of the above)."""
    end_a, end_b = len(a), len(b)
    done = 0
    while (
        done + _BLOCK <= limit
        and a[end_a - done - _BLOCK : end_a - done] == b[end_b - done - _BLOCK : end_b - done]
    ):
        done += _BLOCK
    size = min(done + _BLOCK, limit) - done
    return done + _trailing_equal(
        a[end_a - done - size : end_a - done], b[end_b - done - size : end_b - done]
    )


# Cached: the versions of one directory or note differ at few places, so the same copies recur (the
# root tree's ten entries give ten prefixes); a cache hit costs a fifth of building the opcode.
@functools.lru_cache(maxsize=4096)
def _copy(offset: int, size: int) -> bytes:
    # git's copy opcode: a flag bit per non-zero byte of offset (4 bytes, flags 0x01..0x08) and of
    # size (3 bytes, flags 0x10..0x40), then those bytes, least significant first.
    op = 0x80
    args = bytearray()
    for value, first_flag, width in ((offset, 0x01, 4), (size, 0x10, 3)):
        for index in range(width):
            byte = (value >> (8 * index)) & 0xFF
            if byte:
                op |= first_flag << index
                args.append(byte)
    return _BYTE[op] + bytes(args)


def _stored(payload: bytes) -> bytes:
    """``payload`` as a zlib stream of one stored (uncompressed) deflate block (RFC 1950/1951).

    One block holds at most 65,535 bytes; callers pass less than ``STORED_BELOW``."""
    size = len(payload)
    return (
        b"\x78\x01\x01"
        + struct.pack("<HH", size, size ^ 0xFFFF)
        + payload
        + struct.pack(">I", zlib.adler32(payload))
    )


def _compressor(level: int) -> Callable[[bytes], bytes]:
    """A function from an object to its zlib stream at ``level``.

    ISA-L's levels 0–3 are its own fast deflate: on this writer's objects (commits and trees of
    ~500 bytes) level 1 takes 6 µs against zlib's 12, for 1 % fewer bytes. Other levels, or no
    ISA-L, go to zlib. Either way the result is a standard zlib stream (RFC 1950) any git reads.
    """
    if isal_zlib is not None and 0 <= level <= 3:
        compress = isal_zlib.compress
        return lambda payload: compress(payload, level)
    return _Deflater(level).stream


def _zlib_stream(payload: bytes, compress: Callable[[bytes], bytes]) -> bytes:
    """What a record holds after its header: a stored block under ``STORED_BELOW`` bytes (the module
    note says why), else ``payload`` compressed."""
    return _stored(payload) if len(payload) < STORED_BELOW else compress(payload)


class _Deflater:
    """zlib streams of many small objects from one long-lived raw deflater.

    ``zlib.compress`` sets up and frees ~260 KiB of deflate state per call; glibc then hands that
    memory back to the kernel and faults it in again on the next call, so a 500-byte commit could
    cost 40 µs instead of 7. Here one raw deflater compresses every object and ends each with a full
    flush, which empties its dictionary: what it emitted for an object depends on that object alone.
    Wrapped in a zlib header, closed with an empty final block and the Adler-32 of the object, it is
    a complete zlib stream that any inflater (git's included) reads.
    """

    _FINAL_EMPTY_BLOCK = b"\x03\x00"  # BFINAL=1, fixed Huffman, end of block; byte-aligned after a full flush

    def __init__(self, level: int) -> None:
        self._raw = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._header = b"\x78\x01"  # deflate, 32 KiB window, check bits (FLEVEL is advisory)

    def stream(self, payload: bytes) -> bytes:
        raw = self._raw
        return (
            self._header
            + raw.compress(payload)
            + raw.flush(zlib.Z_FULL_FLUSH)
            + self._FINAL_EMPTY_BLOCK
            + struct.pack(">I", zlib.adler32(payload))
        )


def make_delta(base: bytes, target: bytes) -> bytes:
    """A git delta turning ``base`` into ``target``: copy the common prefix and suffix, insert the middle.

    Tree versions differ in one place (an entry added, removed or changed), which this captures
    exactly; it is not a general diff and does not try to be.
    """
    size = len(base)
    if size == len(target) and size <= _BLOCK:
        return _same_size_delta(base, target, size)
    shorter = min(size, len(target))
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


def _same_size_delta(base: bytes, target: bytes, size: int) -> bytes:
    """:func:`make_delta` for the common case (99 % of an import's deltas): versions of one size (a
    tree entry's id changed, a note's counter moved), at most 4 KiB, so one copy covers each side.
    One XOR of the two bodies as integers finds the first and the last differing byte."""
    x = int.from_bytes(base, "big") ^ int.from_bytes(target, "big")
    head = _size_varint(size)
    if not x:
        return head + head + _copy(0, size) if size else head + head
    prefix = size - 1 - (x.bit_length() - 1) // 8
    suffix = ((x & -x).bit_length() - 1) // 8
    end = size - suffix
    parts = [head, head]
    if prefix:
        parts.append(_copy(0, prefix))
    if end - prefix <= _MAX_INSERT:
        parts.append(_BYTE[end - prefix])
        parts.append(target[prefix:end])
    else:
        for start in range(prefix, end, _MAX_INSERT):
            chunk = target[start : min(start + _MAX_INSERT, end)]
            parts.append(_BYTE[len(chunk)])
            parts.append(chunk)
    if suffix:
        parts.append(_copy(end, suffix))
    return b"".join(parts)


@dataclass(slots=True)
class _Packed:
    """A batch as laid out in its pack: for object i, its id, offset and record (type/size header,
    delta base offset for a delta, then the zlib stream). Parallel lists: one object per entry
    would cost an allocation for each of a batch's thousands of objects."""

    oids: list[bytes]
    offsets: list[int]
    records: list[bytes]


@dataclass(slots=True)
class _Item:
    oid: bytes
    type_code: int
    payload: bytes  # the object, or a delta against ``base``
    base: bytes | None = None


class PackBatch:
    """Objects collected in memory and written as one pack by :meth:`write`."""

    def __init__(self, *, compression: int = 1) -> None:
        self._compression = compression
        self._items: list[_Item] = []
        self._by_oid: dict[bytes, _Item] = {}
        self._size = 0
        # For each whole object that deltas hang from: the longest chain ending at it.
        self._chain: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, oid: bytes) -> bool:
        return oid in self._by_oid

    @property
    def size(self) -> int:
        """Bytes of payload held (what bounds the batch's memory)."""
        return self._size

    def add(self, type_code: int, body: bytes, oid: bytes) -> None:
        """Add a whole object (``oid`` is its id, computed by the caller who needed it anyway)."""
        if oid in self._by_oid:
            return
        item = _Item(oid, type_code, body)
        self._items.append(item)
        self._by_oid[oid] = item
        self._size += len(body)

    def add_version(
        self, type_code: int, body: bytes, oid: bytes, previous: tuple[bytes, bytes] | None
    ) -> None:
        """Add ``body`` whole as the next version of ``previous`` (``(oid, body)``), which becomes a
        delta against it when it is a whole object of this batch.

        ``previous`` stays whole when it is not in this batch, is already a delta, its chain would
        pass git's depth limit, or the delta would not be clearly smaller than the object.
        """
        if oid in self._by_oid:
            return
        self.add(type_code, body, oid)
        if previous is None:
            return
        previous_oid, previous_body = previous
        older = self._by_oid.get(previous_oid)
        if older is None or older.base is not None:
            return
        depth = self._chain.get(previous_oid, 0) + 1
        if depth > MAX_DELTA_DEPTH:
            return
        delta = make_delta(body, previous_body)
        if len(delta) * 2 > len(previous_body):
            return
        older.payload = delta
        older.base = oid
        self._size -= len(previous_body) - len(delta)
        self._chain.pop(previous_oid, None)
        self._chain[oid] = depth

    def _packed(self) -> _Packed:
        # A base is always added after the objects that become deltas against it, and an offset
        # delta must follow its base in the pack: newest first puts every base before its deltas.
        compress = _compressor(self._compression)
        offsets: dict[bytes, int] = {}
        packed = _Packed([], [], [])
        offset = 12  # after the pack header
        for item in reversed(self._items):
            payload = item.payload
            size = len(payload)
            data = _zlib_stream(payload, compress)
            if item.base is None:
                record = _type_and_size(item.type_code, size) + data
            else:
                record = (
                    _type_and_size(OFS_DELTA, size) + _offset_encoding(offset - offsets[item.base]) + data
                )
            packed.oids.append(item.oid)
            packed.offsets.append(offset)
            packed.records.append(record)
            offsets[item.oid] = offset
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
        # One buffer, hashed and written by one call each: the batch is in memory anyway.
        body = b"".join([_PACK_SIGNATURE, struct.pack(">II", 2, len(objects.oids)), *objects.records])
        pack_sum = hashlib.sha1(body, usedforsecurity=False).digest()
        tmp_pack = pack_dir / f"tmp_pack_memsync_{os.getpid()}_{id(self)}"
        with open(tmp_pack, "wb") as out:
            out.write(body)
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


def _index_bytes(objects: _Packed, pack_sum: bytes) -> bytes:
    crc32 = zlib.crc32
    return index_v2(
        sorted(zip(objects.oids, map(crc32, objects.records), objects.offsets, strict=True)), pack_sum
    )


def index_v2(entries: Sequence[tuple[bytes, int, int]], pack_sum: bytes) -> bytes:
    """A version 2 pack index: ``entries`` are (object id, CRC-32 of its record, offset), by id."""
    fanout = [0] * 256
    for oid, _, _ in entries:
        fanout[oid[0]] += 1
    running = 0
    for byte in range(256):
        running += fanout[byte]
        fanout[byte] = running
    small: list[int] = []
    large: list[int] = []
    for _, _, offset in entries:
        if offset < 0x80000000:
            small.append(offset)
        else:
            small.append(0x80000000 | len(large))
            large.append(offset)
    count = len(entries)
    body = b"".join(
        [
            _IDX_SIGNATURE,
            struct.pack(">I", 2),
            struct.pack(">256I", *fanout),
            b"".join([entry[0] for entry in entries]),
            struct.pack(f">{count}I", *[entry[1] for entry in entries]),
            struct.pack(f">{count}I", *small),
            struct.pack(f">{len(large)}Q", *large),
            pack_sum,
        ]
    )
    return body + hashlib.sha1(body, usedforsecurity=False).digest()


def whole_records(level: int = 1) -> Callable[[int, bytes], bytes]:
    """A function from (type code, payload) to the pack record of a whole object at ``level``."""
    compress = _compressor(level)

    def record(type_code: int, payload: bytes) -> bytes:
        return _type_and_size(type_code, len(payload)) + _zlib_stream(payload, compress)

    return record


def _index_with_git(pack: Path) -> None:
    result = subprocess.run(["git", "index-pack", str(pack)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise MirrorError(f"git index-pack failed for {pack.name}: {result.stderr.strip()}")
