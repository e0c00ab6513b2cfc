"""Serve the web debug app with uvicorn on a free loopback port (inside the test loop)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import uvicorn

from alicia.agent.gate.http import serve_options
from alicia.harness import LiveKitServer
from alicia.harness.ports import free_port
from alicia.web import WebSettings, create_app

__all__ = ["serving_web"]


@contextlib.asynccontextmanager
async def serving_web(server: LiveKitServer, *, tokens: str = "dev") -> AsyncIterator[str]:
    """The base URL (``http://127.0.0.1:PORT/``) of the app, for ``server``'s rooms."""
    settings = WebSettings(
        livekit_url=server.url,
        api_key=server.api_key,
        api_secret=server.api_secret,
        tokens="dev" if tokens == "dev" else "off",
    )
    port = free_port()
    config = uvicorn.Config(
        create_app(settings),
        **serve_options(host="127.0.0.1", port=port, log_level="warning", lifespan="off"),
    )
    web = uvicorn.Server(config)
    task = asyncio.create_task(web.serve())
    try:
        async with asyncio.timeout(10):
            while not web.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}/"
    finally:
        web.should_exit = True
        await task
