"""A server whose port another process took between its choice and the bind starts on
new ports (seen in a fresh-clone run: ``listen tcp 127.0.0.1:21772: bind: address already
in use`` failed a whole failover module)."""

from __future__ import annotations

import socket

import pytest

from alicia.harness import LiveKitServer

pytestmark = pytest.mark.integration


def test_livekit_server_starts_on_new_ports_when_its_port_is_taken() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = LiveKitServer()
        server.port = taken.getsockname()[1]  # the fault: chosen, then taken by another
        with server:
            assert server.port != taken.getsockname()[1]
            assert server.url.endswith(f":{server.port}")
