"""The token and credentials never reach a log line, whoever logs them; both formats."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from memsync.config import LogConfig
from memsync.daemon import SecretFilter, configure_logging

TOKEN = "msk-live-5f3c9a7e1b2d4c6e8f0a"


@pytest.fixture
def restore_root_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    yield
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer abc.def-123", "Authorization: Bearer [redacted]"),
        ("authorization=Basic Zm9vOmJhcg==", "authorization=Basic [redacted]"),
        (
            "{'Authorization': 'Bearer xyz', 'x-api-key': 'k1'}",
            "{'Authorization': 'Bearer [redacted]', 'x-api-key': '[redacted]'}",
        ),
        (
            "[(b'x-api-key', b'k2'), (b'accept', b'*/*')]",
            "[(b'x-api-key', b'[redacted]'), (b'accept', b'*/*')]",
        ),
        ("X-Api-Key: k3; next", "X-Api-Key: [redacted]; next"),
        ("push to https://bob:s3cret@git.example/x.git", "push to https://[redacted]@git.example/x.git"),
        ("ssh://git@host/repo", "ssh://[redacted]@host/repo"),
        ("the authorization failed, try again", "the authorization failed, try again"),
        ("plain https://git.example/x.git", "plain https://git.example/x.git"),
    ],
)
def test_headers_and_url_userinfo_are_scrubbed(text: str, expected: str) -> None:
    assert SecretFilter().scrub(text) == expected


def _log_everywhere(token: str) -> None:
    logging.getLogger("memsync.daemon").warning("token in the message: %s", token)
    logging.getLogger("memsync.daemon").info("in extra", extra={"store": "s", "error": f"bad {token}"})
    logging.getLogger("httpx").warning(
        "HTTP Request: GET https://u:%s@api.example/v1 Authorization: Bearer %s", token, token
    )
    try:
        raise RuntimeError(f"failure carrying {token}")
    except RuntimeError:
        logging.getLogger("memsync.api").exception("request failed")
    logging.getLogger("memsync.daemon").error("%s %d", "bad format args")  # must not lose the record


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_the_token_never_reaches_the_output(fmt: str, restore_root_logging: None) -> None:
    stream = io.StringIO()
    configure_logging(LogConfig(format=fmt, level="debug"), secrets=[TOKEN], stream=stream)  # type: ignore[arg-type]
    _log_everywhere(TOKEN)
    output = stream.getvalue()
    assert TOKEN not in output
    assert output.count("[redacted]") >= 4
    assert "RuntimeError: failure carrying [redacted]" in output
    lines = output.strip().splitlines()
    if fmt == "json":
        entries = [json.loads(line) for line in lines]
        assert {e["level"] for e in entries} == {"warning", "info", "error"}
        extra = next(e for e in entries if e["message"] == "in extra")
        assert extra["store"] == "s" and extra["error"] == "bad [redacted]"
        assert all(e["time"].endswith("Z") for e in entries)
    else:
        assert lines[0].endswith("WARNING memsync.daemon: token in the message: [redacted]")


def test_levels_and_chatty_libraries(restore_root_logging: None) -> None:
    stream = io.StringIO()
    configure_logging(LogConfig(format="text", level="info"), stream=stream)
    logging.getLogger("memsync.daemon").debug("hidden")
    logging.getLogger("httpx").info("HTTP Request: one line per request")
    logging.getLogger("memsync.daemon").info("shown")
    assert stream.getvalue().count("\n") == 1 and "shown" in stream.getvalue()
