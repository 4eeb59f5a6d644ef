"""memsync.sync: one store's cycle, composed from the API client, the mirror and the engine.

``memsync.api`` and ``memsync.mirror`` never meet each other; the engine decides over plain values.
This package is where they are put together, once, for both the CLI and the daemon: pull (import new
versions), reconcile the checkout, push, and the locks they share.
"""
