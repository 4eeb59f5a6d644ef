"""The server's own wire models: request bodies it accepts and the objects it answers, per dialect.

Requests are validated by FastAPI against these models (a failure becomes a 400 naming the field,
never a 422) and then by :mod:`memsync.rules` inside the engine. Responses are rendered as plain
dicts by the route adapters for speed and exact control over which keys appear (list items carry
no ``content`` key at all); the response models here document them in ``/openapi.json`` and the
tests validate real answers against them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

# --- errors (api.md §5) -----------------------------------------------------------------------


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


# --- Forward and Cloud requests ---------------------------------------------------------------


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StoreCreate(_Request):
    name: str
    description: str = ""
    metadata: dict[str, str] | None = None


class StoreUpdate(_Request):
    name: str | None = None
    description: str | None = None
    metadata: dict[str, str] | None = Field(default=None, description="Replaces the whole map.")


class MemoryCreate(_Request):
    path: str
    content: str
    metadata: dict[str, str] | None = None


class MemoryUpdate(_Request):
    content: str
    content_sha256: str | None = Field(default=None, description="Precondition: the stored content's hash.")
    metadata: dict[str, str] | None = Field(default=None, description="Replaces the whole map.")
    path: str | None = Field(
        default=None, description="Must equal the current path (a move is delete + create)."
    )


class CloudMemoryPut(_Request):
    content: str
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
    version: int


class CloudMemory(CloudMemoryItem):
    content: str


class CloudVersionItem(BaseModel):
    """Seed 002: ``redacted_at`` appears only on a redacted version."""

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


class CloudVersion(CloudVersionItem):
    content: str | None


class CloudStoreList(_IdPage):
    data: list[CloudStore]


class CloudMemoryList(_IdPage):
    data: list[CloudMemoryItem]


class CloudVersionList(_IdPage):
    data: list[CloudVersionItem]


# --- Anthropic requests and responses (the SDK's models) --------------------------------------


class AnthropicStoreCreate(_Request):
    name: str
    description: str | None = None
    metadata: dict[str, str] | None = None


class AnthropicStoreUpdate(_Request):
    name: str | None = None
    description: str | None = None
    metadata: dict[str, str | None] | None = Field(default=None, description="A patch: null removes a key.")


class Precondition(_Request):
    type: Literal["content_sha256"]
    content_sha256: str


class AnthropicMemoryCreate(_Request):
    path: str
    content: str | None


class AnthropicMemoryUpdate(_Request):
    content: str | None = None
    path: str | None = Field(default=None, description="A new path renames the memory; its id stays.")
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
