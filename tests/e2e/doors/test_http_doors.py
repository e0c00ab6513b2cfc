"""The attack harness on the HTTP doors: every route of the table, every attack.

The servers as users start them: the AG-UI endpoint (``python -m alicia.agent.agui``),
the worker (``python -m alicia.agent start`` with its health and metrics ports), the web
page and the watcher's app (uvicorn, with the project's server options). Every attack
comes from loopback addresses of its own (``127.1.N.*``), so one attack's per-address
limits are not another's; a forwarded header is never believed. The matrix goes to
``test-artifacts/doors-http.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest
import uvicorn

from alicia.agent.gate.doors import Kind, Server
from alicia.agent.gate.http import serve_options
from alicia.agent.settings import WatchSettings
from alicia.agent.watch.app import create_app as watch_app
from alicia.harness import LiveKitServer
from alicia.harness.ports import free_port
from alicia.harness.recorded_llm import RecordedLLM
from tests.e2e.doors.http_attacks import HttpSide
from tests.e2e.doors.matrix import Matrix
from tests.e2e.web_app import serving_web
from tests.e2e.worker import running_worker
from tests.paths import ARTIFACTS
from tests.support.agui_endpoint import running_agui

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@contextlib.asynccontextmanager
async def serving_watcher(server: LiveKitServer) -> AsyncIterator[str]:
    """The watcher's app on a free loopback port (its watching is not started: the attacks
    never get past its door)."""
    env = {**server.env(), "ALICIA_AGENT_NAME": "alicia"}
    env["DATABASE_URL"] = "postgresql+asyncpg://nobody@127.0.0.1:1/none"
    port = free_port()
    config = uvicorn.Config(
        watch_app(WatchSettings.from_env(env)),
        **serve_options(host="127.0.0.1", port=port, log_level="warning", lifespan="off"),
    )
    web = uvicorn.Server(config)
    task = asyncio.create_task(web.serve())
    try:
        async with asyncio.timeout(10):
            while not web.started:
                await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        web.should_exit = True
        await task


async def test_every_http_door_refuses_every_attack_as_its_row_promises(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    health, metrics = free_port(), free_port()
    worker_env = {
        "ALICIA_HTTP_PORT": str(health),
        "ALICIA_METRICS_PORT": str(metrics),
        "ALICIA_LOAD_THRESHOLD": "inf",
    }
    async with (
        running_agui(livekit_server, llm.base_url) as agui,
        running_worker(livekit_server, llm.base_url, env=worker_env),
        serving_web(livekit_server, tokens="off") as web,
        serving_watcher(livekit_server) as watch,
    ):
        side = HttpSide(
            livekit_server,
            {
                Server.AGUI.name: agui.url.removesuffix("/agui"),
                Server.WEB.name: web.rstrip("/"),
                Server.WATCHER.name: watch,
                Server.WORKER.name: f"http://127.0.0.1:{health}",
            },
            by_door={"metrics": f"http://127.0.0.1:{metrics}"},
        )
        matrix = Matrix.of(lambda d: d.kind is Kind.HTTP)
        cells = matrix.todo()
        started = time.monotonic()
        await asyncio.gather(*(matrix.run_door(d, cells, side.attack) for d in matrix.doors))
        took = time.monotonic() - started
    report = matrix.markdown()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "doors-http.md").write_text(report)
    print(f"\n{report}\nHTTP doors attacked in {took:.1f} s")
    failed = "\n".join(f"{c.door} / {c.attack.value}: {c.outcome}" for c in matrix.failed())
    assert not failed, failed
