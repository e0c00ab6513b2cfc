"""livekit-agents' session host (topic ``lk.agent.session``) with a rule for each request.

livekit-agents 1.8 answers every session host request from any participant of the room:
``run_input`` asks the model a text (after interrupting whatever the agent was saying),
``update_io`` mutes the agent for everyone, ``get_agent_info`` returns its instructions.
:func:`gate_session_host` puts the session's host on :class:`GatedRoomTransport`, which
decides per request from the sender's verified join token (``protocol/DECISIONS.md``,
"The host framework's own channels"):

* open to every participant (read-only, no reasoning, what the room sees anyway):
  ``ping``, ``get_chat_history``, ``get_session_state``, ``get_session_usage``,
  ``get_framework_info``, ``get_rtc_stats``;
* the operator grant (``alicia.operator=true`` in the token) only: ``run_input`` (it
  interrupts anyone's turn, which a ControlStop may do only with that grant),
  ``update_io``, ``get_agent_info`` (the instructions) and ``finalize_simulation``.

The instructions also ride on the chat items that change the agent's configuration
(``agent_config_update``, in ``conversation_item_added`` events and the chat history):
they are taken off for everyone but operators.

A refused request gets a response with ``error`` naming the rule, sent to its sender only;
every response goes only to the participant that asked (events are still broadcast, as
livekit-agents does). Messages other than requests (the console's audio) are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from livekit import rtc
from livekit.agents import AgentSession
from livekit.agents.voice.remote_session import (
    TOPIC_SESSION_MESSAGES,
    RoomSessionTransport,
    SessionHost,
    SessionTransport,
)
from livekit.protocol.agent_pb import agent_session as agent_pb

from alicia.agent.engine.participants import OPERATOR_GRANT, is_operator
from alicia.agent.rooms.transport import peer_of

__all__ = [
    "MAX_REQUEST_BYTES",
    "OPEN_REQUESTS",
    "OPERATOR_REQUESTS",
    "GatedRoomTransport",
    "gate_session_host",
]

logger = logging.getLogger("alicia.session")

OPEN_REQUESTS: Final = frozenset(
    {
        "ping",
        "get_chat_history",
        "get_session_state",
        "get_session_usage",
        "get_framework_info",
        "get_rtc_stats",
    }
)
"""Requests any participant may send."""
OPERATOR_REQUESTS: Final = frozenset(
    {"run_input", "update_io", "get_agent_info", "finalize_simulation"}
)
"""Requests only a participant with the operator grant may send."""
MAX_REQUEST_BYTES: Final = 64 * 1024
"""A request stream longer than this is not read further and gets no answer."""
_QUEUE: Final = 32
"""Requests read and waiting to be handled (more are dropped: the room floods)."""
_READ_WITHIN_S: Final = 2.0
"""A request (one small protobuf) arrives whole within this; a stream held open longer is
dropped, so that it holds nothing up."""
_READERS: Final = 16
"""Request streams read at once, all senders together; more are dropped."""
_READERS_EACH: Final = 2
"""Request streams read at once from one sender; more of its are dropped."""
_KNOWN_WITHIN_S: Final = 5.0
"""How long a request waits for the room to learn of its sender (its grants)."""
_PENDING: Final = 256
"""Requests answered to their senders that are still remembered (oldest forgotten)."""


class GatedRoomTransport(SessionTransport):
    """The room's ``lk.agent.session`` byte streams, each request let through only from a
    sender entitled to it (see the module docstring)."""

    def __init__(self, room: rtc.Room, may_operate: Callable[[str], bool] | None = None) -> None:
        """``may_operate(identity)``: the sender holds the operator grant (by default, from
        its verified join token as the room knows it)."""
        self._room = room
        self._may_operate = may_operate or self._operator
        self._incoming: asyncio.Queue[tuple[agent_pb.AgentSessionMessage, str]] = asyncio.Queue(
            _QUEUE
        )
        self._reading: dict[str, int] = {}
        """Streams being read, by sender."""
        self._readers: set[asyncio.Task[None]] = set()
        self._received: asyncio.Queue[agent_pb.AgentSessionMessage | None] = asyncio.Queue(_QUEUE)
        self._askers: OrderedDict[str, str] = OrderedDict()
        """request id -> the identity that sent it (its response goes there only)."""
        self._read_task: asyncio.Task[None] | None = None
        self._send_lock = asyncio.Lock()
        self._closed = False

    def _operator(self, identity: str) -> bool:
        participant = self._room.remote_participants.get(identity)
        return participant is not None and is_operator(peer_of(participant))

    async def _known(self, identity: str) -> None:
        """Wait (bounded) until the room knows ``identity``: livekit-server announces a
        participant that publishes no track in its next batch of joins (up to 3 s), and
        its grants are unknown until then."""
        for _ in range(int(_KNOWN_WITHIN_S / 0.1)):
            if identity in self._room.remote_participants:
                return
            await asyncio.sleep(0.1)

    async def start(self) -> None:
        """Take the room's ``lk.agent.session`` streams."""
        if self._read_task is not None:
            return
        self._room.register_byte_stream_handler(TOPIC_SESSION_MESSAGES, self._on_stream)
        self._read_task = asyncio.create_task(self._read_loop(), name="alicia-session-host")

    def _on_stream(self, reader: rtc.ByteStreamReader, identity: str) -> None:
        if self._closed or (
            self._reading.get(identity, 0) >= _READERS_EACH
            or sum(self._reading.values()) >= _READERS
        ):
            logger.warning("session host request dropped: too many open", extra={"from": identity})
            return
        self._reading[identity] = self._reading.get(identity, 0) + 1
        task = asyncio.create_task(self._take(reader, identity), name="alicia-session-request")
        self._readers.add(task)
        task.add_done_callback(self._readers.discard)

    async def _take(self, reader: rtc.ByteStreamReader, identity: str) -> None:
        """Read one request stream, within :data:`_READ_WITHIN_S`, and queue it."""
        try:
            async with asyncio.timeout(_READ_WITHIN_S):
                message = await self._read(reader, identity)
        except TimeoutError:
            logger.info("session host request not sent whole in time", extra={"from": identity})
            return
        finally:
            left = self._reading.pop(identity, 1) - 1
            if left:
                self._reading[identity] = left
        if message is None:
            return
        try:
            self._incoming.put_nowait((message, identity))
        except asyncio.QueueFull:
            logger.warning("session host request dropped: queue full", extra={"from": identity})

    async def _read_loop(self) -> None:
        while True:
            message, identity = await self._incoming.get()
            if not message.HasField("request"):
                continue  # not a request: the console's audio has no place in a room
            request = message.request
            kind = request.WhichOneof("request") or ""
            if kind in OPERATOR_REQUESTS:
                await self._known(identity)
            allowed = kind in OPEN_REQUESTS or (
                kind in OPERATOR_REQUESTS and self._may_operate(identity)
            )
            if not allowed:
                logger.info(
                    "session host request refused", extra={"from": identity, "request": kind}
                )
                await self._refuse(identity, request.request_id, kind)
                continue
            self._askers[request.request_id] = identity
            while len(self._askers) > _PENDING:
                self._askers.popitem(last=False)
            await self._received.put(message)

    async def _read(
        self, reader: rtc.ByteStreamReader, identity: str
    ) -> agent_pb.AgentSessionMessage | None:
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in reader:
                size += len(chunk)
                if size > MAX_REQUEST_BYTES:
                    logger.warning("session host request too long", extra={"from": identity})
                    return None
                chunks.append(chunk)
            message = agent_pb.AgentSessionMessage()
            message.ParseFromString(b"".join(chunks))
        except Exception as exc:
            logger.info("session host message unreadable", extra={"error": repr(exc)})
            return None
        return message

    async def _refuse(self, identity: str, request_id: str, kind: str) -> None:
        rule = (
            f"not permitted: {kind} needs the operator grant ({OPERATOR_GRANT}=true)"
            if kind in OPERATOR_REQUESTS
            else f"not permitted: {kind or 'this request'} is not served here"
        )
        refusal = agent_pb.AgentSessionMessage(
            response=agent_pb.SessionResponse(request_id=request_id, error=rule)
        )
        with contextlib.suppress(Exception):
            await self._send(refusal, [identity])

    async def send_message(self, msg: agent_pb.AgentSessionMessage) -> None:
        """A response to its asker only; an event to the room. The agent's instructions
        (on the chat items that change its configuration) go to operators only."""
        destinations: list[str] | None = None
        if msg.HasField("response"):
            asker = self._askers.pop(msg.response.request_id, None)
            if asker is None:
                return  # nobody entitled asked for it
            destinations = [asker]
            if not self._may_operate(asker):
                msg = _without_instructions(msg)
        else:
            msg = _without_instructions(msg)
        if self._closed or not self._room.isconnected():
            raise RuntimeError("room session transport is closed")
        await self._send(msg, destinations)

    async def _send(self, msg: agent_pb.AgentSessionMessage, to: list[str] | None) -> None:
        async with self._send_lock:
            await self._room.local_participant.send_bytes(
                msg.SerializeToString(), topic=TOPIC_SESSION_MESSAGES, destination_identities=to
            )

    async def close(self) -> None:
        """Stop taking streams and end the host's iteration."""
        if self._closed:
            return
        self._closed = True
        readers = [*self._readers, *([self._read_task] if self._read_task else [])]
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        if self._read_task is not None:
            with contextlib.suppress(ValueError, AttributeError):
                self._room.unregister_byte_stream_handler(TOPIC_SESSION_MESSAGES)
        with contextlib.suppress(asyncio.QueueFull):
            self._received.put_nowait(None)

    def __aiter__(self) -> AsyncIterator[agent_pb.AgentSessionMessage]:
        return self

    async def __anext__(self) -> agent_pb.AgentSessionMessage:
        if self._closed and self._received.empty():
            raise StopAsyncIteration
        message = await self._received.get()
        if message is None:
            raise StopAsyncIteration
        return message


def _without_instructions(msg: agent_pb.AgentSessionMessage) -> agent_pb.AgentSessionMessage:
    """``msg`` with the instructions taken off every agent configuration item it carries
    (a copy if there were any)."""
    if not any(
        i.HasField("agent_config_update") and i.agent_config_update.instructions
        for i in _items_of(msg)
    ):
        return msg
    clean = agent_pb.AgentSessionMessage()
    clean.CopyFrom(msg)
    for item in _items_of(clean):
        if item.HasField("agent_config_update"):
            item.agent_config_update.ClearField("instructions")
    return clean


def _items_of(msg: agent_pb.AgentSessionMessage) -> list[Any]:
    if msg.HasField("event") and msg.event.HasField("conversation_item_added"):
        return [msg.event.conversation_item_added.item]
    if msg.HasField("response") and msg.response.HasField("get_chat_history"):
        return list(msg.response.get_chat_history.items)
    if msg.HasField("response") and msg.response.HasField("run_input"):
        return list(msg.response.run_input.items)
    return []


async def gate_session_host(agent_session: AgentSession[Any], room: rtc.Room) -> bool:
    """Put ``agent_session``'s session host (if it has one in ``room``) on a
    :class:`GatedRoomTransport`; True if it did. The session closes the new host as it
    would have closed its own."""
    host: Any = getattr(agent_session, "_session_host", None)
    if not isinstance(host, SessionHost):
        return False  # started with session_host=False, or not the primary session
    transport = getattr(host, "_transport", None)
    if isinstance(transport, GatedRoomTransport):
        return True  # gated from the start (the worker's own voice rooms)
    if not isinstance(transport, RoomSessionTransport):
        return False  # the console's TCP transport: a local developer, not the room
    await host.aclose()  # unregisters the open handler
    await start_gated_host(agent_session, room)
    return True


async def start_gated_host(agent_session: AgentSession[Any], room: rtc.Room) -> None:
    """Give ``agent_session`` (started with ``session_host=False``) a gated session host in
    ``room``: no request is ever answered by the open one. The session closes it."""
    gated = SessionHost(GatedRoomTransport(room))
    gated.register_session(agent_session)
    await gated.start()
    agent_session._session_host = gated
