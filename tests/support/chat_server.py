"""A one-route chat-completions server on 127.0.0.1 that answers with the SSE body a test
gives, for the openai client over the worker's aiohttp transport or the SDK's default one.

The ``serve`` fixture (``tests/conftest.py``) runs :func:`serving_chat` once per
transport; tests build bodies with :func:`sse` and :func:`chunk` and answer with
:func:`body_handler` or a handler of their own.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import openai
from aiohttp import web

from alicia.harness.loopback import serve_app

__all__ = ["TRANSPORTS", "Handler", "body_handler", "chunk", "serving_chat", "sse"]

Handler = Callable[[web.Request], Any]

TRANSPORTS = ["aiohttp", "httpx"]
"""The openai client's HTTP transports: the worker's (aiohttp) and the SDK's default."""


@contextlib.asynccontextmanager
async def serving_chat(
    transport: str,
) -> AsyncIterator[Callable[[Handler], Awaitable[openai.AsyncOpenAI]]]:
    """Yields a function that starts an HTTP server on 127.0.0.1 answering chat completions
    and Responses with a handler and returns its client (over ``transport``); every server
    and client is closed on exit."""
    runners: list[web.AppRunner] = []
    clients: list[openai.AsyncOpenAI] = []

    async def start(handler: Handler) -> openai.AsyncOpenAI:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        app.router.add_post("/v1/responses", handler)
        runner, port = await serve_app(app)
        runners.append(runner)
        http = openai.DefaultAioHttpClient() if transport == "aiohttp" else None
        client = openai.AsyncOpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="test", max_retries=0, http_client=http
        )
        clients.append(client)
        return client

    yield start
    for client in clients:
        await client.close()
    for runner in runners:
        await runner.cleanup()


def sse(*events: Any, done: bool = True) -> bytes:
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return body + (b"data: [DONE]\n\n" if done else b"")


def chunk(**delta: Any) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}


def body_handler(body: bytes) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(body)
        await response.write_eof()
        return response

    return handle
