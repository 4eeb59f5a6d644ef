"""Seed files: stores, memories and whole version histories at chosen times, by chosen actors.

The format is documented in ``docs/server.md``. A seed file is applied once per database (its
SHA-256 is recorded), in one transaction: a file with an error changes nothing and names the element
at fault. Paths, metadata and content follow the rules of each store's dialect, as over HTTP.
"""

from __future__ import annotations

import difflib
import hashlib
import types
import typing
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

from memsync.errors import ConfigError, RuleViolation
from memsync.rules import Dialect

from .clock import parse_timestamp
from .problems import ApiProblem
from .storage import Actor, Engine, SessionStoreRequest
from .wire import ActorModel


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SeedEvent(_Strict):
    op: Literal["create", "update", "delete"]
    at: str | None = Field(default=None, description="RFC 3339; default: the time of loading.")
    content: str | None = None
    path: str | None = Field(default=None, description="create: the path; update: a rename (Anthropic).")
    metadata: dict[str, str] | None = None
    actor: ActorModel | None = None
    redacted_at: str | None = Field(default=None, description="Redact the version this event writes.")
    redacted_by: ActorModel | None = None


class SeedMemory(_Strict):
    path: str
    content: str | None = Field(default=None, description="Shorthand for a history of one create.")
    metadata: dict[str, str] | None = None
    history: list[SeedEvent] = Field(default_factory=list)


class SeedMount(_Strict):
    identity_id: str
    template_id: str


class SeedStore(_Strict):
    dialect: Dialect
    name: str
    description: str = ""
    metadata: dict[str, str] | None = None
    created_at: str | None = None
    system_managed: bool = False
    identity_id: str | None = None
    template_id: str | None = None
    archived_at: str | None = None
    mounts: list[SeedMount] = Field(default_factory=list)
    memories: list[SeedMemory] = Field(default_factory=list)


class SeedSessionStore(_Strict):
    store: str = Field(description="The name of a store of this seed file, in the session's dialect.")
    access: Literal["read_write", "read_only"] = "read_write"
    instructions: str | None = None
    mount_path: str | None = Field(default=None, description="Cloud only: returned as given.")


class SeedSession(_Strict):
    dialect: Literal[Dialect.CLOUD, Dialect.ANTHROPIC]
    id: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,255}$", description="Default: a new sesn_ id."
    )
    agent: str = "agent_seed"
    created_at: str | None = None
    stores: list[SeedSessionStore] = Field(default_factory=list)


class SeedFile(_Strict):
    stores: list[SeedStore] = Field(default_factory=list)
    sessions: list[SeedSession] = Field(default_factory=list)


Loc = tuple[int | str, ...]


def _where(loc: Loc) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")


def _loc_order(loc: Loc) -> tuple[tuple[int, int, str], ...]:
    """Document order for locations: list indexes numerically, keys by name."""
    return tuple((0, part, "") if isinstance(part, int) else (1, 0, part) for part in loc)


def _model_at(loc: Loc) -> type[BaseModel] | None:
    """The seed model that validates the object at ``loc``, or None where it is no seed model."""
    current: Any = SeedFile
    for part in loc:
        if isinstance(part, int):
            if typing.get_origin(current) is not list:
                return None
            current = typing.get_args(current)[0]
        else:
            if not (isinstance(current, type) and issubclass(current, BaseModel)):
                return None
            field = current.model_fields.get(part)
            if field is None:
                return None
            current = field.annotation
            if typing.get_origin(current) in (typing.Union, types.UnionType):
                members = [arg for arg in typing.get_args(current) if arg is not type(None)]
                current = members[0] if len(members) == 1 else None
    if isinstance(current, type) and issubclass(current, BaseModel):
        return current
    return None


def describe_seed_errors(errors: Sequence[ErrorDetails]) -> str:
    """One line naming every error of a seed file, the same whatever order pydantic reports them in.

    Unknown (misspelt) keys come first, each paired with the missing or valid key it is closest to
    ("did you mean"); a required key paired that way is not reported again. Then the remaining
    missing keys and every other error, in document order.
    """
    unknown: dict[Loc, list[str]] = {}
    missing: dict[Loc, list[str]] = {}
    others: list[tuple[Loc, str]] = []
    for error in errors:
        loc: Loc = tuple(error["loc"])
        if error["type"] == "extra_forbidden" and loc and isinstance(loc[-1], str):
            unknown.setdefault(loc[:-1], []).append(loc[-1])
        elif error["type"] == "missing" and loc and isinstance(loc[-1], str):
            missing.setdefault(loc[:-1], []).append(loc[-1])
        else:
            others.append((loc, error["msg"].removeprefix("Value error, ")))
    first: list[tuple[Loc, str]] = []
    for parent, keys in unknown.items():
        model = _model_at(parent)
        valid = list(model.model_fields) if model is not None else []
        wanted = sorted(missing.get(parent, []))
        for key in sorted(keys):
            required = difflib.get_close_matches(key, wanted, n=1, cutoff=0.6)
            optional = difflib.get_close_matches(key, [k for k in valid if k not in wanted], n=1, cutoff=0.6)
            if required:
                wanted.remove(required[0])
                missing[parent].remove(required[0])
                message = f"unknown key (did you mean {required[0]!r}? it is required)"
            elif optional:
                message = f"unknown key (did you mean {optional[0]!r}?)"
            elif valid:
                message = f"unknown key (valid keys: {', '.join(valid)})"
            else:
                message = "unknown key"
            first.append(((*parent, key), message))
    rest = [((*parent, key), "required key missing") for parent, keys in missing.items() for key in keys]
    rest += others
    problems = sorted(first, key=lambda item: _loc_order(item[0]))
    problems += sorted(rest, key=lambda item: (_loc_order(item[0]), item[1]))
    return "; ".join(f"{_where(loc) or 'the file'}: {message}" for loc, message in problems)


def _actor(model: ActorModel | None) -> Actor | None:
    if model is None:
        return None
    wire = model.model_dump()
    kind = wire.pop("type")
    return Actor(kind, next(iter(wire.values())))


@contextmanager
def _blame(where: str) -> Iterator[None]:
    """Turn a refusal of the engine into a ConfigError naming the seed element at fault."""
    try:
        yield
    except RuleViolation as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except ApiProblem as exc:
        raise ConfigError(f"{where}: {exc.message}") from None


def _time(where: str, text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return parse_timestamp(text)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _apply_store(engine: Engine, where: str, seed: SeedStore) -> str:
    dialect = seed.dialect
    if seed.system_managed and (seed.identity_id is None or dialect is not Dialect.FORWARD):
        raise ConfigError(f"{where}: a system-managed store is a Forward store and needs an identity_id")
    created_at = _time(f"{where}.created_at", seed.created_at)
    with _blame(where):
        store, _ = engine.create_store(
            dialect,
            name=seed.name,
            description=seed.description,
            metadata=seed.metadata,
            system_managed=seed.system_managed,
            identity_id=seed.identity_id,
            template_id=seed.template_id,
            at_ms=created_at,
        )
    for index, memory in enumerate(seed.memories):
        _apply_memory(engine, f"{where}.memories[{index}]", dialect, store.id, memory)
    for index, mount in enumerate(seed.mounts):
        if dialect is not Dialect.FORWARD:
            raise ConfigError(f"{where}.mounts: only Forward stores can be mounted")
        with _blame(f"{where}.mounts[{index}]"):
            engine.mount(mount.identity_id, mount.template_id, store.id)
    return store.id


def _archive_store(engine: Engine, where: str, seed: SeedStore, store_id: str) -> None:
    if seed.archived_at is not None:
        archived_at = _time(f"{where}.archived_at", seed.archived_at)
        with _blame(f"{where}.archived_at"):
            engine.archive_store(seed.dialect, store_id, at_ms=archived_at)


def _apply_session(
    engine: Engine,
    where: str,
    seed: SeedSession,
    stores: dict[tuple[Dialect, str], tuple[str, SeedStore] | None],
) -> None:
    """A session attaching stores of this file by name. Sessions are made before any store is
    archived, so a session may attach a store archived after it began, never one archived before."""
    created_at = _time(f"{where}.created_at", seed.created_at)
    requests = []
    for index, attached in enumerate(seed.stores):
        here = f"{where}.stores[{index}]"
        key = (seed.dialect, attached.store)
        if key not in stores:
            raise ConfigError(
                f"{here}.store: no {seed.dialect.value} store named {attached.store!r} in this file"
            )
        found = stores[key]
        if found is None:
            raise ConfigError(
                f"{here}.store: several {seed.dialect.value} stores are named {attached.store!r}"
            )
        store_id, store = found
        archived_at = _time(f"{here}.store", store.archived_at)
        if archived_at is not None and archived_at <= (engine.now_ms() if created_at is None else created_at):
            raise ConfigError(f"{here}.store: {attached.store!r} is archived before the session begins")
        if attached.mount_path is not None and seed.dialect is Dialect.ANTHROPIC:
            raise ConfigError(f"{here}.mount_path: Anthropic derives mount paths from store names")
        requests.append(
            SessionStoreRequest(store_id, attached.access, attached.instructions, attached.mount_path)
        )
    with _blame(where):
        engine.create_session(
            seed.dialect,
            agent=seed.agent,
            stores=requests,
            derive_mounts=seed.dialect is Dialect.ANTHROPIC,
            at_ms=created_at,
            session_id=seed.id,
        )


def _apply_memory(engine: Engine, where: str, dialect: Dialect, store_id: str, seed: SeedMemory) -> None:
    history = seed.history or [SeedEvent(op="create", content=seed.content)]
    if history[0].op != "create":
        raise ConfigError(f"{where}.history[0]: a memory's history starts with op 'create'")
    memory_id = ""
    redactions: list[tuple[str, str, int | None, Actor | None]] = []
    for index, event in enumerate(history):
        here = f"{where}.history[{index}]"
        at_ms = _time(f"{here}.at", event.at)
        actor = _actor(event.actor)
        if event.op == "create" and index:
            raise ConfigError(f"{here}: 'create' only starts a history; use a new memory entry")
        with _blame(here):
            if event.op == "create":
                memory = engine.create_memory(
                    dialect,
                    store_id,
                    path=event.path or seed.path,
                    content=event.content if event.content is not None else "",
                    metadata=event.metadata if event.metadata is not None else seed.metadata,
                    actor=actor,
                    at_ms=at_ms,
                )
                memory_id, version_id = memory.id, memory.head_version_id
            elif event.op == "update":
                memory = engine.update_memory(
                    dialect,
                    store_id,
                    memory_id,
                    content=event.content,
                    path=event.path,
                    metadata=event.metadata,
                    actor=actor,
                    at_ms=at_ms,
                )
                version_id = memory.head_version_id
            else:
                version_id = engine.delete_memory(dialect, store_id, memory_id, actor=actor, at_ms=at_ms).id
        if event.redacted_at is not None:
            redacted_at = _time(f"{here}.redacted_at", event.redacted_at)
            redactions.append((here, version_id, redacted_at, _actor(event.redacted_by)))
    for here, version_id, redacted_at, redactor in redactions:
        with _blame(f"{here}.redacted_at"):
            engine.redact_version(dialect, store_id, version_id, actor=redactor, at_ms=redacted_at)


def load_seed(engine: Engine, seed: SeedFile) -> None:
    """Apply ``seed`` in one transaction; raises :class:`ConfigError` naming the element at fault."""
    with engine.transaction():
        made = [_apply_store(engine, f"stores[{index}]", store) for index, store in enumerate(seed.stores)]
        by_name: dict[tuple[Dialect, str], tuple[str, SeedStore] | None] = {}
        for store_id, store in zip(made, seed.stores, strict=True):
            key = (store.dialect, store.name)
            by_name[key] = None if key in by_name else (store_id, store)  # None: the name is ambiguous
        for index, session in enumerate(seed.sessions):
            _apply_session(engine, f"sessions[{index}]", session, by_name)
        for index, (store_id, store) in enumerate(zip(made, seed.stores, strict=True)):
            _archive_store(engine, f"stores[{index}]", store, store_id)


def load_seed_file(engine: Engine, path: Path) -> bool:
    """Apply the seed file at ``path`` unless this database already has it; True if applied."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the seed file {path}: {exc.strerror}") from None
    marker = "seed:" + hashlib.sha256(raw).hexdigest()
    if engine.meta_get(marker) is not None:
        return False
    try:
        seed = SeedFile.model_validate_json(raw)
    except ValidationError as exc:
        raise ConfigError(f"seed file {path}: {describe_seed_errors(exc.errors())}") from None
    try:
        with engine.transaction():
            load_seed(engine, seed)
            engine.meta_set(marker, path.name)
    except ConfigError as exc:
        raise ConfigError(f"seed file {path}: {exc.message}") from None
    return True
