"""The public surface of memsync.api is exactly ``__all__``: sorted, complete, and nothing private."""

from __future__ import annotations

import inspect
import re

import memsync.api as api
from memsync.errors import ApiError, AuthenticationFailed


def _isort_key(name: str) -> tuple[int, str]:
    # ruff's RUF022 order: CONSTANTS, then Classes, then functions.
    if re.fullmatch(r"[A-Z0-9_]+", name):
        return (0, name)
    return (1, name) if name[0].isupper() else (2, name)


def test_all_is_sorted_and_unique() -> None:
    assert api.__all__ == sorted(api.__all__, key=_isort_key)
    assert len(set(api.__all__)) == len(api.__all__)


def test_all_names_exactly_the_public_attributes() -> None:
    public = {
        name for name, value in vars(api).items() if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert public == set(api.__all__)


def test_private_modules_stay_private() -> None:
    for name in api.__all__:
        module = getattr(getattr(api, name), "__module__", "memsync.api")
        assert module in ("memsync.api", "memsync.errors") or module.startswith("memsync.api._"), name


def test_every_error_is_in_the_one_tree() -> None:
    errors = [getattr(api, n) for n in api.__all__ if isinstance(getattr(api, n), type)]
    errors = [cls for cls in errors if issubclass(cls, Exception)]
    assert errors, "the public API exports its errors"
    assert all(issubclass(cls, ApiError) for cls in errors)
    assert issubclass(api.AuthenticationError, AuthenticationFailed)
    assert api.AuthenticationError.exit_code == AuthenticationFailed.exit_code == 3
    assert api.NotFound.exit_code == ApiError.exit_code == 1


def test_the_names_the_pull_engine_relies_on() -> None:
    client = api.Client
    for method in (
        "list_stores",
        "get_store",
        "create_store",
        "archive_store",
        "iter_versions",
        "fetch_contents",
        "get_memory",
        "list_memories",
        "create_memory",
        "update_memory",
        "rename_memory",
        "delete_memory",
        "redact_version",
        "get_version",
    ):
        assert callable(getattr(client, method)), method
    assert isinstance(client.request_count, property)
    assert list(inspect.signature(api.open_client).parameters)[:3] == ["dialect", "base_url", "token"]
