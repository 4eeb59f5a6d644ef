"""The errors of :mod:`memsync.api`, and the one place where httpx errors become them.

Every failure of a call reaches the caller as one of these classes, all below
:class:`memsync.errors.ApiError` (whose exit code they keep)::

    ApiError (memsync.errors)                         what went wrong                retried?
    ├── AuthenticationFailed (memsync.errors)
    │   └── AuthenticationError                       401, 403: the token was refused  no
    ├── BadRequest                                    400, 413, 422, other 4xx         no
    ├── NotFound                                      404                              no
    ├── Conflict                                      409                              no
    │   ├── PreconditionFailed                        the stored hash/version moved    no
    │   ├── PathConflict                              the path (or a parent) is taken   no
    │   └── StoreArchived                             the store refuses writes         no
    ├── RateLimited                                   429                              yes
    ├── ServerError                                   5xx, 529                         yes
    ├── TransportError                                connection failed or timed out   yes
    └── InvalidResponse                               an answer memsync refuses        no
        └── ContentMismatch                           content does not match its hash  no

Each carries ``status`` (None without an HTTP answer), ``error_type`` (the API's ``error.type``),
``message`` and ``request_id``, plus ``attempts``: how many times the request was sent, which tells
a write with an unknown outcome (``attempts > 1``) from one that certainly failed.

Messages never contain the token: it is cut out of anything the server echoes, and httpx errors
(whose requests carry it in their headers) are translated without being chained.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Iterator
from typing import TYPE_CHECKING, TypeVar

from memsync.errors import ApiError, AuthenticationFailed

if TYPE_CHECKING:
    import httpx

_F = TypeVar("_F", bound="Failure")

# A server's message is shown to users: keep it to one readable line.
_MAX_SERVER_MESSAGE_CHARS = 300


class Failure(ApiError):
    """What every memsync.api error carries beyond :class:`memsync.errors.ApiError`."""

    attempts: int = 1


class AuthenticationError(AuthenticationFailed, Failure):
    """The API refused the token (401) or its permissions (403)."""


class BadRequest(Failure):
    """The API refused the request as invalid (400, 413, 422 or another 4xx)."""


class NotFound(Failure):
    """The store, memory or version does not exist (any more)."""


class Conflict(Failure):
    """409: the request conflicts with the store's current state."""


class PreconditionFailed(Conflict):
    """The memory changed since the caller read it: its hash (or Cloud version) is not the expected one.

    ``current_sha256`` is the hash the store holds now, when memsync read it back (else None).
    """

    current_sha256: str | None = None


class PathConflict(Conflict):
    """Another memory holds the path (or, on Anthropic, an ancestor or descendant of it)."""

    path: str | None = None


class StoreArchived(Conflict):
    """The store is archived: its memories can be read but not written."""


class RateLimited(Failure):
    """429 after the retry budget ran out. ``retry_after`` is the server's hint in seconds, if any."""

    retry_after: float | None = None


class ServerError(Failure):
    """The API failed (5xx or 529) on every attempt the retry budget allowed."""


class TransportError(Failure):
    """No HTTP answer: the connection failed, dropped or timed out.

    ``retryable`` is False when retrying cannot help (a malformed base URL, a refused certificate).
    ``certificate_refused`` is True when TLS verification refused the server's certificate;
    ``proxy_refused`` when the proxy refused to open the tunnel (a 4xx to CONNECT: 407, 403).
    """

    retryable: bool = True
    certificate_refused: bool = False
    proxy_refused: bool = False


class InvalidResponse(Failure):
    """The API answered something memsync refuses: malformed JSON, wrong types, hostile paths, a body
    over the size cap, pagination that loops or never ends."""


class ContentMismatch(InvalidResponse):
    """A version's (or memory's) content does not hash to the ``content_sha256`` the API gave for it."""

    def __init__(self, object_id: str, expected: str, actual: str, *, request_id: str | None = None) -> None:
        super().__init__(
            f"content of {object_id} does not match its content_sha256 (API says {expected},"
            f" content hashes to {actual}); refusing it",
            request_id=request_id,
        )
        self.object_id = object_id
        self.expected_sha256 = expected
        self.actual_sha256 = actual


def one_line(text: str, secret: str | None = None) -> str:
    """``text`` from the server made safe to show: without the secret, without control characters, short."""
    if secret:
        text = text.replace(secret, "[token]")
    cleaned = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)
    if len(cleaned) > _MAX_SERVER_MESSAGE_CHARS:
        cleaned = cleaned[:_MAX_SERVER_MESSAGE_CHARS] + "…"
    return cleaned


def error_for_status(
    status: int, error_type: str | None, message: str, request_id: str | None, *, what: str
) -> Failure:
    """The error for an HTTP error answer. The status decides; the type only refines 409
    (docs/api-contract.md §5)."""
    text = f"{what}: HTTP {status}"
    if error_type:
        text += f" {error_type}"
    if message:
        text += f": {message}"
    if request_id:
        text += f" (request id {request_id})"
    cls: type[Failure]
    if status in (401, 403):
        cls = AuthenticationError
        text += "; check the token and its permissions"
    elif status == 407:  # from the proxy an http:// request goes through, not from the API
        cls = BadRequest
        text += _proxy_hint("407")
    elif status == 404:
        cls = NotFound
    elif status == 409:
        if error_type == "memory_precondition_failed_error":
            cls = PreconditionFailed
        elif error_type == "memory_path_conflict_error":
            cls = PathConflict
        else:
            cls = Conflict
    elif status == 429:
        cls = RateLimited
    elif status >= 500:
        cls = ServerError
    else:
        cls = BadRequest
    return cls(text, status=status, error_type=error_type, request_id=request_id)


def refine(error: ApiError, cls: type[_F], note: str | None = None) -> _F:
    """``error`` re-expressed as the more precise ``cls`` (same status, type, request id, attempts)."""
    message = error.message if note is None else f"{error.message}; {note}"
    refined = cls(message, status=error.status, error_type=error.error_type, request_id=error.request_id)
    refined.attempts = error.attempts if isinstance(error, Failure) else 1
    return refined


@contextlib.contextmanager
def translated_transport_errors(what: str, secret: str) -> Iterator[None]:
    """The boundary: httpx's exceptions inside become :class:`TransportError` / :class:`InvalidResponse`.

    The httpx exception is not chained (``from None``): its request holds the credentials in its headers,
    and a traceback printer or error reporter walking ``__cause__`` could reach them. Its text is shown
    without ``secret``.
    """
    import httpx

    try:
        yield
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise _translated(exc, what, one_line(str(exc), secret)) from None


def _translated(exc: httpx.HTTPError | httpx.InvalidURL, what: str, text: str) -> Failure:
    import httpx

    name = type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        return TransportError(f"{what}: timed out ({name})")
    if isinstance(exc, httpx.DecodingError):
        return InvalidResponse(f"{what}: the response body could not be decoded ({text})")
    refused = _certificate_refusal(exc)
    if refused is not None:
        # The same certificate is presented on every attempt: retrying only delays the message.
        error = TransportError(f"{what}: the server's certificate is not trusted: {refused}")
        error.retryable = False
        error.certificate_refused = True
        return error
    if isinstance(exc, httpx.ProxyError) and text[:1] == "4":
        # httpcore's text for a refused CONNECT is the proxy's status line. A 4xx is the proxy's
        # decision (credentials, policy), the same on every attempt; a 5xx (its upstream) may pass.
        error = TransportError(f"{what}: the proxy answered {text}{_proxy_hint(text[:3])}")
        error.retryable = False
        error.proxy_refused = True
        return error
    if isinstance(exc, httpx.NetworkError | httpx.RemoteProtocolError | httpx.ProxyError):
        return TransportError(f"{what}: {name}: {text or 'connection failed'}")
    # An invalid URL, an unsupported protocol, a local protocol error: retrying cannot help.
    error = TransportError(f"{what}: {name}: {text}; check base_url")
    error.retryable = False
    return error


def _certificate_refusal(exc: BaseException) -> str | None:
    """Why TLS verification refused the certificate, when that is what ``exc`` comes from (httpx
    chains httpcore's error, which chains the :class:`ssl.SSLCertVerificationError`)."""
    seen: BaseException | None = exc
    for _ in range(8):  # a bounded walk: chains are short, and a cycle must not hang a message
        if seen is None:
            return None
        if isinstance(seen, ssl.SSLCertVerificationError):
            return seen.verify_message or str(seen.reason or seen)
        seen = seen.__cause__ or seen.__context__
    return None


def _proxy_hint(status: str) -> str:
    if status == "407":
        return (
            "; the proxy wants credentials it was not given, or refused them: give them in the proxy's"
            " URL, http://user:password@host:port (percent-encoded)"
        )
    return "; the proxy refuses this destination: ask its administrators, or check NO_PROXY"
