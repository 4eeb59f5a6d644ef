"""memsync.daemon (see design.md §3)."""
