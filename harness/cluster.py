"""livekit-server as an N-node cluster on loopback, behind one address, as deployments run it.

* Debian's ``redis-server`` (:class:`~alicia.harness.redis.RedisServer`): what the nodes
  share in livekit-server's distributed mode (room placement; signalling, RoomService and
  agent dispatch routed to the node that hosts the room).
* N :class:`~alicia.harness.livekit_server.LiveKitServer` nodes, each on its own ports,
  with the same keys, the same Redis and the same webhook URLs (every node posts the
  events of the rooms it hosts).
* Debian's ``haproxy`` (:class:`Balancer`) in front: one port for signalling (WebSocket)
  and the server API, spread over the nodes that pass its health check (``GET /`` every
  0.5 s); media goes to each node's own ICE candidates, as with LiveKit's own load
  balancer setups.
* Each node's ``signal_relay.retry_timeout`` at :data:`RELAY_RETRY_TIMEOUT_S`, not
  livekit-server's 7.5 s: a participant whose signalling goes through one node to a room
  on another learns that the room's node died when the node it talks to gives up
  relaying its next signal (its ping, every 5 s): at the end of the send attempt that
  passes the timeout (attempts of 0.5, 1, 2, 4 s: about 3.5 s with 2 s, 7.5 s with the
  default). ``bench/node_death.py`` measured the whole: a median of 10.3 s with the
  default, 6.4 s with 2 s (docs/SCALING.md).

:class:`LiveKitCluster` has :class:`LiveKitServer`'s ``url``, ``http_url``, ``token`` and
``env``, pointing at the balancer, so whatever takes a server takes a cluster.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from .livekit_server import LiveKitServer
from .ports import free_port
from .redis import RedisServer
from .served import ServedProcess

__all__ = ["RELAY_RETRY_TIMEOUT_S", "Balancer", "LiveKitCluster"]

RELAY_RETRY_TIMEOUT_S = 2.0
"""How long a node goes on retrying a signal it relays to another node (livekit-server's
``signal_relay.retry_timeout``, 7.5 s by default)."""

HAPROXY_CONFIG = """\
global
  maxconn 4096
defaults
  mode http
  timeout connect 2s
  timeout client 1h
  timeout server 1h
  timeout tunnel 1h
  timeout http-request 10s
  option redispatch
  retries 2
frontend livekit
  bind 127.0.0.1:{port}
  default_backend nodes
backend nodes
  balance roundrobin
  option httpchk GET /
  http-check expect status 200
  default-server inter 500ms fastinter 250ms downinter 500ms fall 2 rise 2
{servers}
"""


class Balancer(ServedProcess):
    """Debian's haproxy spreading HTTP and WebSocket connections over ``backends``
    (``host:port``), each health-checked every 0.5 s (down after two failures)."""

    name = "haproxy"
    start_timeout_s = 30.0

    def __init__(self, backends: Sequence[str]) -> None:
        """``backends``: the nodes' ``host:port``."""
        super().__init__()
        self.backends = list(backends)
        self.pick_ports()

    def pick_ports(self) -> None:
        """A free loopback port for the frontend."""
        self.port = free_port()

    @property
    def ready_url(self) -> str:
        """A node's answer through the balancer."""
        return f"http://127.0.0.1:{self.port}/"

    def command(self, folder: Path) -> list[str]:
        binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
        if not Path(binary).is_file():
            raise RuntimeError("haproxy not found: run ./scripts/setup (Debian's haproxy)")
        servers = "\n".join(
            f"  server node{i} {address} check" for i, address in enumerate(self.backends)
        )
        config = folder / "haproxy.cfg"
        config.write_text(HAPROXY_CONFIG.format(port=self.port, servers=servers))
        return [binary, "-db", "-f", str(config)]  # -db: in the foreground


class LiveKitCluster:
    """``nodes`` livekit-server nodes sharing one Redis, behind one :class:`Balancer`."""

    def __init__(
        self,
        nodes: int = 2,
        *,
        webhooks: Sequence[str] = (),
        log_level: str = "info",
        relay_retry_timeout_s: float | None = RELAY_RETRY_TIMEOUT_S,
    ) -> None:
        """Nothing runs until :meth:`start`; ``relay_retry_timeout_s=None`` keeps
        livekit-server's own."""
        if nodes < 1:
            raise ValueError("a cluster has at least one node")
        self.redis = RedisServer()
        self.nodes = [
            LiveKitServer(
                log_level=log_level,
                webhooks=webhooks,
                redis=self.redis.address,
                relay_retry_timeout_s=relay_retry_timeout_s,
            )
            for _ in range(nodes)
        ]
        self.balancer = Balancer([f"127.0.0.1:{node.port}" for node in self.nodes])
        self.api_key = self.nodes[0].api_key
        self.api_secret = self.nodes[0].api_secret

    @property
    def url(self) -> str:
        """The one WebSocket URL clients and agents connect to (the balancer)."""
        return f"ws://127.0.0.1:{self.balancer.port}"

    @property
    def http_url(self) -> str:
        """The server API through the balancer."""
        return f"http://127.0.0.1:{self.balancer.port}"

    def token(
        self,
        identity: str,
        room: str,
        *,
        name: str | None = None,
        agent: bool = False,
        attributes: dict[str, str] | None = None,
    ) -> str:
        """A join token, as :meth:`LiveKitServer.token` mints it (every node has the keys)."""
        return self.nodes[0].token(identity, room, name=name, agent=agent, attributes=attributes)

    def env(self) -> dict[str, str]:
        """``LIVEKIT_URL`` (the balancer), ``LIVEKIT_API_KEY``, ``LIVEKIT_API_SECRET``."""
        return {
            "LIVEKIT_URL": self.url,
            "LIVEKIT_API_KEY": self.api_key,
            "LIVEKIT_API_SECRET": self.api_secret,
        }

    def node_id(self, index: int) -> str:
        """livekit-server's id of node ``index`` (from its start-up log line)."""
        match = re.search(r'"nodeID": "([^"]+)"', self.nodes[index].log_tail(10**7))
        if match is None:
            raise RuntimeError(f"node {index} logged no nodeID (log level warn?)")
        return match.group(1)

    def node_of(self, room: str) -> int | None:
        """The index of the node ``room`` is placed on, as the nodes record it in Redis."""
        placed = self.redis.hget("room_node_map", room)
        ids = [self.node_id(i) for i in range(len(self.nodes))]
        return ids.index(placed) if placed in ids else None

    def start(self) -> Self:
        """Redis, then the nodes, then the balancer; each up before the next."""
        try:
            self.redis.start()
            for node in self.nodes:
                node.start()
            self.balancer.backends = [f"127.0.0.1:{node.port}" for node in self.nodes]
            self.balancer.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Everything stopped, the balancer first."""
        self.balancer.stop()
        for node in self.nodes:
            node.stop()
        self.redis.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
