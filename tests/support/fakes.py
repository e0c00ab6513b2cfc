"""In-memory stand-ins for unit tests of the turn runner (no LiveKit involved).

:class:`MemoryTransport` implements :class:`alicia.agent.engine.transport.Transport`: tests deliver
client packets into it and read back what the worker sent, addressed to whom. An
optional ``handler`` sees every sent packet as it is sent (like httpx's MockTransport).
:class:`FakeClient` numbers a client's envelopes and reads its inbox.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from alicia.agent.engine.transport import UNKNOWN_PEER, Incoming, Left, Packet, Peer, TransportError
from alicia.protocol import Body, Envelope, StanzaCounter, decode, encode, envelope

__all__ = ["DEBUG_PEER", "FakeClient", "MemoryTransport", "RecordingSink", "Sent"]

DEBUG_PEER = Peer(attributes={"alicia.reasoning": "full"})
"""A client joined with one of the project's debugging tokens: granted plaintext steps."""


@dataclass(frozen=True, slots=True)
class Sent:
    """One packet the worker sent: bytes and destination identities (None: everyone)."""

    data: bytes
    to: tuple[str, ...] | None

    def reaches(self, identity: str) -> bool:
        """True if ``identity`` would receive this packet."""
        return self.to is None or identity in self.to


class MemoryTransport:
    """A :class:`~alicia.agent.engine.transport.Transport` kept in memory."""

    def __init__(self, handler: Callable[[Sent], None] | None = None) -> None:
        self.sent: list[Sent] = []
        self.fail_sends = False
        """When True, ``send`` raises TransportError (a room that went away)."""
        self._handler = handler
        self._queue: asyncio.Queue[Incoming | None] = asyncio.Queue()
        self._changed = asyncio.Event()
        self._closed = False

    async def send(self, data: bytes, *, to: Sequence[str] | None = None) -> None:
        """Record ``data`` for ``to``."""
        if self._closed:
            raise RuntimeError("MemoryTransport is closed")
        if self.fail_sends:
            raise TransportError("send failed (fail_sends)")
        item = Sent(bytes(data), tuple(to) if to is not None else None)
        self.sent.append(item)
        if self._handler is not None:
            self._handler(item)
        self._changed.set()

    def deliver(
        self, sender: str, data: bytes, peer: Peer = UNKNOWN_PEER, *, at: float | None = None
    ) -> None:
        """A packet from ``sender`` (as the front end knows it: ``peer``) arrives (``at``:
        its ``received_at``, default now)."""
        packet = Packet(sender, data, peer) if at is None else Packet(sender, data, peer, at)
        self._queue.put_nowait(packet)

    def leave(self, identity: str) -> None:
        """``identity`` leaves the room."""
        self._queue.put_nowait(Left(identity))

    def __aiter__(self) -> AsyncIterator[Incoming]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Incoming]:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            yield item

    async def aclose(self) -> None:
        """End iteration."""
        if not self._closed:
            self._closed = True
            self._queue.put_nowait(None)

    def inbox(self, identity: str) -> list[Envelope[Any]]:
        """Every envelope sent so far that reaches ``identity``, decoded, in order."""
        return [decode(s.data) for s in self.sent if s.reaches(identity)]

    async def wait_for(
        self,
        identity: str,
        until: Callable[[list[Envelope[Any]]], bool],
        within: float = 10.0,
    ) -> list[Envelope[Any]]:
        """Wait until ``until(inbox(identity))`` holds; return that inbox."""
        async with asyncio.timeout(within):
            while True:
                box = self.inbox(identity)
                if until(box):
                    return box
                self._changed.clear()
                await self._changed.wait()


class FakeClient:
    """One client identity talking through a :class:`MemoryTransport`."""

    def __init__(
        self,
        transport: MemoryTransport,
        identity: str,
        conversation_id: str,
        peer: Peer = DEBUG_PEER,
    ) -> None:
        self.transport = transport
        self.identity = identity
        self.conversation_id = conversation_id
        self.peer = peer
        self.counter = StanzaCounter("client")

    def send(self, body: Body, *, stanza_id: int | None = None) -> int:
        """Send ``body`` in the next envelope (or with ``stanza_id``); return the stanzaId."""
        sid = self.counter.next() if stanza_id is None else stanza_id
        env = envelope(body, stanza_id=sid, conversation_id=self.conversation_id)
        self.transport.deliver(self.identity, encode(env), self.peer)
        return sid

    def send_raw(self, data: bytes) -> None:
        """Send arbitrary bytes."""
        self.transport.deliver(self.identity, data, self.peer)

    def inbox(self) -> list[Envelope[Any]]:
        """Everything this client received."""
        return self.transport.inbox(self.identity)

    async def wait_for(
        self, until: Callable[[list[Envelope[Any]]], bool], within: float = 10.0
    ) -> list[Envelope[Any]]:
        """Wait until ``until(inbox)`` holds."""
        return await self.transport.wait_for(self.identity, until, within)


class RecordingSink:
    """A :class:`~alicia.agent.engine.sink.StepSink` keeping what it is given (for assertions)."""

    def __init__(self, last_index: dict[str, int] | None = None) -> None:
        self.envelopes: list[Envelope[Any]] = []
        self._last = dict(last_index or {})
        self.closed = False

    def submit(self, env: Envelope[Any]) -> None:
        """Keep ``env``."""
        self.envelopes.append(env)

    async def last_step_index(self, previous_id: str) -> int:
        """The seeded last index (0 if none)."""
        return self._last.get(previous_id, 0)

    async def aclose(self) -> None:
        """Mark closed."""
        self.closed = True
