"""memsync.mirror's public face: one sorted __all__, every name real, nothing private leaking."""

from __future__ import annotations

import inspect

import memsync.mirror as mirror


def _isort_key(name: str) -> tuple[int, str]:
    # The order ruff keeps __all__ in: CONSTANTS, then Classes, then functions.
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_all_is_sorted_and_complete() -> None:
    assert mirror.__all__ == sorted(mirror.__all__, key=_isort_key)
    assert len(set(mirror.__all__)) == len(mirror.__all__)
    for name in mirror.__all__:
        assert hasattr(mirror, name), name
        assert not name.startswith("_")


def test_every_public_class_and_function_is_documented() -> None:
    for name in mirror.__all__:
        value = getattr(mirror, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), f"memsync.mirror.{name} has no docstring"
