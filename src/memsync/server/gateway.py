"""The outermost ASGI layer: a request id on every answer, the token check, and the body limit.

It is plain ASGI (not Starlette's ``BaseHTTPMiddleware``) so it costs little per request, and it
answers 401 before any routing, validation or fault injection happens. Which token forms count
depends on the dialect the path belongs to: Forward and Cloud take ``Authorization: Bearer``,
Anthropic takes that or ``x-api-key`` (docs/api-contract.md §2-§4).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from .envelope import MAX_BODY_BYTES, error_payload, json_bytes

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("memsync.server")

FORWARD_BASE = "/api/v1/forward"
CLOUD_BASE = "/api/v1/cloud"
ANTHROPIC_BASE = "/v1"
DEBUG_BASE = "/debug"


def api_key_id(token: str) -> str:
    """The id under which versions record the key that wrote them (a hash, never the token)."""
    return "apikey_" + hashlib.sha256(token.encode("utf-8")).hexdigest()[:24]


def _under(path: str, base: str) -> bool:
    return path == base or path.startswith(base + "/")


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def send_json(
    send: Send, status: int, payload: Any, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    body = json_bytes(payload)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


class Gateway:
    def __init__(self, app: ASGIApp, *, tokens: Sequence[str], max_body_bytes: int = MAX_BODY_BYTES) -> None:
        if not tokens:
            raise ValueError("the server needs at least one token")
        self.app = app
        self._tokens = [t.encode("utf-8") for t in tokens]
        self._max_body = max_body_bytes

    def _token_matches(self, presented: bytes) -> bytes | None:
        found = None
        for token in self._tokens:
            # Compare against every token so the time taken does not tell which one nearly matched.
            if hmac.compare_digest(presented, token):
                found = token
        return found

    def _authenticate(self, path: str, headers: dict[bytes, bytes]) -> bytes | None:
        presented: list[bytes] = []
        authorization = headers.get(b"authorization", b"")
        scheme, _, credential = authorization.partition(b" ")
        if scheme.lower() == b"bearer" and credential.strip():
            presented.append(credential.strip())
        if _under(path, ANTHROPIC_BASE) or _under(path, DEBUG_BASE):
            api_key = headers.get(b"x-api-key", b"")
            if api_key:
                presented.append(api_key)
        for candidate in presented:
            token = self._token_matches(candidate)
            if token is not None:
                return token
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = "req_" + secrets.token_hex(12)
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        id_header = (b"request-id", request_id.encode("ascii"))
        completed = False

        async def send_with_id(message: Message) -> None:
            nonlocal completed
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), id_header]}
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                completed = True
            await send(message)

        path: str = scope.get("path", "")
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        guarded = any(_under(path, b) for b in (FORWARD_BASE, CLOUD_BASE, ANTHROPIC_BASE, DEBUG_BASE))
        if guarded:
            token = self._authenticate(path, headers)
            if token is None:
                wanted = "x-api-key or Authorization: Bearer" if _under(path, ANTHROPIC_BASE) else "Bearer"
                await send_json(
                    send_with_id,
                    401,
                    error_payload(401, f"missing or invalid token: send it as {wanted}", request_id),
                )
                return
            state["api_key_id"] = api_key_id(token.decode("utf-8"))

        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self._max_body:
            await self._too_large(send_with_id, request_id)
            return

        app_receive = receive
        if length is None and b"transfer-encoding" in headers:
            # A chunked body has no announced size: read it whole (up to the limit), then replay it.
            chunks: list[bytes] = []
            size = 0
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return
                chunks.append(message.get("body", b""))
                size += len(chunks[-1])
                if size > self._max_body:
                    await self._too_large(send_with_id, request_id)
                    return
                if not message.get("more_body", False):
                    break
            app_receive = _replay(b"".join(chunks), receive)

        try:
            await self.app(scope, app_receive, send_with_id)
        except Exception:
            # The app's error handler already answered and logged it; uvicorn need not log it again.
            if not completed:
                raise

    async def _too_large(self, send: Send, request_id: str) -> None:
        message = f"the request body is larger than {self._max_body} bytes; memory content is at most 100 KiB"
        await send_json(send, 413, error_payload(413, message, request_id), [(b"connection", b"close")])
