"""Request parameters the dialect adapters share, and the refusal of everything no route declares.

docs/api-contract.md §6: a parameter, JSON field or header the server does not know is a 400 naming it, never
silently dropped, because a client whose option is ignored believes it took effect (a filter, a
precondition, a mount). Routes declare what they take; :class:`RequestGuard` compares each request
with those declarations: its query keys, and on routes without a body the fields of a JSON body. It
also refuses the headers of features the reference server does not have (workspaces, betas it does
not know). Unknown JSON fields of a declared body are refused by the request models
(``extra="forbid"`` in :mod:`.wire`).

The Cloud and Anthropic adapters parse ``view``, creation-time ranges, hashes, page tokens and
version filters with the same functions here, so both dialects answer one parameter one way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import Depends, Query, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from .clock import parse_timestamp
from .problems import InvalidRequest
from .storage import SESSION_HEADER, Actor, SessionClaim, decode_cursor

View = Literal["basic", "full"]
# With view=full a page carries content, so it holds at most this many items (docs/api-contract.md §4); a
# larger limit is capped rather than refused.
FULL_VIEW_PAGE = 20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_TIME = {"format": "date-time"}


def page_size(limit: int, view: View) -> int:
    return min(limit, FULL_VIEW_PAGE) if view == "full" else limit


def sha256_param(field: str, value: str) -> str:
    if not _SHA256.match(value):
        raise InvalidRequest(field, "must be 64 lowercase hexadecimal characters (a SHA-256 digest)")
    return value


def optional_sha256_param(field: str, value: str | None) -> str | None:
    return None if value is None else sha256_param(field, value)


def time_param(field: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        raise InvalidRequest(field, str(exc)) from None


def id_cursor(page: str | None) -> str | None:
    """The id a ``page`` token of an id-ordered listing continues after."""
    return None if page is None else decode_cursor(page, ("id",))[1]


def actor_of(request: Request) -> Actor | None:
    """Who writes: the session named by the reference-only session header (docs/server.md), else the
    key the Gateway matched, by the hash it recorded (never the token itself)."""
    session_id = request.headers.get(SESSION_HEADER)
    if session_id is not None:
        if not session_id.strip():
            raise InvalidRequest(
                SESSION_HEADER, "names no session; send a session id or leave the header out"
            )
        return SessionClaim(session_id.strip())
    key_id = getattr(request.state, "api_key_id", None)
    return None if key_id is None else Actor("api_actor", key_id)


@dataclass(frozen=True)
class CreatedRange:
    gte: int | None
    lte: int | None


def created_range(
    created_at_gte: str | None = Query(
        None, alias="created_at[gte]", description="RFC 3339; inclusive.", json_schema_extra=_TIME
    ),
    created_at_lte: str | None = Query(
        None, alias="created_at[lte]", description="RFC 3339; inclusive.", json_schema_extra=_TIME
    ),
) -> CreatedRange:
    return CreatedRange(
        time_param("created_at[gte]", created_at_gte), time_param("created_at[lte]", created_at_lte)
    )


@dataclass(frozen=True)
class VersionFilters:
    memory_id: str | None
    created: CreatedRange
    actors: list[tuple[str, str]]


def version_filters(
    memory_id: str | None = Query(None, description="Only this memory's versions (also once deleted)."),
    created: CreatedRange = Depends(created_range),
    session_id: str | None = Query(None, description="Only versions written by this session."),
    api_key_id: str | None = Query(None, description="Only versions written with this API key."),
    service_account_id: str | None = Query(None, description="Only versions by this service account."),
) -> VersionFilters:
    """The version-list filters of docs/api-contract.md §4, which the Cloud SDK (qca.managed) sends too."""
    actors = [
        (kind, value)
        for kind, value in (
            ("session_actor", session_id),
            ("api_actor", api_key_id),
            ("service_account_actor", service_account_id),
        )
        if value is not None
    ]
    return VersionFilters(memory_id, created, actors)


# --- refusing what no route declares ----------------------------------------------------------


@dataclass(frozen=True)
class _Declared:
    query: frozenset[str]
    # Those in /openapi.json; a hidden one is read only to be refused with a reason.
    documented: tuple[str, ...]
    has_body: bool


def _declared(dependant: Dependant) -> _Declared:
    """What a route (with its dependencies) declares: query parameter names, and whether it has a body."""
    params = list(dependant.query_params)
    has_body = bool(dependant.body_params)
    pending = list(dependant.dependencies)
    while pending:
        sub = pending.pop()
        params += sub.query_params
        has_body = has_body or bool(sub.body_params)
        pending += sub.dependencies
    documented = sorted(p.alias for p in params if getattr(p.field_info, "include_in_schema", True))
    return _Declared(frozenset(p.alias for p in params), tuple(documented), has_body)


@dataclass(frozen=True)
class HeaderPolicy:
    """How a dialect treats the headers of its vendor's namespaces (``x-qoder-``, ``anthropic-``...).

    Generic headers (``user-agent``, ``x-stainless-*``, ``idempotency-key``...) are never looked at.
    In the vendor's namespaces a header is ``accepted`` as sent, ``refused`` when it carries a value
    (a feature the reference server lacks; the value says why), a beta list checked name by name,
    or unknown: a 400, as an unknown parameter is.
    """

    namespaces: tuple[str, ...]
    accepted: frozenset[str]
    refused: Mapping[str, str]
    beta_header: str | None = None
    known_betas: frozenset[str] = frozenset()


class RequestGuard:
    """A router dependency: refuses undeclared query parameters, body fields and unsupported headers.

    ``also_accepted`` names query parameters every route of the dialect tolerates without declaring
    them (Anthropic: ``beta``, which some SDK versions append to every call, docs/api-contract.md §4).
    """

    def __init__(self, headers: HeaderPolicy, *, also_accepted: frozenset[str] = frozenset()) -> None:
        self._headers = headers
        self._also_accepted = also_accepted
        self._routes: dict[int, _Declared] = {}

    def _route_declares(self, route: APIRoute) -> _Declared:
        known = self._routes.get(id(route))
        if known is None:
            known = self._routes[id(route)] = _declared(route.dependant)
        return known

    async def __call__(self, request: Request) -> None:
        self._check_headers(request)
        route = request.scope.get("route")
        if not isinstance(route, APIRoute):
            return
        declared = self._route_declares(route)
        for key in request.query_params:
            if key not in declared.query and key not in self._also_accepted:
                raise InvalidRequest(
                    key,
                    "unknown parameter; this server refuses parameters it does not know (this call takes:"
                    f" {', '.join(declared.documented) or 'none'})",
                )
        if not declared.has_body and request.method in ("POST", "PUT", "PATCH", "DELETE"):
            await self._check_no_fields(request)

    def _check_headers(self, request: Request) -> None:
        policy = self._headers
        for name, value in request.headers.items():
            if not name.startswith(policy.namespaces) or name in policy.accepted:
                continue
            if name == policy.beta_header:
                self._check_betas(name, value)
            elif name in policy.refused:
                if value.strip():
                    raise InvalidRequest(name, policy.refused[name])
            else:
                raise InvalidRequest(
                    name, "unknown header; this server refuses the headers of its API it does not know"
                )

    def _check_betas(self, header: str, value: str) -> None:
        known = self._headers.known_betas
        unknown = [beta for beta in (part.strip() for part in value.split(",")) if beta and beta not in known]
        if unknown:
            raise InvalidRequest(
                header,
                f"unknown beta {', '.join(unknown)}; every memory-store feature of the reference server is"
                f" on without a beta, and it knows these betas: {', '.join(sorted(known)) or 'none'}",
            )

    @staticmethod
    async def _check_no_fields(request: Request) -> None:
        """SDKs send ``{}`` with bodyless calls (the Qoder SDK does on DELETE); a field is an error."""
        raw = await request.body()
        if not raw.strip():
            return
        try:
            body: Any = json.loads(raw)
        except ValueError:
            return
        if isinstance(body, dict) and body:
            field = next(iter(body))
            raise InvalidRequest(str(field), "unknown field; this call takes no request body")


_NO_WORKSPACES = (
    "workspaces are not implemented by the reference server; omit the header (a token's stores are all"
    " in one workspace)"
)
# qca-sdk 0.11.0 sends these on every call (qca/common/_base_client.py and _platform.py). It names no
# beta, and the server has every feature it implements on without one, so it knows no beta name.
QODER_HEADERS = HeaderPolicy(
    namespaces=("x-qoder-", "qoder-"),
    accepted=frozenset(
        {
            "x-qoder-retry-count",
            "x-qoder-timeout",
            "x-qoder-lang",
            "x-qoder-package-version",
            "x-qoder-os",
            "x-qoder-arch",
            "x-qoder-runtime",
            "x-qoder-runtime-version",
        }
    ),
    refused={"qoder-workspace-id": _NO_WORKSPACES},
    beta_header="x-qoder-beta",
)
# docs/api-contract.md §4: anthropic-version and anthropic-beta are accepted whatever their values. The
# SDK can also send a workspace and a user profile with every call (anthropic/_client.py).
ANTHROPIC_HEADERS = HeaderPolicy(
    namespaces=("anthropic-",),
    accepted=frozenset({"anthropic-version", "anthropic-beta"}),
    refused={
        "anthropic-workspace-id": _NO_WORKSPACES,
        "anthropic-user-profile-id": (
            "user profiles are not implemented by the reference server; omit the header"
        ),
    },
)
