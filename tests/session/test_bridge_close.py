"""The bridge's close: one close runs, a second call returns at once, and ``closed`` tells
a waiter (the voice room's lease release) when the first has closed storage."""

from __future__ import annotations

import asyncio
from typing import Any

from livekit import rtc
from livekit.agents import AgentSession

from alicia.agent.session.bridge import ReasoningBridge
from alicia.agent.settings import Settings

ENV = {
    "LIVEKIT_URL": "ws://127.0.0.1:1",
    "LIVEKIT_API_KEY": "devkey",
    "LIVEKIT_API_SECRET": "secret",
    "LLM_BASE_URL": "http://127.0.0.1:1/v1",
    "LLM_MODEL": "recorded-model",
}


class _SlowSink:
    """A storage sink whose close waits until the test lets it finish."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.closes = 0

    def submit(self, envelope: Any) -> None:
        """Nothing is stored here."""

    async def aclose(self) -> None:
        self.closes += 1
        await self.gate.wait()


async def test_a_second_close_returns_at_once_and_closed_is_set_when_storage_is() -> None:
    sink = _SlowSink()
    settings = Settings.from_env(ENV)
    session: AgentSession[Any] = AgentSession()
    bridge = ReasoningBridge(session, rtc.Room(), settings=settings, sink=sink)  # type: ignore[arg-type]
    first = asyncio.ensure_future(bridge.aclose())
    await asyncio.sleep(0.05)
    await asyncio.wait_for(bridge.aclose(), 1.0)  # a close from within the first's chain
    assert not bridge.closed.is_set() and sink.closes == 1
    sink.gate.set()
    await asyncio.wait_for(bridge.closed.wait(), 1.0)
    await first
    assert sink.closes == 1
