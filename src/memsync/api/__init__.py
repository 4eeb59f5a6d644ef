"""memsync.api (see design.md §3)."""
