"""Fixtures shared by the whole suite: real livekit-server and real Postgres, a module's
recorded LLM, and a one-route chat server.

Both servers are started once per session on free loopback ports and stopped at the end.
Nothing is skipped when a component is missing: the harness installs it or fails.
A folder's own fixtures are in its ``conftest.py`` (``tests/engine`` has a fresh ``llm``
per test, ``tests/e2e`` the module's ``worker`` and, for a watcher's tests, a module's
own ``livekit``). With parallel workers (``./scripts/test``)
each worker has its own servers (:mod:`tests.support.scheduling`).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import openai
import pytest
import pytest_asyncio

from alicia.agent.gate.ffi_routing import stop_capturing_native_logs
from alicia.harness import LiveKitServer, PostgresServer
from alicia.harness.recorded_llm import RecordedLLM
from tests.support.chat_server import TRANSPORTS, Handler, serving_chat
from tests.support.recorded import recorded_llm_for

# the quick tier, parallel workers, the order; the logs of the processes a failed test ran
pytest_plugins = ["tests.support.scheduling", "tests.support.process_logs"]

# livekit-agents' event-loop monitor wakes each loop (a worker's, each job's, each idle
# job process's) 50 times a second, twice: an idle voice worker used 3.9 % of a core with
# it, 0.9 % without; the suite runs hundreds on 2 cores. No test here reads it; off for
# every process the tests start (a run by hand keeps livekit-agents' default).
os.environ.setdefault("LIVEKIT_AGENTS_LOOP_BLOCK_WARN_MS", "0")


@pytest.fixture(scope="session", autouse=True)
def _native_logs_stay_native() -> None:
    """The tests' own rooms leave livekit's native log records native, as the worker and
    the client library do by default (``ALICIA_NATIVE_LOGS``): captured, each record (about
    2,000 for a room's join, 3 per data packet) crosses into Python to be dropped there.
    Measured on ``tests/e2e/doors/test_room_doors.py`` and ``tests/e2e/test_visibility.py``
    run alone: the machine's CPU 145.7 s with them captured, 120.7 s without. Not written
    to stderr either (``RUST_LOG``, read once, as the library starts): rooms still joined
    when the session's livekit-server stops would print their reconnection errors at the
    end of every run. The processes the tests start keep their own settings."""
    before = os.environ.get("RUST_LOG")
    os.environ["RUST_LOG"] = "off"
    try:
        stop_capturing_native_logs()
    finally:
        if before is None:
            del os.environ["RUST_LOG"]
        else:
            os.environ["RUST_LOG"] = before


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


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def llm(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[RecordedLLM]:
    """One recorded-stream server for the module: the shared and the calculator streams,
    unless the module sets ``LLM_STREAMS = "shared"``, with the module's ``LLM_OPTIONS``
    (see :func:`tests.support.recorded.recorded_llm_for`)."""
    async with recorded_llm_for(request.module, lambda: tmp_path_factory.mktemp("streams")) as s:
        yield s


@pytest_asyncio.fixture(params=TRANSPORTS)
async def serve(
    request: pytest.FixtureRequest,
) -> AsyncIterator[Callable[[Handler], Awaitable[openai.AsyncOpenAI]]]:
    """Start a one-route HTTP server on 127.0.0.1; yields a function returning its client
    (over the worker's aiohttp transport, and over the SDK's default one)."""
    async with serving_chat(request.param) as start:
        yield start
