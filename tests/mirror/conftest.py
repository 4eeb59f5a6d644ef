"""Fixtures for mirror tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from memsync.mirror import Mirror


@pytest.fixture
def new_mirror(tmp_path: Path) -> Callable[..., Mirror]:
    """Make fresh mirrors under tmp_path by name."""

    def make(name: str = "store") -> Mirror:
        return Mirror.init(tmp_path / name)

    return make
