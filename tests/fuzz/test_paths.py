"""Generated paths and contents through ``memsync.rules`` and the path encoding, and end to end.

Pure properties first (many examples): the rules refuse only with a RuleViolation naming the field;
every path any dialect accepts has a tree spelling that git can hold and that decodes back to it;
contents the rules accept survive the trip through bytes. Then the round trip against the real
server, Forward and Anthropic: memories at generated paths with generated contents, pulled, must
come back from the working tree exactly, with ``git fsck --strict`` clean.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from memsync.api import Client, open_client
from memsync.errors import RuleViolation
from memsync.mirror import decode_path, encode_path, encode_paths
from memsync.rules import (
    Dialect,
    check_content,
    check_path,
    decode_content,
    sha256_hex,
    to_absolute,
    to_relative,
)
from tests.fuzz.budget import budget
from tests.fuzz.strategies import accepted, contents, relative_paths, round_trip, storable
from tests.support.server import ServerProcess

PURE = settings(max_examples=budget().pure_examples, deadline=None)
E2E = settings(
    max_examples=budget().round_trips,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


@PURE
@given(st.one_of(relative_paths, relative_paths.map(to_absolute), st.text()), st.sampled_from(list(Dialect)))
def test_the_rules_accept_a_path_as_is_or_refuse_it_naming_the_field(path: str, dialect: Dialect) -> None:
    try:
        assert check_path(path, dialect) is path
    except RuleViolation as refused:
        assert refused.field == "path" and refused.rule and str(refused).startswith("path: ")


@PURE
@given(relative_paths)
def test_every_path_a_dialect_accepts_has_a_tree_spelling_that_decodes_back(path: str) -> None:
    dialects = [d for d in Dialect if accepted(path, d)]
    if not dialects:
        return
    for sibling in (False, True):
        spelled = encode_path(path, directory_sibling=sibling)
        assert decode_path(spelled) == path
        for component in spelled.split("/"):
            assert 0 < len(component.encode("utf-8")) <= 255
            assert component not in (".", "..") and "\x00" not in component
            folded = "".join(ch for ch in component if unicodedata.category(ch) != "Cf").casefold()
            assert not folded.startswith(".git") and not re.match(r"gi.{0,5}~[0-9]", folded)
    if Dialect.ANTHROPIC in dialects:
        assert to_relative(to_absolute(path)) == path


@PURE
@given(st.lists(relative_paths, min_size=1, max_size=8, unique=True))
def test_a_set_of_accepted_paths_spells_a_tree_without_clashes(paths: list[str]) -> None:
    kept = [p for p in paths if any(accepted(p, d) for d in Dialect)]
    spelled = encode_paths(kept)
    assert len(set(spelled.values())) == len(kept)
    files = set(spelled.values())
    directories = {t.rsplit("/", 1)[0] for t in files if "/" in t}
    # No tree path is both a file and a directory: git could not hold that tree.
    assert not any(d in files or any(d.startswith(f + "/") for f in files) for d in directories)
    assert all(decode_path(tree) == memory for memory, tree in spelled.items())


@PURE
@given(contents, st.sampled_from(list(Dialect)))
def test_contents_the_rules_accept_survive_bytes_and_hash_as_the_api_says(
    content: str, dialect: Dialect
) -> None:
    try:
        check_content(content, dialect)
    except RuleViolation as refused:
        assert refused.field == "content"
        return
    data = content.encode("utf-8")
    assert decode_content(data, dialect) == content
    assert sha256_hex(content) == hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module", params=[Dialect.FORWARD, Dialect.ANTHROPIC], ids=lambda d: d.value)
def client(request: pytest.FixtureRequest, server: ServerProcess) -> Iterator[Client]:
    with open_client(request.param, server.base_url, server.token) as c:
        yield c


@E2E
@given(
    files=st.dictionaries(relative_paths, contents, min_size=2, max_size=8),
    rewrites=st.dictionaries(relative_paths, contents, max_size=2),
    reuse=st.lists(st.integers(0, 5), max_size=2),
)
def test_generated_memories_come_back_from_the_working_tree_exactly(
    client: Client, files: dict[str, str], rewrites: dict[str, str], reuse: list[int]
) -> None:
    kept = storable(files, client.dialect)
    # Paths the dialect refuses are the rules' business (tested above); this needs some it takes.
    assume(kept)
    event(f"{len(kept)} memories")
    # Rewrite some of the stored paths too, not only generated ones that are rarely stored.
    names = sorted(kept)
    rewrites = {**rewrites, **{names[i % len(names)]: f"rewritten {i}\n" for i in reuse}}
    rewrites = {p: c for p, c in storable(rewrites, client.dialect).items() if p in kept}
    round_trip(client, f"fuzz-{uuid.uuid4().hex[:10]}", kept, rewrites)
