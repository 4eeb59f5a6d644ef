"""Hypothesis strategies for memory paths and contents, hostile-leaning, and the round trip they feed.

Paths mix ordinary text with everything the path encoding must handle (docs/mirror.md): ``%`` and
its markers, ``.git`` in its spellings and NTFS short names, HFS+-ignorable code points, ``\\``,
control characters, outer white space, long segments, and a small pool of directory names, so that
one generated path is often the directory of another (``a`` beside ``a/b``). Whether a dialect's
rules accept a path is for :mod:`memsync.rules` to say; the properties check both outcomes.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from hypothesis import strategies as st

from memsync.api import Client
from memsync.errors import RuleViolation
from memsync.mirror import encode_paths
from memsync.mirror.paths import MAX_TREE_PATH_BYTES
from memsync.rules import Dialect, check_content, check_path, to_absolute
from memsync.sync.pull import pull_store
from tests.reliability.harness import GitOracle
from tests.reliability.histories import decoded_worktree

SPECIAL_PIECES = [
    ".git",
    ".GIT",
    ".Git.",
    ".git ",
    "git~1",
    "GITMOD~1",
    "gi7eba~1",
    ".gitmodules",
    ".gitattributes",
    ".gitignore",
    ".mailmap",
    ".lfsconfig",
    ".",
    "..",
    "...",
    "%",
    "%25",
    "%2E",
    "%_",
    "%+",
    "%2",
    "100%",
    "\\",
    "\x00",
    "\x1b[31m",
    "\u200c",
    "\u202e",
    "\ufeff",
    "\u2028",
    " ",
    "\t",
    "é",
    "e\u0301",
    "🙂",
    "~",
]
DIRECTORIES = ["a", "a/b", "notes", ".git", "%", "d d"]
# Lone surrogates are not text: no UTF-8 spelling, refused before any rule could see them.
NO_SURROGATES: tuple[Literal["Cs"]] = ("Cs",)

_piece = st.one_of(
    st.sampled_from(SPECIAL_PIECES),
    st.text(st.characters(exclude_categories=NO_SURROGATES, exclude_characters="/"), min_size=1, max_size=12),
    st.text(st.characters(codec="ascii", exclude_characters="/\x00"), min_size=1, max_size=8),
)
segments = st.one_of(
    st.lists(_piece, min_size=1, max_size=3).map("".join),
    st.text(st.sampled_from("aé🙂%.-"), min_size=200, max_size=300),  # near and over 255 bytes
)
relative_paths = st.one_of(
    st.lists(segments, min_size=1, max_size=5).map("/".join),
    st.tuples(st.sampled_from(DIRECTORIES), st.lists(segments, min_size=0, max_size=2)).map(
        lambda t: "/".join([t[0], *t[1]])
    ),
)
contents = st.one_of(
    st.text(st.characters(exclude_categories=NO_SURROGATES), min_size=0, max_size=200),
    st.text(st.sampled_from("ab\r\n\t é"), min_size=1, max_size=3000),
)


def accepted(path: str, dialect: Dialect) -> bool:
    """Whether ``dialect``'s rules take ``path`` (in the canonical relative spelling)."""
    spelled = to_absolute(path) if dialect is Dialect.ANTHROPIC else path
    try:
        check_path(spelled, dialect)
    except RuleViolation:
        return False
    return True


def content_accepted(content: str, dialect: Dialect) -> bool:
    try:
        check_content(content, dialect)
    except RuleViolation:
        return False
    return True


def storable(files: Mapping[str, str], dialect: Dialect) -> dict[str, str]:
    """The subset of ``files`` a store of ``dialect`` takes, path by path: its rules, and on Anthropic
    no path beside its own directory (``a`` and ``a/b``), which it refuses as a conflict. Paths whose
    tree spelling passes the 1,024 bytes macOS and Windows accept are left out too: memsync refuses
    those by design (tests/mirror/test_spelling_rules.py), and a round trip cannot include them."""
    kept = {p: c for p, c in files.items() if accepted(p, dialect) and content_accepted(c, dialect)}
    if dialect is Dialect.ANTHROPIC:
        kept = {p: c for p, c in kept.items() if not any(q != p and q.startswith(p + "/") for q in kept)}
    # Fewer paths never lengthen a spelling, so dropping the long ones until none is left settles.
    while too_long := {p for p, t in encode_paths(kept).items() if len(t.encode()) > MAX_TREE_PATH_BYTES}:
        kept = {p: c for p, c in kept.items() if p not in too_long}
    return kept


def round_trip(
    client: Client, store_name: str, files: Mapping[str, str], rewrites: Mapping[str, str]
) -> None:
    """Create ``files`` in a new store, rewrite some, pull, and check the checkout decodes back to
    exactly the store's paths and bytes, with a clean ``git fsck --strict``."""
    store = client.create_store(store_name, request_id=store_name)
    ids = {path: client.create_memory(store.id, path, content).id for path, content in files.items()}
    expected = dict(files)
    for path, content in rewrites.items():
        if path in ids:
            client.update_memory(store.id, ids[path], content, expected_sha256=None)
            expected[path] = content
    live = {m.path: m.id for m in client.list_memories(store.id)}
    assert set(live) == set(expected), "the store lost or invented a memory"
    with tempfile.TemporaryDirectory(prefix="memsync-round-trip-") as root:
        report = pull_store(client, store, Path(root))
        assert report.ok, report.error
        repo = Path(root) / store.id
        assert decoded_worktree(repo) == expected
        # The bytes on disk are the store's bytes, not just equal after decoding.
        for path, memory_id in live.items():
            assert client.get_memory(store.id, memory_id).content == expected[path]
        GitOracle(repo).fsck()
