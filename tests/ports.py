"""The one way tests get a free TCP port (and the `free_port` fixture in tests/conftest.py)."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on at `host` right now (the OS picks it; a race with another binder is
    possible but rare, and the test then fails on its bind, never silently)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
