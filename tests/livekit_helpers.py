"""Helpers for tests that join real rooms with the ``livekit`` Python SDK."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from livekit import rtc

from harness import LiveKitServer

__all__ = ["Inbox", "joined"]


class Inbox:
    """Collects data packets a room receives, for asserting on them."""

    def __init__(self, room: rtc.Room, topic: str | None = None) -> None:
        self.packets: list[rtc.DataPacket] = []
        self._topic = topic
        self._event = asyncio.Event()
        room.on("data_received", self._on_data)

    def _on_data(self, packet: rtc.DataPacket) -> None:
        if self._topic is None or packet.topic == self._topic:
            self.packets.append(packet)
            self._event.set()

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[rtc.DataPacket]:
        """Wait until at least ``count`` packets arrived; return them all."""
        async with asyncio.timeout(timeout):
            while len(self.packets) < count:
                self._event.clear()
                await self._event.wait()
        return self.packets


@contextlib.asynccontextmanager
async def joined(
    server: LiveKitServer, room: str, identity: str, token: str | None = None
) -> AsyncIterator[rtc.Room]:
    """A connected ``rtc.Room`` for ``identity`` (or ``token``), disconnected on exit."""
    r = rtc.Room()
    await r.connect(server.url, token or server.token(identity, room))
    try:
        yield r
    finally:
        await r.disconnect()


async def wait_for_participant(room: rtc.Room, identity: str, timeout: float = 10.0) -> None:
    """Wait until ``identity`` is a remote participant of ``room``."""
    async with asyncio.timeout(timeout):
        while identity not in room.remote_participants:
            await asyncio.sleep(0.02)
