"""Fixtures shared by the whole suite: real livekit-server and real Postgres.

Both are started once per session on free loopback ports and stopped at the end. The
failover tests get a livekit-server of their own per module (``livekit``), posting its
webhooks to the watcher's port (``watch_port``).
Nothing is skipped when a component is missing: the harness installs it or fails.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from alicia.harness import LiveKitServer, PostgresServer
from alicia.harness.ports import free_port


@pytest.fixture(scope="session")
def livekit_server() -> Iterator[LiveKitServer]:
    """A real livekit-server v1.13.5 on 127.0.0.1."""
    with LiveKitServer() as server:
        yield server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real, throwaway PostgreSQL cluster on 127.0.0.1."""
    with PostgresServer() as server:
        yield server


@pytest.fixture(scope="module")
def watch_port() -> int:
    """The port a module's watcher receives livekit-server's webhooks on."""
    return free_port()


@pytest.fixture(scope="module")
def livekit(watch_port: int) -> Iterator[LiveKitServer]:
    """A livekit-server of the module's own, posting webhooks to the watcher's port."""
    with LiveKitServer(webhooks=[f"http://127.0.0.1:{watch_port}/webhook"]) as server:
        yield server
