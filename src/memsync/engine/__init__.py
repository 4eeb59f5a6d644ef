"""memsync.engine (see design.md §3)."""
