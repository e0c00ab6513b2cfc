"""Free loopback ports.

``ALICIA_PORT_RANGE`` (``low-high``, default unset) confines every pick to that band:
the test runner gives each of its parallel workers a band of its own, so two workers
starting servers at the same moment never pick the same port.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time

__all__ = ["free_port", "free_udp_range", "port_open"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago.

    Chosen below the kernel's ephemeral range when it can be: a port the kernel hands out
    (``bind(0)``) can be taken by any outgoing connection before the server binds it,
    which happens often on a machine busy with many connections. A port is never handed
    out twice by one process: two servers picked one after the other (a module's
    livekit-server and the watcher it posts to) would otherwise be given the same port
    while the first was not yet bound, and the second's clients would reach the first.
    """
    import random

    band = _band()
    low = _ephemeral_low()
    if band is not None or low > _FIXED_LOW + 1000:
        start, end = band or (_FIXED_LOW, low - 1)
        for _ in range(100):
            port = random.randrange(start, end + 1)
            if port in _given:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                _given.add(port)
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_given: set[int] = set()
"""The ports :func:`free_port` picked in this process (at most one band's worth)."""


_FIXED_LOW = 10000
"""Lowest port :func:`free_port` picks itself."""


def _ephemeral_low() -> int:
    """The first port of Linux's ephemeral range (0 when unknown: use ``bind(0)``)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _band() -> tuple[int, int] | None:
    """``ALICIA_PORT_RANGE`` as (low, high), or None when unset."""
    raw = os.environ.get("ALICIA_PORT_RANGE", "").strip()
    if not raw:
        return None
    try:
        low, high = (int(part) for part in raw.split("-", 1))
    except ValueError as exc:
        raise ValueError(f"ALICIA_PORT_RANGE must be low-high, not {raw!r}") from exc
    if not 1024 <= low < high <= 65535:
        raise ValueError(f"ALICIA_PORT_RANGE out of order or bounds: {raw!r}")
    return low, high


def free_udp_range(size: int) -> int:
    """The first port of ``size`` consecutive UDP ports that are free on 127.0.0.1."""
    import random

    low, high = _band() or (20000, 60000)
    for _ in range(200):
        start = random.randrange(low, high - size)
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


async def port_open(port: int, *, within: float = 30.0) -> bool:
    """Wait until something accepts TCP connections on 127.0.0.1:``port``; False if
    nothing did ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return True
        await asyncio.sleep(0.05)
    return False
