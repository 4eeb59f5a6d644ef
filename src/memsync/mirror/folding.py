"""memsync's own name fold: when two names may be one file on a case- or normalization-insensitive disk.

APFS and HFS+ (macOS) ignore case and Unicode normalization, NTFS and exFAT (Windows) case. Names such
a filesystem takes for one get distinct spellings in the mirror (:mod:`memsync.mirror.paths`, rule 5),
and spellings decide commit ids, so this fold must never change:

    fold(name) = each code point mapped to the canonical decomposition of its full case folding
                 (NFD(casefold(NFD(c)))), then combining marks put in canonical order

from the tables of **Unicode 14.0.0**, pinned in ``folding-unicode-14.0.0.json`` beside this module,
never from the running Python's ``unicodedata`` (3.12 ships Unicode 15.0, which folds a few more
names together and would change commit ids). The fold is a little coarser than any one filesystem's,
which costs at most a spelling that escapes more than it had to. Hangul syllables decompose by the
arithmetic of Unicode chapter 3.12, so the table leaves them out; tests check the shipped file against
:func:`build_table` on a Python whose Unicode version is 14.0.0.
"""

from __future__ import annotations

import functools
import itertools
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
    lead, rest = divmod(code - _HANGUL_FIRST, _V_COUNT * _T_COUNT)
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
    chars = "".join(
        _hangul(code) if _HANGUL_FIRST <= (code := ord(ch)) <= _HANGUL_LAST else table.get(code, ch)
        for ch in name
    )

    # Canonical ordering: each run of combining marks sorted, stably, by combining class (a run of
    # other characters, all class 0, keeps its order).
    def combining(ch: str) -> int:
        return classes.get(ord(ch), 0)

    runs = itertools.groupby(chars, key=lambda ch: combining(ch) > 0)
    return "".join("".join(sorted(run, key=combining)) for _, run in runs)
