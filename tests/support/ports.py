"""A loopback port nothing listens on (at the moment it is returned)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port the kernel just handed out and took back: free for a server a test starts, and closed
    for a test that needs one nothing answers on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
