"""Three spellings of a memory path: in the git tree, in a commit message, and on a terminal.

**Tree spelling** (``encode_path`` / ``decode_path``). A memory path (canonical relative form,
``notes/a.md``) becomes a working-tree path that git stores, checks out and fsck-verifies without
interpreting it, on every filesystem. The encoding works segment by segment and is a bijection
between memory paths and *canonical* tree paths; decoding is strict and refuses anything encoding
would not produce, so a user file ``100%.md`` is reported (with the suggestion ``100%25.md``), never
guessed at.

1. ``%`` is always written ``%25``; so are ``\\`` (git treats it as a separator when protecting
   NTFS paths) and every control character (C0, DEL, C1): a file name never spans lines or moves
   the terminal cursor. An escape is ``%`` and two upper-case hex digits per UTF-8 byte.
2. A segment that git, libgit2 or ``git fsck`` would treat specially gets its *first character*
   percent-escaped (all of its UTF-8 bytes), so the stored name starts with ``%``, which no special
   name does. A segment is special when, after removing the code points HFS+ ignores and
   case-folding: it starts with ``.git`` (``.git``, ``.GIT``, ``.git.``, ``.git `` and
   ``.gitmodules``/``.gitattributes``/``.gitignore``/``.gitkeep``...), starts with ``.mailmap`` or
   ``.lfsconfig`` (read by ``git log`` and git-lfs), looks like an NTFS 8.3 short name of one of
   those (``gi``, ``ma`` or ``lf`` and up to 4 more characters, ``~`` and a digit: ``git~1``,
   ``gitmod~1``, ``gi7eba~1``, ``maba30~1``), or is ``.``/``..`` (only a
   continuation piece of a long segment can be, see 4).
3. A file whose path is also a directory of another memory (``a`` beside ``a/b``, legal on
   Forward and Cloud) gets the reserved suffix ``%_``: ``a%_`` beside ``a/b``. This depends on the
   set of paths, so :func:`encode_paths` decides it for a whole tree; the suffix is added when the
   directory appears and removed when it disappears, so the tree is always a pure function of the
   set of memory paths.
4. A segment whose spelling would exceed 255 bytes (Linux ``NAME_MAX``; Anthropic segments may be
   up to 1,023 bytes, and escaping can push a 255-byte Forward segment over) is cut, at character
   boundaries, into pieces of at most 253 bytes, each but the last followed by the reserved marker
   ``%+`` and a ``/``: ``<253 bytes>%+/<rest>``. Each piece is escaped as a segment of its own (rule
   2 applies to each piece). Decoding joins the pieces again. Nothing is hashed or refused: every
   path the API accepts has a spelling, at most about 3,100 bytes long.

5. Two or more entries of one folder (files or folders) whose names :func:`~memsync.mirror.folding.fold`
   alike (``README.md`` and ``readme.md``, NFC ``é`` and NFD ``é``) would be one file on a case- or
   normalization-insensitive filesystem. Each of them that is not its own fold is spelled *folded*:
   every character but ASCII lower-case letters, digits and a few punctuation marks escaped
   (``%52%45%41%44%4D%45.md``); the one that is its own fold keeps its plain spelling, so a newcomer
   that folds like an existing lower-case name renames nothing. Like rule 3, it depends on the set
   of paths (:func:`encode_paths`, :func:`folded_segments`).
6. Names Windows cannot hold: ``<>:"|?*`` are escaped wherever they appear (as rule 1), a name's
   last character when it is a dot or a space, and the first character of a device name (CON, PRN,
   AUX, NUL, COM1-9, LPT1-9, with any extension).

A tree spelled by rule 5 or 6 is written as Memsync-Format 2; mirrors written before those rules
spelled such names as rules 1-4 do (:attr:`Spelling.FORMAT1`), which decoding still reads until the
next pull respells them (:func:`memsync.mirror.rewrite.respell_history`).

``%+`` and ``%_`` cannot come from rule 1 (the characters after ``%`` are not hex digits), so no
memory segment can forge them, and no tree path ending in either is ever both a file and a directory.

**Message spelling** (``quote_for_message``): git's C-quoting, applied when a path needs it, so a path
in a commit message or trailer can never span lines or forge a trailer.

**Terminal spelling** (``escape_for_terminal``): control, format and separator characters as
backslash escapes, for error messages and command output.
"""

from __future__ import annotations

import enum
import re
import unicodedata
from collections.abc import Iterable, Mapping

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
    """How one segment is spelled. PLAIN is the rule for every name; FOLDED is rule 5's for a name
    that folds like a sibling's; FORMAT1 is PLAIN without rule 6, as mirrors of Memsync-Format 1
    spelled names: still read, never written."""

    PLAIN = "plain"
    FOLDED = "folded"
    FORMAT1 = "format1"


# Rule 1: escaped wherever they appear: the escape character itself, backslash, and controls; and,
# rule 6, the characters Windows refuses in a name.
_ESCAPED_FORMAT1 = re.compile(r"[%\\\x00-\x1f\x7f-\x9f]")
_ESCAPED = re.compile(r'[%\\\x00-\x1f\x7f-\x9f<>:"|?*]')
# Rule 5: a folded spelling keeps only characters every fold leaves as they are.
_KEPT_FOLDED = re.compile(r"[ !#$&'()+,\-./0-9;=@\[\]^_`a-z{}~]")
_ALWAYS_ESCAPED = {Spelling.PLAIN: _ESCAPED, Spelling.FORMAT1: _ESCAPED_FORMAT1}
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


def _is_special(piece: str, start: int = 0, end: int | None = None) -> bool:
    """Would git, libgit2 or fsck treat a name ``piece[start:end]`` specially?"""
    stop = len(piece) if end is None else end
    if stop - start <= 2 and piece[start:stop] in (".", ".."):
        return True
    # Only the first few significant characters decide: look no further than that.
    significant = []
    for index in range(start, stop):
        ch = piece[index]
        if ch in HFS_IGNORABLE:
            continue
        significant.append(ch)
        if len(significant) >= 12:
            break
    folded = "".join(significant).casefold()
    return folded.startswith(_SPECIAL_PREFIXES) or _NTFS_SHORT_NAME.match(folded) is not None


def _is_device(piece: str) -> bool:
    """Is ``piece`` a name Windows keeps for a device (rule 6), with or without an extension?"""
    return piece.split(".", 1)[0].rstrip(" ").upper() in _DEVICES


def _escaped(ch: str, spelling: Spelling) -> bool:
    if spelling is Spelling.FOLDED:
        return _KEPT_FOLDED.match(ch) is None
    return _ALWAYS_ESCAPED[spelling].match(ch) is not None


def _first_escaped(piece: str, start: int, end: int, spelling: Spelling) -> bool:
    """Rules 2 and 6: does the piece ``piece[start:end]`` get its first character escaped?"""
    if _is_special(piece, start, end):
        return True
    return spelling is not Spelling.FORMAT1 and _is_device(piece[start:end])


def _last_escaped(piece: str, end: int, final: bool, spelling: Spelling) -> bool:
    """Rule 6: a name's last character, a dot or a space, is escaped (Windows drops it)."""
    return final and spelling is not Spelling.FORMAT1 and piece[end - 1] in ". "


def _escape_piece(segment: str, start: int, end: int, final: bool, spelling: Spelling) -> str:
    out = []
    for index in range(start, end):
        ch = segment[index]
        if (
            _escaped(ch, spelling)
            or (index == start and _first_escaped(segment, start, end, spelling))
            or (index == end - 1 and _last_escaped(segment, end, final, spelling))
        ):
            out.append(_pct(ch))
        else:
            out.append(ch)
    return "".join(out)


def _encode_segment(segment: str, last_limit: int, spelling: Spelling = Spelling.PLAIN) -> list[str]:
    """The tree components of one memory segment; the last one at most ``last_limit`` bytes."""
    whole = _escape_piece(segment, 0, len(segment), True, spelling)
    if len(whole.encode("utf-8")) <= last_limit:
        return [whole]
    # Bytes each character takes once escaped by its own rule; a piece's first character (rules 2
    # and 6) and a final piece's last (rule 6) may take their %-escape instead, which only ever
    # makes a piece longer as it grows.
    sizes = [len(ch.encode("utf-8")) * (3 if _escaped(ch, spelling) else 1) for ch in segment]

    def length(start: int, end: int, total: int, final: bool) -> int:
        forced = set()
        if _first_escaped(segment, start, end, spelling):
            forced.add(start)
        if _last_escaped(segment, end, final, spelling):
            forced.add(end - 1)
        return total + sum(2 * sizes[i] for i in forced if not _escaped(segment[i], spelling))

    components: list[str] = []
    start = 0
    while True:
        if length(start, len(segment), sum(sizes[start:]), True) <= last_limit:
            components.append(_escape_piece(segment, start, len(segment), True, spelling))
            return components
        end, total = start + 1, sizes[start]
        while end < len(segment) and length(start, end + 1, total + sizes[end], False) <= _PIECE_MAX:
            total += sizes[end]
            end += 1
        components.append(_escape_piece(segment, start, end, False, spelling) + CONTINUATION)
        start = end


def check_memory_path(memory_path: object) -> str:
    """Validate a canonical relative memory path as the encoding needs it; return it.

    This is looser than any one dialect (it accepts every path Forward, Cloud or Anthropic may hand
    us, the latter converted to relative) but refuses what could escape the repository.
    """
    if not isinstance(memory_path, str):
        raise PathEncodingError("a memory path must be a string", path=repr(memory_path), reason="type")
    problem = _memory_path_problem(memory_path)
    if problem is None:
        return memory_path
    reason, why = problem
    raise PathEncodingError(
        f"memory path {escape_for_terminal(memory_path)} cannot be stored: {why}",
        path=memory_path,
        reason=reason,
    )


def _memory_path_problem(memory_path: str) -> tuple[str, str] | None:
    if memory_path == "":
        return "empty", "it is empty"
    if memory_path.startswith("/"):
        return "absolute", "it is absolute; the mirror takes the relative form (notes/a.md)"
    if "\x00" in memory_path:
        return "nul", "it contains NUL"
    try:
        size = len(memory_path.encode("utf-8"))
    except UnicodeEncodeError:
        return "utf8", "it is not valid UTF-8 (lone surrogate)"
    if size > MAX_MEMORY_PATH_BYTES:
        return "too_long", f"it is {size} bytes of UTF-8; at most {MAX_MEMORY_PATH_BYTES}"
    for index, segment in enumerate(memory_path.split("/"), start=1):
        if segment in ("", ".", ".."):
            return "bad_segment", f"segment {index} is empty, '.' or '..'"
    return None


def encode_path(
    memory_path: str,
    *,
    directory_sibling: bool = False,
    folded: Iterable[int] = (),
    spelling: Spelling = Spelling.PLAIN,
) -> str:
    """The working-tree path of the memory file at ``memory_path``.

    ``directory_sibling`` says that ``memory_path`` is also a directory in the same tree (another
    memory lives below it); the file then carries the reserved suffix ``%_``. ``folded`` are the
    indexes of the segments that fold like a sibling's and are not their own fold (rule 5). Use
    :func:`encode_paths` to decide both for a set of paths. Raises :class:`PathEncodingError` for a
    path no dialect accepts (empty, absolute, ``..``, NUL, over 1,024 bytes).
    """
    segments = check_memory_path(memory_path).split("/")
    folded = frozenset(folded)

    def spelled(index: int) -> Spelling:
        return Spelling.FOLDED if index in folded else spelling

    components: list[str] = []
    for index, segment in enumerate(segments[:-1]):
        components.extend(_encode_segment(segment, NAME_MAX, spelled(index)))
    last_index = len(segments) - 1
    if directory_sibling:
        last = _encode_segment(segments[-1], _PIECE_MAX, spelled(last_index))
        last[-1] += FILE_SUFFIX
    else:
        last = _encode_segment(segments[-1], NAME_MAX, spelled(last_index))
    components.extend(last)
    return "/".join(components)


def directory_prefixes(memory_path: str) -> list[str]:
    """The memory paths of the directories that contain ``memory_path`` (``a``, ``a/b`` for ``a/b/c``)."""
    segments = memory_path.split("/")
    return ["/".join(segments[:i]) for i in range(1, len(segments))]


def _parent_and_name(entry: str) -> tuple[str, str]:
    parent, _, name = entry.rpartition("/")
    return parent, name


def folded_segments(memory_paths: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """Rule 5 for a set of paths: ``{memory_path: indexes of its segments spelled folded}``, for the
    paths that have any. A segment is spelled folded when another entry of its folder (a file or a
    folder) has a different name with the same :func:`~memsync.mirror.folding.fold`, and the segment
    is not its own fold."""
    paths = list(memory_paths)
    groups: dict[tuple[str, str], set[str]] = {}
    entries = {prefix for path in paths for prefix in directory_prefixes(path)} | set(paths)
    for entry in entries:
        parent, name = _parent_and_name(entry)
        groups.setdefault((parent, fold(name)), set()).add(name)
    colliding = {key for key, names in groups.items() if len(names) > 1}
    if not colliding:
        return {}
    result: dict[str, tuple[int, ...]] = {}
    for path in paths:
        segments = path.split("/")
        indexes = []
        for index, name in enumerate(segments):
            folded_name = fold(name)
            if name != folded_name and ("/".join(segments[:index]), folded_name) in colliding:
                indexes.append(index)
        if indexes:
            result[path] = tuple(indexes)
    return result


def encode_paths(memory_paths: Iterable[str]) -> dict[str, str]:
    """The working-tree path of every memory path in a tree: ``{memory_path: tree_path}``.

    A file that is also a directory of another path in the set gets the ``%_`` suffix (rule 3); a
    segment that folds like a sibling's is spelled folded (rule 5).
    """
    paths = list(memory_paths)
    directories = {prefix for path in paths for prefix in directory_prefixes(path)}
    folded = folded_segments(paths)
    return {
        path: encode_path(path, directory_sibling=path in directories, folded=folded.get(path, ()))
        for path in paths
    }


def segment_spellings(segment: str, *, last: bool) -> list[tuple[str, ...]]:
    """Every way a tree may spell one memory segment (its components), the usual one first: as
    rule 5 may or may not fold it, as Memsync-Format 1 did, and, for a file (``last``), with and
    without the ``%_`` suffix. For finding a memory's file on disk whatever its siblings are."""
    options: list[tuple[str, ...]] = []
    for spelling in (Spelling.PLAIN, Spelling.FOLDED, Spelling.FORMAT1):
        options.append(tuple(_encode_segment(segment, NAME_MAX, spelling)))
        if last:
            suffixed = _encode_segment(segment, _PIECE_MAX, spelling)
            suffixed[-1] += FILE_SUFFIX
            options.append(tuple(suffixed))
    return list(dict.fromkeys(options))


def _decode_component(component: str, tree_path: str) -> tuple[str, str | None]:
    """The text of one tree component and its trailing marker (``%+``, ``%_`` or None)."""
    data = bytearray()
    marker: str | None = None
    for match in _COMPONENT_TOKEN.finditer(component):
        token = match.group()
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
    """The memory path at ``tree_path``, how each of its segments is spelled, and whether it has
    the ``%_`` suffix; strict: :class:`PathEncodingError` for anything no rule spells this way.

    A segment spelled folded is read whether or not a sibling folds like it (the set decides that,
    :func:`encode_paths`); so is a Memsync-Format 1 spelling of a name rule 6 now escapes.
    """
    if not isinstance(tree_path, str) or tree_path == "":
        raise _not_canonical(str(tree_path), "it is empty")
    components = tree_path.split("/")
    segments: list[tuple[str, list[str]]] = []
    pending_text = ""
    pending_components: list[str] = []
    has_suffix = False
    for index, component in enumerate(components):
        text, marker = _decode_component(component, tree_path)
        last = index == len(components) - 1
        if marker == CONTINUATION:
            if last:
                raise _not_canonical(tree_path, "it ends with the continuation marker %+")
            pending_text += text
            pending_components.append(component)
            continue
        if marker == FILE_SUFFIX:
            if not last:
                raise _not_canonical(tree_path, "the file marker %_ may only end the file name")
            has_suffix = True
            component = component[: -len(FILE_SUFFIX)]
        segments.append((pending_text + text, [*pending_components, component]))
        pending_text, pending_components = "", []
    memory_path = "/".join(text for text, _ in segments)
    try:
        check_memory_path(memory_path)
    except PathEncodingError as exc:
        raise _not_canonical(tree_path, f"it decodes to an invalid memory path ({exc.reason})") from None
    spellings: list[Spelling] = []
    for index, (text, spelled) in enumerate(segments):
        limit = _PIECE_MAX if has_suffix and index == len(segments) - 1 else NAME_MAX
        found = next((s for s in Spelling if _encode_segment(text, limit, s) == spelled), None)
        if found is None:
            canonical = encode_path(memory_path, directory_sibling=has_suffix)
            raise _not_canonical(
                tree_path, f"memsync spells this memory path {escape_for_terminal(canonical)}", canonical
            )
        spellings.append(found)
    return memory_path, tuple(spellings), has_suffix


def decode_path(tree_path: str) -> str:
    """The memory path stored at working-tree path ``tree_path``; strict.

    Refuses (with :class:`PathEncodingError` naming the path and, when it can, the spelling that
    would be accepted) any path that no spelling rule produces: a stray ``%``, lower-case or needless
    escapes, a special name left unescaped, a misplaced marker.
    """
    return read_spelling(tree_path)[0]


def decode_paths(tree_paths: Iterable[str]) -> dict[str, str]:
    """The memory path of every file of a tree: ``{tree_path: memory_path}``; strict.

    Besides :func:`decode_path`'s checks, refuses two files that decode to the same memory path
    (``a`` and ``a%_``), which only a hand-made file can cause.
    """
    decoded: dict[str, str] = {}
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
        decoded[tree_path] = memory_path
    return decoded


def suggest_tree_path(tree_path: str) -> str | None:
    """The canonical spelling of a hand-made working-tree name, read literally; None if it has none.

    ``100%.md`` → ``100%25.md``, ``.gitignore`` → ``%2Egitignore``: what the user should rename a
    file to so that memsync stores it under the name they typed.
    """
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

_C_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\v": "\\v",
    "\f": "\\f",
    "\r": "\\r",
    '"': '\\"',
    "\\": "\\\\",
}
# Printable ASCII but '"' and '\\', not starting or ending with a space: never needs quotes.
_PLAIN_ASCII = re.compile(r"[!#-\[\]-~](?:[ !#-\[\]-~]*[!#-\[\]-~])?")
_C_UNESCAPES = {value[1]: key for key, value in _C_ESCAPES.items()}
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def _is_unsafe_char(ch: str) -> bool:
    return unicodedata.category(ch) in _UNSAFE_CATEGORIES


def quote_for_message(path: str) -> str:
    """``path`` as it may appear in a commit message: as is when harmless, else C-quoted like git.

    Quoted when it contains ``"``, ``\\``, a control, format or line/paragraph separator character,
    or starts or ends with white space (a trailer parser would strip it). Inside quotes, git's
    escapes (``\\n``, ``\\t``, ``\\"``, ``\\\\``...) and ``\\ooo`` octal bytes of UTF-8, as git's
    ``unquote_c_style`` reads them; other characters stay literal. The result is one line.
    """
    if _PLAIN_ASCII.fullmatch(path):
        return path
    needs_quotes = (
        path == ""
        or path[0].isspace()
        or path[-1].isspace()
        or any(ch in _C_ESCAPES or _is_unsafe_char(ch) for ch in path)
    )
    if not needs_quotes:
        return path
    out = ['"']
    for ch in path:
        if ch in _C_ESCAPES:
            out.append(_C_ESCAPES[ch])
        elif _is_unsafe_char(ch):
            out.append("".join(f"\\{byte:03o}" for byte in ch.encode("utf-8", "surrogatepass")))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def unquote_from_message(text: str) -> str:
    """The inverse of :func:`quote_for_message`; raises ValueError on a malformed quoted string."""
    if not text.startswith('"'):
        return text
    if len(text) < 2 or not text.endswith('"'):
        raise ValueError("unterminated quoted path")
    body = text[1:-1]
    data = bytearray()
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == '"':
            raise ValueError("unescaped quote inside a quoted path")
        if ch != "\\":
            data.extend(ch.encode("utf-8"))
            i += 1
            continue
        if i + 1 >= len(body):
            raise ValueError("dangling backslash in a quoted path")
        nxt = body[i + 1]
        if nxt in _C_UNESCAPES:
            data.extend(_C_UNESCAPES[nxt].encode("utf-8"))
            i += 2
        elif re.fullmatch(r"[0-3][0-7]{2}", body[i + 1 : i + 4]):
            data.append(int(body[i + 1 : i + 4], 8))
            i += 4
        else:
            raise ValueError(f"unknown escape \\{nxt} in a quoted path")
    return data.decode("utf-8")


def _code_point_escape(code: int) -> str:
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def escape_for_terminal(path: str) -> str:
    """``path`` safe to print: control, format and separator characters (and ``\\``) escaped.

    ESC sequences, bidi overrides and line breaks in a hostile path cannot rewrite the terminal or
    forge output lines; ``\\x1b``, ``\\u202e``, ``\\n`` show what is there.
    """
    out = []
    for ch in path:
        if ch == "\\":
            out.append("\\\\")
        elif ch in _C_ESCAPES and ch != '"':
            out.append(_C_ESCAPES[ch])
        elif _is_unsafe_char(ch):
            out.append(_code_point_escape(ord(ch)))
        else:
            out.append(ch)
    return "".join(out)


def tree_layout_problems(tree_paths: Mapping[str, str]) -> list[str]:
    """Tree paths of ``{tree_path: memory_path}`` that the tree's set of paths spells otherwise.

    A file carries ``%_`` exactly when its memory path is also a directory, and a segment is spelled
    folded exactly when a sibling folds like it; a hand-made rename, or a file the user added beside
    one whose name folds like it, can break that. Reported, not fatal: the mapping stays lossless
    either way, and the next checkout of the tree spells them as the rules say.
    """
    target = encode_paths(tree_paths.values())
    return [tree_path for tree_path, memory_path in tree_paths.items() if target[memory_path] != tree_path]
