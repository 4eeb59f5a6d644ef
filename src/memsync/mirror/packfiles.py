"""The mirror's pack files: which to consolidate, merging them without reading an object, and
reading objects without mapping an index (for a large checkout, :class:`PackReader`).

``git repack`` re-reads every object and keeps an entry for each: consolidating the 520,000 objects
of a 100,000-version mirror took it 3.8 s and 300 MiB (measured with /usr/bin/time; ``--geometric``
360 MiB, capped pack windows and one thread 260 MiB), so the import's memory grew with the store
after all. A pack on disk is self-contained and its offset deltas are relative, so packs merge by
copying their records one after another under a new header, and their indexes by merging sorted
tables a slice at a time: memory stays flat whatever the store's size, and nothing is inflated.
What a merge does not do is look for deltas between packs; ``git gc`` still does, any time.

Packs that share an object cannot be concatenated (git verify-pack rejects an object twice in a
pack). The writer makes such packs only now and then (a tree that returns to an earlier state, an
import resumed after a kill left its pack behind), and then the caller lets ``git repack`` merge.

Which packs: git's geometric rule (``git repack --geometric=2``). Ordered by object count, the packs
that do not each hold at least twice the objects of all smaller ones together are merged, so a few
small packs are merged with each other and the large ones are left alone until the small ones add
up to them: every object is copied O(log n) times over the mirror's life.

Reading: libgit2 and git map every index they search and keep it mapped, so looking up a
checkout's 10,000 files across 51 packs made 13 MiB of indexes resident (in memsync, or in the
git process that did it for memsync). :class:`PackReader` binary-searches slices of the indexes
read into buffers, which leaves them in the page cache and out of the process.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import struct
import tempfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from memsync.crashpoints import crash_point
from memsync.errors import MirrorError
from memsync.mirror.objects import COMMIT, object_id
from memsync.mirror.pack import index_v2, whole_records

_PACK_SIGNATURE = b"PACK"
_IDX_SIGNATURE = b"\377tOc"
_HEADER = 12  # "PACK", version, object count
_TRAILER = 20  # SHA-1 of everything before it
_FANOUT = 8 + 256 * 4  # idx signature, version, fanout table
_LARGE = 0x80000000  # an idx offset with this bit set indexes the 64-bit table
_COPY = 1 << 20
GEOMETRIC_FACTOR = 2


@dataclass(frozen=True, slots=True)
class PackFile:
    """A pack and its index's header: the object count, the fanout table (cumulative counts by
    first byte of the id) and how many entries the index's 64-bit offset table holds."""

    pack: Path
    objects: int
    fanout: tuple[int, ...]
    large_offsets: int  # entries in the index's 64-bit offset table

    @property
    def index(self) -> Path:
        return self.pack.with_suffix(".idx")

    # Where the index's tables start: ids (20 bytes each) at _FANOUT, then CRCs (4), offsets (4), and
    # the 64-bit offsets (8) of the entries whose 32-bit offset has the high bit set.
    @property
    def crcs_at(self) -> int:
        return _FANOUT + 20 * self.objects

    @property
    def offsets_at(self) -> int:
        return _FANOUT + 24 * self.objects

    def full_offset(self, index_fd: int, offset: int) -> int:
        """A 32-bit offset entry as the offset it stands for (read from the 64-bit table if need be)."""
        if not offset & _LARGE:
            return offset
        at = _FANOUT + 28 * self.objects + 8 * (offset & ~_LARGE)
        return int(struct.unpack(">Q", os.pread(index_fd, 8, at))[0])


def read_pack_file(pack: Path) -> PackFile | None:
    """The pack's index header; None for a pack memsync leaves alone (kept, promised, an index
    other than version 2 with SHA-1 names, or one whose size does not add up)."""
    if pack.with_suffix(".keep").exists() or pack.with_suffix(".promisor").exists():
        return None
    return _index_header(pack)


def packs_to_merge(packs: Sequence[PackFile], factor: int = GEOMETRIC_FACTOR) -> list[PackFile]:
    """The packs git's geometric repack would roll up (git's ``split_pack_geometry``)."""
    ordered = sorted(packs, key=lambda p: (p.objects, p.pack.name))
    split = 0
    for i in range(len(ordered) - 1, 0, -1):
        if ordered[i].objects < factor * ordered[i - 1].objects:
            split = i + 1  # the heavier of the pair that breaks the progression goes too
            break
    total = sum(p.objects for p in ordered[:split])
    # The merged pack must not break the progression above it either.
    while split < len(ordered) and total * factor > ordered[split].objects:
        total += ordered[split].objects
        split += 1
    return ordered[:split] if split >= 2 else []


class _Hashed:
    """A file written through SHA-1, as packs and indexes end with the hash of what precedes."""

    def __init__(self, path: Path) -> None:
        self.file = open(path, "wb")  # noqa: SIM115 - closed by finish() or close()
        self.sha = hashlib.sha1(usedforsecurity=False)

    def write(self, data: bytes) -> None:
        self.sha.update(data)
        self.file.write(data)

    def finish(self) -> bytes:
        digest = self.sha.digest()
        self.file.write(digest)
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        return digest

    def close(self) -> None:
        self.file.close()


class NotPacked(MirrorError):
    """An object sought in the packs is not in any (it may be loose: libgit2 writes those)."""


class SharedObjects(MirrorError):
    """The packs to merge hold an object in common: concatenated, it would be in the pack twice,
    which git verify-pack rejects. Nothing was written."""


def merge_packs(sources: Sequence[PackFile], journal: Path, *, large_from: int = _LARGE) -> Path:
    """Merge ``sources`` (at least two, in one directory) into one pack; the new ``.pack``.

    The index is built first, so packs that share an object raise :class:`SharedObjects` before
    anything is copied. The merged pack and index are fsynced and renamed into place (index last)
    before any source is deleted (each index first), so every object stays readable whenever a kill
    comes. ``journal`` names the sources while they and the merged pack coexist: :func:`finish_merge`
    deletes them after a kill, instead of a later merge copying every object twice. ``large_from``:
    offsets from here go into the index's 64-bit table (git's rule is 2 GiB; tests lower it).
    """
    if len(sources) < 2:
        raise MirrorError("merging packs needs at least two")
    directory = sources[0].pack.parent
    tag = f"{os.getpid()}_{id(sources)}"
    tmp_pack = directory / f"tmp_pack_memsync_{tag}"
    tmp_idx = directory / f"tmp_idx_memsync_{tag}"
    try:
        return _merge(sources, journal, directory, tmp_pack, tmp_idx, large_from)
    except OSError as exc:  # a pack gone or unreadable midway (a git gc run by hand at that moment)
        raise MirrorError(
            f"merging the packs of {directory}: {exc}; nothing was lost, run memsync again"
        ) from exc
    finally:
        tmp_pack.unlink(missing_ok=True)
        tmp_idx.unlink(missing_ok=True)


def _merge(
    sources: Sequence[PackFile],
    journal: Path,
    directory: Path,
    tmp_pack: Path,
    tmp_idx: Path,
    large_from: int,
) -> Path:
    bases = []
    position = _HEADER
    for source in sources:
        bases.append(position)
        position += source.pack.stat().st_size - _HEADER - _TRAILER
    index = _Hashed(tmp_idx)
    try:
        _write_index_tables(sources, bases, index, large_from)
        pack_sum = _write_pack(sources, tmp_pack)
        index.write(pack_sum)
        index.finish()
        final = directory / f"pack-{pack_sum.hex()}.pack"
        _write_journal(journal, final, sources)
        if not final.with_suffix(".idx").exists():  # else merged before by a run killed after it
            os.replace(tmp_pack, final)
            crash_point("mirror.merged_pack_renamed")
            os.replace(tmp_idx, final.with_suffix(".idx"))
    finally:
        index.close()
    crash_point("mirror.merged_pack_written")
    finish_merge(journal, directory)
    return final


def _write_index_tables(sources: Sequence[PackFile], bases: list[int], out: _Hashed, large_from: int) -> None:
    """Everything of the merged pack's version 2 index but the two checksums.

    One fanout bucket (object ids of one first byte) at a time: each source's slice of its id, CRC
    and offset tables is read, the bucket sorted, its ids written and its CRCs and offsets spooled to
    temporary files appended after, since the index holds all ids, then all CRCs, then all offsets.
    A bucket is 1/256 of the objects (2,000 entries at 500,000), so memory stays flat and the sort
    runs at C speed, not a heap's Python one.
    """
    fanout = [sum(source.fanout[byte] for source in sources) for byte in range(256)]
    out.write(_IDX_SIGNATURE + struct.pack(">I256I", 2, *fanout))
    handles: list[int] = []
    large: list[int] = []  # offsets past large_from: none below 2 GiB of packs
    try:
        handles.extend(os.open(source.index, os.O_RDONLY) for source in sources)
        with tempfile.TemporaryFile() as crcs, tempfile.TemporaryFile() as offsets:
            for byte in range(256):
                bucket: list[tuple[bytes, int, int]] = []
                for number, source in enumerate(sources):
                    bucket.extend(_bucket(source, handles[number], byte, bases[number]))
                bucket.sort()
                for i in range(1, len(bucket)):
                    if bucket[i][0] == bucket[i - 1][0]:
                        raise SharedObjects(f"the packs to merge share object {bucket[i][0].hex()}")
                out.write(b"".join([entry[0] for entry in bucket]))
                crcs.write(struct.pack(f">{len(bucket)}I", *[entry[1] for entry in bucket]))
                small = []
                for _, _, offset in bucket:
                    if offset < large_from:
                        small.append(offset)
                    else:
                        small.append(_LARGE | len(large))
                        large.append(offset)
                offsets.write(struct.pack(f">{len(small)}I", *small))
            for spool in (crcs, offsets):
                spool.seek(0)
                while data := spool.read(_COPY):
                    out.write(data)
        out.write(struct.pack(f">{len(large)}Q", *large))
    finally:
        for handle in handles:
            os.close(handle)


def _bucket(source: PackFile, fd: int, byte: int, base: int) -> list[tuple[bytes, int, int]]:
    """``(object id, CRC-32, offset in the merged pack)`` of the source's ids starting with ``byte``."""
    start = source.fanout[byte - 1] if byte else 0
    n = source.fanout[byte] - start
    if n == 0:
        return []
    oids = os.pread(fd, 20 * n, _FANOUT + 20 * start)
    crcs = os.pread(fd, 4 * n, source.crcs_at + 4 * start)
    offsets = os.pread(fd, 4 * n, source.offsets_at + 4 * start)
    if len(oids) != 20 * n or len(crcs) != 4 * n or len(offsets) != 4 * n:
        raise MirrorError(f"{source.index} is shorter than its header says; run git fsck in the mirror")
    shift = base - _HEADER
    entries = []
    pairs = zip(struct.unpack(f">{n}I", crcs), struct.unpack(f">{n}I", offsets), strict=True)
    for i, (crc, offset) in enumerate(pairs):
        entries.append((oids[20 * i : 20 * i + 20], crc, source.full_offset(fd, offset) + shift))
    return entries


def _write_journal(journal: Path, merged: Path, sources: Sequence[PackFile]) -> None:
    pending = journal.with_name(journal.name + ".tmp")
    with open(pending, "w", encoding="utf-8") as out:
        out.write(json.dumps({"merged": merged.name, "sources": [source.pack.name for source in sources]}))
        out.flush()
        os.fsync(out.fileno())
    os.replace(pending, journal)


def finish_merge(journal: Path, directory: Path) -> None:
    """Complete or undo the merge ``journal`` records, if any: its sources go once the merged pack's
    index is in place (everything in them is in it); without that index they stay, and a merged
    pack renamed without it goes."""
    try:
        entry = json.loads(journal.read_text(encoding="utf-8"))
        merged, sources = str(entry["merged"]), [str(name) for name in entry["sources"]]
    except FileNotFoundError:
        return
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise MirrorError(
            f"cannot read {journal} ({exc}): move it away and run git fsck in the mirror"
        ) from None
    if "/" in merged or not merged.startswith("pack-"):
        raise MirrorError(
            f"{journal} names {merged!r}, not a pack: move it away and run git fsck in the mirror"
        )
    if (directory / merged).with_suffix(".idx").exists():
        for name in sources:
            if name != merged and "/" not in name and name.startswith("pack-"):
                delete_pack(directory / name)
    else:
        delete_pack(directory / merged)
    journal.unlink()


def _write_pack(sources: Sequence[PackFile], path: Path) -> bytes:
    """Write the concatenation: a header for all the objects, each source's records; its checksum."""
    out = _Hashed(path)
    try:
        out.write(_PACK_SIGNATURE + struct.pack(">II", 2, sum(source.objects for source in sources)))
        for source in sources:
            with open(source.pack, "rb") as handle:
                header = handle.read(_HEADER)
                if header[:4] != _PACK_SIGNATURE or struct.unpack(">I", header[8:])[0] != source.objects:
                    raise MirrorError(f"{source.pack} does not match its index; run git fsck in the mirror")
                remaining = os.fstat(handle.fileno()).st_size - _HEADER - _TRAILER
                while remaining > 0:
                    data = handle.read(min(_COPY, remaining))
                    if not data:
                        raise MirrorError(f"{source.pack} is shorter than it was a moment ago")
                    out.write(data)
                    remaining -= len(data)
        return out.finish()
    finally:
        out.close()


def delete_pack(pack: Path) -> None:
    """Delete a pack and the files beside it, the index first: a reader finds objects through it."""
    for suffix in (".idx", ".pack", ".rev", ".bitmap"):
        pack.with_suffix(suffix).unlink(missing_ok=True)


# --- reading objects with plain reads: what a large checkout reads, gathered into one pack ----------

_OFS_DELTA = 6
_REF_DELTA = 7
_TREE_MODE = b"40000"
_GITLINK_MODE = b"160000"


class PackReader:
    """The objects of a directory's packs, found and read with ``pread``, never mapped.

    libgit2 (and git) map every index they search and keep it mapped; a lookup here binary-searches
    a slice of the index read into a buffer, so what it touches stays in the page cache and out of
    the process. For the few readers that look up thousands of objects across every pack.
    """

    def __init__(self, directory: Path) -> None:
        found = (_index_header(pack) for pack in sorted(directory.glob("pack-*.pack")))
        self._packs = [pack for pack in found if pack is not None]
        self._files: dict[int, tuple[int, int]] = {}  # pack number → (index fd, pack fd)

    def __enter__(self) -> PackReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for index_fd, pack_fd in self._files.values():
            os.close(index_fd)
            os.close(pack_fd)
        self._files.clear()

    def _open(self, number: int) -> tuple[int, int]:
        if number not in self._files:
            pack = self._packs[number]
            index_fd = os.open(pack.index, os.O_RDONLY)
            try:
                self._files[number] = (index_fd, os.open(pack.pack, os.O_RDONLY))
            except OSError:
                os.close(index_fd)
                raise
        return self._files[number]

    def locate(self, wanted: Iterable[bytes]) -> dict[bytes, tuple[int, int]]:
        """``{object id: (pack number, offset)}`` for the wanted raw ids found (the first pack wins)."""
        by_byte: dict[int, list[bytes]] = {}
        for oid in sorted(set(wanted)):
            by_byte.setdefault(oid[0], []).append(oid)
        found: dict[bytes, tuple[int, int]] = {}
        for number, pack in enumerate(self._packs):
            if not by_byte:
                break
            index_fd = self._open(number)[0]
            for byte, oids in list(by_byte.items()):
                start = pack.fanout[byte - 1] if byte else 0
                n = pack.fanout[byte] - start
                if n == 0:
                    continue
                block = os.pread(index_fd, 20 * n, _FANOUT + 20 * start)
                ids = [block[i : i + 20] for i in range(0, len(block), 20)]
                left = []
                for oid in oids:
                    i = bisect.bisect_left(ids, oid)
                    if i < len(ids) and ids[i] == oid:
                        (entry,) = struct.unpack(
                            ">I", os.pread(index_fd, 4, pack.offsets_at + 4 * (start + i))
                        )
                        found[oid] = (number, pack.full_offset(index_fd, entry))
                    else:
                        left.append(oid)
                if left:
                    by_byte[byte] = left
                else:
                    del by_byte[byte]
        return found

    def read(self, number: int, offset: int) -> tuple[int, bytes]:
        """``(type code, content)`` of the object at ``offset`` in pack ``number``, deltas applied."""
        pack_fd = self._open(number)[1]
        head = os.pread(pack_fd, 32, offset)
        byte = head[0]
        kind, size, shift, i = (byte >> 4) & 7, byte & 15, 4, 1
        while byte & 0x80:
            byte = head[i]
            size |= (byte & 0x7F) << shift
            shift, i = shift + 7, i + 1
        if kind == _OFS_DELTA:
            byte = head[i]
            distance, i = byte & 0x7F, i + 1
            while byte & 0x80:
                byte = head[i]
                distance, i = ((distance + 1) << 7) | (byte & 0x7F), i + 1
            base_kind, base = self.read(number, offset - distance)
            return base_kind, _apply_delta(base, _inflate(pack_fd, offset + i, size))
        if kind == _REF_DELTA:
            base_id = head[i : i + 20]
            where = self.locate([base_id]).get(base_id)
            if where is None:
                raise NotPacked(f"delta base {base_id.hex()} is in no pack; run git fsck in the mirror")
            base_kind, base = self.read(*where)
            return base_kind, _apply_delta(base, _inflate(pack_fd, offset + i + 20, size))
        if not COMMIT <= kind <= 4:
            raise MirrorError(f"object type {kind} at offset {offset} of {self._packs[number].pack.name}")
        return kind, _inflate(pack_fd, offset + i, size)

    def object(self, object_id: bytes) -> tuple[int, bytes]:
        where = self.locate([object_id]).get(object_id)
        if where is None:
            raise NotPacked(f"object {object_id.hex()} is in no pack")
        return self.read(*where)


def _index_header(pack: Path) -> PackFile | None:
    try:
        with open(pack.with_suffix(".idx"), "rb") as handle:
            header = handle.read(_FANOUT)
            size = os.fstat(handle.fileno()).st_size
    except OSError:
        return None
    if len(header) != _FANOUT or header[:4] != _IDX_SIGNATURE or header[4:8] != b"\0\0\0\2":
        return None
    fanout = struct.unpack(">256I", header[8:])
    objects = fanout[-1]
    extra = size - (_FANOUT + objects * 28 + 2 * _TRAILER)
    if extra < 0 or extra % 8:
        return None
    return PackFile(pack, objects, fanout, extra // 8)


def _inflate(fd: int, at: int, size: int) -> bytes:
    stream = zlib.decompressobj()
    parts = []
    want = size + (size >> 10) + 64  # zlib's worst case for the size, so one read usually does
    while not stream.eof:
        chunk = os.pread(fd, want, at)
        if not chunk:
            raise MirrorError("a pack ends inside an object; run git fsck in the mirror")
        at += len(chunk)
        parts.append(stream.decompress(chunk))
        want = _COPY
    data = b"".join(parts)
    if len(data) != size:
        raise MirrorError(f"a packed object inflates to {len(data)} bytes, not {size}; run git fsck")
    return data


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        value |= (byte & 0x7F) << shift
        position, shift = position + 1, shift + 7
        if not byte & 0x80:
            return value, position


def _apply_delta(base: bytes, delta: bytes) -> bytes:
    """git's delta format: the source and result sizes, then copy-from-base and insert opcodes."""
    source_size, position = _varint(delta, 0)
    result_size, position = _varint(delta, position)
    if source_size != len(base):
        raise MirrorError("a delta does not fit its base; run git fsck in the mirror")
    out = bytearray()
    end = len(delta)
    while position < end:
        opcode = delta[position]
        position += 1
        if opcode & 0x80:
            offset = size = 0
            for bit in range(4):
                if opcode & (1 << bit):
                    offset |= delta[position] << (8 * bit)
                    position += 1
            for bit in range(3):
                if opcode & (0x10 << bit):
                    size |= delta[position] << (8 * bit)
                    position += 1
            out += base[offset : offset + (size or 0x10000)]
        elif opcode:
            out += delta[position : position + opcode]
            position += opcode
        else:
            raise MirrorError("a delta holds the reserved opcode 0; run git fsck in the mirror")
    if len(out) != result_size:
        raise MirrorError("a delta does not make the size it promises; run git fsck in the mirror")
    return bytes(out)


def _tree_entries(body: bytes) -> Iterator[tuple[bytes, bytes, bytes]]:
    """``(mode, name, raw id)`` of a tree object's entries."""
    position = 0
    while position < len(body):
        space = body.index(b" ", position)
        nul = body.index(b"\0", space)
        yield body[position:space], body[space + 1 : nul], body[nul + 1 : nul + 21]
        position = nul + 21


def checkout_objects(directory: Path, tip: str, head: str | None) -> tuple[list[str], int]:
    """What a checkout from ``head`` (None: nothing yet) to ``tip`` reads: the root tree and every
    tree and file that differs, as hex ids, and how many of them are files."""
    with PackReader(directory) as reader:
        roots: list[bytes | None] = []
        for commit in (tip, head):
            if commit is None:
                roots.append(None)
                continue
            kind, body = reader.object(bytes.fromhex(commit))
            if kind != COMMIT or not body.startswith(b"tree "):
                raise MirrorError(f"{commit} is not a commit; run git fsck in the mirror")
            roots.append(bytes.fromhex(body[5:45].decode("ascii")))
        root, base = roots
        assert root is not None
        wanted, files = [root.hex()], 0
        pending: list[tuple[bytes, bytes | None]] = [(root, base)]
        while pending:
            tree, base_tree = pending.pop()
            before = {}
            if base_tree is not None:
                before = {name: (mode, oid) for mode, name, oid in _tree_entries(reader.object(base_tree)[1])}
            for mode, name, oid in _tree_entries(reader.object(tree)[1]):
                old_mode, old_oid = before.get(name, (None, None))
                if oid == old_oid or mode == _GITLINK_MODE:
                    continue
                wanted.append(oid.hex())
                if mode == _TREE_MODE:
                    pending.append((oid, old_oid if old_mode == _TREE_MODE else None))
                else:
                    files += 1
        return wanted, files


def copy_objects(directory: Path, object_ids: Iterable[str]) -> Path:
    """Copy these objects, whole, into one new pack in ``directory``; its ``.pack``.

    Read with :class:`PackReader`, so gathering the 10,080 objects of a 100,000-version import's
    checkout maps no index in this process and runs no git process that would. Each object is
    checked against its id before it is written; pack and index are fsynced and renamed into place,
    the index last, so a crash never leaves a readable index over a short pack.
    """
    wanted = {bytes.fromhex(object_id) for object_id in object_ids}
    tag = f"{os.getpid()}_{id(wanted)}"
    tmp_pack = directory / f"tmp_pack_memsync_{tag}"
    tmp_idx = directory / f"tmp_idx_memsync_{tag}"
    record = whole_records()
    try:
        with PackReader(directory) as reader:
            where = reader.locate(wanted)
            missing = wanted - where.keys()
            if missing:
                raise NotPacked(
                    f"{len(missing)} objects to gather are in no pack (one: {min(missing).hex()}); "
                    "run git fsck in the mirror"
                )
            out = _Hashed(tmp_pack)
            entries = []
            try:
                out.write(_PACK_SIGNATURE + struct.pack(">II", 2, len(where)))
                position = _HEADER
                for oid, (number, offset) in sorted(where.items(), key=lambda item: item[1]):
                    kind, data = reader.read(number, offset)
                    if object_id(kind, data) != oid:
                        raise MirrorError(f"object {oid.hex()} does not hash to its id; run git fsck")
                    packed = record(kind, data)
                    entries.append((oid, zlib.crc32(packed), position))
                    out.write(packed)
                    position += len(packed)
                pack_sum = out.finish()
            finally:
                out.close()
        with open(tmp_idx, "wb") as index:
            index.write(index_v2(sorted(entries), pack_sum))
            index.flush()
            os.fsync(index.fileno())
        final = directory / f"pack-{pack_sum.hex()}.pack"
        os.replace(tmp_pack, final)
        os.replace(tmp_idx, final.with_suffix(".idx"))
        return final
    except OSError as exc:
        raise MirrorError(f"gathering objects into one pack in {directory}: {exc}") from exc
    finally:
        tmp_pack.unlink(missing_ok=True)
        tmp_idx.unlink(missing_ok=True)
