"""memsync: keep agent Memory Stores in git."""

__version__ = "0.1.0"
