"""The refusals the engine raises, each carrying the HTTP status and error type of docs/api-contract.md §5.

The route adapters never choose a status themselves: they let these propagate, and the app renders
them as the error envelope ``{"type": "error", "error": {"type", "message"}, "request_id"}``.
"""

from __future__ import annotations


class ApiProblem(Exception):
    """A request the server refuses on purpose."""

    status: int = 400
    error_type: str = "invalid_request_error"

    def __init__(self, message: str, *, error_type: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if error_type is not None:
            self.error_type = error_type


class InvalidRequest(ApiProblem):
    """400: the request breaks a rule; the message starts with the field it names."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class NotFound(ApiProblem):
    status = 404
    error_type = "not_found_error"


class Conflict(ApiProblem):
    """409: the request contradicts the stored state (always sent with ``x-should-retry: false``)."""

    status = 409
    error_type = "conflict_error"


PRECONDITION_FAILED = "memory_precondition_failed_error"
PATH_CONFLICT = "memory_path_conflict_error"
