"""The official Qoder SDK (qca-sdk), unmodified, pointed at a reference server of its own (seeded as
tests/sdk/seed.py says)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from qca.forward import Forward
from qca.managed import Managed

from tests.sdk.seed import SEED
from tests.support.server import ServerProcess
from tests.support.tiers import end_to_end


@pytest.fixture(scope="session")
@end_to_end
def qoder_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("sdk-server")
    seed = folder / "seed.json"
    seed.write_text(json.dumps(SEED), encoding="utf-8")
    with ServerProcess(db=folder / "memstore.sqlite3", extra_args=["--seed", str(seed)]) as proc:
        yield proc


@pytest.fixture
def forward(qoder_server: ServerProcess) -> Iterator[Forward]:
    """The Forward client as a user configures it: a base URL, a token, and no retries to hide errors."""
    base_url = qoder_server.base_url + "/api/v1/forward"
    with Forward(access_token=qoder_server.token, base_url=base_url, max_retries=0, timeout=10.0) as client:
        yield client


@pytest.fixture
def managed(qoder_server: ServerProcess) -> Iterator[Managed]:
    """The Cloud client (``qca.managed``), configured the same way."""
    base_url = qoder_server.base_url + "/api/v1/cloud"
    with Managed(access_token=qoder_server.token, base_url=base_url, max_retries=0, timeout=10.0) as client:
        yield client
