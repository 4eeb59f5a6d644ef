"""The server's own wire models: request bodies it accepts and the objects it answers, per dialect.

Requests are validated by FastAPI against these models (a failure becomes a 400 naming the field,
never a 422) and then by :mod:`memsync.rules` inside the engine. Request models forbid fields they
do not declare (docs/api-contract.md §6: an unknown field is a 400 naming it, never silently
dropped). Responses are rendered as plain dicts by the route adapters for speed and exact control over
which keys appear (list items carry no ``content`` key at all); the response models here document them in
``/openapi.json`` and the tests validate real answers against them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictInt, Tag, field_validator

# --- schema annotations ------------------------------------------------------------------------
# These only describe the rules in /openapi.json (so a schema-driven fuzzer generates valid data);
# memsync.rules enforces them, with messages that name the field. UTF-8 byte limits are given as
# character limits, which is exact for ASCII.

# The end anchor is a lookahead: in Python's re (used by jsonschema and Hypothesis) "$" also
# matches before a final newline, in ECMAScript it does not.
END = r"(?![\s\S])"
NO_CONTROLS = rf"^[^\x00-\x08\x0B\x0C\x0E-\x1F\x7F]*{END}"
# White space as Python's str.strip() sees it (JSON Schema's \s differs between regex dialects).
_WS = r"\t\n\x0b\x0c\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NON_BLANK_NO_CONTROLS = (
    r"^[^\x00-\x08\x0B\x0C\x0E-\x1F\x7F]*"
    rf"[^{_WS}\x00-\x1F\x7F]"
    rf"[^\x00-\x08\x0B\x0C\x0E-\x1F\x7F]*{END}"
)
_SEGMENT = rf"(?!\.\.?(?:/|{END}))[^/\\\x00{_WS}](?:[^/\\\x00]{{0,253}}[^/\\\x00{_WS}])?"
RELATIVE_PATH = rf"^{_SEGMENT}(?:/{_SEGMENT}){{0,57}}{END}"
_ABSOLUTE_SEGMENT = (
    rf"(?!\.\.?(?:/|{END}))[^/\x00-\x1F\x7F-\x9F\u00AD\u0600-\u0605\u061C\u06DD\u070F\u0890\u0891"
    r"\u08E2\u180E\u200B-\u200F\u2028-\u202E\u2060-\u2064\u2066-\u206F\uFEFF\uFFF9-\uFFFB]+"
)
ABSOLUTE_PATH = rf"^(?:/{_ABSOLUTE_SEGMENT}){{1,20}}{END}"
SHA256_HEX = rf"^[0-9a-f]{{64}}{END}"


def _text(pattern: str, *, min_length: int = 0, max_length: int | None = None) -> dict[str, Any]:
    extra: dict[str, Any] = {"pattern": pattern}
    if min_length:
        extra["minLength"] = min_length
    if max_length is not None:
        extra["maxLength"] = max_length
    return extra


def _metadata(
    max_keys: int, *, reserved: tuple[str, ...] = (), nullable_values: bool = False
) -> dict[str, Any]:
    names: dict[str, Any] = {"minLength": 1, "maxLength": 64}
    if reserved:
        names["not"] = {"enum": list(reserved)}
    values: dict[str, Any] = {"type": "string", "maxLength": 512}
    if nullable_values:
        values = {"anyOf": [values, {"type": "null"}]}
    return {"maxProperties": max_keys, "propertyNames": names, "additionalProperties": values}


CONTENT_MAX = 102_400
FORWARD_CONTENT = _text(NO_CONTROLS, min_length=1, max_length=CONTENT_MAX)
ANTHROPIC_CONTENT = _text(NO_CONTROLS, max_length=CONTENT_MAX)
FORWARD_PATH = _text(RELATIVE_PATH, min_length=1, max_length=1024)
STORE_NAME = _text(NON_BLANK_NO_CONTROLS, min_length=1)
STORE_DESCRIPTION = _text(NO_CONTROLS)

# --- errors (docs/api-contract.md §5) ---------------------------------------------------------


class ErrorDetail(BaseModel):
    type: str = Field(description="invalid_request_error, authentication_error, not_found_error, ...")
    message: str


class ErrorEnvelope(BaseModel):
    type: Literal["error"]
    error: ErrorDetail
    request_id: str


class Deleted(BaseModel):
    id: str
    type: str
    deleted: bool


# Who wrote or redacted a version (Anthropic's and Cloud's ``created_by`` / ``redacted_by``).
class SessionActor(BaseModel):
    type: Literal["session_actor"]
    session_id: str


class ApiActor(BaseModel):
    type: Literal["api_actor"]
    api_key_id: str


class UserActor(BaseModel):
    type: Literal["user_actor"]
    user_id: str


class ServiceAccountActor(BaseModel):
    type: Literal["service_account_actor"]
    service_account_id: str


ActorModel = Annotated[SessionActor | ApiActor | UserActor | ServiceAccountActor, Field(discriminator="type")]


# --- Forward and Cloud requests ---------------------------------------------------------------


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StoreCreate(_Request):
    """Cloud store creation (Forward's reserves ``created_by`` and one key)."""

    name: str = Field(json_schema_extra=STORE_NAME)
    description: str | None = Field(
        default="",
        description="null is the empty description (the SDKs send null for None).",
        json_schema_extra=STORE_DESCRIPTION,
    )
    metadata: dict[str, str] | None = Field(default=None, json_schema_extra=_metadata(16))

    @field_validator("description")
    @classmethod
    def _null_is_empty(cls, value: str | None) -> str:
        # Stored as "" so an idempotent create's fingerprint is the same whichever was sent.
        return "" if value is None else value


class StoreMount(_Request):
    """Forward create's ``mount`` (qca ``MemoryStoreCreateMountParam``): mount the new store at once."""

    identity_id: str = Field(min_length=1)
    template_id: str = Field(min_length=1)
    access: Literal["read_only", "read_write"] = Field(
        default="read_only",
        description="Explicit mounts are always read_only (seed 000); read_write is refused.",
        json_schema_extra={"enum": ["read_only"]},
    )


class ForwardStoreCreate(StoreCreate):
    metadata: dict[str, str] | None = Field(
        default=None,
        description="`created_by` is reserved (the server sets it to `forward`).",
        json_schema_extra=_metadata(15, reserved=("created_by",)),
    )
    mount: StoreMount | None = Field(
        default=None, description="Mount the new store on this (identity, template) in the same step."
    )


class StoreUpdate(_Request):
    name: str | None = Field(default=None, json_schema_extra=STORE_NAME)
    description: str | None = Field(default=None, json_schema_extra=STORE_DESCRIPTION)
    metadata: dict[str, str] | None = Field(
        default=None, description="Replaces the whole map.", json_schema_extra=_metadata(16)
    )


class ForwardStoreUpdate(StoreUpdate):
    metadata: dict[str, str] | None = Field(
        default=None,
        description="Replaces the whole map; `created_by` is reserved.",
        json_schema_extra=_metadata(15, reserved=("created_by",)),
    )


class MemoryCreate(_Request):
    path: str = Field(json_schema_extra=FORWARD_PATH)
    content: str = Field(json_schema_extra=FORWARD_CONTENT)
    metadata: dict[str, str] | None = Field(default=None, json_schema_extra=_metadata(16))


class _MemoryChange(_Request):
    content_sha256: str | None = Field(default=None, description="Precondition: the stored content's hash.")
    metadata: dict[str, str] | None = Field(
        default=None, description="Replaces the whole map.", json_schema_extra=_metadata(16)
    )
    path: str | None = Field(
        default=None,
        description="Must equal the current path (a move is delete + create).",
        json_schema_extra=FORWARD_PATH,
    )


class MemoryUpdate(_MemoryChange):
    content: str = Field(json_schema_extra=FORWARD_CONTENT)


class CloudMemoryUpdate(_MemoryChange):
    """The Cloud SDK's update (qca.managed): content may be left out (or null) to keep it."""

    content: str | None = Field(default=None, json_schema_extra=FORWARD_CONTENT)


class CloudMemoryPut(_Request):
    content: str = Field(json_schema_extra=FORWARD_CONTENT)
    version: StrictInt = Field(description="The memory's current version; any other is a 409.")


class MountCreate(_Request):
    memory_store_id: str


# --- Forward responses (seed 000) -------------------------------------------------------------


class BindingInfo(BaseModel):
    identity_template_count: int


class ForwardStore(BaseModel):
    id: str
    type: Literal["memory_store"]
    name: str
    description: str
    status: Literal["active", "archived"]
    entry_count: int
    total_size: int
    metadata: dict[str, str]
    system_managed: bool
    identity_id: str | None
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None
    binding_info: BindingInfo


class ForwardMemoryItem(BaseModel):
    """A memory as lists show it: no ``content`` key."""

    id: str
    type: Literal["memory"]
    memory_store_id: str
    path: str
    content_size_bytes: int
    content_sha256: str
    metadata: dict[str, str]
    created_at: datetime
    updated_at: datetime


class ForwardMemory(ForwardMemoryItem):
    content: str


class ForwardVersionItem(BaseModel):
    """A version as lists show it: no ``content`` key."""

    id: str
    type: Literal["memory_version"]
    memory_store_id: str
    memory_id: str
    path: str
    content_size_bytes: int
    content_sha256: str
    operation: Literal["created", "updated", "deleted"]
    redacted: bool
    redacted_at: datetime | None
    created_at: datetime


class ForwardVersion(ForwardVersionItem):
    content: str | None


class Mount(BaseModel):
    memory_store_id: str
    identity_id: str
    template_id: str
    access: Literal["read_write", "read_only"]
    system_managed: bool
    name: str
    status: str
    entry_count: int
    created_at: datetime


class MountList(BaseModel):
    data: list[Mount]
    has_more: bool


class _IdPage(BaseModel):
    first_id: str | None
    last_id: str | None
    has_more: bool


class _NextPage(BaseModel):
    """Cloud's paging as qca.managed follows it: ``page=<next_page>`` until ``next_page`` is null."""

    has_more: bool
    next_page: str | None


class _IdNextPage(_NextPage):
    first_id: str | None
    last_id: str | None


class ForwardStoreList(_IdPage):
    data: list[ForwardStore]


class ForwardMemoryList(_IdPage):
    data: list[ForwardMemoryItem]


class ForwardVersionList(_IdPage):
    data: list[ForwardVersionItem]


# --- Cloud responses (seed 002) ---------------------------------------------------------------


class CloudStore(BaseModel):
    id: str
    type: Literal["memory_store"]
    name: str
    description: str
    status: Literal["active", "archived", "deleted"]
    entry_count: int
    total_size: int
    metadata: dict[str, str]
    archived_at: datetime | None
    created_at: datetime
    updated_at: datetime


class CloudMemoryItem(ForwardMemoryItem):
    """Lists leave ``content`` out unless ``view=full``."""

    version: int
    memory_version_id: str = Field(description="The head version (the qca.managed model's name).")
    content: str | None = None


class CloudMemory(CloudMemoryItem):
    """Create, update and retrieve include ``content`` unless ``view=basic``."""


class CloudMemoryPrefix(BaseModel):
    """A directory of a ``depth=1`` listing (ends with ``/``)."""

    type: Literal["memory_prefix"]
    path: str


class CloudVersionItem(BaseModel):
    """Seed 002: ``redacted_at`` appears only on a redacted version. ``created_by`` and
    ``redacted_by`` are the qca.managed model's (as Anthropic's). Lists leave ``content`` out unless
    ``view=full``."""

    id: str
    type: Literal["memory_version"]
    memory_store_id: str
    memory_id: str
    path: str
    content_size_bytes: int
    content_sha256: str
    operation: Literal["created", "updated", "deleted"]
    redacted: bool
    redacted_at: datetime | None = None
    created_at: datetime
    created_by: ActorModel | None
    redacted_by: ActorModel | None
    content: str | None = None


class CloudVersion(CloudVersionItem):
    """A retrieve or redact includes ``content`` (null if redacted or a tombstone) unless ``view=basic``."""


CloudMemoryListItem = Annotated[CloudMemoryItem | CloudMemoryPrefix, Field(discriminator="type")]


class CloudStoreList(_IdNextPage):
    data: list[CloudStore]


class CloudMemoryList(_IdNextPage):
    data: list[CloudMemoryListItem]


class CloudVersionList(_IdNextPage):
    data: list[CloudVersionItem]


# With --cloud-paging after-id the listings carry no next_page (the seeds' generation of Cloud).
class CloudStoreIdList(_IdPage):
    data: list[CloudStore]


class CloudMemoryIdList(_IdPage):
    data: list[CloudMemoryListItem]


class CloudVersionIdList(_IdPage):
    data: list[CloudVersionItem]


# With --cloud-paging next-page the listings carry no first_id / last_id.
class CloudStoreNextPageList(_NextPage):
    data: list[CloudStore]


class CloudMemoryNextPageList(_NextPage):
    data: list[CloudMemoryListItem]


class CloudVersionNextPageList(_NextPage):
    data: list[CloudVersionItem]


# --- Anthropic requests and responses (the SDK's models) --------------------------------------


class AnthropicStoreCreate(_Request):
    name: str = Field(json_schema_extra={**STORE_NAME, "maxLength": 255})
    description: str | None = Field(default=None, json_schema_extra={**STORE_DESCRIPTION, "maxLength": 1024})
    metadata: dict[str, str] | None = Field(default=None, json_schema_extra=_metadata(16))


class AnthropicStoreUpdate(_Request):
    name: str | None = Field(default=None, json_schema_extra={**STORE_NAME, "maxLength": 255})
    description: str | None = Field(default=None, json_schema_extra={**STORE_DESCRIPTION, "maxLength": 1024})
    metadata: dict[str, str | None] | None = Field(
        default=None,
        description="A patch: null removes a key. At most 16 keys after the change.",
        json_schema_extra=_metadata(16, nullable_values=True),
    )


class Precondition(_Request):
    type: Literal["content_sha256"]
    content_sha256: str = Field(json_schema_extra={"pattern": SHA256_HEX})


ANTHROPIC_PATH = _text(ABSOLUTE_PATH, max_length=1024)


class AnthropicMemoryCreate(_Request):
    path: str = Field(json_schema_extra=ANTHROPIC_PATH)
    content: str | None = Field(
        description='null creates an empty memory, as "" does.', json_schema_extra=ANTHROPIC_CONTENT
    )


class AnthropicMemoryUpdate(_Request):
    content: str | None = Field(default=None, json_schema_extra=ANTHROPIC_CONTENT)
    path: str | None = Field(
        default=None,
        description="A new path renames the memory; its id stays.",
        json_schema_extra=ANTHROPIC_PATH,
    )
    precondition: Precondition | None = None


class AnthropicStore(BaseModel):
    id: str
    type: Literal["memory_store"]
    name: str
    description: str
    metadata: dict[str, str]
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None


class AnthropicMemory(BaseModel):
    id: str
    type: Literal["memory"]
    memory_store_id: str
    path: str
    content: str | None
    content_size_bytes: int
    content_sha256: str
    memory_version_id: str
    created_at: datetime
    updated_at: datetime


class AnthropicMemoryPrefix(BaseModel):
    type: Literal["memory_prefix"]
    path: str


class AnthropicVersion(BaseModel):
    id: str
    type: Literal["memory_version"]
    memory_store_id: str
    memory_id: str
    operation: Literal["created", "modified", "deleted"]
    path: str | None
    content: str | None
    content_size_bytes: int | None
    content_sha256: str | None
    created_at: datetime
    created_by: ActorModel | None
    redacted_at: datetime | None
    redacted_by: ActorModel | None


class AnthropicDeletedMemory(BaseModel):
    id: str
    type: Literal["memory_deleted"]


class AnthropicDeletedStore(BaseModel):
    id: str
    type: Literal["memory_store_deleted"]


class AnthropicStoreList(BaseModel):
    data: list[AnthropicStore]
    next_page: str | None


class AnthropicMemoryList(BaseModel):
    data: list[Annotated[AnthropicMemory | AnthropicMemoryPrefix, Field(discriminator="type")]]
    next_page: str | None


class AnthropicVersionList(BaseModel):
    data: list[AnthropicVersion]
    next_page: str | None


# --- sessions (Anthropic and Cloud): memory stores attached when a session is created ---------

StoreAccess = Literal["read_write", "read_only"]


def _agent_form(value: Any) -> str:
    return "id" if isinstance(value, str) else "object"


_SESSION_STORES: dict[str, Any] = {"maxItems": 8}


class AgentRef(_Request):
    """An agent pinned at a version (the SDKs' alternative to an agent id string)."""

    type: Literal["agent"] = "agent"
    id: str = Field(min_length=1)
    version: StrictInt | None = Field(default=None, ge=1, le=2**62)


# An agent id, or an agent pinned at a version; a refusal names the form it tried (agent.id, agent.object...).
AgentField = Annotated[
    Annotated[str, Field(min_length=1), Tag("id")] | Annotated[AgentRef, Tag("object")],
    Discriminator(_agent_form),
]


class MemoryStoreResource(_Request):
    type: Literal["memory_store"]
    memory_store_id: str = Field(min_length=1)
    access: StoreAccess | None = Field(default=None, description="read_write when left out.")
    instructions: str | None = Field(
        default=None, description="At most 4,096 characters.", json_schema_extra={"maxLength": 4096}
    )


class CloudMemoryStoreResource(MemoryStoreResource):
    mount_path: str | None = Field(
        default=None,
        description="Reference server: kept and returned exactly as given (unchecked); null when left out.",
    )


class AnthropicSessionCreate(_Request):
    agent: AgentField
    environment_id: str = Field(min_length=1)
    resources: list[MemoryStoreResource] = Field(
        default_factory=list, description="At most 8 memory stores.", json_schema_extra=_SESSION_STORES
    )
    title: str | None = None
    metadata: dict[str, str] | None = None


class CloudSessionCreate(_Request):
    agent: AgentField
    environment_id: str | None = None
    memory_store_ids: list[str] | None = Field(
        default=None,
        description="Seed 004's form: each store attached read_write. Excludes resources.",
        json_schema_extra={**_SESSION_STORES, "uniqueItems": True},
    )
    resources: list[CloudMemoryStoreResource] | None = Field(
        default=None,
        description="The Qoder SDK's form. Excludes memory_store_ids.",
        json_schema_extra=_SESSION_STORES,
    )
    title: str | None = None
    metadata: dict[str, str] | None = None


class SessionMemoryStore(BaseModel):
    type: Literal["memory_store"]
    memory_store_id: str
    access: StoreAccess
    instructions: str | None
    name: str
    description: str
    mount_path: str | None


class SessionAgent(BaseModel):
    type: Literal["agent"]
    id: str
    version: int | None


class Session(BaseModel):
    id: str
    type: Literal["session"]
    agent: SessionAgent
    environment_id: str | None
    title: str | None
    metadata: dict[str, str]
    resources: list[SessionMemoryStore]
    status: Literal["idle"]
    vault_ids: list[str]
    archived_at: datetime | None
    created_at: datetime
    updated_at: datetime
