"""memsync's own name fold: when two names may be one file on a case- or normalization-insensitive disk.

APFS and HFS+ (macOS) compare names case-insensitively and, APFS and HFS+ both, without regard to
Unicode normalization; NTFS (Windows) and exFAT case-insensitively. Two memories whose names such a
filesystem takes for one must get distinct spellings in the mirror (:mod:`memsync.mirror.paths`,
rule 5). The spelling decides commit ids, so the fold that finds those names must never change:

    fold(name) = each code point mapped to the canonical decomposition of its full case folding
                 (NFD(casefold(NFD(c)))), then combining marks put in canonical order

computed from the tables of **Unicode 14.0.0**, pinned in ``folding-unicode-14.0.0.json`` beside this
module, never from the running Python's ``unicodedata``: Python 3.12 ships Unicode 15.0, and a newer
table folds a few more names together, which would respell them and change commit ids. The fold is a
little coarser than any one filesystem's (it identifies everything APFS or NTFS does, and some pairs
only one of them does), which costs at most a spelling that escapes more than it had to.

Hangul syllables decompose by the fixed arithmetic of the Unicode standard (chapter 3.12), so the
table leaves their 11,172 code points out. :func:`build_table` makes the table from ``unicodedata``;
tests check the shipped file against it on a Python whose Unicode version is 14.0.0.
"""

from __future__ import annotations

import functools
import json
import unicodedata
from importlib import resources
from typing import Any

UNICODE_VERSION = "14.0.0"
TABLE_FILE = f"folding-unicode-{UNICODE_VERSION}.json"

_HANGUL_FIRST, _HANGUL_LAST = 0xAC00, 0xD7A3
_L_BASE, _V_BASE, _T_BASE = 0x1100, 0x1161, 0x11A7
_V_COUNT, _T_COUNT = 21, 28


def _hangul(code: int) -> str:
    index = code - _HANGUL_FIRST
    lead, rest = divmod(index, _V_COUNT * _T_COUNT)
    vowel, trail = divmod(rest, _T_COUNT)
    out = chr(_L_BASE + lead) + chr(_V_BASE + vowel)
    return out + chr(_T_BASE + trail) if trail else out


def build_table() -> dict[str, Any]:
    """The fold table from the running Python's ``unicodedata`` (shipped for Unicode 14.0.0 only)."""
    fold: dict[str, str] = {}
    classes: dict[str, int] = {}
    for code in range(0x110000):
        if 0xD800 <= code <= 0xDFFF or _HANGUL_FIRST <= code <= _HANGUL_LAST:
            continue
        ch = chr(code)
        mapped = unicodedata.normalize("NFD", unicodedata.normalize("NFD", ch).casefold())
        if mapped != ch:
            fold[str(code)] = mapped
        combining = unicodedata.combining(ch)
        if combining:
            classes[str(code)] = combining
    return {"unicode": unicodedata.unidata_version, "fold": fold, "combining": classes}


@functools.cache
def _table() -> tuple[dict[int, str], dict[int, int]]:
    raw = json.loads(resources.files(__package__).joinpath(TABLE_FILE).read_text(encoding="utf-8"))
    if raw.get("unicode") != UNICODE_VERSION:  # a packaging mistake, never a user's
        raise RuntimeError(f"{TABLE_FILE} is not the Unicode {UNICODE_VERSION} fold table")
    fold = {int(code): text for code, text in raw["fold"].items()}
    classes = {int(code): value for code, value in raw["combining"].items()}
    return fold, classes


@functools.lru_cache(maxsize=1 << 14)
def fold(name: str) -> str:
    """``name`` folded (see the module docstring); equal folds: one name on some filesystem."""
    if name.isascii():
        return name.lower()  # ASCII folds to itself but for A-Z, and has no combining marks
    table, classes = _table()
    out: list[str] = []
    for ch in name:
        code = ord(ch)
        if _HANGUL_FIRST <= code <= _HANGUL_LAST:
            out.append(_hangul(code))
        else:
            out.append(table.get(code, ch))
    chars = list("".join(out))
    # Canonical ordering: each run of combining marks sorted, stably, by combining class.
    start = 0
    while start < len(chars):
        if not classes.get(ord(chars[start]), 0):
            start += 1
            continue
        end = start
        while end < len(chars) and classes.get(ord(chars[end]), 0):
            end += 1
        chars[start:end] = sorted(chars[start:end], key=lambda c: classes[ord(c)])
        start = end
    return "".join(chars)
