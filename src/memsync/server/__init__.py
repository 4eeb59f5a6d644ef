"""The embedded reference Memory Store server: one SQLite engine, three dialects (docs/api-contract.md).

``run`` serves it (``memsync server``); ``BackgroundServer`` serves it in a thread of the caller;
``create_app`` gives the ASGI app over an ``Engine`` for embedding; ``Engine`` is the storage with an
injectable clock; ``load_seed_file`` seeds it.
"""

from __future__ import annotations

from .app import create_app
from .runner import BackgroundServer, default_db_path, run
from .seeding import load_seed_file
from .storage import Actor, Engine

__all__ = ["Actor", "BackgroundServer", "Engine", "create_app", "default_db_path", "load_seed_file", "run"]
