"""schemathesis against the reference server's own OpenAPI schema, every dialect's operations.

Each operation gets generated requests (valid and invalid bodies, parameters and ids); then stateful
sequences follow the schema's links (create a store, then its memories, versions...). Every answer
must be no server error, carry a documented status, content type and headers, and match the
schema's model for that status. The budget is small in CI (tests/fuzz/budget.py); the soak raises it.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.fuzz.budget import budget
from tests.support.server import ServerProcess

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
FUZZ_SETTINGS = settings(
    max_examples=budget().openapi_examples,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=False,
)


# Headers that frame the HTTP message itself. A generated value for one (``Content-Length: ACA"<35!``)
# makes a request that is not HTTP: the server's HTTP layer answers 400 before any operation runs, so
# it says nothing about the schema. The client sets them from the body it sends.
FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "host", "connection"})


def _as_http(case: Any) -> Any:
    """``case`` without generated values for the headers that frame the message."""
    if case.headers:
        for name in [name for name in case.headers if name.lower() in FRAMING_HEADERS]:
            del case.headers[name]
    return case


def _auth(server: ServerProcess) -> dict[str, str]:
    # Bearer is accepted by all three dialects (Anthropic takes x-api-key too).
    return {"Authorization": f"Bearer {server.token}"}


@pytest.fixture(scope="module")
def api_schema(server: ServerProcess) -> Any:
    schema = schemathesis.openapi.from_url(f"{server.base_url}/openapi.json", timeout=30)
    # Generated data only: the coverage phase enumerates every case of every schema whatever the
    # budget, far beyond what CI affords (the soak's CLI run has it).
    schema.config.phases.update(phases=["fuzzing", "stateful"])
    return schema


openapi = schemathesis.pytest.from_fixture("api_schema")


@openapi.parametrize()
@FUZZ_SETTINGS
def test_every_operation_answers_within_its_schema(case: Any, server: ServerProcess) -> None:
    _as_http(case).call_and_validate(headers=_auth(server), checks=CHECKS)


def test_sequences_along_the_schema_links_answer_within_it(api_schema: Any, server: ServerProcess) -> None:
    machine = api_schema.as_state_machine()
    headers = _auth(server)
    answered: list[int] = []

    class Authenticated(machine):  # type: ignore[misc, valid-type]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            _as_http(case)
            return {"headers": headers}

        def after_call(self, response: Any, case: Any) -> None:
            super().after_call(response, case)
            answered.append(response.status_code)

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            case.validate_response(response, checks=CHECKS, headers=headers)

    steps = budget()
    Authenticated.run(
        settings=settings(
            max_examples=steps.stateful_scenarios,
            stateful_step_count=steps.stateful_steps,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            # The same sequences every run (the soak explores): a small budget's draw could
            # otherwise make no call that succeeds, and the assertion below would flake.
            derandomize=os.environ.get("HYPOTHESIS_PROFILE") != "soak",
        )
    )
    # The sequences made real calls, and some of them succeeded.
    assert sum(200 <= status < 300 for status in answered) > 0, answered
