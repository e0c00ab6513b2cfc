"""Fixtures shared by the whole suite: real livekit-server and real Postgres.

Both are started once per session on free loopback ports and stopped at the end.
Nothing is skipped when a component is missing: the harness installs it or fails.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from alicia.harness import LiveKitServer, PostgresServer


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
