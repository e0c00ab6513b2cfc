"""The engine's :class:`~alicia.agent.engine.transport.Transport` on a LiveKit room.

:class:`RoomTransport` sends and receives one envelope per reliable data packet on the
protocol's topic of a connected ``livekit.rtc.Room``, and reports departures. With a
``chat_topic`` (LiveKit's ``lk.chat`` in text rooms) it also reads the text streams
participants send there and hands each whole message on as typed input
(:class:`~alicia.agent.engine.transport.Typed`).

Exception tree::

    Exception
    └── TransportError   a send failed (LiveKit's error is the cause, or its text)

Using a closed transport, or opening one twice, raises ``RuntimeError``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import Any, Final

from livekit import rtc

from alicia.agent.engine.participants import Overloaded, PacketTooLarge
from alicia.agent.engine.transport import (
    Incoming,
    Left,
    Packet,
    Peer,
    Regranted,
    TransportError,
    Typed,
)
from alicia.agent.telemetry.instruments import DROPPED, watch_queue
from alicia.protocol import PROTOCOL_ATTRIBUTE, TEXT_BUDGET_BYTES, ProtocolError

from .doors import door
from .ffi_routing import publish, route_room, set_attributes
from .grants import grants_of, peer_of
from .refusals import refused
from .room import StreamCut, doors_of_room

__all__ = ["RoomTransport", "announce"]

logger = logging.getLogger("alicia.transport")

PROTOCOL: Final = door("protocol")
CHAT: Final = door("chat")
GRANTS: Final = door("grants")
DEFAULT_MAX_PENDING: Final = PROTOCOL.bounds.open_all or 4096
"""Packets and typed messages of all senders read and waiting (more are dropped)."""
MAX_PENDING_EACH: Final = PROTOCOL.bounds.queued_each or 256
"""The same for one sender: one sender's flood never fills the room's queue."""


ANNOUNCE_WAITS_S: Final = (0.25, 0.5, 1.0, 2.0)
"""Pauses between tries of the announcement (the signal link can time out a request, as
while it is rebuilt)."""


async def announce(room: rtc.Room, attributes: dict[str, str] | None = None) -> None:
    """Tell the room's clients this agent speaks the protocol (``alicia.protocol=1``;
    they trust no other agent), with ``attributes`` too.

    livekit-server batches the join of a participant that publishes no track and tells
    the others every 3 s; an attribute change is sent at once, with the join. So clients
    (and a client following a takeover) see the agent about 3 s sooner. A failed try is
    tried again (:data:`ANNOUNCE_WAITS_S`): unannounced, no client without an agent name
    trusts the agent. A token without ``canUpdateOwnMetadata`` cannot set it: logged."""
    values = {PROTOCOL_ATTRIBUTE: "1", **(attributes or {})}
    allowed = room.local_participant.permissions.can_update_metadata
    for wait in (*(ANNOUNCE_WAITS_S if allowed else ()), None):
        try:
            await set_attributes(room, values)  # raises what the SDK's call only logs
            return
        except Exception:
            gone = room.connection_state == rtc.ConnectionState.CONN_DISCONNECTED
            if wait is None or gone:
                logger.warning("agent attribute not set", extra={"room": room.name}, exc_info=True)
                return
            logger.info("agent attribute not set: trying again", extra={"room": room.name})
            await asyncio.sleep(wait)


class _State(enum.Enum):
    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"


_END: Final = object()


class RoomTransport:
    """:class:`Transport` over a connected ``rtc.Room``: reliable packets on the protocol's
    topic (the ``protocol`` door), typed input on ``lk.chat`` (the ``chat`` door), and
    grants from what livekit-server vouches for (the ``grants`` door).

    Use as an async context manager (or call :meth:`start` / :meth:`aclose`). Incoming
    packets wait in a queue of at most ``max_pending``, at most :data:`MAX_PENDING_EACH`
    of one sender; past that they are dropped and counted in :attr:`dropped` (the turn
    runner's per-participant limits normally keep the queue short).
    """

    def __init__(
        self,
        room: rtc.Room,
        *,
        max_pending: int = DEFAULT_MAX_PENDING,
        chat_topic: str | None = None,
    ) -> None:
        """Wrap ``room`` (already connected); nothing is registered until :meth:`start`.
        ``chat_topic``: also take typed input (the ``chat`` door's topic, ``lk.chat``)."""
        if chat_topic is not None and chat_topic != CHAT.at:
            raise ValueError(f"typed input is read on {CHAT.at!r} only, not {chat_topic!r}")
        self._room = room
        self._chat = chat_topic is not None
        self._stops: list[Callable[[], None]] = []
        self._readers: set[asyncio.Task[None]] = set()
        self._max_pending = max_pending
        self._trusted: set[str] = set()
        """Senders handed on with grants from their attributes (a change that takes them
        away is handed on once)."""
        self._waiting: Counter[str] = Counter()
        """Sender -> its packets and typed messages in the queue."""
        self._queue: asyncio.Queue[Incoming | object] = asyncio.Queue()
        self._state = _State.NEW
        grants_of(room)  # follow the room's grants from now on, if nobody did yet
        watch_queue("incoming", self, lambda t: t._queue.qsize())
        self.dropped = 0
        """Incoming packets dropped because the queue was full."""
        self.unattributed = 0
        """Incoming packets dropped because the SDK did not know their sender yet."""

    def start(self) -> RoomTransport:
        """Start listening to the room's data packets and departures."""
        if self._state is not _State.NEW:
            raise RuntimeError(f"RoomTransport is {self._state.value}; it can be opened once")
        doors = doors_of_room(self._room)
        self._stops.append(doors.packets(PROTOCOL, self._on_data))
        self._stops.append(doors.changes(GRANTS, self._on_change))
        if self._chat:
            self._stops.append(doors.streams(CHAT, self._on_chat, on_refused=self._chat_refused))
        self._room.on("participant_disconnected", self._on_left)
        self._room.on("disconnected", self._on_disconnected)
        self._state = _State.OPEN
        if not route_room(self._room):
            logger.info("room FFI events not routed (unexpected livekit SDK internals)")
        return self

    async def aclose(self) -> None:
        """Stop listening; iteration ends. Idempotent."""
        if self._state is _State.OPEN:
            for stop in self._stops:
                stop()
            self._stops.clear()
            self._room.off("participant_disconnected", self._on_left)
            self._room.off("disconnected", self._on_disconnected)
            self._queue.put_nowait(_END)
        self._state = _State.CLOSED
        readers = list(self._readers)
        for task in readers:
            task.cancel()
        if readers:
            await asyncio.gather(*readers, return_exceptions=True)

    async def __aenter__(self) -> RoomTransport:
        return self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def send(self, data: bytes, *, to: Sequence[str] | None = None) -> None:
        """Publish ``data`` as one reliable packet on the topic."""
        if self._state is not _State.OPEN:
            raise RuntimeError(f"RoomTransport is {self._state.value}")
        destinations = list(to) if to is not None else []
        try:
            await publish(self._room, data, destinations, PROTOCOL.at)
        except Exception as exc:  # the FFI raises PublishDataError or plain errors
            raise TransportError(f"publish_data failed: {exc}") from exc

    def __aiter__(self) -> AsyncIterator[Incoming]:
        if self._state is _State.NEW:
            raise RuntimeError("RoomTransport is not started")
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Incoming]:
        while True:
            item = await self._queue.get()
            if item is _END:
                self._queue.put_nowait(_END)  # later iterators end too
                return
            assert isinstance(item, Packet | Left | Typed | Regranted)
            if isinstance(item, Packet | Typed):
                left = self._waiting[item.sender] - 1
                if left > 0:
                    self._waiting[item.sender] = left
                else:
                    del self._waiting[item.sender]
            yield item

    # -- room callbacks (event loop thread) -----------------------------------------

    def _admit(self, sender: str) -> bool:
        """Room in the queue for one more item of ``sender`` (counted if so)."""
        if self._queue.qsize() >= self._max_pending:
            why = "the room's queue is full"
        elif self._waiting[sender] >= MAX_PENDING_EACH:
            why = "too many waiting"
        else:
            self._waiting[sender] += 1
            return True
        self.dropped += 1
        DROPPED.add(1, _QUEUE_FULL)
        refused(PROTOCOL, sender, why)
        return False

    def _on_data(self, packet: rtc.DataPacket) -> None:
        if packet.participant is None:
            # livekit-server may deliver a new participant's first packets before the
            # participant_connected event; the SDK then cannot name the sender (its
            # identity is empty), so the packet cannot be answered. Clients repeat their
            # Configuration until it is answered (see DECISIONS in the worker report).
            self.unattributed += 1
            DROPPED.add(1, _UNATTRIBUTED)
            refused(PROTOCOL, "", "sender not known yet")
            return
        sender = packet.participant
        if self._admit(sender.identity):
            self._queue.put_nowait(Packet(sender.identity, packet.data, self._peer(sender)))

    def _on_chat(self, reader: Any, identity: str) -> None:
        task = asyncio.create_task(self._read_chat(reader, identity), name="alicia-chat-read")
        self._readers.add(task)
        task.add_done_callback(self._readers.discard)

    def _chat_refused(self, identity: str, why: str) -> None:
        said = {
            "too fast": "too many chat messages: slow down",
            "too many open": f"at most {CHAT.bounds.open_each} chat messages open at once",
        }
        self._typed(identity, "", Overloaded(said.get(why, f"chat message refused: {why}")))

    async def _read_chat(self, reader: Any, identity: str) -> None:
        """One chat message, whole (within the ``chat`` door's bytes and deadline), as
        typed input from the participant who sent it."""
        try:
            text = await reader.read_all()
        except StreamCut:
            if reader.cut == "too big":
                size = (CHAT.bounds.bytes_each or TEXT_BUDGET_BYTES) + 1
                self._typed(identity, "", PacketTooLarge(size, TEXT_BUDGET_BYTES))
            elif reader.cut == "too slow":
                limit = CHAT.bounds.deadline_s
                self._typed(identity, "", Overloaded(f"chat message not whole within {limit:g} s"))
            return
        except Exception as exc:  # the sender left mid-stream, the stream failed
            logger.info("chat message not read", extra={"error": repr(exc)})
            return
        self._typed(identity, text)

    def _typed(self, identity: str, text: str, refused: ProtocolError | None = None) -> None:
        """Hand typed input (or its refusal) from ``identity`` to the session."""
        sender = self._room.remote_participants.get(identity)
        if sender is None or self._state is not _State.OPEN:
            self.unattributed += 1
            DROPPED.add(1, _UNATTRIBUTED)
            return
        if self._admit(identity):
            self._queue.put_nowait(Typed(identity, text, self._peer(sender), refused))

    def _on_left(self, participant: rtc.RemoteParticipant) -> None:
        self._trusted.discard(participant.identity)
        self._queue.put_nowait(Left(participant.identity))

    def _on_change(self, participant: rtc.RemoteParticipant) -> None:
        # Anyone whose attributes are grants is vouched for anew at every change: what it
        # may see follows from now on. Attributes a participant could set itself are never
        # grants: the change that made it so lowers it once (if it was trusted before);
        # its own changes after that (as many as it likes) change nothing, not queued.
        identity = participant.identity
        peer = peer_of(self._room, participant)
        if peer.can_update_own_attributes:
            if identity not in self._trusted:
                return
            self._trusted.discard(identity)
        else:
            self._trusted.add(identity)
        self._regrant(identity, peer)

    def _peer(self, participant: rtc.RemoteParticipant) -> Peer:
        peer = peer_of(self._room, participant)
        if not peer.can_update_own_attributes:
            self._trusted.add(participant.identity)
        return peer

    def _regrant(self, identity: str, peer: Peer) -> None:
        # Never dropped (a lowered grant must hold): only the server makes these.
        self._queue.put_nowait(Regranted(identity, peer))

    def _on_disconnected(self, *_: object) -> None:
        # The room is gone: iteration ends; sends fail with TransportError from now on.
        self._queue.put_nowait(_END)


_UNATTRIBUTED: Final = {"alicia.reason": "unattributed"}
_QUEUE_FULL: Final = {"alicia.reason": "queue_full"}
