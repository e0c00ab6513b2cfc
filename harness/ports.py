"""Free loopback ports."""

from __future__ import annotations

import socket

__all__ = ["free_port", "free_udp_range"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_udp_range(size: int) -> int:
    """The first port of ``size`` consecutive UDP ports that are free on 127.0.0.1."""
    import random

    for _ in range(200):
        start = random.randrange(20000, 60000 - size)
        socks: list[socket.socket] = []
        try:
            for p in range(start, start + size):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return start
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no run of {size} free UDP ports found")
