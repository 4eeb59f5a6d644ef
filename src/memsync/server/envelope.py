"""Answers in the shape of docs/api-contract.md §5: the error envelope, its statuses, and fast JSON replies.

Every error the app can produce is rendered here: the engine's refusals, the rules' violations,
FastAPI's request validation (turned from 422 into a 400 naming the field), unknown routes and
methods, and unexpected exceptions (a 500 ``api_error``; the traceback goes to the log, not the
client). Every 409 carries ``x-should-retry: false`` so SDKs do not retry a conflict.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from memsync.errors import RuleViolation

from .problems import ApiProblem
from .wire import ErrorEnvelope

log = logging.getLogger("memsync.server")

ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
    529: "overloaded_error",
}

_DESCRIPTIONS: dict[int, str] = {
    400: "The request breaks a rule; the message names the field.",
    401: "No valid token.",
    404: "No such object (or not in this dialect).",
    409: "The request conflicts with the stored state. Carries `x-should-retry: false`.",
    413: "The request body is larger than the server accepts (8 MiB).",
    429: "Rate limited (an injected fault); retry after `Retry-After` seconds.",
    500: "Server error (or an injected fault).",
}

MAX_BODY_BYTES = 8 * 1024 * 1024


def json_bytes(payload: Any) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class JsonAnswer(Response):
    """A JSON response rendered without validation: the adapters build exact dicts."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return json_bytes(content)


def error_payload(
    status: int, message: str, request_id: str, error_type: str | None = None
) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": error_type or ERROR_TYPES.get(status, "api_error"), "message": message},
        "request_id": request_id,
    }


def error_headers(status: int) -> dict[str, str]:
    return {"x-should-retry": "false"} if status == 409 else {}


def request_id_of(scope: Mapping[str, Any]) -> str:
    state = scope.get("state") or {}
    return str(state.get("request_id", "req_unknown"))


def error_answer(
    request: Request,
    status: int,
    message: str,
    error_type: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JsonAnswer:
    return JsonAnswer(
        error_payload(status, message, request_id_of(request.scope), error_type),
        status_code=status,
        headers={**error_headers(status), **(headers or {})},
    )


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` declaration of a route: every listed status answers the error envelope."""
    declared: dict[int | str, dict[str, Any]] = {}
    for status in (*statuses, 401, 429, 500):
        entry: dict[str, Any] = {"model": ErrorEnvelope, "description": _DESCRIPTIONS.get(status, "Error.")}
        if status == 409:
            entry["headers"] = {
                "x-should-retry": {"description": "Always `false`.", "schema": {"type": "string"}}
            }
        if status == 429:
            entry["headers"] = {"Retry-After": {"description": "Seconds.", "schema": {"type": "string"}}}
        declared[status] = entry
    return declared


def _field_of(loc: Iterable[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:] if len(parts) > 1 else parts
    if parts and parts[0].isdigit():
        # A JSON syntax error is located by character offset: name the body itself.
        return "body"
    return ".".join(parts) or "body"


def _describe(error: Mapping[str, Any]) -> str:
    kind = str(error.get("type", ""))
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "unknown field; this server refuses fields it does not know rather than ignoring them"
    if kind == "json_invalid":
        ctx = error.get("ctx") or {}
        return f"is not valid JSON ({ctx.get('error', 'decode error')})"
    if kind in ("model_attributes_type", "model_type", "dict_type"):
        if isinstance(error.get("input"), bytes | str):
            return "must be a JSON object, sent with Content-Type: application/json"
        return "must be a JSON object"
    if kind == "string_type":
        return "must be a string"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return "must be an integer"
    if kind in ("bool_type", "bool_parsing"):
        return "must be true or false"
    if kind == "literal_error":
        ctx = error.get("ctx") or {}
        return f"must be one of {ctx.get('expected', 'the documented values')}"
    return str(error.get("msg", "is invalid"))


def _allowed_methods(request: Request) -> list[str]:
    """Every method the API documents at this path (Starlette's own 405 names only one route's)."""
    path = request.url.path
    allowed: set[str] = set()
    for template, item in request.app.openapi().get("paths", {}).items():
        pattern = "^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path):
            allowed |= {method.upper() for method in item if method in ("get", "post", "put", "delete")}
    return sorted(allowed)


def install_error_handlers(app: FastAPI) -> None:
    async def on_problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiProblem)
        return error_answer(request, exc.status, exc.message, exc.error_type)

    async def on_rule(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RuleViolation)
        return error_answer(request, 400, str(exc))

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = list(exc.errors())
        first = errors[0] if errors else {"loc": ("body",), "msg": "is invalid"}
        field = _field_of(first.get("loc", ()))
        message = f"{field}: {_describe(first)}"
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more problem(s))"
        return error_answer(request, 400, message)

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        status = exc.status_code
        if status == 404:
            message = f"no route {request.url.path}; see /openapi.json for the routes of each dialect"
        elif status == 405:
            allowed = _allowed_methods(request)
            message = (
                f"method {request.method} is not allowed on {request.url.path}; use {', '.join(allowed)}"
            )
            return error_answer(request, status, message, headers={"allow": ", ".join(allowed)})
        else:
            message = str(exc.detail)
        return error_answer(request, status, message, headers=dict(exc.headers or {}))

    async def on_crash(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
        return error_answer(request, 500, "the server failed unexpectedly; the request may be retried")

    app.add_exception_handler(ApiProblem, on_problem)
    app.add_exception_handler(RuleViolation, on_rule)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_crash)
