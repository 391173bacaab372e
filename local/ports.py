"""Free TCP ports on loopback.

Binding to port 0 lets the kernel pick; the port is released before the server binds it, so
another process may grab it in between. Callers retry on "address already in use" (as envtest
does) rather than pretending the race does not exist.
"""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """`count` distinct ports that were free a moment ago (all held open together while picking)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
