"""memsync.engine (see docs/design.md §3)."""
