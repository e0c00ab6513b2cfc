"""Run the AG-UI endpoint as users do (``python -m alicia.agent.agui``) and talk to it.

:func:`running_agui` starts the endpoint as a subprocess on a free loopback port against
a :class:`~alicia.harness.LiveKitServer` (its key and secret verify the tokens) and an LLM
base URL, and waits until ``/agui/healthz`` answers. :func:`agui_token` mints a caller's
bearer token the way an app backend would (``livekit-api``). :func:`post_run` sends one
RunAgentInput and returns the decoded SSE events.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from livekit import api

from alicia.harness import LiveKitServer
from alicia.harness.ports import free_port
from tests.paths import ROOT
from tests.support.zygote import ModuleProcess, python_module

__all__ = [
    "AguiProcess",
    "EventStream",
    "agui_token",
    "post_run",
    "run_input",
    "running_agui",
    "sse_events",
]


@dataclass
class AguiProcess:
    """A started endpoint: its URL and log."""

    url: str
    """``http://127.0.0.1:<port>/agui``, as the endpoint printed it."""
    proc: ModuleProcess
    log_path: Path

    def log(self, tail: int = 6000) -> str:
        """The end of the endpoint's output."""
        return self.log_path.read_text(errors="replace")[-tail:]


@contextlib.asynccontextmanager
async def running_agui(
    server: LiveKitServer, llm_base_url: str, *, env: Mapping[str, str] | None = None
) -> AsyncIterator[AguiProcess]:
    """``python -m alicia.agent.agui`` against ``server`` and ``llm_base_url``; healthy."""
    port = free_port()
    full_env = {
        **os.environ,
        **server.env(),
        "LLM_BASE_URL": llm_base_url,
        "LLM_MODEL": "recorded-model",
        "LLM_API_KEY": "test",
        "ALICIA_AGUI_PORT": str(port),
        "PYTHONPATH": str(ROOT),
        **(env or {}),
    }
    if env is None or "DATABASE_URL" not in env:
        full_env.pop("DATABASE_URL", None)
    with tempfile.TemporaryDirectory(prefix="alicia-agui-") as tmp:
        log_path = Path(tmp) / "agui.log"
        proc = await python_module("alicia.agent.agui", [], env=full_env, log=log_path, cwd=ROOT)
        printed = ""
        try:
            deadline = time.monotonic() + 60
            async with aiohttp.ClientSession() as http:
                while True:
                    if proc.returncode is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"the AG-UI endpoint did not start:\n{printed}")
                    printed = log_path.read_text(errors="replace")
                    if "AG-UI endpoint on " in printed:
                        url = printed.split("AG-UI endpoint on ", 1)[1].split()[0]
                        with contextlib.suppress(aiohttp.ClientError):
                            async with http.get(url + "/healthz") as reply:
                                if reply.status == 200:
                                    break
                    await asyncio.sleep(0.05)
            yield AguiProcess(url, proc, log_path)
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 15)
                except TimeoutError:
                    os.killpg(proc.pid, signal.SIGKILL)
                    await proc.wait()


def agui_token(
    server: LiveKitServer,
    thread: str,
    identity: str,
    level: str | None = "full",
    *,
    own: bool = False,
) -> str:
    """A caller's bearer token as an app backend mints it: a LiveKit access token for the
    thread's room, granting ``level`` (attribute ``alicia.reasoning``)."""
    grants = api.VideoGrants(room_join=True, room=thread, can_update_own_metadata=own)
    tok = api.AccessToken(server.api_key, server.api_secret).with_identity(identity)
    if level is not None:
        tok = tok.with_attributes({"alicia.reasoning": level})
    return tok.with_grants(grants).to_jwt()


def run_input(thread: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """A RunAgentInput as a client sends it (camelCase JSON)."""
    return {
        "threadId": thread,
        "runId": f"run-{time.monotonic_ns()}",
        "messages": messages,
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }


def sse_events(text: str) -> list[dict[str, Any]]:
    """The JSON events of an SSE body (``data:`` lines; comments and blank lines skipped)."""
    events: list[dict[str, Any]] = []
    for block in text.split("\n\n"):
        data = [line[5:].lstrip() for line in block.split("\n") if line.startswith("data:")]
        if data:
            events.append(json.loads("\n".join(data)))
    return events


async def post_run(
    url: str, token: str | None, body: Mapping[str, Any], *, timeout: float = 60.0
) -> tuple[int, list[dict[str, Any]], str]:
    """POST one run; (status, decoded events, raw body)."""
    headers = {"Accept": "text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as http,
        http.post(url, json=body, headers=headers) as response,
    ):
        text = await response.text()
        status = response.status
    events = sse_events(text) if status == 200 else []
    return status, events, text


class EventStream:
    """A live SSE stream of AG-UI events (``GET``, or ``POST`` of ``body``), read in the
    background into :attr:`events`; :meth:`wait` for an event, :meth:`aclose` to hang up."""

    def __init__(self, url: str, token: str, *, body: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.token = token
        self.body = body
        self.events: list[dict[str, Any]] = []
        self.status = 0
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> EventStream:
        self._task = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _read(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "text/event-stream"}
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        method = "GET" if self.body is None else "POST"
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as http,
                http.request(method, self.url, json=self.body, headers=headers) as response,
            ):
                self.status = response.status
                buffer = ""
                async for chunk in response.content.iter_any():
                    buffer += chunk.decode()
                    *blocks, buffer = buffer.split("\n\n")
                    for block in blocks:
                        self.events.extend(sse_events(block + "\n\n"))
                    self._changed.set()
        finally:
            self._changed.set()

    async def wait(self, type_: str, timeout: float = 30.0, **fields: Any) -> dict[str, Any]:
        """The first event of ``type_`` (with ``fields``), waiting for it."""
        async with asyncio.timeout(timeout):
            while True:
                for event in self.events:
                    if event["type"] == type_ and all(event.get(k) == v for k, v in fields.items()):
                        return event
                if self._task is not None and self._task.done():
                    self._task.result()
                    raise AssertionError(f"the stream ended without {type_}: {self.events}")
                self._changed.clear()
                await self._changed.wait()

    async def aclose(self) -> None:
        """Hang up."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
