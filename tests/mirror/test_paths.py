"""The path encoding: the cases of docs/mirror.md, Hypothesis properties, and git as the oracle."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.mirror import decode_path, encode_path, encode_paths, escape_for_terminal
from memsync.mirror.errors import PathEncodingError
from memsync.mirror.paths import (
    HFS_IGNORABLE,
    NAME_MAX,
    Spelling,
    quote_for_message,
    read_spelling,
    suggest_tree_path,
    unquote_from_message,
)
from memsync.rules import Dialect, check_path
from tests.mirror.oracle import fsck, git

# --- the documented cases ----------------------------------------------------------------------

CASES = [
    ("notes/a.md", "notes/a.md"),
    ("émoji/🙂 notes.md", "émoji/🙂 notes.md"),
    (".notes/a.md", ".notes/a.md"),  # a leading dot alone is harmless
    ("...", "..%2E"),  # Windows drops a trailing dot
    (" padded /x ", " padded%20/x%20"),  # Anthropic allows outer spaces; Windows drops trailing ones
    ("100%.md", "100%25.md"),
    ("%25", "%2525"),
    ("a\\b", "a%5Cb"),
    ("line\nbreak", "line%0Abreak"),
    ("bell\x07\x7f\x85", "bell%07%7F%C2%85"),
    (".git", "%2Egit"),
    (".GIT/config", "%2EGIT/config"),
    ("x/.Git/y", "x/%2EGit/y"),
    (".git.", "%2Egit%2E"),
    (".git ", "%2Egit%20"),
    (".gitmodules", "%2Egitmodules"),
    ("deep/.gitattributes", "deep/%2Egitattributes"),
    ("deep/er/.gitignore", "deep/er/%2Egitignore"),
    (".mailmap", "%2Emailmap"),
    (".lfsconfig", "%2Elfsconfig"),
    ("git~1", "%67it~1"),
    ("GITMOD~1", "%47ITMOD~1"),
    ("gi7eba~1", "%67i7eba~1"),
    ("maba30~2", "%6Daba30~2"),
    ("draft~2.md", "draft~2.md"),  # only short names of special names are escaped
    (".g\u200cit", "%2Eg\u200cit"),
    ("\u200c.git", "%E2%80%8C.git"),
    ("\ufeff.gitmodules", "%EF%BB%BF.gitmodules"),
    ("a%_", "a%25_"),
    ("a%+", "a%25+"),
]


@pytest.mark.parametrize(("memory_path", "tree_path"), CASES)
def test_documented_cases(memory_path: str, tree_path: str) -> None:
    assert encode_path(memory_path) == tree_path
    assert decode_path(tree_path) == memory_path


def test_a_file_beside_a_directory_of_the_same_name_gets_the_suffix() -> None:
    layout = encode_paths(["a", "a/b", "a/b/c", "d/e"])
    assert layout == {"a": "a%_", "a/b": "a/b%_", "a/b/c": "a/b/c", "d/e": "d/e"}
    assert all(decode_path(tree) == memory for memory, tree in layout.items())
    # The suffix follows the set: b lost its folder, c gained one.
    layout = encode_paths(["a", "a/x", "b", "c", "c/d"])
    assert layout == {"a": "a%_", "a/x": "a/x", "b": "b", "c": "c%_", "c/d": "c/d"}


def test_long_segments_are_cut_into_pieces_that_fit_name_max() -> None:
    segment = "é" * 600  # 1,200 bytes: only Anthropic allows it, and only as one segment
    with pytest.raises(PathEncodingError):
        encode_path(segment)  # over the 1,024-byte path limit
    segment = "é" * 500
    tree = encode_path(f"dir/{segment}")
    parts = tree.split("/")
    assert all(len(part.encode()) <= NAME_MAX for part in parts)
    assert parts[1].endswith("%+") and not parts[-1].endswith("%+")
    assert decode_path(tree) == f"dir/{segment}"


def test_a_255_byte_forward_segment_that_needs_escaping_still_fits() -> None:
    segment = "%" + "a" * 254
    check_path(segment, Dialect.FORWARD)
    tree = encode_path(segment)
    assert all(len(part.encode()) <= NAME_MAX for part in tree.split("/"))
    assert decode_path(tree) == segment
    # With the %_ suffix too.
    suffixed = encode_path("b" * 255, directory_sibling=True)
    assert all(len(part.encode()) <= NAME_MAX for part in suffixed.split("/"))
    assert decode_path(suffixed) == "b" * 255


@pytest.mark.parametrize("last", [".", " "])
def test_a_long_segment_whose_escaped_end_does_not_fit_the_last_piece(last: str) -> None:
    # The rest fits as a middle piece but not as the last, where its final '.' or ' ' is escaped and
    # the %_ suffix added: the last character makes a piece of its own (this once raised IndexError).
    segment = "y" * 253 + "x" * 252 + last
    tree = encode_path(f"notes/{segment}", directory_sibling=True)
    assert tree.endswith(f"%+/{'%2E' if last == '.' else '%20'}%_")
    assert all(len(part.encode()) <= NAME_MAX for part in tree.split("/"))
    assert decode_path(tree) == f"notes/{segment}"


def test_a_piece_that_starts_a_special_name_is_escaped_too() -> None:
    segment = "x" * 253 + ".gitmodules"
    tree = encode_path(segment)
    assert tree == "x" * 253 + "%+/%2Egitmodules"
    assert decode_path(tree) == segment


@pytest.mark.parametrize(
    ("tree_path", "suggestion"),
    [
        ("100%.md", "100%25.md"),
        ("%2egit", "%252egit"),
        ("%61", "%2561"),  # a needless escape: 'a' is spelled a
        (".gitignore", "%2Egitignore"),
        ("a%+", "a%25+"),
        ("a%_/b", "a%25_/b"),
        ("%FF", "%25FF"),  # not UTF-8
    ],
)
def test_decoding_is_strict_and_names_the_path(tree_path: str, suggestion: str) -> None:
    with pytest.raises(PathEncodingError) as caught:
        decode_path(tree_path)
    assert escape_for_terminal(tree_path) in str(caught.value)
    assert caught.value.suggestion == suggestion == suggest_tree_path(tree_path)
    assert caught.value.path == tree_path


@pytest.mark.parametrize(
    "bad", ["", "/abs", "a//b", "a/./b", "../x", "a/..", "nul\x00", "\ud800", "a" * 1025]
)
def test_paths_no_dialect_accepts_are_refused(bad: str) -> None:
    with pytest.raises(PathEncodingError):
        encode_path(bad)


# --- messages and terminals ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "quoted"),
    [
        ("notes/a.md", "notes/a.md"),
        ("café.md", "café.md"),
        ("a\nMemory-Id: mem_forged", '"a\\nMemory-Id: mem_forged"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash", '"back\\\\slash"'),
        (" lead", '" lead"'),
        ("trail ", '"trail "'),
        ("bidi\u202etxt", '"bidi\\342\\200\\256txt"'),
        ("sep\u2028x", '"sep\\342\\200\\250x"'),
        ("tab\tbell\x07", '"tab\\tbell\\a"'),
    ],
)
def test_quote_for_message(path: str, quoted: str) -> None:
    assert quote_for_message(path) == quoted
    assert unquote_from_message(quoted) == path


def test_escape_for_terminal_neutralises_control_sequences() -> None:
    shown = escape_for_terminal("a\x1b[31mred\u202e\n\\")
    assert shown == "a\\x1b[31mred\\u202e\\n\\\\"
    assert all(ch.isprintable() for ch in shown)


# --- properties ------------------------------------------------------------------------------

SPECIAL_SEGMENTS = [
    ".git",
    ".GIT",
    "git~1",
    "Git~2",
    ".git.",
    ".git ",
    ".gitmodules",
    ".GitAttributes",
    ".gitignore",
    ".mailmap",
    ".g\u200cit",
    "\u200d.git",
    ".gi\ufefft",
    "gi7eba~1",
    "100%.md",
    "%",
    "%25",
    "%2E",
    "a%_",
    "a%+",
    "%_",
    "%+",
    "x\\.git",
    "...",
    " ",
    "\t",
]
ALPHABET = st.sampled_from(
    [*"ab.~%_+gitGIT\\ -", "\n", "\x01", "\x7f", "\x85", "é", "🙂", "\u200c", "\u202e", "\ufeff", "ß"]
)
segments = st.one_of(
    st.sampled_from(SPECIAL_SEGMENTS),
    st.text(ALPHABET, min_size=1, max_size=12),
    st.text(ALPHABET, min_size=240, max_size=420),
).filter(lambda s: s not in (".", ".."))
memory_paths = (
    st.lists(segments, min_size=1, max_size=4).map("/".join).filter(lambda p: len(p.encode()) <= 1024)
)


@given(memory_paths, st.booleans())
def test_round_trip(path: str, sibling: bool) -> None:
    tree = encode_path(path, directory_sibling=sibling)
    assert decode_path(tree) == path
    for component in tree.split("/"):
        assert 0 < len(component.encode()) <= NAME_MAX
        assert component not in (".", "..")
        assert not any(ch in component for ch in "\\\n\x00")


@given(st.lists(memory_paths, min_size=1, max_size=12, unique=True))
def test_no_collisions_and_no_file_is_a_directory(paths: list[str]) -> None:
    layout = encode_paths(paths)
    trees = list(layout.values())
    assert len(set(trees)) == len(trees)
    directories = {"/".join(t.split("/")[:i]) for t in trees for i in range(1, t.count("/") + 1)}
    assert not directories & set(trees)
    assert {tree: decode_path(tree) for tree in trees} == {tree: memory for memory, tree in layout.items()}


@given(st.text(st.sampled_from(list("a%_+/.2E5CFgit~")), min_size=1, max_size=20))
def test_decoding_accepts_only_canonical_spellings(tree_path: str) -> None:
    try:
        memory_path, spellings, has_suffix = read_spelling(tree_path)
    except PathEncodingError:
        return
    assert has_suffix == tree_path.endswith("%_")
    folded = [index for index, spelling in enumerate(spellings) if spelling is Spelling.FOLDED]
    rest = set(spellings) - {Spelling.FOLDED}
    if len(rest) <= 1:  # one spelling for every segment not folded: encode_path makes it whole
        spelling = rest.pop() if rest else Spelling.PLAIN
        assert (
            encode_path(memory_path, directory_sibling=has_suffix, folded=folded, spelling=spelling)
            == tree_path
        )


def _index_and_check_out(repo: Path, tree_paths: list[str]) -> None:
    """Let git itself store the paths (its index refuses .git and friends) and check them out."""
    blob = git(repo, "hash-object", "-w", "--stdin", input=b"memory\n").strip()
    entries = b"".join(f"100644 {blob}\t".encode() + path.encode() + b"\0" for path in tree_paths)
    git(repo, "update-index", "--add", "-z", "--index-info", input=entries)
    tree = git(repo, "write-tree").strip()
    commit = git(repo, "commit-tree", "-m", "paths", tree).strip()
    git(repo, "update-ref", "refs/heads/main", commit)
    fsck(repo)
    checkout = repo.parent / (repo.name + "-checkout")
    subprocess.run(["git", "clone", "-q", str(repo), str(checkout)], check=True, capture_output=True)


@settings(max_examples=20)
@given(st.lists(memory_paths, min_size=1, max_size=10, unique=True))
def test_git_stores_fscks_and_checks_out_every_encoded_tree(
    tmp_path_factory: pytest.TempPathFactory, paths: list[str]
) -> None:
    repo = tmp_path_factory.mktemp("paths") / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    layout = encode_paths(paths)
    _index_and_check_out(repo, list(layout.values()))
    checkout = repo.parent / "repo-checkout"
    on_disk = []
    for root, dirs, files in os.walk(checkout):
        dirs[:] = [d for d in dirs if not (root == str(checkout) and d == ".git")]
        on_disk.extend(os.path.relpath(os.path.join(root, f), checkout) for f in files)
    assert sorted(decode_path(tree) for tree in on_disk) == sorted(paths)


def test_every_special_segment_passes_git(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    names = [f"d{i}/{name}" for i, name in enumerate(SPECIAL_SEGMENTS)]
    _index_and_check_out(repo, list(encode_paths(names).values()))


def _literal_tree_fails_fsck(tmp_path: Path, name: str) -> bool:
    """Force a tree with ``name`` into a repository and ask fsck whether it has a .git problem."""
    repo = tmp_path / f"probe{ord(name[2]):x}"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    blob = git(repo, "hash-object", "-w", "--stdin", input=b"x").strip()
    raw = b"100644 " + name.encode() + b"\0" + bytes.fromhex(blob)
    tree = git(repo, "hash-object", "-w", "-t", "tree", "--literally", "--stdin", input=raw).strip()
    git(repo, "update-ref", "refs/heads/x", git(repo, "commit-tree", "-m", "m", tree).strip())
    result = subprocess.run(["git", "-C", str(repo), "fsck", "--strict"], capture_output=True, text=True)
    return "hasDotgit" in result.stderr


def test_the_hfs_ignorable_set_is_the_one_git_uses(tmp_path: Path) -> None:
    # Every code point we treat as ignorable makes git's fsck see '.git'; neighbours do not.
    for ch in sorted(HFS_IGNORABLE):
        assert _literal_tree_fails_fsck(tmp_path, f".g{ch}it"), f"U+{ord(ch):04X}"
    for ch in ("\u200b", "\u2060", "\u2061"):
        assert not _literal_tree_fails_fsck(tmp_path, f".g{ch}it"), f"U+{ord(ch):04X}"
