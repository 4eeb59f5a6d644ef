"""Clients of the session's reference server, one per dialect (each test makes its own stores)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.server import ServerProcess

TIMEOUT_S = 10.0


def dialect_client(server: ServerProcess, base: str, *, api_key: bool = False) -> httpx.Client:
    headers = {"x-api-key": server.token} if api_key else {"Authorization": f"Bearer {server.token}"}
    return httpx.Client(base_url=server.base_url + base, headers=headers, timeout=TIMEOUT_S)


@pytest.fixture
def forward(server: ServerProcess) -> Iterator[httpx.Client]:
    with dialect_client(server, "/api/v1/forward") as client:
        yield client


@pytest.fixture
def cloud(server: ServerProcess) -> Iterator[httpx.Client]:
    with dialect_client(server, "/api/v1/cloud") as client:
        yield client


@pytest.fixture
def anthropic_http(server: ServerProcess) -> Iterator[httpx.Client]:
    with dialect_client(server, "/v1", api_key=True) as client:
        yield client
