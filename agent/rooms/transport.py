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
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any, Final

from livekit import rtc

from alicia.agent.engine.participants import Overloaded, TokenBucket
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
from alicia.protocol import DATA_TOPIC, PROTOCOL_ATTRIBUTE, TEXT_BUDGET_BYTES, ProtocolError

from .ffi_routing import publish, route_room

__all__ = ["RoomTransport", "announce", "peer_of"]

logger = logging.getLogger("alicia.transport")

DEFAULT_MAX_PENDING: Final = 4096
_CHAT_READ_LIMIT: Final = TEXT_BUDGET_BYTES + 1
"""Bytes of one chat message read at most: one more than a user turn may hold, so the
session refuses what is longer (the rest of the stream is not read)."""
CHAT_OPEN_PER_SENDER: Final = 4
"""Chat streams one participant may have open at once; more are refused as they open."""
CHAT_DEADLINE_S: Final = 15.0
"""A chat message must be whole within this many seconds of its stream opening."""
CHAT_OPENS_PER_S: Final = 2.0
CHAT_OPENS_BURST: Final = 10
"""Chat streams a participant may open per second (after a burst): charged as each opens."""


_KINDS: Final = {
    rtc.ParticipantKind.PARTICIPANT_KIND_STANDARD: "standard",
    rtc.ParticipantKind.PARTICIPANT_KIND_INGRESS: "ingress",
    rtc.ParticipantKind.PARTICIPANT_KIND_EGRESS: "egress",
    rtc.ParticipantKind.PARTICIPANT_KIND_SIP: "sip",
    rtc.ParticipantKind.PARTICIPANT_KIND_AGENT: "agent",
}


def peer_of(participant: rtc.RemoteParticipant) -> Peer:
    """The engine's view of ``participant``, from what livekit-server told the room.

    Attributes come from the verified join token unless the participant holds
    ``canUpdateOwnMetadata``; if the server sent no permissions at all, the participant is
    treated as able to set its own (so none of its attributes counts as a grant).
    """
    info: Any = participant._info  # the ParticipantInfo the SDK keeps (HasField is there)
    has_permission = bool(info.HasField("permission")) if hasattr(info, "HasField") else False
    can_update = participant.permissions.can_update_metadata if has_permission else True
    return Peer(
        kind=_KINDS.get(participant.kind, "other"),
        attributes=participant.attributes,
        can_update_own_attributes=bool(can_update),
    )


async def announce(room: rtc.Room, attributes: dict[str, str] | None = None) -> None:
    """Tell the room's clients this agent speaks the protocol (``alicia.protocol=1``;
    they trust no other agent), with ``attributes`` too.

    livekit-server batches the join of a participant that publishes no track and tells
    the others every 3 s; an attribute change is sent at once, with the join. So clients
    (and a client following a takeover) see the agent about 3 s sooner. A token without
    ``canUpdateOwnMetadata`` cannot set it: logged."""
    try:
        await room.local_participant.set_attributes({PROTOCOL_ATTRIBUTE: "1", **(attributes or {})})
    except Exception:
        logger.warning("agent attribute not set", extra={"room": room.name}, exc_info=True)


class _State(enum.Enum):
    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"


_END: Final = object()


class RoomTransport:
    """:class:`Transport` over a connected ``rtc.Room``: reliable packets on ``topic``.

    Use as an async context manager (or call :meth:`start` / :meth:`aclose`). Incoming
    packets wait in a queue of at most ``max_pending``; past that they are dropped and
    counted in :attr:`dropped` (the turn runner's per-participant limits normally keep
    the queue short).
    """

    def __init__(
        self,
        room: rtc.Room,
        *,
        topic: str = DATA_TOPIC,
        max_pending: int = DEFAULT_MAX_PENDING,
        chat_topic: str | None = None,
    ) -> None:
        """Wrap ``room`` (already connected); nothing is registered until :meth:`start`.
        ``chat_topic``: also take text streams on that topic as typed input."""
        self._room = room
        self._topic = topic
        self._chat_topic = chat_topic
        self._readers: set[asyncio.Task[None]] = set()
        self._chats_open: dict[str, int] = {}
        """Sender -> its chat streams being read."""
        self._chat_opens: dict[str, TokenBucket] = {}
        """Sender -> its budget of chat streams to open (forgotten when it leaves)."""
        self._max_pending = max_pending
        self._queue: asyncio.Queue[Incoming | object] = asyncio.Queue()
        self._state = _State.NEW
        watch_queue("incoming", self, lambda t: t._queue.qsize())
        self.dropped = 0
        """Incoming packets dropped because the queue was full."""
        self.unattributed = 0
        """Incoming packets dropped because the SDK did not know their sender yet."""

    def start(self) -> RoomTransport:
        """Start listening to the room's data packets and departures."""
        if self._state is not _State.NEW:
            raise RuntimeError(f"RoomTransport is {self._state.value}; it can be opened once")
        self._room.on("data_received", self._on_data)
        self._room.on("participant_disconnected", self._on_left)
        self._room.on("participant_attributes_changed", self._on_attributes)
        self._room.on("participant_permissions_changed", self._on_permissions)
        self._room.on("disconnected", self._on_disconnected)
        if self._chat_topic is not None:
            self._room.register_text_stream_handler(self._chat_topic, self._on_chat)
        self._state = _State.OPEN
        if not route_room(self._room):
            logger.info("room FFI events not routed (unexpected livekit SDK internals)")
        return self

    async def aclose(self) -> None:
        """Stop listening; iteration ends. Idempotent."""
        if self._state is _State.OPEN:
            self._room.off("data_received", self._on_data)
            self._room.off("participant_disconnected", self._on_left)
            self._room.off("participant_attributes_changed", self._on_attributes)
            self._room.off("participant_permissions_changed", self._on_permissions)
            self._room.off("disconnected", self._on_disconnected)
            if self._chat_topic is not None:
                self._room.unregister_text_stream_handler(self._chat_topic)
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
            await publish(self._room, data, destinations, self._topic)
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
            yield item

    # -- room callbacks (event loop thread) -----------------------------------------

    def _on_data(self, packet: rtc.DataPacket) -> None:
        if packet.topic != self._topic:
            return
        if packet.participant is None:
            # livekit-server may deliver a new participant's first packets before the
            # participant_connected event; the SDK then cannot name the sender (its
            # identity is empty), so the packet cannot be answered. Clients repeat their
            # Configuration until it is answered (see DECISIONS in the worker report).
            self.unattributed += 1
            DROPPED.add(1, _UNATTRIBUTED)
            logger.warning("data packet from an unknown participant dropped")
            return
        if self._queue.qsize() >= self._max_pending:
            self.dropped += 1
            DROPPED.add(1, _QUEUE_FULL)
            logger.warning("incoming packet dropped", extra={"dropped": self.dropped})
            return
        sender = packet.participant
        self._queue.put_nowait(Packet(sender.identity, packet.data, peer_of(sender)))

    def _on_chat(self, reader: rtc.TextStreamReader, identity: str) -> None:
        opens = self._chat_opens.get(identity)
        if opens is None:
            opens = self._chat_opens[identity] = TokenBucket(CHAT_OPENS_PER_S, CHAT_OPENS_BURST)
        if not opens.take():
            reader.close()
            self._typed(identity, "", Overloaded("too many chat messages: slow down"))
            return
        if self._chats_open.get(identity, 0) >= CHAT_OPEN_PER_SENDER:
            reader.close()
            refusal = Overloaded(f"at most {CHAT_OPEN_PER_SENDER} chat messages open at once")
            self._typed(identity, "", refusal)
            return
        self._chats_open[identity] = self._chats_open.get(identity, 0) + 1
        task = asyncio.create_task(self._read_chat(reader, identity), name="alicia-chat-read")
        self._readers.add(task)
        task.add_done_callback(self._readers.discard)

    async def _read_chat(self, reader: rtc.TextStreamReader, identity: str) -> None:
        """One chat message, whole (at most :data:`_CHAT_READ_LIMIT` bytes, within
        :data:`CHAT_DEADLINE_S`), as typed input from the participant who sent it."""
        parts: list[str] = []
        size = 0
        try:
            async with asyncio.timeout(CHAT_DEADLINE_S):
                async for chunk in reader:
                    parts.append(chunk)
                    size += len(chunk.encode())
                    if size >= _CHAT_READ_LIMIT:
                        break
        except TimeoutError:
            refusal = Overloaded(f"chat message not finished within {CHAT_DEADLINE_S:g} s")
            self._typed(identity, "", refusal)
            return
        except Exception as exc:  # the sender left mid-stream, the stream failed
            logger.info("chat message not read", extra={"error": repr(exc)})
            return
        finally:
            reader.close()
            left = self._chats_open.get(identity, 1) - 1
            if left > 0:
                self._chats_open[identity] = left
            else:
                self._chats_open.pop(identity, None)
        self._typed(identity, "".join(parts))

    def _typed(self, identity: str, text: str, refused: ProtocolError | None = None) -> None:
        """Hand typed input (or its refusal) from ``identity`` to the session."""
        sender = self._room.remote_participants.get(identity)
        if sender is None or self._state is not _State.OPEN:
            self.unattributed += 1
            DROPPED.add(1, _UNATTRIBUTED)
            return
        if self._queue.qsize() >= self._max_pending:
            self.dropped += 1
            DROPPED.add(1, _QUEUE_FULL)
            logger.warning("incoming chat message dropped", extra={"dropped": self.dropped})
            return
        self._queue.put_nowait(Typed(identity, text, peer_of(sender), refused))

    def _on_left(self, participant: rtc.RemoteParticipant) -> None:
        self._chat_opens.pop(participant.identity, None)
        self._queue.put_nowait(Left(participant.identity))

    def _on_attributes(self, _changed: object, participant: rtc.Participant) -> None:
        # Attributes a participant may set itself are never grants: its own changes (as
        # many as it likes) change nothing and are not queued.
        if isinstance(participant, rtc.RemoteParticipant):
            peer = peer_of(participant)
            if not peer.can_update_own_attributes:
                self._regrant(participant.identity, peer)

    def _on_permissions(self, participant: rtc.Participant, *_: object) -> None:
        if isinstance(participant, rtc.RemoteParticipant):  # the server's doing only
            self._regrant(participant.identity, peer_of(participant))

    def _regrant(self, identity: str, peer: Peer) -> None:
        # Never dropped (a lowered grant must hold): only the server makes these.
        self._queue.put_nowait(Regranted(identity, peer))

    def _on_disconnected(self, *_: object) -> None:
        # The room is gone: iteration ends; sends fail with TransportError from now on.
        self._queue.put_nowait(_END)


_UNATTRIBUTED: Final = {"alicia.reason": "unattributed"}
_QUEUE_FULL: Final = {"alicia.reason": "queue_full"}
