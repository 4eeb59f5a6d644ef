"""Three spellings of a memory path: in the git tree, in a commit message, and on a terminal.

**Tree spelling** (:func:`encode_path`, :func:`decode_path`): a bijection between memory paths and
*canonical* tree paths that git stores, checks out and fsck-verifies on every filesystem, by the rules
of docs/mirror.md, "Path spelling" (numbered as there). Spellings decide commit ids: never change one.
**Message spelling** (:func:`quote_for_message`): C-quoted like git where needed, so a path can never
span lines or forge a trailer. **Terminal spelling** (:func:`escape_for_terminal`): controls escaped.
"""

from __future__ import annotations

import enum
import functools
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from itertools import islice

from memsync.mirror.errors import PathEncodingError
from memsync.mirror.folding import fold

MAX_MEMORY_PATH_BYTES = 1024
NAME_MAX = 255
# The longest working-tree path memsync writes: macOS refuses longer ones (PATH_MAX), and git for
# Windows checks them out with core.longpaths (which mirrors set).
MAX_TREE_PATH_BYTES = 1024
_PIECE_MAX = NAME_MAX - 2  # room for a two-byte marker (%+ or %_)
CONTINUATION = "%+"
FILE_SUFFIX = "%_"

# The code points HFS+ ignores in names, as git's is_hfs_dotgit does (checked against git's fsck in tests).
HFS_IGNORABLE = frozenset(
    "\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u206a\u206b\u206c\u206d\u206e\u206f\ufeff"
)


class Spelling(enum.Enum):
    """How one segment is spelled: PLAIN, FOLDED (rule 5), or FORMAT1 (PLAIN without rule 6: read,
    never written). Readers try them in this order."""

    PLAIN = "plain"
    FOLDED = "folded"
    FORMAT1 = "format1"


# The characters escaped wherever they appear: rules 1 and 6 (Memsync-Format 1 had no rule 6), and in a
# folded spelling (rule 5) all but those every fold leaves as they are.
_ESCAPED = {
    Spelling.PLAIN: re.compile(r'[%\\\x00-\x1f\x7f-\x9f<>:"|?*]'),
    Spelling.FOLDED: re.compile(r"[^ !#$&'()+,\-./0-9;=@\[\]^_`a-z{}~]"),
    Spelling.FORMAT1: re.compile(r"[%\\\x00-\x1f\x7f-\x9f]"),
}
# NTFS 8.3 short names a special name can have: the first 6 letters (git~1, gitmod~1, mailma~1,
# lfscon~1) or 2 letters and a 4-digit hash (gi7eba~1, maba30~1). Other names with ~N are left alone.
_NTFS_SHORT_NAME = re.compile(r"(?:gi|ma|lf)[^~]{0,4}~[0-9]")
_SPECIAL_PREFIXES = (".git", ".mailmap", ".lfsconfig")
# Rule 6: names Windows keeps for devices, whatever their extension (CON, con.md, lpt1.tar.gz).
_DEVICES = frozenset(
    ["CON", "PRN", "AUX", "NUL"]
    + [f"{port}{n}" for port in ("COM", "LPT") for n in [*"123456789", "\u00b9", "\u00b2", "\u00b3"]]
)
# Pieces of a tree component: an escape, a reserved marker, a stray '%', or a run of literals.
_COMPONENT_TOKEN = re.compile(r"%[0-9A-F]{2}|%\+|%_|%|[^%]+")


def _pct(text: str) -> str:
    return "".join(f"%{byte:02X}" for byte in text.encode("utf-8"))


def _forced_escapes(piece: str, final: bool, spelling: Spelling) -> set[int]:
    """Rules 2 and 6: the indexes in ``piece`` escaped for the name they make, whatever the character."""
    forced = set()
    # Only the first few significant characters decide: look no further than that.
    folded = "".join(islice((ch for ch in piece if ch not in HFS_IGNORABLE), 12)).casefold()
    if (
        piece in (".", "..")
        or folded.startswith(_SPECIAL_PREFIXES)
        or _NTFS_SHORT_NAME.match(folded)
        or (spelling is not Spelling.FORMAT1 and piece.split(".", 1)[0].rstrip(" ").upper() in _DEVICES)
    ):
        forced.add(0)
    if final and spelling is not Spelling.FORMAT1 and piece[-1] in ". ":  # Windows drops it
        forced.add(len(piece) - 1)
    return forced


def _escape_piece(piece: str, final: bool, spelling: Spelling) -> str:
    forced = _forced_escapes(piece, final, spelling)
    escaped = _ESCAPED[spelling]
    if not forced and escaped.search(piece) is None:
        return piece  # the usual piece, without a match per character
    return "".join(_pct(ch) if i in forced or escaped.match(ch) else ch for i, ch in enumerate(piece))


@functools.lru_cache(maxsize=1 << 12)  # a folder's segment repeats in every path below it
def _encode_segment(segment: str, spelling: Spelling, suffixed: bool = False) -> list[str]:
    """The tree components of one memory segment (rule 4); with ``suffixed``, the last ends in ``%_``."""
    last_limit = _PIECE_MAX if suffixed else NAME_MAX
    components = [_escape_piece(segment, True, spelling)]
    if len(components[0].encode("utf-8")) > last_limit:
        # The bytes each character takes escaped by its own rule, counted once: measuring a growing
        # piece escapes nothing (a forced escape, rules 2 and 6, adds two bytes per byte).
        escaped = _ESCAPED[spelling]
        sizes = [len(ch.encode("utf-8")) * (3 if escaped.match(ch) else 1) for ch in segment]

        def length(start: int, end: int, total: int, final: bool) -> int:
            forced = {start + i for i in _forced_escapes(segment[start:end], final, spelling)}
            return total + sum(2 * sizes[i] for i in forced if not escaped.match(segment[i]))

        components, start = [], 0
        while length(start, len(segment), sum(sizes[start:]), True) > last_limit:
            end, total = start + 1, sizes[start]
            # The last character stays for the final piece, even when the rest would fit as a middle
            # piece: a final '.' or ' ' is escaped (rule 6) and may not fit in the last one.
            while end < len(segment) - 1 and length(start, end + 1, total + sizes[end], False) <= _PIECE_MAX:
                total += sizes[end]
                end += 1
            components.append(_escape_piece(segment[start:end], False, spelling) + CONTINUATION)
            start = end
        components.append(_escape_piece(segment[start:], True, spelling))
    if suffixed:
        components[-1] += FILE_SUFFIX
    return components


def check_memory_path(path: object) -> str:
    """Return the memory path ``path`` if the encoding can store it: every path Forward, Cloud or
    Anthropic may hand us (the latter made relative), refusing what could escape the repository."""
    if not isinstance(path, str):
        raise PathEncodingError("a memory path must be a string", path=repr(path), reason="type")

    def refused(reason: str, why: str) -> PathEncodingError:
        shown = escape_for_terminal(path)
        return PathEncodingError(f"memory path {shown} cannot be stored: {why}", path=path, reason=reason)

    if path == "":
        raise refused("empty", "it is empty")
    if path.startswith("/"):
        raise refused("absolute", "it is absolute; the mirror takes the relative form (notes/a.md)")
    if "\x00" in path:
        raise refused("nul", "it contains NUL")
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        raise refused("utf8", "it is not valid UTF-8 (lone surrogate)") from None
    if size > MAX_MEMORY_PATH_BYTES:
        raise refused("too_long", f"it is {size} bytes of UTF-8; at most {MAX_MEMORY_PATH_BYTES}")
    for index, segment in enumerate(path.split("/"), start=1):
        if segment in ("", ".", ".."):
            raise refused("bad_segment", f"segment {index} is empty, '.' or '..'")
    return path


def encode_path(
    memory_path: str,
    *,
    directory_sibling: bool = False,
    folded: Iterable[int] = (),
    spelling: Spelling = Spelling.PLAIN,
) -> str:
    """The working-tree path of the memory at ``memory_path``, which may also be a directory's
    (``directory_sibling``, rule 3), with the segments at the indexes ``folded`` spelled folded (rule 5)."""
    segments = check_memory_path(memory_path).split("/")
    folded = frozenset(folded)
    last = len(segments) - 1
    return "/".join(
        component
        for index, segment in enumerate(segments)
        for component in _encode_segment(
            segment, Spelling.FOLDED if index in folded else spelling, directory_sibling and index == last
        )
    )


def directory_prefixes(memory_path: str) -> list[str]:
    """The memory paths of the directories that contain ``memory_path`` (``a``, ``a/b`` for ``a/b/c``)."""
    segments = memory_path.split("/")
    return ["/".join(segments[:i]) for i in range(1, len(segments))]


def folded_segments(memory_paths: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """Rule 5: ``{memory_path: indexes of its segments spelled folded}``, for the paths that have any
    (a segment that is not its own fold, beside another entry of its folder with the same fold)."""
    paths = list(memory_paths)
    groups: dict[tuple[str, str], set[str]] = {}
    for entry in {prefix for path in paths for prefix in directory_prefixes(path)} | set(paths):
        parent, _, name = entry.rpartition("/")
        groups.setdefault((parent, fold(name)), set()).add(name)
    colliding = {key for key, names in groups.items() if len(names) > 1}
    if not colliding:
        return {}
    result: dict[str, tuple[int, ...]] = {}
    for path in paths:
        segments = path.split("/")
        indexes = tuple(
            index
            for index, name in enumerate(segments)
            if (folded := fold(name)) != name and ("/".join(segments[:index]), folded) in colliding
        )
        if indexes:
            result[path] = indexes
    return result


def encode_paths(memory_paths: Iterable[str]) -> dict[str, str]:
    """``{memory_path: tree_path}`` for the set of paths of one tree (rules 3 and 5 decided for it)."""
    paths = list(memory_paths)
    directories = {prefix for path in paths for prefix in directory_prefixes(path)}
    folded = folded_segments(paths)
    return {path: encoded(path, path in directories, folded.get(path, ())) for path in paths}


def segment_spellings(segment: str, *, last: bool) -> list[tuple[str, ...]]:
    """Every way a tree may spell one memory segment, the usual one first (and for the ``last``, with
    and without ``%_``): to find a memory's file whatever its siblings."""
    options = (
        tuple(_encode_segment(segment, spelling, suffixed))
        for spelling in Spelling
        for suffixed in ((False, True) if last else (False,))
    )
    return list(dict.fromkeys(options))


def _decode_component(component: str, tree_path: str) -> tuple[str, str | None]:
    """The text of one tree component and its trailing marker (``%+``, ``%_`` or None)."""
    data = bytearray()
    marker: str | None = None
    for token in _COMPONENT_TOKEN.findall(component):
        if marker is not None:
            raise _not_canonical(tree_path, f"{marker} may only end a name")
        if token in (CONTINUATION, FILE_SUFFIX):
            marker = token
        elif token == "%":
            raise _not_canonical(
                tree_path, "'%' must be followed by two upper-case hex digits ('%' itself is %25)"
            )
        elif token.startswith("%"):
            data.append(int(token[1:], 16))
        else:
            data.extend(token.encode("utf-8", "surrogatepass"))
    try:
        return data.decode("utf-8"), marker
    except UnicodeDecodeError:
        raise _not_canonical(tree_path, "its %-escapes are not UTF-8") from None


def read_spelling(tree_path: str) -> tuple[str, tuple[Spelling, ...], bool]:
    """The memory path at ``tree_path``, the spelling of each segment, and whether it ends in ``%_``;
    strict, but reading a folded or format 1 spelling whether or not the set of paths calls for it."""
    if not isinstance(tree_path, str) or tree_path == "":
        raise _not_canonical(str(tree_path), "it is empty")
    components = tree_path.split("/")
    texts: list[str] = []  # of each segment
    spelled: list[list[str]] = []  # the components of each segment
    marker: str | None = None
    for index, component in enumerate(components):
        continued = marker == CONTINUATION
        text, marker = _decode_component(component, tree_path)
        last = index == len(components) - 1
        if marker == CONTINUATION and last:
            raise _not_canonical(tree_path, "it ends with the continuation marker %+")
        if marker == FILE_SUFFIX and not last:
            raise _not_canonical(tree_path, "the file marker %_ may only end the file name")
        if continued:
            texts[-1] += text
            spelled[-1].append(component)
        else:
            texts.append(text)
            spelled.append([component])
    has_suffix = marker == FILE_SUFFIX
    memory_path = "/".join(texts)
    try:
        check_memory_path(memory_path)
    except PathEncodingError as exc:
        raise _not_canonical(tree_path, f"it decodes to an invalid memory path ({exc.reason})") from None
    spellings: list[Spelling] = []
    for index, text in enumerate(texts):
        suffixed = has_suffix and index == len(texts) - 1
        found = next((s for s in Spelling if _encode_segment(text, s, suffixed) == spelled[index]), None)
        if found is None:
            canonical = encode_path(memory_path, directory_sibling=has_suffix)
            raise _not_canonical(
                tree_path, f"memsync spells this memory path {escape_for_terminal(canonical)}", canonical
            )
        spellings.append(found)
    return memory_path, tuple(spellings), has_suffix


def decode_path(tree_path: str) -> str:
    """The memory path at ``tree_path``; a spelling no rule makes is refused, naming the right one."""
    return read_spelling(tree_path)[0]


# The push engine spells every path of a tree each cycle, and decode_path checks a spelling by encoding
# it again (about 0.1 ms a path, a third of a cycle over 1,000 memories). Spellings are pure and
# consecutive trees share almost all their paths, so a process-wide cache makes them dictionary
# lookups. Exceptions are not cached.
@functools.lru_cache(maxsize=1 << 16)
def decoded(tree_path: str) -> str:
    return decode_path(tree_path)


@functools.lru_cache(maxsize=1 << 16)
def encoded(memory_path: str, directory_sibling: bool = False, folded: tuple[int, ...] = ()) -> str:
    return encode_path(memory_path, directory_sibling=directory_sibling, folded=folded)


def suggest_tree_path(tree_path: str) -> str | None:
    """What to rename a hand-made file to so memsync stores it under the name typed (``100%.md`` →
    ``100%25.md``); None if that name is no memory path."""
    try:
        return encode_path(tree_path)
    except PathEncodingError:
        return None


def _not_canonical(tree_path: str, why: str, canonical: str | None = None) -> PathEncodingError:
    suggestion = suggest_tree_path(tree_path)
    if suggestion is not None and suggestion not in (tree_path, canonical):
        shown = escape_for_terminal(suggestion)
        why += f"; to store a memory under exactly this name, rename the file to {shown}"
    return PathEncodingError(
        f"working-tree path {escape_for_terminal(tree_path)} is not a memsync path: {why}",
        path=tree_path,
        reason="not_canonical",
        suggestion=suggestion,
    )


# --- commit messages and terminals -------------------------------------------------------------

# git's C escapes: a backslash and a letter.
_C_CHARS, _C_LETTERS = '\a\b\t\n\v\f\r"\\', 'abtnvfr"\\'
_C_ESCAPES = {ch: "\\" + letter for ch, letter in zip(_C_CHARS, _C_LETTERS, strict=True)}
_C_UNESCAPES = dict(zip(_C_LETTERS, _C_CHARS, strict=True))
_TERMINAL_ESCAPES = {ch: escape for ch, escape in _C_ESCAPES.items() if ch != '"'}
# Printable ASCII but '"' and '\\', not starting or ending with a space: never needs quotes.
_PLAIN_ASCII = re.compile(r"[!#-\[\]-~](?:[ !#-\[\]-~]*[!#-\[\]-~])?")
# Inside quotes: an octal byte, another escape (or a dangling backslash), a stray quote, or literals.
_QUOTED_TOKEN = re.compile(r'\\[0-3][0-7]{2}|\\.?|"|[^\\"]+', re.DOTALL)
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def _escape_chars(text: str, escapes: Mapping[str, str], unsafe: Callable[[str], str]) -> str:
    return "".join(
        escapes.get(ch) or (unsafe(ch) if unicodedata.category(ch) in _UNSAFE_CATEGORIES else ch)
        for ch in text
    )


def _octal_bytes(ch: str) -> str:
    return "".join(f"\\{byte:03o}" for byte in ch.encode("utf-8", "surrogatepass"))


def quote_for_message(path: str) -> str:
    """``path`` as it may appear in a commit message, on one line: as is when harmless, else C-quoted
    as git's ``unquote_c_style`` reads it (also when it starts or ends with white space, which a
    trailer parser would strip)."""
    if _PLAIN_ASCII.fullmatch(path):
        return path
    quoted = _escape_chars(path, _C_ESCAPES, _octal_bytes)
    needs_quotes = quoted != path or path == "" or path[0].isspace() or path[-1].isspace()
    return f'"{quoted}"' if needs_quotes else path


def unquote_from_message(text: str) -> str:
    """The inverse of :func:`quote_for_message`; raises ValueError on a malformed quoted string."""
    if not text.startswith('"'):
        return text
    if len(text) < 2 or not text.endswith('"'):
        raise ValueError("unterminated quoted path")
    data = bytearray()
    for token in _QUOTED_TOKEN.findall(text[1:-1]):
        if token == '"':
            raise ValueError("unescaped quote inside a quoted path")
        if token == "\\":
            raise ValueError("dangling backslash in a quoted path")
        if not token.startswith("\\"):
            data.extend(token.encode("utf-8"))
        elif token[1] in _C_UNESCAPES:
            data.extend(_C_UNESCAPES[token[1]].encode("utf-8"))
        elif len(token) == 4:
            data.append(int(token[1:], 8))
        else:
            raise ValueError(f"unknown escape {token} in a quoted path")
    return data.decode("utf-8")


def escape_for_terminal(path: str) -> str:
    """``path`` safe to print: ``\\`` and control, format and separator characters escaped, so a
    hostile path's ESC sequences, bidi overrides and line breaks cannot rewrite the terminal."""
    return _escape_chars(path, _TERMINAL_ESCAPES, lambda ch: ascii(ch)[1:-1])  # \x1b, \u202e, \U000e0001
