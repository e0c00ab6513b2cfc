"""A protocol client of the real worker in a real room (the worker tests' client).

:func:`client` joins ``room`` on a livekit-server and waits for the agent; the
:class:`Client` numbers its envelopes, decodes only what the agent sends, and repeats its
Configuration until it is answered. :func:`worker_log_on_failure` attaches the worker's
log to a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from livekit import rtc

from alicia.harness import LiveKitServer
from alicia.protocol import (
    DATA_TOPIC,
    AssistantSentence,
    Body,
    Configuration,
    Envelope,
    MessageType,
    StanzaCounter,
    UserMessage,
    decode,
    encode,
    envelope,
    new_id,
)
from tests.e2e.worker import WorkerProcess
from tests.support.livekit_rooms import joined

T = MessageType
SHOW = ["reasoning_step_display", "streaming"]


class Client:
    """A protocol client in a real room: numbers its envelopes, decodes what the agent sends."""

    def __init__(self, room: rtc.Room, conversation_id: str) -> None:
        self.room = room
        self.conversation_id = conversation_id
        self.counter = StanzaCounter("client")
        self.received: list[tuple[float, str, Envelope[Any]]] = []
        self.agent = ""
        self._event = asyncio.Event()
        room.on("data_received", self._on_data)

    def _on_data(self, packet: rtc.DataPacket) -> None:
        sender = packet.participant
        if packet.topic != DATA_TOPIC or sender is None or sender.identity != self.agent:
            return  # only the agent's envelopes (other clients' packets are not for us)
        self.received.append((time.monotonic(), sender.identity, decode(packet.data)))
        self._event.set()

    async def wait_for_agent(self) -> None:
        async with asyncio.timeout(30):  # the agent joins once the room is dispatched
            while not self.agent:
                for p in self.room.remote_participants.values():
                    if p.kind == rtc.ParticipantKind.PARTICIPANT_KIND_AGENT:
                        self.agent = p.identity
                await asyncio.sleep(0.02)

    @property
    def box(self) -> list[Envelope[Any]]:
        return [env for _, _, env in self.received]

    async def send(self, body: Body) -> int:
        sid = self.counter.next()
        env = envelope(body, stanza_id=sid, conversation_id=self.conversation_id)
        await self.send_raw(encode(env))
        return sid

    async def send_raw(self, data: bytes) -> None:
        await self.room.local_participant.publish_data(
            data, reliable=True, destination_identities=[self.agent], topic=DATA_TOPIC
        )

    async def wait_until(
        self, until: Callable[[list[Envelope[Any]]], bool], within: float = 20.0
    ) -> list[Envelope[Any]]:
        async with asyncio.timeout(within):
            while not until(self.box):
                self._event.clear()
                await self._event.wait()
        return self.box

    async def handshake(self, features: list[str] | None = SHOW) -> Configuration:
        """Send Configuration until it is answered.

        livekit-server can deliver a new participant's first packets before the agent
        learns who sent them; those cannot be answered, so a client repeats its
        Configuration (each with a new stanzaId) until the reply comes.
        """
        for _ in range(15):
            await self.send(Configuration(features=features))
            with contextlib.suppress(TimeoutError):
                box = await self.wait_until(
                    lambda b: any(e.type == T.CONFIGURATION for e in b), within=1.0
                )
                reply: Configuration = next(e.body for e in box if e.type == T.CONFIGURATION)
                return reply
        raise TimeoutError("the agent never answered the Configuration")


@contextlib.asynccontextmanager
async def client(server: LiveKitServer, room: str, identity: str) -> AsyncIterator[Client]:
    async with joined(server, room, identity) as r:
        c = Client(r, room)
        await c.wait_for_agent()
        yield c


@contextlib.contextmanager
def worker_log_on_failure(worker: WorkerProcess) -> Iterator[None]:
    try:
        yield
    except BaseException as exc:
        raise AssertionError(f"{exc!r}\n--- worker log ---\n{worker.log()}") from exc


def of(box: list[Envelope[Any]], kind: type[Any]) -> list[Any]:
    return [e.body for e in box if isinstance(e.body, kind)]


def final(box: list[Envelope[Any]]) -> bool:
    return any(isinstance(e.body, AssistantSentence) and e.body.is_final for e in box)


def user_message(room: str, text: str) -> UserMessage:
    return UserMessage(id=new_id("msg"), conversation_id=room, content=text)
