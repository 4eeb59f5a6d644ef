"""Rules 5 and 6 of the path spelling (docs/mirror.md, "Path spelling"): names that fold alike, and
names Windows cannot hold, spelled so every filesystem checks them out as distinct files."""

from __future__ import annotations

import json
import unicodedata
from importlib import resources

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memsync.errors import UnsafeInput
from memsync.mirror import Mirror, decode_path, encode_path, encode_paths
from memsync.mirror.fastimport import Move, Put, Remove
from memsync.mirror.folding import TABLE_FILE, UNICODE_VERSION, build_table, fold
from memsync.mirror.history import PathMap, TreeChanges
from memsync.mirror.paths import NAME_MAX, Spelling, read_spelling
from tests.mirror.oracle import fsck, git, record
from tests.mirror.test_history import NewMirror, tree_listing, write

# --- rule 6: names Windows cannot hold ----------------------------------------------------------

WINDOWS_CASES = [
    ("a:b.md", "a%3Ab.md"),
    ('say "hi"?.md', "say %22hi%22%3F.md"),
    ("<x>|*.md", "%3Cx%3E%7C%2A.md"),
    ("con", "%63on"),
    ("CON.md", "%43ON.md"),
    ("nul.tar.gz", "%6Eul.tar.gz"),
    ("Aux .md", "%41ux .md"),
    ("lpt9.md", "%6Cpt9.md"),
    ("com\u00b9.md", "%63om\u00b9.md"),
    ("com10.md", "com10.md"),  # only COM1-COM9 are devices
    ("console.md", "console.md"),
    ("dir./x", "dir%2E/x"),
    ("trailing ", "trailing%20"),
    ("notes/a.md", "notes/a.md"),
]


@pytest.mark.parametrize(("memory_path", "tree_path"), WINDOWS_CASES)
def test_names_windows_cannot_hold_are_escaped_and_decode_back(memory_path: str, tree_path: str) -> None:
    assert encode_path(memory_path) == tree_path
    assert decode_path(tree_path) == memory_path


def test_a_format_1_spelling_is_still_read() -> None:
    # Mirrors made before rule 6 hold a:b.md literally; they are read until their next pull respells them.
    assert read_spelling("a:b.md") == ("a:b.md", (Spelling.FORMAT1,), False)
    assert encode_path("a:b.md", spelling=Spelling.FORMAT1) == "a:b.md"
    assert encode_paths(["a:b.md"]) == {"a:b.md": "a%3Ab.md"}  # the next checkout respells it


# --- rule 5: names that fold alike ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("paths", "expected"),
    [
        (["Readme.md", "readme.md"], ["%52eadme.md", "readme.md"]),
        (["README.md", "Readme.md"], ["%52%45%41%44%4D%45.md", "%52eadme.md"]),
        (["Docs/a", "docs/b"], ["%44ocs/a", "docs/b"]),
        (["A", "a/b"], ["%41", "a/b"]),
        (["\u00e9.md", "e\u0301.md"], ["%C3%A9.md", "e\u0301.md"]),  # NFC beside NFD
        (["stra\u00dfe", "strasse"], ["stra%C3%9Fe", "strasse"]),
        (["\u212a", "k"], ["%E2%84%AA", "k"]),  # KELVIN SIGN folds to k
        (["Readme.md", "notes/readme.md"], ["Readme.md", "notes/readme.md"]),  # other folders
        (["Readme.md", "Other.md"], ["Readme.md", "Other.md"]),
    ],
)
def test_names_that_fold_alike_get_distinct_spellings(paths: list[str], expected: list[str]) -> None:
    layout = encode_paths(paths)
    assert [layout[path] for path in paths] == expected
    assert [decode_path(tree) for tree in expected] == paths


def test_a_name_that_is_its_own_fold_keeps_its_spelling_when_another_arrives() -> None:
    before = encode_paths(["notes/readme.md"])
    after = encode_paths(["notes/readme.md", "notes/README.md"])
    assert before["notes/readme.md"] == after["notes/readme.md"] == "notes/readme.md"


def _folded_tree(tree_path: str) -> str:
    return "/".join(fold(component) for component in tree_path.split("/"))


CONFUSABLE = st.sampled_from(
    ["a", "A", "\u00e9", "e\u0301", "\u00df", "ss", "S", "\u212a", "k", ":", ".", " ", "%"]
)
NAMES = st.lists(CONFUSABLE, min_size=1, max_size=4).map("".join).filter(lambda name: name not in (".", ".."))
PATHS = st.lists(NAMES, min_size=1, max_size=3).map("/".join)


@given(st.lists(PATHS, min_size=1, max_size=10, unique=True))
def test_no_two_spellings_fold_alike_and_every_one_decodes_back(paths: list[str]) -> None:
    layout = encode_paths(paths)
    trees = list(layout.values())
    folded = [_folded_tree(tree) for tree in trees]
    assert len(set(folded)) == len(folded)
    folders = {"/".join(f.split("/")[:i]) for f in folded for i in range(1, f.count("/") + 1)}
    assert not folders & set(folded)  # no file folds like a folder
    assert {tree: decode_path(tree) for tree in trees} == {tree: memory for memory, tree in layout.items()}
    for tree in trees:
        assert all(0 < len(component.encode()) <= NAME_MAX for component in tree.split("/"))
        assert not any(ch in tree for ch in '<>:"|?*\\')


@given(st.lists(st.tuples(st.booleans(), PATHS), min_size=1, max_size=25))
def test_the_history_writers_map_spells_every_tree_as_the_set_rule_does(
    steps: list[tuple[bool, str]],
) -> None:
    """PathMap keeps spellings incrementally (the history writer's hot path); the moves it announces,
    applied to the previous tree, give exactly encode_paths of the new set."""
    paths = PathMap()
    paths.listener = changes = TreeChanges()
    tree: dict[str, str] = {}  # tree path → memory path
    for add, path in steps:
        changes.clear()
        if add and paths.owner(path) is None:
            paths.add(path, path)
            changes.put(paths, path, "blob")
        elif not add and paths.owner(path) is not None:
            paths.remove(path)
        for change in changes:
            if isinstance(change, Remove):
                del tree[change.path]
            elif isinstance(change, Move):
                tree[change.target] = tree.pop(change.source)
            elif isinstance(change, Put):
                tree[change.path] = path
        expected = encode_paths(paths.view())
        assert tree == {spelled: memory for memory, spelled in expected.items()}


# --- the fold table is pinned ----------------------------------------------------------------------


def test_the_shipped_fold_table_is_unicode_14_and_matches_the_standard_library() -> None:
    shipped = json.loads(resources.files("memsync.mirror").joinpath(TABLE_FILE).read_text(encoding="utf-8"))
    assert shipped["unicode"] == UNICODE_VERSION
    if unicodedata.unidata_version != UNICODE_VERSION:
        pytest.skip(f"this Python has Unicode {unicodedata.unidata_version}; the table is checked on 14.0.0")
    assert build_table() == shipped


@given(st.text(st.characters(exclude_characters="\u0345"), max_size=8))
def test_the_fold_is_canonical_caseless_matching(text: str) -> None:
    if unicodedata.unidata_version != UNICODE_VERSION:
        pytest.skip(f"this Python has Unicode {unicodedata.unidata_version}")
    expected = unicodedata.normalize("NFD", unicodedata.normalize("NFD", text).casefold())
    assert fold(text) == expected


# --- in the history: format 2 only where a tree needs it -------------------------------------------


def _format(mirror: Mirror, rev: str) -> str:
    body = git(mirror.path, "log", "-1", "--format=%B", rev)
    return body.rstrip().rsplit("\n", 1)[-1]


def test_a_tree_that_needs_the_new_rules_is_format_2_and_only_while_it_does(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    write(
        mirror,
        [
            record(1, "mem_a", "created", "notes/readme.md", b"a"),
            record(2, "mem_b", "created", "notes/README.md", b"b"),
            record(3, "mem_b", "deleted", None, None),
            record(4, "mem_c", "created", "a:b.md", b"c"),
        ],
    )
    tip = "refs/remotes/memstore/main"
    assert [_format(mirror, f"{tip}~{n}") for n in (3, 2, 1, 0)] == [
        "Memsync-Format: 1",
        "Memsync-Format: 2",
        "Memsync-Format: 1",
        "Memsync-Format: 2",
    ]
    assert set(tree_listing(mirror)) == {"notes/readme.md", "a%3Ab.md"}
    assert set(tree_listing(mirror, f"{tip}~2")) == {"notes/readme.md", "notes/%52%45%41%44%4D%45.md"}
    fsck(mirror.path)
    assert mirror.last_imported() is not None


def test_a_path_spelled_over_1024_bytes_is_refused_with_the_reason(new_mirror: NewMirror) -> None:
    mirror = new_mirror()
    with pytest.raises(UnsafeInput, match="over the 1024 bytes macOS and Windows accept"):
        write(mirror, [record(1, "mem_a", "created", "x/" + ":" * 400, b"a")])  # spelled %3A: 1,200 bytes
    write(mirror, [record(1, "mem_a", "created", "x/" + ":" * 300, b"a")])
    assert list(tree_listing(mirror)) == [
        "x/" + "%3A" * 84 + "%+/" + "%3A" * 84 + "%+/" + "%3A" * 84 + "%+/" + "%3A" * 48
    ]
