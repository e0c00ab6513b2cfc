"""End to end: the module's worker process, a fresh script per test, the served manifest.

The module's recorded LLM is ``llm`` (``tests/conftest.py``); the voice tests have a fresh
one per test (``tests/e2e/voice/conftest.py``). The watcher's tests get a livekit-server of
the module's own (``livekit``), posting its webhooks to the watcher's port (``watch_port``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from alicia.harness import LiveKitServer
from alicia.harness.cluster import LiveKitCluster
from alicia.harness.ports import free_port
from alicia.harness.recorded_llm import RecordedLLM, StreamSpec, load_manifest
from tests.e2e.worker import WorkerProcess, running_worker

WORKER_ENV = {"ALICIA_STEP_MAX_DELAY": "0.2", "ALICIA_LOAD_THRESHOLD": "inf"}
"""The module worker's settings unless the module sets its own ``WORKER_ENV``: steps cut
after 0.2 s of silence, and no load limit (the machine is shared: never let CPU load make
the worker refuse a room)."""


@pytest.fixture(scope="module")
def watch_port() -> int:
    """The port a module's watcher receives livekit-server's webhooks on."""
    return free_port()


@pytest.fixture(scope="module")
def second_watch_port() -> int:
    """The port of a module's second watcher (the cluster's nodes post to both)."""
    return free_port()


@pytest.fixture(scope="module")
def livekit(watch_port: int) -> Iterator[LiveKitServer]:
    """A livekit-server of the module's own, posting webhooks to the watcher's port."""
    with LiveKitServer(webhooks=[f"http://127.0.0.1:{watch_port}/webhook"]) as server:
        yield server


@pytest.fixture(scope="module")
def cluster(watch_port: int, second_watch_port: int) -> Iterator[LiveKitCluster]:
    """A 2-node livekit-server cluster of the module's own (one Redis, haproxy in front),
    every node posting webhooks to both watchers' ports (a second watcher is optional)."""
    hooks = [f"http://127.0.0.1:{p}/webhook" for p in (watch_port, second_watch_port)]
    with LiveKitCluster(2, webhooks=hooks) as nodes:
        yield nodes


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def worker(
    request: pytest.FixtureRequest, livekit_server: LiveKitServer, llm: RecordedLLM
) -> AsyncIterator[WorkerProcess]:
    """One worker process for the module, registered with the server, with the module's
    ``WORKER_ENV`` (default: :data:`WORKER_ENV`), executed as printed when the module says
    ``WORKER_AS_PRINTED = True`` (else forked from the suite's zygote)."""
    env = getattr(request.module, "WORKER_ENV", WORKER_ENV)
    printed = getattr(request.module, "WORKER_AS_PRINTED", False)
    async with running_worker(livekit_server, llm.base_url, env=env, as_printed=printed) as proc:
        yield proc


@pytest.fixture
def fresh_script(llm: RecordedLLM) -> Iterator[None]:
    """The module's ``llm`` with no script left by an earlier test (a module that shares
    one worker uses it for every test: ``pytest.mark.usefixtures("fresh_script")``)."""
    llm.reset()
    yield


@pytest.fixture(scope="module")
def streams(llm: RecordedLLM) -> dict[str, StreamSpec]:
    """The manifest the module's ``llm`` serves (shared and calculator streams)."""
    return load_manifest(llm.streams_dir)
