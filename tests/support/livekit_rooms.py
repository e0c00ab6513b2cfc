"""Helpers for tests that join real rooms with the ``livekit`` Python SDK."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from livekit import rtc

from alicia.harness import LiveKitServer
from alicia.protocol import (
    DATA_TOPIC,
    Body,
    Configuration,
    Envelope,
    StanzaCounter,
    decode,
    encode,
    envelope,
)

__all__ = ["Inbox", "ProtocolClient", "joined", "protocol_client", "wait_for_participant"]


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


class ProtocolClient:
    """A raw protocol client: numbers what it sends, keeps what the agent sends."""

    def __init__(self, room: rtc.Room, conversation_id: str) -> None:
        self.room = room
        self.conversation_id = conversation_id
        self.counter = StanzaCounter("client")
        self.last_sent = 0
        self.box: list[Envelope[Any]] = []
        self.bytes_received = 0
        """Bytes of every packet the agent sent this client."""
        self.agent = ""
        self._event = asyncio.Event()
        room.on("data_received", self._on_data)

    def _on_data(self, packet: rtc.DataPacket) -> None:
        sender = packet.participant
        if packet.topic == DATA_TOPIC and sender is not None and sender.identity == self.agent:
            self.bytes_received += len(packet.data)
            self.box.append(decode(packet.data))
            self._event.set()

    async def wait_for_agent(self, within: float = 90.0) -> None:
        """Until an agent is in the room (a precondition, not a promise: a voice app's first
        job, at nice 10 beside the realtime lanes, took over 30 s to join)."""
        async with asyncio.timeout(within):
            while not self.agent:
                for p in self.room.remote_participants.values():
                    if p.kind == rtc.ParticipantKind.PARTICIPANT_KIND_AGENT:
                        self.agent = p.identity
                await asyncio.sleep(0.02)

    async def send(self, body: Body) -> int:
        """Send ``body`` in the next envelope to the agent; its stanzaId."""
        self.last_sent = self.counter.next()
        env = envelope(body, stanza_id=self.last_sent, conversation_id=self.conversation_id)
        await self.send_raw(encode(env))
        return self.last_sent

    async def send_raw(self, data: bytes, *, everyone: bool = False) -> None:
        """Publish ``data`` on the protocol topic, to the agent (or to the whole room)."""
        await self.room.local_participant.publish_data(
            data,
            reliable=True,
            destination_identities=[] if everyone else [self.agent],
            topic=DATA_TOPIC,
        )

    async def wait_for(self, kind: type[Any], within: float = 30.0, **match: Any) -> Any:
        async with asyncio.timeout(within):
            while True:
                for env in self.box:
                    body = env.body
                    if isinstance(body, kind) and all(
                        getattr(body, k) == v for k, v in match.items()
                    ):
                        return body
                self._event.clear()
                await self._event.wait()

    async def handshake(self) -> None:
        for _ in range(15):  # the first packets of a new participant can go unanswered
            await self.send(Configuration(features=["reasoning_step_display", "streaming"]))
            with contextlib.suppress(TimeoutError):
                await self.wait_for(Configuration, within=1.0)
                return
        raise TimeoutError("no Configuration reply")

    def of(self, kind: type[Any]) -> list[Any]:
        return [e.body for e in self.box if isinstance(e.body, kind)]

    def got(self) -> str:
        """What arrived, in order, runs of one kind counted (for a failure's message)."""
        runs: list[list[Any]] = []
        for env in self.box:
            name = type(env.body).__name__
            if runs and runs[-1][0] == name:
                runs[-1][1] += 1
            else:
                runs.append([name, 1])
        return " ".join(f"{n}x{c}" if c > 1 else n for n, c in runs) or "nothing"


@contextlib.asynccontextmanager
async def protocol_client(
    server: LiveKitServer, room: str, identity: str = "alice"
) -> AsyncIterator[ProtocolClient]:
    """A :class:`ProtocolClient` in ``room`` that has seen the agent and been answered
    (disconnected on exit; what it received stays readable)."""
    async with joined(server, room, identity) as r:
        client = ProtocolClient(r, room)
        await client.wait_for_agent()
        await client.handshake()
        yield client
