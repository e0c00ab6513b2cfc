"""Debian's ``redis-server`` on loopback: what livekit-server's nodes share in its
distributed mode (room placement, routing of signalling and agent dispatch between nodes).

In memory only (no snapshot, no append-only file), on a free port, in a temporary folder.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

from .ports import free_port
from .served import ServedProcess

__all__ = ["RedisServer"]


class RedisServer(ServedProcess):
    """``redis-server`` bound to 127.0.0.1, up once it answers ``PING``."""

    name = "redis"
    start_timeout_s = 30.0

    def __init__(self) -> None:
        """Pick a free loopback port."""
        super().__init__()
        self.pick_ports()

    def pick_ports(self) -> None:
        """A free loopback port."""
        self.port = free_port()

    @property
    def address(self) -> str:
        """``host:port``, as livekit-server's ``redis.address`` takes it."""
        return f"127.0.0.1:{self.port}"

    def command(self, folder: Path) -> list[str]:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not Path(binary).is_file():
            raise RuntimeError("redis-server not found: run ./scripts/setup (Debian's package)")
        return [
            binary,
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(folder),
            "--protected-mode",
            "yes",
            "--loglevel",
            "warning",
        ]

    def hget(self, key: str, field: str) -> str | None:
        """``HGET key field`` (None when there is no such field): to read livekit-server's
        own records, such as the node a room is placed on (``room_node_map``)."""
        parts = [b"HGET", key.encode(), field.encode()]
        request = b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as conn:
            conn.sendall(request)
            reply = conn.makefile("rb")
            head = reply.readline()
            if head.startswith(b"$-1"):
                return None
            if not head.startswith(b"$"):
                raise RuntimeError(f"redis HGET {key} {field}: {head!r}")
            return reply.read(int(head[1:]) + 2)[:-2].decode()

    def answers(self) -> bool:
        """``PING`` answered ``+PONG``."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False
