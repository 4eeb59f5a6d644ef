"""memsync's own name fold: when two names may be one file on a case- or normalization-insensitive disk.

    fold(name) = each code point mapped to the canonical decomposition of its full case folding
                 (NFD(casefold(NFD(c)))), then combining marks put in canonical order

from the tables of **Unicode 14.0.0** shipped beside this module, never from the running Python's
``unicodedata`` (3.12's Unicode 15.0 folds a few more names together): spellings decide commit ids,
so this fold must never change (docs/mirror.md, "Path spelling"). Hangul syllables are left out of
the table: their decomposition is arithmetic, the same in every Unicode version.
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
        if combining := unicodedata.combining(ch):
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
        unicodedata.normalize("NFD", ch)
        if _HANGUL_FIRST <= ord(ch) <= _HANGUL_LAST
        else table.get(ord(ch), ch)
        for ch in name
    )

    # Canonical ordering: each run of combining marks sorted, stably, by combining class.
    runs = itertools.groupby(chars, key=lambda ch: ord(ch) in classes)
    return "".join("".join(sorted(run, key=lambda ch: classes.get(ord(ch), 0))) for _, run in runs)
