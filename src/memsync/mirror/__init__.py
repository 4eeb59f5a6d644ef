"""memsync.mirror (see design.md §3)."""
