"""Every test here is end-to-end: git runs the remote helper (git-remote-memstore) as a process."""

from __future__ import annotations

import pytest


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.e2e)
