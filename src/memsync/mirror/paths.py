"""Three spellings of a memory path: in the git tree, in a commit message, and on a terminal.

**Tree spelling** (``encode_path`` / ``decode_path``): a memory path (``notes/a.md``) becomes a
working-tree path that git stores, checks out and fsck-verifies on every filesystem without
interpreting it. Encoding is a bijection between memory paths and *canonical* tree paths; decoding is
strict, so a user file ``100%.md`` is reported (suggesting ``100%25.md``), never guessed at. Per segment:

1. ``%``, ``\\`` (a separator to git's NTFS protection) and control characters (C0, DEL, C1) are
   escaped: ``%`` and two upper-case hex digits per UTF-8 byte.
2. A segment git, libgit2 or ``git fsck`` would treat specially gets its first character escaped.
   Special, after dropping the code points HFS+ ignores and case-folding: starting with ``.git``,
   ``.mailmap`` or ``.lfsconfig``; an NTFS 8.3 short name of one (``gi``, ``ma`` or ``lf``, up to 4
   more characters, ``~`` and a digit: ``git~1``, ``gi7eba~1``); ``.`` or ``..`` (a piece of rule 4).
3. A file whose path is also another memory's directory (``a`` beside ``a/b``) gets the suffix ``%_``.
4. A segment whose spelling would exceed 255 bytes (``NAME_MAX``; Anthropic allows 1,023, and
   escaping grows a name) is cut at character boundaries into pieces of at most 253 bytes, each but
   the last ending in the marker ``%+``, each escaped as a segment. Nothing is hashed or refused.
5. Entries of one folder whose names :func:`~memsync.mirror.folding.fold` alike (``README.md`` and
   ``readme.md``; NFC and NFD ``é``) would be one file on a case- or normalization-insensitive disk.
   Each that is not its own fold is spelled *folded*, all but ASCII lower-case letters, digits and
   some punctuation escaped (``%52%45%41%44%4D%45.md``); its own fold stays plain, so a newcomer
   folding like an existing lower-case name renames nothing.
6. What Windows cannot hold: ``<>:"|?*`` anywhere (as rule 1), a last character that is a dot or a
   space, and the first character of a device name (CON, PRN, AUX, NUL, COM1-9, LPT1-9, any extension).

Rules 3 and 5 depend on the set of paths (:func:`encode_paths`), so a tree is a pure function of its
set of memory paths. Rules 5 and 6 came with Memsync-Format 2; decoding still reads the older spelling
(:attr:`Spelling.FORMAT1`) until a pull respells it (:mod:`~memsync.mirror.rewrite`). No memory
segment can forge ``%+`` or ``%_`` (rule 1 puts hex digits after a ``%``).

**Message spelling** (``quote_for_message``): git's C-quoting where needed, so a path in a commit
message or trailer can never span lines or forge a trailer.

**Terminal spelling** (``escape_for_terminal``): control, format and separator characters as
backslash escapes, for error messages and command output.
"""

from __future__ import annotations

import enum
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from itertools import islice

from memsync.mirror.errors import PathEncodingError
from memsync.mirror.folding import fold

MAX_MEMORY_PATH_BYTES = 1024
NAME_MAX = 255
# The longest working-tree path memsync writes: macOS refuses longer ones (PATH_MAX, 1,024 bytes), and
# git for Windows checks them out with core.longpaths (which mirrors set).
MAX_TREE_PATH_BYTES = 1024
_PIECE_MAX = NAME_MAX - 2  # room for a two-byte marker (%+ or %_)
CONTINUATION = "%+"
FILE_SUFFIX = "%_"

# The code points that HFS+ ignores when comparing names; git's is_hfs_dotgit skips exactly these
# (verified against git 2.39's fsck in tests/mirror/test_paths.py).
HFS_IGNORABLE = frozenset(
    "\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u206a\u206b\u206c\u206d\u206e\u206f\ufeff"
)


class Spelling(enum.Enum):
    """How one segment is spelled: PLAIN, FOLDED (rule 5), or FORMAT1 (PLAIN without rule 6: read,
    never written). Readers try them in this order."""

    PLAIN = "plain"
    FOLDED = "folded"
    FORMAT1 = "format1"


# Rules 1 and 6: escaped wherever they appear (Memsync-Format 1 had no rule 6).
_ALWAYS_ESCAPED = {
    Spelling.PLAIN: re.compile(r'[%\\\x00-\x1f\x7f-\x9f<>:"|?*]'),
    Spelling.FORMAT1: re.compile(r"[%\\\x00-\x1f\x7f-\x9f]"),
}
# Rule 5: a folded spelling keeps only characters every fold leaves as they are.
_KEPT_FOLDED = re.compile(r"[ !#$&'()+,\-./0-9;=@\[\]^_`a-z{}~]")
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


def _escaped(ch: str, spelling: Spelling) -> bool:
    if spelling is Spelling.FOLDED:
        return _KEPT_FOLDED.match(ch) is None
    return _ALWAYS_ESCAPED[spelling].match(ch) is not None


def _first_escaped(piece: str, spelling: Spelling) -> bool:
    """Rules 2 and 6: does ``piece`` get its first character escaped?"""
    if piece in (".", ".."):
        return True
    # Only the first few significant characters decide: look no further than that.
    folded = "".join(islice((ch for ch in piece if ch not in HFS_IGNORABLE), 12)).casefold()
    if folded.startswith(_SPECIAL_PREFIXES) or _NTFS_SHORT_NAME.match(folded):
        return True
    return spelling is not Spelling.FORMAT1 and piece.split(".", 1)[0].rstrip(" ").upper() in _DEVICES


def _last_escaped(piece: str, final: bool, spelling: Spelling) -> bool:
    """Rule 6: a name's last character, a dot or a space, is escaped (Windows drops it)."""
    return final and spelling is not Spelling.FORMAT1 and piece[-1] in ". "


def _escape_piece(piece: str, final: bool, spelling: Spelling) -> str:
    first, last = _first_escaped(piece, spelling), _last_escaped(piece, final, spelling)
    end = len(piece) - 1
    return "".join(
        _pct(ch) if _escaped(ch, spelling) or (i == 0 and first) or (i == end and last) else ch
        for i, ch in enumerate(piece)
    )


def _encode_segment(segment: str, spelling: Spelling, suffixed: bool = False) -> list[str]:
    """The tree components of one memory segment (rule 4); with ``suffixed``, the last ends in ``%_``."""
    last_limit = _PIECE_MAX if suffixed else NAME_MAX
    components = [_escape_piece(segment, True, spelling)]
    if len(components[0].encode("utf-8")) > last_limit:
        # Bytes each character takes once escaped by its own rule; a piece's first character (rules 2
        # and 6) and a final piece's last (rule 6) may take their %-escape instead, which only ever
        # makes a piece longer as it grows.
        sizes = [len(ch.encode("utf-8")) * (3 if _escaped(ch, spelling) else 1) for ch in segment]

        def length(start: int, end: int, total: int, final: bool) -> int:
            piece = segment[start:end]
            forced = set()
            if _first_escaped(piece, spelling):
                forced.add(start)
            if _last_escaped(piece, final, spelling):
                forced.add(end - 1)
            return total + sum(2 * sizes[i] for i in forced if not _escaped(segment[i], spelling))

        components, start = [], 0
        while length(start, len(segment), sum(sizes[start:]), True) > last_limit:
            end, total = start + 1, sizes[start]
            while end < len(segment) and length(start, end + 1, total + sizes[end], False) <= _PIECE_MAX:
                total += sizes[end]
                end += 1
            components.append(_escape_piece(segment[start:end], False, spelling) + CONTINUATION)
            start = end
        components.append(_escape_piece(segment[start:], True, spelling))
    if suffixed:
        components[-1] += FILE_SUFFIX
    return components


def check_memory_path(memory_path: object) -> str:
    """Return ``memory_path`` if the encoding can store it: looser than any one dialect (it accepts
    every path Forward, Cloud or Anthropic may hand us, the latter made relative), but refusing what
    could escape the repository."""
    if not isinstance(memory_path, str):
        raise PathEncodingError("a memory path must be a string", path=repr(memory_path), reason="type")
    path: str = memory_path

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
    """The working-tree path of the memory file at ``memory_path``.

    ``directory_sibling``: the path is also a directory in the tree (rule 3); ``folded``: the indexes
    of the segments spelled folded (rule 5). :func:`encode_paths` decides both for a set of paths.
    Raises :class:`PathEncodingError` for a path :func:`check_memory_path` refuses.
    """
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
    """Rule 5 for a set of paths: ``{memory_path: indexes of its segments spelled folded}``, for the
    paths that have any: a segment whose folder has another entry (file or folder) of the same fold,
    and that is not its own fold."""
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
    """The working-tree path of every memory path in a tree (rules 3 and 5): ``{memory_path: tree_path}``."""
    paths = list(memory_paths)
    directories = {prefix for path in paths for prefix in directory_prefixes(path)}
    folded = folded_segments(paths)
    return {
        path: encode_path(path, directory_sibling=path in directories, folded=folded.get(path, ()))
        for path in paths
    }


def segment_spellings(segment: str, *, last: bool) -> list[tuple[str, ...]]:
    """Every way a tree may spell one memory segment, the usual one first (each :class:`Spelling`,
    and for a file, ``last``, with and without ``%_``): to find a memory's file whatever its siblings."""
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
    """The memory path at ``tree_path``, the spelling of each segment, and whether it ends in ``%_``.

    Strict (:class:`PathEncodingError` for anything no rule spells this way), but a folded or
    Memsync-Format 1 spelling is read whether or not the set of paths calls for it.
    """
    if not isinstance(tree_path, str) or tree_path == "":
        raise _not_canonical(str(tree_path), "it is empty")
    components = tree_path.split("/")
    segments: list[tuple[str, list[str]]] = []  # (text, its components)
    pending_text = ""
    pending_components: list[str] = []
    has_suffix = False
    for index, component in enumerate(components):
        text, marker = _decode_component(component, tree_path)
        last = index == len(components) - 1
        pending_text += text
        pending_components.append(component)
        if marker == CONTINUATION:
            if last:
                raise _not_canonical(tree_path, "it ends with the continuation marker %+")
            continue
        if marker == FILE_SUFFIX:
            if not last:
                raise _not_canonical(tree_path, "the file marker %_ may only end the file name")
            has_suffix = True
        segments.append((pending_text, pending_components))
        pending_text, pending_components = "", []
    memory_path = "/".join(text for text, _ in segments)
    try:
        check_memory_path(memory_path)
    except PathEncodingError as exc:
        raise _not_canonical(tree_path, f"it decodes to an invalid memory path ({exc.reason})") from None
    spellings: list[Spelling] = []
    for index, (text, spelled) in enumerate(segments):
        suffixed = has_suffix and index == len(segments) - 1
        found = next((s for s in Spelling if _encode_segment(text, s, suffixed) == spelled), None)
        if found is None:
            canonical = encode_path(memory_path, directory_sibling=has_suffix)
            raise _not_canonical(
                tree_path, f"memsync spells this memory path {escape_for_terminal(canonical)}", canonical
            )
        spellings.append(found)
    return memory_path, tuple(spellings), has_suffix


def decode_path(tree_path: str) -> str:
    """The memory path at ``tree_path``; strict: a stray ``%``, lower-case or needless escapes, a
    special name left unescaped or a misplaced marker is refused, naming the right spelling if it can."""
    return read_spelling(tree_path)[0]


def decode_paths(tree_paths: Iterable[str]) -> dict[str, str]:
    """``{tree_path: memory_path}`` of a tree's files; strict, and refusing two files of one memory
    path (``a`` and ``a%_``, which only a hand-made file can cause)."""
    seen: dict[str, str] = {}
    for tree_path in tree_paths:
        memory_path = decode_path(tree_path)
        other = seen.get(memory_path)
        if other is not None:
            raise PathEncodingError(
                f"{escape_for_terminal(other)} and {escape_for_terminal(tree_path)} are the same "
                f"memory {escape_for_terminal(memory_path)}; keep one of them",
                path=tree_path,
                reason="duplicate",
            )
        seen[memory_path] = tree_path
    return {tree_path: memory_path for memory_path, tree_path in seen.items()}


def suggest_tree_path(tree_path: str) -> str | None:
    """What to rename a hand-made file to so memsync stores it under the name typed (``100%.md`` →
    ``100%25.md``, ``.gitignore`` → ``%2Egitignore``); None if that name is no memory path."""
    try:
        return encode_path(tree_path)
    except PathEncodingError:
        return None


def _not_canonical(tree_path: str, why: str, canonical: str | None = None) -> PathEncodingError:
    suggestion = suggest_tree_path(tree_path) if tree_path else None
    hint = ""
    if suggestion is not None and suggestion not in (tree_path, canonical):
        hint = "; to store a memory under exactly this name, rename the file to " + escape_for_terminal(
            suggestion
        )
    return PathEncodingError(
        f"working-tree path {escape_for_terminal(tree_path)} is not a memsync path: {why}{hint}",
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
    """``text`` with the characters ``escapes`` names replaced, and each other control, format or
    separator character spelled by ``unsafe``."""
    return "".join(
        escapes.get(ch) or (unsafe(ch) if unicodedata.category(ch) in _UNSAFE_CATEGORIES else ch)
        for ch in text
    )


def _octal_bytes(ch: str) -> str:
    return "".join(f"\\{byte:03o}" for byte in ch.encode("utf-8", "surrogatepass"))


def _code_point(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def quote_for_message(path: str) -> str:
    """``path`` as it may appear in a commit message: as is when harmless, else C-quoted like git.

    Quoted when it is empty, contains ``"``, ``\\`` or a control, format or separator character, or
    starts or ends with white space (a trailer parser would strip it); inside, git's escapes and
    ``\\ooo`` octal UTF-8 bytes, as git's ``unquote_c_style`` reads them. The result is one line.
    """
    if _PLAIN_ASCII.fullmatch(path):
        return path
    quoted = _escape_chars(path, _C_ESCAPES, _octal_bytes)
    if quoted != path or path == "" or path[0].isspace() or path[-1].isspace():
        return f'"{quoted}"'
    return path


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
    """``path`` safe to print: ``\\`` and control, format and separator characters escaped.

    ESC sequences, bidi overrides and line breaks in a hostile path cannot rewrite the terminal or
    forge output lines; ``\\x1b``, ``\\u202e``, ``\\n`` show what is there.
    """
    return _escape_chars(path, _TERMINAL_ESCAPES, _code_point)


def tree_layout_problems(tree_paths: Mapping[str, str]) -> list[str]:
    """Tree paths of ``{tree_path: memory_path}`` that the set of paths spells otherwise (a ``%_``
    or a folded segment that rules 3 and 5 no longer call for, or now do: a hand-made rename or
    addition). Reported, not fatal: the mapping stays lossless, and the next checkout respells them.
    """
    target = encode_paths(tree_paths.values())
    return [tree_path for tree_path, memory_path in tree_paths.items() if target[memory_path] != tree_path]
