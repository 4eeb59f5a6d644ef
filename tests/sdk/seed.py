"""What the reference server under the SDK tests starts with: what the API cannot create itself, a
system-managed default store, and versions written by sessions, service accounts and users (one of
them redacted by a user)."""

from __future__ import annotations

# The (identity, template) pair whose default store the seed makes; no other test mounts on it.
DEFAULT_IDENTITY = "idn_sdk_default"
DEFAULT_TEMPLATE = "tmpl_sdk_default"
EARLY_MOUNTED_STORE = "sdk mounted before the default"
DEFAULT_STORE = "sdk default store"
ACTORS_STORE = "sdk actors"
SESSION_ID = "sesn_sdk_seed"
SERVICE_ACCOUNT_ID = "sa_sdk_seed"
USER_ID = "user_sdk_seed"

SEED = {
    "stores": [
        # Mounted on the pair before the default store exists: listings still show the default first.
        {
            "dialect": "forward",
            "name": EARLY_MOUNTED_STORE,
            "mounts": [{"identity_id": DEFAULT_IDENTITY, "template_id": DEFAULT_TEMPLATE}],
        },
        {
            "dialect": "forward",
            "name": DEFAULT_STORE,
            "system_managed": True,
            "identity_id": DEFAULT_IDENTITY,
            "template_id": DEFAULT_TEMPLATE,
        },
        {
            "dialect": "cloud",
            "name": ACTORS_STORE,
            "description": "versions written by each kind of actor",
            "created_at": "2025-01-01T00:00:00Z",
            "memories": [
                {
                    "path": "by/actors.md",
                    "history": [
                        {
                            "op": "create",
                            "content": "by a session",
                            "at": "2025-01-01T01:00:00Z",
                            "actor": {"type": "session_actor", "session_id": SESSION_ID},
                        },
                        {
                            "op": "update",
                            "content": "by a service account",
                            "at": "2025-01-01T02:00:00Z",
                            "actor": {
                                "type": "service_account_actor",
                                "service_account_id": SERVICE_ACCOUNT_ID,
                            },
                            "redacted_at": "2025-01-02T00:00:00Z",
                            "redacted_by": {"type": "user_actor", "user_id": USER_ID},
                        },
                        {
                            "op": "update",
                            "content": "by a user",
                            "at": "2025-01-01T03:00:00Z",
                            "actor": {"type": "user_actor", "user_id": USER_ID},
                        },
                    ],
                }
            ],
        },
    ]
}
