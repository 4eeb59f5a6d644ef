"""Injected faults: the failures real Memory Store services show, on a seeded share of requests.

Each request to a dialect route draws from one ``random.Random(seed)``; with probability ``rate`` it
gets exactly one fault, chosen uniformly from :data:`FAULT_KINDS`:

``server_error``       a 500 ``api_error``; nothing is applied.
``rate_limited``       a 429 ``rate_limit_error`` with ``Retry-After: 1``; nothing is applied.
``slow``               the normal answer, after 1 s, marked ``x-injected-fault: slow``.
``drop_before_write``  the connection is closed before the request reaches the app: nothing applied.
``drop_after_write``   the app runs (a write commits), then the connection is closed instead of
                       sending its answer: the client cannot tell whether the write happened.

A drop must look like a network failure to the client, not like an HTTP answer, so the app needs
the connection's transport: :class:`TransportExposingH11Protocol` (uvicorn's h11 protocol) puts it
into the ASGI scope, and the injector closes it and waits for uvicorn to notice the disconnect, so
uvicorn sends nothing either. Counts per kind are kept in :attr:`FaultInjector.counts` and served by
``GET /debug/faults``, a route that exists only while faults are on.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from .envelope import error_payload, request_id_of
from .gateway import (
    ANTHROPIC_BASE,
    CLOUD_BASE,
    FORWARD_BASE,
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    send_json,
)

log = logging.getLogger("memsync.server")

FAULT_KINDS = ("server_error", "rate_limited", "slow", "drop_before_write", "drop_after_write")
SLOW_SECONDS = 1.0
TRANSPORT_KEY = "memsync.transport"
_DISCONNECT_WAIT_S = 5.0


class TransportExposingH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, handing each request's transport to the app (to drop it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        inner = self.app

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            scope.setdefault("extensions", {})[TRANSPORT_KEY] = self.transport
            await inner(scope, receive, send)

        self.app = app


class FaultInjector:
    def __init__(self, app: ASGIApp, *, rate: float, seed: int | None) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"fault rate {rate} is not a share between 0 and 1")
        self.app = app
        self.rate = rate
        self.seed = seed
        self._random = random.Random(seed)
        self.requests = 0
        self.counts: Counter[str] = Counter({kind: 0 for kind in FAULT_KINDS})

    def snapshot(self) -> dict[str, Any]:
        return {
            "rate": self.rate,
            "seed": self.seed,
            "requests": self.requests,
            "faults": dict(self.counts),
            "total": sum(self.counts.values()),
        }

    def _draw(self) -> str | None:
        self.requests += 1
        if self._random.random() >= self.rate:
            return None
        kind = self._random.choice(FAULT_KINDS)
        self.counts[kind] += 1
        return kind

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not any(
            path == base or path.startswith(base + "/") for base in (FORWARD_BASE, CLOUD_BASE, ANTHROPIC_BASE)
        ):
            await self.app(scope, receive, send)
            return
        kind = self._draw()
        if kind is None:
            await self.app(scope, receive, send)
            return
        log.debug("injecting fault %s into %s %s", kind, scope.get("method"), path)
        request_id = request_id_of(scope)
        if kind == "server_error":
            message = "injected fault: the server failed; nothing was applied, retry"
            await send_json(send, 500, error_payload(500, message, request_id))
        elif kind == "rate_limited":
            message = "injected fault: rate limited; nothing was applied, retry after 1 second"
            await send_json(send, 429, error_payload(429, message, request_id), [(b"retry-after", b"1")])
        elif kind == "slow":
            await asyncio.sleep(SLOW_SECONDS)

            async def marked(message: Message) -> None:
                # Said in a header, so a client can tell an injected delay from a busy machine's.
                if message["type"] == "http.response.start":
                    message = {
                        **message,
                        "headers": [*message.get("headers", []), (b"x-injected-fault", b"slow")],
                    }
                await send(message)

            await self.app(scope, receive, marked)
        elif kind == "drop_before_write":
            await self._drop(scope, receive)
        else:

            async def lose(message: Message) -> None:
                return None

            await self.app(scope, receive, lose)
            await self._drop(scope, receive)

    async def _drop(self, scope: Scope, receive: Receive) -> None:
        transport = scope.get("extensions", {}).get(TRANSPORT_KEY)
        if transport is None:
            raise RuntimeError(
                "dropping a connection needs TransportExposingH11Protocol; run the app with"
                " uvicorn.Config(http=TransportExposingH11Protocol)"
            )
        transport.close()
        # Wait until uvicorn has seen the disconnect, so it does not try to answer for the app.
        try:
            async with asyncio.timeout(_DISCONNECT_WAIT_S):
                while (await receive())["type"] != "http.disconnect":
                    pass
        except TimeoutError:
            log.warning(
                "a dropped connection was not reported as disconnected within %ss", _DISCONNECT_WAIT_S
            )
