"""Free TCP ports on 127.0.0.1, for local clusters and tests (never another address)."""

from __future__ import annotations

import socket

__all__ = ["free_ports"]


def free_ports(n: int) -> list[int]:
    """`n` distinct ports free right now on 127.0.0.1 (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()
