"""Hand-written packs: git reads them, and git's own indexer writes the very same index."""

from __future__ import annotations

import os
import subprocess
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.mirror import pack
from memsync.mirror.objects import BLOB, MODE_FILE, TREE, object_id, serialise_tree
from memsync.mirror.pack import (
    MAX_DELTA_DEPTH,
    STORED_BELOW,
    PackBatch,
    _Deflater,
    _offset_encoding,
    _stored,
    _type_and_size,
    make_delta,
)
from memsync.mirror.packfiles import (
    _apply_delta as _apply,  # checked against git's own deltas in test_packfiles
)
from tests.mirror.oracle import git


def _bare(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    return path


@pytest.fixture(params=["isal", "zlib"])
def deflate(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each compression backend: ISA-L (a dependency), and zlib (where ISA-L has no wheel)."""
    if request.param == "zlib":
        monkeypatch.setattr(pack, "isal_zlib", None)
    else:
        assert pack.isal_zlib is not None, "isal is a dependency: pip install -e '.[test]'"
    return str(request.param)


def test_git_indexes_our_pack_to_the_same_bytes(tmp_path: Path, deflate: str) -> None:
    repo = _bare(tmp_path / "repo.git")
    batch = PackBatch()
    blobs = [f"content {i}\n".encode() * (i + 1) for i in range(40)]
    entries = []
    for i, data in enumerate(blobs):
        oid = object_id(BLOB, data)
        batch.add(BLOB, data, oid)
        entries.append((MODE_FILE, f"file{i:03d}.md".encode(), oid))
    previous: tuple[bytes, bytes] | None = None
    versions = []
    for count in range(10, 41):  # a growing directory: each version supersedes the last
        body = serialise_tree(entries[:count])
        oid = object_id(TREE, body)
        batch.add_version(TREE, body, oid, previous)
        previous = (oid, body)
        versions.append(oid.hex())
    pack = batch.write(repo / "objects")
    assert pack is not None
    ours = pack.with_suffix(".idx").read_bytes()
    theirs = tmp_path / "theirs.idx"
    git(repo, "index-pack", "-o", str(theirs), str(pack))
    assert theirs.read_bytes() == ours
    # verify-pack -v: "<oid> <type> <size> <size in pack> <offset> [<depth> <base oid>]".
    rows = {
        line.split()[0]: line.split()
        for line in git(repo, "verify-pack", "-v", str(pack.with_suffix(".idx"))).splitlines()
        if line[:40] in versions
    }
    # Newest whole, as git packs it: a checkout of the latest version resolves no delta chain.
    assert len(rows[versions[-1]]) == 5
    for depth, older in enumerate(reversed(versions[:-1]), start=1):
        assert rows[older][5:] == [str(depth), versions[-depth]]
    assert git(repo, "cat-file", "-p", versions[-1]).count("\n") == 40
    assert git(repo, "cat-file", "-p", versions[0]).count("\n") == 10


def test_chains_stop_at_gits_depth_limit_and_a_delta_must_pay(tmp_path: Path) -> None:
    repo = _bare(tmp_path / "repo.git")
    batch = PackBatch()
    previous: tuple[bytes, bytes] | None = None
    chain = []
    for n in range(MAX_DELTA_DEPTH + 5):
        body = b"a line that stays the same in every version\n" * 20 + b"version %d\n" % n
        oid = object_id(BLOB, body)
        batch.add_version(BLOB, body, oid, previous)
        previous = (oid, body)
        chain.append(oid.hex())
    # A next version sharing nothing with the previous one: a delta would not be smaller.
    before, after = bytes(range(256)) * 2, b"something else entirely\n" * 30
    batch.add(BLOB, before, object_id(BLOB, before))
    batch.add_version(BLOB, after, object_id(BLOB, after), (object_id(BLOB, before), before))
    pack = batch.write(repo / "objects")
    assert pack is not None
    rows = {
        line.split()[0]: line.split()
        for line in git(repo, "verify-pack", "-v", str(pack.with_suffix(".idx"))).splitlines()
        if line[:1].isalnum() and len(line.split()) >= 5 and len(line.split()[0]) == 40
    }
    depths = [int(rows[oid][5]) if len(rows[oid]) > 5 else 0 for oid in chain]
    assert max(depths) == MAX_DELTA_DEPTH
    assert len(rows[object_id(BLOB, before).hex()]) == 5  # left whole
    git(repo, "fsck", "--strict")


@settings(max_examples=60)
@given(
    st.integers(0, 20_000),
    st.integers(0, 20_000),
    st.binary(max_size=300),
    st.binary(max_size=300),
    st.integers(0, 255),
)
def test_a_delta_rebuilds_the_target(
    prefix_size: int, suffix_size: int, old: bytes, new: bytes, seed: int
) -> None:
    # git applies the delta (in patch-delta.c's format); apply it here the same way to check it.
    # Sizes go past the 4 KiB blocks of the prefix and suffix search.
    filler = bytes((seed + i * 7) % 256 for i in range(256)) * (1 + max(prefix_size, suffix_size) // 256)
    prefix, suffix = filler[:prefix_size], filler[::-1][:suffix_size]
    base = prefix + old + suffix
    target = prefix + new + suffix
    delta = make_delta(base, target)
    assert _apply(base, delta) == target
    # The shared prefix and suffix are copied, never inserted: the delta is about the change's size.
    assert len(delta) <= len(new) + len(new) // 127 + 32


@settings(max_examples=60)
@given(st.binary(min_size=1, max_size=5000), st.data())
def test_a_same_size_change_is_copied_around(base: bytes, data: st.DataObject) -> None:
    # Same-size versions (a tree entry's id changed) take make_delta's one-XOR path: the bytes
    # before the first and after the last differing byte are copied.
    start = data.draw(st.integers(0, len(base) - 1))
    end = data.draw(st.integers(start, len(base)))
    middle = data.draw(st.binary(min_size=end - start, max_size=end - start))
    target = base[:start] + middle + base[end:]
    delta = make_delta(base, target)
    assert _apply(base, delta) == target
    assert len(delta) <= (end - start) + (end - start) // 127 + 32


@settings(max_examples=40)
@given(st.lists(st.binary(max_size=3000), min_size=1, max_size=8))
def test_every_object_is_a_whole_zlib_stream_of_its_own(payloads: list[bytes]) -> None:
    for level in (1, 6):  # ISA-L's level and a level only zlib has
        compress = pack._compressor(level)
        for payload in payloads:
            assert zlib.decompress(compress(payload)) == payload
    # One deflater serves a whole pack: each object's stream must inflate alone, and be the same
    # bytes whatever was compressed before it (the full flush forgets the earlier objects).
    deflater = _Deflater(1)
    streams = [deflater.stream(payload) for payload in payloads]
    for payload, stream in zip(payloads, streams, strict=True):
        assert zlib.decompress(stream) == payload
        assert _Deflater(1).stream(payload) == stream
    assert zlib.decompress(_stored(payloads[-1][:STORED_BELOW])) == payloads[-1][:STORED_BELOW]


def test_short_headers_match_gits_loops() -> None:
    # The one- and two-byte fast paths against the loops of git's pack format (pack-format.txt).
    def offset(distance: int) -> bytes:
        out = [distance & 0x7F]
        distance >>= 7
        while distance:
            distance -= 1
            out.append(0x80 | (distance & 0x7F))
            distance >>= 7
        return bytes(reversed(out))

    def header(type_code: int, size: int) -> bytes:
        out, byte, size = bytearray(), (type_code << 4) | (size & 0x0F), size >> 4
        while size:
            out.append(byte | 0x80)
            byte, size = size & 0x7F, size >> 7
        return bytes(out + bytes((byte,)))

    edges = [1, 2, 0x0F, 0x10, 0x7F, 0x80, 0x81, 0x7FF, 0x800, 0x3FFF, 0x4000, 0x4080, 0x4081, 1 << 20]
    for value in edges + list(range(0, 20_000, 7)):
        if value:
            assert _offset_encoding(value) == offset(value), value
        for type_code in (1, 2, 3, 6):
            assert _type_and_size(type_code, value) == header(type_code, value), (type_code, value)


def test_a_written_pack_leaves_exactly_the_pack_and_its_index(tmp_path: Path) -> None:
    # Temporary files are renamed into place (the .idx last, which is what makes a pack visible).
    repo = _bare(tmp_path / "repo.git")
    batch = PackBatch()
    batch.add(BLOB, b"x", object_id(BLOB, b"x"))
    pack = batch.write(repo / "objects")
    assert pack is not None
    names = sorted(os.listdir(repo / "objects" / "pack"))
    assert names == sorted([pack.name, pack.with_suffix(".idx").name])
    assert git(repo, "cat-file", "-p", object_id(BLOB, b"x").hex()) == "x"
