"""The Memory Store client: one set of operations over the three dialects.

Writes whose outcome is unknown (the request was sent again after a 5xx or a lost connection) are
settled from what the store holds, never repeated blindly (docs/design.md §3):

- create memory answered 409: the path is read back; the same content there means done.
- update answered 409: the memory is read back; the intended content there means done (also on the
  first attempt: the store already holds what the caller wants, as Anthropic answers 200).
- delete answered 404 after a retry: done.
- redact answered 409: the version is read back; redacted means done.
- archive answered 409: the store is read back; archived means done.
- create store: Forward dedupes on the ``Idempotency-Key``, which is kept across retries and can be
  derived from a stable request id so that a re-run reuses it. The Cloud and Anthropic dialects have
  no such key: before sending again, the client looks for a store that appeared since its first
  attempt with the same name, description and metadata, and takes it.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import math
import uuid
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from memsync.api._errors import (
    Conflict,
    InvalidResponse,
    NotFound,
    PathConflict,
    PreconditionFailed,
    StoreArchived,
    refine,
)
from memsync.api._fetch import Job, Pace, run_jobs
from memsync.api._models import Cursor, Memory, MemoryVersion, Mount, Page, Session, Store, StoreStatus
from memsync.api._pages import DEFAULT_MAX_PAGES, VersionListing, walk_pages
from memsync.api._transport import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_TIMEOUT_S,
    Answer,
    RetryPolicy,
    Transport,
    display_url,
)
from memsync.api._wire import Wire, verify_content
from memsync.errors import ApiError, UsageError
from memsync.rules import (
    Dialect,
    check_content,
    check_memory_metadata,
    check_new_store,
    check_store_metadata,
    sha256_hex,
)

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("memsync.api")

PAGE_SIZE = 100  # the largest page every dialect serves
FULL_PAGE_SIZE = 20  # Anthropic's cap on a page with view=full
DEFAULT_FETCH_MAX_CONCURRENCY = 16
# Consecutive input versions one Anthropic content job may span; 20 of them at most need content.
_MAX_JOB_VERSIONS = 200
# Anthropic timestamps in filters are padded so that a server storing finer than it prints still matches.
_FILTER_PAD = timedelta(milliseconds=1)


class Client:
    """A Memory Store API client for one dialect, base URL and token. Use it as a context manager.

    Thread-safe for concurrent calls. Paths are canonical relative paths (``notes/a.md``) whatever the
    dialect; Anthropic's leading ``/`` is added and removed here.
    """

    def __init__(
        self,
        dialect: Dialect,
        base_url: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_pages: int = DEFAULT_MAX_PAGES,
        fetch_concurrency: int | None = None,
        fetch_max_concurrency: int = DEFAULT_FETCH_MAX_CONCURRENCY,
        max_connections: int | None = None,
        transport: httpx.BaseTransport | None = None,
        proxy: str | None = None,
        ca_bundle: Path | None = None,
        allow_plain_http: bool = False,
    ) -> None:
        """``fetch_concurrency``: requests in flight in :meth:`fetch_contents`; None adapts it to the
        observed latency, up to ``fetch_max_concurrency``. ``max_connections``: the connection pool's
        size (default: one fetch's requests in flight, plus 4); a client whose :meth:`share` copies
        work for N stores at once wants N times that. ``transport`` replaces the network (tests).
        ``proxy``: a URL, "" for none, None for the environment's; ``ca_bundle`` and
        ``allow_plain_http``: memsync.api._network."""
        self._dialect = Dialect(dialect)
        self._wire = Wire(self._dialect)
        self._http = Transport(
            self._wire,
            base_url,
            token,
            timeout=timeout,
            retry=retry,
            max_body_bytes=max_body_bytes,
            max_connections=max_connections or max(fetch_max_concurrency, fetch_concurrency or 1) + 4,
            transport=transport,
            proxy=proxy,
            ca_bundle=ca_bundle,
            allow_plain_http=allow_plain_http,
        )
        self._max_pages = max_pages
        self._fetch_concurrency = fetch_concurrency
        self._fetch_max_concurrency = max(fetch_max_concurrency, fetch_concurrency or 1)

    # --- lifecycle and counters ----------------------------------------------------------------

    @property
    def dialect(self) -> Dialect:
        return self._dialect

    @property
    def base_url(self) -> str:
        """The API root requests go to (base URL and the dialect's prefix), without credentials."""
        return display_url(self._http.base_url)

    @property
    def request_count(self) -> int:
        """HTTP requests this client has sent, retries included (benchmarks compare it to the minimum)."""
        return self._http.request_count

    @property
    def retry_count(self) -> int:
        return self._http.retry_count

    def close(self) -> None:
        """Close the connection pool (a :meth:`share` copy leaves its original's open)."""
        self._http.close()

    def share(self) -> Client:
        """A client over this one's connection pool, token and settings, with its own request counters.

        Stores worked on at once each get one: :attr:`request_count` then counts one store's requests
        (the budgets of docs/design.md §5 are per store), while keep-alive connections are reused across
        stores. Closing the copy leaves the pool open; close this client when every copy is done.
        """
        twin = copy.copy(self)
        twin._http = self._http.share()
        return twin

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<memsync.api.Client {self._dialect.value} {self.base_url}>"

    # --- stores --------------------------------------------------------------------------------

    def list_stores(
        self, *, system_managed: bool | None = None, include_archived: bool = False
    ) -> Iterator[Store]:
        """Stores, lazily. ``system_managed`` True/False keeps only (non-)system-managed default stores
        (only Forward has any); archived stores only with ``include_archived``; deleted ones never."""
        params: dict[str, str] = {}
        if system_managed is not None and self._dialect is Dialect.FORWARD:
            params["system_managed"] = "true" if system_managed else "false"
        if include_archived and self._dialect is Dialect.ANTHROPIC:
            params["include_archived"] = "true"
        for page in self._pages(self._wire.stores(), params, self._wire.store, PAGE_SIZE):
            for store in page.items:
                if store.status is StoreStatus.DELETED:
                    continue
                if store.archived and not include_archived:
                    continue
                if system_managed is not None and store.system_managed is not system_managed:
                    continue
                yield store

    def get_store(self, store_id: str) -> Store:
        return self._wire.store(self._call("GET", self._wire.stores(store_id)).data)

    def create_store(
        self,
        name: str,
        *,
        description: str = "",
        metadata: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
        request_id: str | None = None,
    ) -> Store:
        """Create a store, at most once.

        The ``Idempotency-Key`` is ``idempotency_key``, else derived from ``request_id`` (a stable id the
        caller keeps, so that a re-run after a crash sends the same key), else a fresh random key; it is
        the same on every retry of this call.
        """
        # Cloud keeps the name trimmed and requires a description: refused here, before any request.
        name, description = check_new_store(name, description, self._dialect)
        body: dict[str, Any] = {"name": name, "description": description}
        if metadata is not None:
            body["metadata"] = check_store_metadata(metadata, self._dialect)
        if idempotency_key is None:
            if request_id is not None:
                digest = hashlib.sha256(request_id.encode("utf-8")).hexdigest()[:32]
                idempotency_key = f"memsync-{digest}"
            else:
                idempotency_key = f"memsync-{uuid.uuid4().hex}"
        headers = {"Idempotency-Key": idempotency_key}
        if self._dialect is Dialect.FORWARD:
            try:
                answer = self._call("POST", self._wire.stores(), json_body=body, headers=headers)
            except Conflict as exc:
                raise refine(
                    exc, Conflict, f"Idempotency-Key {idempotency_key} was used before for a different store"
                ) from None
            return self._wire.store(answer.data)
        known = {store.id for store in self.list_stores(include_archived=True)}

        def find_created() -> Store | None:
            for store in self.list_stores(include_archived=True):
                if (
                    store.id not in known
                    and store.name == name
                    and store.description == description
                    and all(store.metadata.get(k) == v for k, v in (metadata or {}).items())
                ):
                    log.info("store create settled: %s appeared since the first attempt", store.id)
                    return store
            return None

        answer = self._http.request(
            "POST", self._wire.stores(), json_body=body, headers=headers, before_retry=find_created
        )
        if isinstance(answer.settled, Store):
            return answer.settled
        return self._wire.store(answer.data)

    def archive_store(self, store_id: str) -> Store:
        """Archive a store; an already archived store is returned as it is."""
        try:
            answer = self._call("POST", self._wire.stores(store_id, "archive"))
        except Conflict as exc:
            store = self.get_store(store_id)
            if store.archived:
                return store
            if store.mount_count:
                note = f"the store is mounted by {store.mount_count} (identity, template) pairs"
                raise refine(exc, Conflict, note) from None
            raise
        return self._wire.store(answer.data)

    # --- mounts (Forward) -----------------------------------------------------------------------

    def list_mounts(self, identity_id: str, template_id: str) -> list[Mount]:
        """The stores mounted for an (identity, template), in the API's order: the default store first,
        then by mount time (seed 000). That order is the order a session merges their memories in."""
        self._require_mounts()
        path = self._wire.mounts(identity_id, template_id)
        mounts: list[Mount] = []
        params: dict[str, str] = {}
        # At most 11 mounts exist per pair, so one page is the rule; a service that pages anyway is
        # followed by its token, or after the last store id, and a page that gives no way on is refused.
        for _ in range(self._max_pages):
            data = self._call("GET", path, params=params).data
            page = self._wire.page(data, self._wire.mount)
            mounts.extend(page.items)
            if page.next_cursor is None:
                return mounts
            cursor = page.next_cursor
            if cursor.param == "after_id" and page.items:
                cursor = cursor._replace(value=page.items[-1].store_id)
            params = {cursor.param: cursor.value}
        raise InvalidResponse(f"the mounts of {identity_id}/{template_id} ran past {self._max_pages} pages")

    def mount_store(self, identity_id: str, template_id: str, store_id: str) -> Mount:
        """Mount ``store_id`` (read-only) for an (identity, template); :class:`Conflict` when it is
        mounted already, archived, or the pair has 10 explicit mounts."""
        self._require_mounts()
        body = {"memory_store_id": store_id}
        try:
            answer = self._call("POST", self._wire.mounts(identity_id, template_id), json_body=body)
        except Conflict as exc:
            if exc.attempts > 1:
                # An earlier attempt may have mounted it and lost the answer: settled if it is there.
                for mount in self.list_mounts(identity_id, template_id):
                    if mount.store_id == store_id:
                        log.info("mount of %s settled: an earlier attempt mounted it", store_id)
                        return mount
            raise
        except NotFound as exc:
            raise refine(
                exc, NotFound, f"store {store_id} does not exist or this token cannot see it"
            ) from None
        return self._wire.mount(answer.data)

    def unmount_store(self, identity_id: str, template_id: str, store_id: str) -> None:
        """Unmount ``store_id`` from an (identity, template). :class:`NotFound` when it is not mounted;
        :class:`Conflict` for the default store, whose mount the system manages."""
        self._require_mounts()
        try:
            self._call("DELETE", self._wire.mounts(identity_id, template_id, store_id))
        except NotFound as exc:
            if exc.attempts > 1:
                return  # an earlier attempt unmounted it and its answer was lost
            raise

    def _require_mounts(self) -> None:
        if self._dialect is not Dialect.FORWARD:
            raise UsageError(
                f"mounts exist on the Forward dialect only; this client speaks {self._dialect.value},"
                " whose stores are not mounted into sessions"
            )

    # --- sessions (Cloud, Anthropic) -------------------------------------------------------------

    def get_session(self, session_id: str) -> Session:
        """A session's attached memory stores, in the API's order, and its exact ``created_at``.

        :class:`NotFound` when the API does not know the session. Forward has no sessions to read (an
        (identity, template)'s mounts stand for them): a :class:`~memsync.errors.UsageError`.
        """
        if self._dialect is Dialect.FORWARD:
            raise UsageError(
                "sessions can be read on the cloud and anthropic dialects only; on forward a session sees"
                " the stores mounted for its (identity, template)"
            )
        try:
            answer = self._call("GET", self._wire.sessions(session_id), headers=self._wire.session_headers())
        except NotFound as exc:
            raise refine(
                exc, NotFound, f"session {session_id} does not exist or this token cannot see it"
            ) from None
        session = self._wire.session(answer.data)
        if session.id != session_id:
            raise InvalidResponse(f"asked for session {session_id}, the API returned {session.id}")
        return session

    # --- memories ------------------------------------------------------------------------------

    def list_memories(self, store_id: str, path_prefix: str | None = None) -> Iterator[Memory]:
        """Memories (without content), lazily, in the dialect's order. ``path_prefix`` is a plain string
        prefix of the relative path, whatever the dialect (``a/b`` matches ``a/bc.md``)."""
        params: dict[str, str] = {}
        if path_prefix:
            if self._dialect is Dialect.ANTHROPIC:
                # Anthropic matches whole segments of a prefix ending in '/': ask for the folder, filter here.
                folder = path_prefix[: path_prefix.rfind("/") + 1]
                if folder:
                    params["path_prefix"] = "/" + folder
            else:
                params["path_prefix"] = path_prefix
        for page in self._pages(self._wire.memories(store_id), params, self._wire.memory, PAGE_SIZE):
            for memory in page.items:
                if path_prefix is None or memory.path.startswith(path_prefix):
                    yield memory

    def find_memory(self, store_id: str, path: str) -> Memory | None:
        """The live memory at exactly ``path`` (without content), or None."""
        for memory in self.list_memories(store_id, path_prefix=path):
            if memory.path == path:
                return memory
        return None

    def get_memory(self, store_id: str, memory_id: str) -> Memory:
        """A live memory with its content (checked against its hash)."""
        answer = self._call("GET", self._wire.memories(store_id, memory_id))
        memory = self._parse_memory(answer)
        if memory.content is None:
            raise InvalidResponse(f"the API returned memory {memory_id} without its content")
        return memory

    def create_memory(
        self, store_id: str, path: str, content: str, *, metadata: Mapping[str, str] | None = None
    ) -> Memory:
        """Create a memory at ``path``. :class:`PathConflict` if a live memory holds the path."""
        body: dict[str, Any] = {
            "path": self._wire.path_out(path),
            "content": check_content(content, self._dialect),
        }
        if metadata is not None:
            body["metadata"] = check_memory_metadata(metadata, self._dialect)
        try:
            answer = self._call("POST", self._wire.memories(store_id), json_body=body)
        except Conflict as exc:
            return self._settle_create(store_id, path, content, exc)
        return _with_content(self._parse_memory(answer), content)

    def update_memory(
        self, store_id: str, memory_id: str, content: str, *, expected_sha256: str | None
    ) -> Memory:
        """Replace a memory's content if it still hashes to ``expected_sha256`` (None: unconditionally).

        :class:`PreconditionFailed` when it does not. Cloud: read the memory, compare its hash, then
        ``PUT`` with its integer ``version``, which the server checks, so no write slips in between (a
        memory answered without ``version`` is updated with ``POST`` and the hash just read instead).
        """
        check_content(content, self._dialect)
        if self._dialect is Dialect.CLOUD:
            return self._update_cloud(store_id, memory_id, content, expected_sha256)
        body: dict[str, Any] = {"content": content}
        if expected_sha256 is not None:
            if self._dialect is Dialect.ANTHROPIC:
                body["precondition"] = {"type": "content_sha256", "content_sha256": expected_sha256}
            else:
                body["content_sha256"] = expected_sha256
        try:
            answer = self._call("POST", self._wire.memories(store_id, memory_id), json_body=body)
        except Conflict as exc:
            return self._settle_update(store_id, memory_id, content, expected_sha256, exc)
        return _with_content(self._parse_memory(answer), content)

    def rename_memory(
        self, store_id: str, memory_id: str, new_path: str, *, expected_sha256: str | None
    ) -> Memory:
        """Move a memory to ``new_path``, if its content still hashes to ``expected_sha256``.

        Anthropic renames natively (the id stays). Forward and Cloud cannot change a path: the memory is
        created at the new path first and the old one deleted afterwards (with its hash as precondition),
        so an interruption leaves both copies, never neither. The returned memory has the new id there.
        """
        wire_path = self._wire.path_out(new_path)
        if self._dialect is Dialect.ANTHROPIC:
            body: dict[str, Any] = {"path": wire_path}
            if expected_sha256 is not None:
                body["precondition"] = {"type": "content_sha256", "content_sha256": expected_sha256}
            try:
                answer = self._call("POST", self._wire.memories(store_id, memory_id), json_body=body)
            except Conflict as exc:
                return self._settle_rename(store_id, memory_id, new_path, expected_sha256, exc)
            return self._parse_memory(answer)
        current = self.get_memory(store_id, memory_id)
        assert current.content is not None
        if expected_sha256 is not None and current.content_sha256 != expected_sha256:
            raise _stale(memory_id, expected_sha256, current.content_sha256)
        if current.path == new_path:
            return current
        created = self.create_memory(store_id, new_path, current.content, metadata=current.metadata or None)
        try:
            self.delete_memory(store_id, memory_id, expected_sha256=current.content_sha256)
        except ApiError as exc:
            exc.message = (
                f"{exc.message}; renaming {current.path!r} to {new_path!r} created {created.id} there but"
                f" could not delete the original {memory_id}, which stays"
            )
            raise
        return created

    def delete_memory(self, store_id: str, memory_id: str, *, expected_sha256: str | None) -> None:
        """Delete a memory if its content still hashes to ``expected_sha256`` (None: unconditionally).

        Anthropic and Cloud check the hash in the delete itself (``expected_content_sha256``), so no
        write can slip in between. Forward has no precondition on delete: the memory is read and its
        hash compared first, and a write that lands between that read and the delete is lost with the
        memory (its version stays in the history); the window is one round trip.
        """
        params: dict[str, str] = {}
        if expected_sha256 is not None:
            if self._dialect is Dialect.FORWARD:
                current = self.get_memory(store_id, memory_id)
                if current.content_sha256 != expected_sha256:
                    raise _stale(memory_id, expected_sha256, current.content_sha256)
            else:
                params["expected_content_sha256"] = expected_sha256
        try:
            self._call("DELETE", self._wire.memories(store_id, memory_id), params=params)
        except NotFound as exc:
            if exc.attempts > 1:
                return  # an earlier attempt deleted it and its answer was lost
            raise
        except Conflict as exc:
            raise self._explain_conflict(store_id, memory_id, expected_sha256, exc) from None

    # --- versions ------------------------------------------------------------------------------

    def iter_versions(
        self,
        store_id: str,
        *,
        memory_id: str | None = None,
        full: bool = False,
        page_size: int | None = None,
        session_id: str | None = None,
        created_before: datetime | None = None,
    ) -> VersionListing:
        """Versions newest first, paged lazily: stop iterating at the first version you already have.

        ``full`` asks for contents in the listing where the dialect can (Anthropic ``view=full``, 20 per
        page); elsewhere contents stay None and :meth:`fetch_contents` gets them. The listing's
        ``out_of_order`` flag tells whether it broke the (``created_at``, ``id``) order
        (docs/api-contract.md §6).

        ``session_id`` keeps the versions that session wrote (Cloud, Anthropic). ``created_before``
        keeps exactly those whose ``created_at`` is at or before that instant (Cloud and Anthropic):
        the API is asked for ``created_at[lte]`` a millisecond later, so a server that keeps finer
        times than it prints leaves none out, and the few versions of that last millisecond are
        dropped here. Forward filters on neither: a :class:`UsageError`.
        """
        params: dict[str, str] = {}
        if memory_id is not None:
            params["memory_id"] = memory_id
        if (session_id is not None or created_before is not None) and self._dialect is Dialect.FORWARD:
            raise UsageError(
                "the forward dialect cannot list versions by session or creation time; list them all"
                " and compare each version's created_at"
            )
        if session_id is not None:
            params["session_id"] = session_id
        if created_before is not None:
            if created_before.tzinfo is None:
                raise UsageError("created_before must be a timezone-aware datetime (UTC), not a naive one")
            params["created_at[lte]"] = self._wire.timestamp_out(created_before.astimezone(UTC), _FILTER_PAD)
        size = max(1, min(page_size or PAGE_SIZE, PAGE_SIZE))
        if full and self._dialect is Dialect.ANTHROPIC:
            params["view"] = "full"
            size = min(size, FULL_PAGE_SIZE)
        pages = self._pages(self._wire.versions(store_id), params, self._wire.version, size)
        if created_before is not None:
            pages = _created_up_to(pages, created_before)
        return VersionListing(pages, what=f"store {store_id}")

    def get_version(self, store_id: str, version_id: str) -> MemoryVersion:
        """One version with its content (None on a tombstone or a redacted version)."""
        answer = self._call("GET", self._wire.versions(store_id, version_id))
        version = self._wire.version(answer.data)
        if version.id != version_id:
            raise InvalidResponse(f"asked for version {version_id}, the API returned {version.id}")
        return version

    def redact_version(self, store_id: str, version_id: str) -> MemoryVersion:
        """Remove one version's content for good. A version already redacted is returned as it is."""
        try:
            answer = self._call("POST", self._wire.versions(store_id, version_id, "redact"))
        except Conflict:
            version = self.get_version(store_id, version_id)
            if version.redacted:
                return version
            raise
        return self._wire.version(answer.data)

    def fetch_contents(
        self, store_id: str, versions: Iterable[MemoryVersion], *, concurrency: int | None = None
    ) -> Iterator[tuple[MemoryVersion, str | None]]:
        """``(version, content)`` for each of ``versions``, in input order, lazily.

        Contents are checked against each input version's ``content_sha256``
        (:class:`ContentMismatch` names the version). A version that already carries its content costs
        no request; a tombstone or a redacted version yields None. The yielded version is the freshest
        known: one redacted since it was listed comes back redacted, with None. On Anthropic, contents
        are listed 20 per request (``view=full``) instead of fetched one by one.

        ``concurrency`` fixes the requests in flight (default: the client's setting, else adaptive).
        """
        pace = Pace(concurrency or self._fetch_concurrency, self._fetch_max_concurrency)
        for job, fetched in run_jobs(self._content_jobs(store_id, versions), pace):
            for version in job.versions:
                latest = fetched.get(version.id, version)
                if not latest.has_content:
                    yield latest, None
                    continue
                content = latest.content
                if content is None:
                    raise InvalidResponse(f"the API returned version {version.id} without its content")
                expected = version.content_sha256 or latest.content_sha256
                if expected is None:
                    raise InvalidResponse(f"version {version.id} has content but no content_sha256")
                verify_content(version.id, content, expected)
                yield latest, content

    # --- internals -----------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Answer:
        return self._http.request(method, path, params=params, json_body=json_body, headers=headers)

    def _pages(self, path: str, params: Mapping[str, str], parse: Any, size: int) -> Iterator[Page[Any]]:
        def fetch(cursor: Cursor | None) -> Page[Any]:
            answer = self._call("GET", path, params={**params, **self._wire.page_params(size, cursor)})
            return self._wire.page(answer.data, parse)

        return walk_pages(fetch, what=path, max_pages=self._max_pages)

    def _parse_memory(self, answer: Answer) -> Memory:
        memory = self._wire.memory(answer.data)
        if memory is None:
            raise InvalidResponse("the API answered a memory_prefix where a memory was expected")
        return memory

    def _content_jobs(self, store_id: str, versions: Iterable[MemoryVersion]) -> Iterator[Job]:
        """Group input versions into jobs: one request per version, or one listing per 20 on Anthropic."""
        per_job = FULL_PAGE_SIZE if self._dialect is Dialect.ANTHROPIC else 1
        batch: list[MemoryVersion] = []
        needing: list[MemoryVersion] = []
        for version in versions:
            batch.append(version)
            if version.has_content and version.content is None:
                needing.append(version)
            if len(needing) >= per_job or len(batch) >= _MAX_JOB_VERSIONS:
                yield self._job(store_id, batch, needing)
                batch, needing = [], []
        if batch:
            yield self._job(store_id, batch, needing)

    def _job(self, store_id: str, batch: list[MemoryVersion], needing: list[MemoryVersion]) -> Job:
        if not needing:
            return Job(batch)
        wanted = list(needing)
        if self._dialect is Dialect.ANTHROPIC and len(wanted) > 1:
            return Job(batch, lambda: self._list_contents(store_id, wanted))
        return Job(batch, lambda: {v.id: self.get_version(store_id, v.id) for v in wanted})

    def _list_contents(self, store_id: str, wanted: list[MemoryVersion]) -> dict[str, MemoryVersion]:
        """Anthropic: the contents of ``wanted`` from a full listing of the time range they span."""
        ids = {v.id for v in wanted}
        oldest = min(v.created_at for v in wanted)
        newest = max(v.created_at for v in wanted)
        params = {
            "view": "full",
            "created_at[gte]": self._wire.timestamp_out(oldest, -_FILTER_PAD),
            "created_at[lte]": self._wire.timestamp_out(newest, _FILTER_PAD),
        }
        memories = {v.memory_id for v in wanted}
        if len(memories) == 1:
            params["memory_id"] = memories.pop()
        found: dict[str, MemoryVersion] = {}
        # Other versions in the same range cost pages; beyond this budget the rest is fetched one by one.
        budget = math.ceil(len(wanted) / FULL_PAGE_SIZE) + 2
        pages = self._pages(self._wire.versions(store_id), params, self._wire.version, FULL_PAGE_SIZE)
        for number, page in enumerate(pages, start=1):
            found.update((v.id, v) for v in page.items if v.id in ids)
            if len(found) == len(ids) or number >= budget:
                break
        for version in wanted:
            if version.id not in found:
                found[version.id] = self.get_version(store_id, version.id)
        return found

    def _settle_create(self, store_id: str, path: str, content: str, exc: Conflict) -> Memory:
        existing = self.find_memory(store_id, path)
        if existing is not None:
            if exc.attempts > 1 and existing.content_sha256 == sha256_hex(content):
                log.info("create of %r settled: an earlier attempt created %s", path, existing.id)
                return _with_content(existing, content)
            error = refine(exc, PathConflict, f"memory {existing.id} is at {path!r}")
            error.path = path
            raise error from None
        if isinstance(exc, PathConflict):
            exc.path = path
            raise exc
        raise self._archived_or(store_id, exc) from None

    def _settle_update(
        self, store_id: str, memory_id: str, content: str, expected: str | None, exc: Conflict
    ) -> Memory:
        current = self.get_memory(store_id, memory_id)
        if current.content_sha256 == sha256_hex(content):
            return current
        raise self._explain_conflict(store_id, memory_id, expected, exc, current) from None

    def _settle_rename(
        self, store_id: str, memory_id: str, new_path: str, expected: str | None, exc: Conflict
    ) -> Memory:
        current = self.get_memory(store_id, memory_id)
        if current.path == new_path and (expected is None or current.content_sha256 == expected):
            return current
        if expected is not None and current.content_sha256 != expected:
            raise _stale(memory_id, expected, current.content_sha256, exc) from None
        holder = self.find_memory(store_id, new_path)
        if holder is not None or isinstance(exc, PathConflict):
            error = refine(exc, PathConflict, None if holder is None else f"memory {holder.id} is there")
            error.path = new_path
            raise error from None
        raise self._archived_or(store_id, exc) from None

    def _update_cloud(self, store_id: str, memory_id: str, content: str, expected: str | None) -> Memory:
        intended = sha256_hex(content)
        current = self.get_memory(store_id, memory_id)
        if current.content_sha256 == intended:
            return current
        if expected is not None and current.content_sha256 != expected:
            raise _stale(memory_id, expected, current.content_sha256)
        method, body = "PUT", {"content": content, "version": current.version}
        if current.version is None:
            # Services of the official SDK's generation answer without the integer version; they take
            # the Forward-style update, with the hash just read as its precondition.
            method, body = "POST", {"content": content, "content_sha256": current.content_sha256}
        try:
            answer = self._call(method, self._wire.memories(store_id, memory_id), json_body=body)
        except Conflict as exc:
            return self._settle_update(store_id, memory_id, content, current.content_sha256, exc)
        return _with_content(self._parse_memory(answer), content)

    def _explain_conflict(
        self,
        store_id: str,
        memory_id: str,
        expected: str | None,
        exc: Conflict,
        current: Memory | None = None,
    ) -> ApiError:
        """The precise error for a 409 on a write to ``memory_id``: stale hash, archived store, or as is."""
        if isinstance(exc, PathConflict | StoreArchived):
            return exc
        if expected is not None:
            if current is None:
                try:
                    current = self.get_memory(store_id, memory_id)
                except NotFound:
                    current = None
            if current is not None and current.content_sha256 != expected:
                return _stale(memory_id, expected, current.content_sha256, exc)
        if isinstance(exc, PreconditionFailed):
            return exc
        return self._archived_or(store_id, exc)

    def _archived_or(self, store_id: str, exc: Conflict) -> ApiError:
        if self.get_store(store_id).archived:
            return refine(exc, StoreArchived, f"store {store_id} is archived: its memories are read-only")
        return exc


def _created_up_to(pages: Iterator[Page[MemoryVersion]], instant: datetime) -> Iterator[Page[MemoryVersion]]:
    for page in pages:
        kept = [v for v in page.items if v.created_at <= instant]
        yield page if len(kept) == len(page.items) else page.model_copy(update={"items": kept})


def _with_content(memory: Memory, content: str) -> Memory:
    """``memory`` with the content just written, when the answer left it out (Anthropic's basic view)."""
    if memory.content is None and memory.content_sha256 == sha256_hex(content):
        return memory.model_copy(update={"content": content})
    return memory


def _stale(memory_id: str, expected: str, current: str, cause: ApiError | None = None) -> PreconditionFailed:
    message = (
        f"memory {memory_id} changed: expected content_sha256 {expected}, the store has {current};"
        " pull, then try again"
    )
    if cause is None:
        error = PreconditionFailed(message)
    else:
        error = refine(cause, PreconditionFailed)
        error.message = f"{message} ({cause.message})"
    error.current_sha256 = current
    return error


def open_client(dialect: Dialect, base_url: str, token: str, **options: Any) -> Client:
    """A :class:`Client` for ``dialect`` at ``base_url`` (without the dialect's prefix) using ``token``.

    ``options`` are the keyword arguments of :class:`Client`: ``timeout``, ``retry`` (a
    :class:`RetryPolicy`), ``max_body_bytes``, ``max_pages``, ``fetch_concurrency``,
    ``fetch_max_concurrency``, ``transport``.
    """
    return Client(dialect, base_url, token, **options)
