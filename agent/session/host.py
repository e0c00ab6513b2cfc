"""livekit-agents' session host (topic ``lk.agent.session``) with a rule for each request.

livekit-agents 1.8 answers every session host request from any participant of the room:
``run_input`` asks the model a text (after interrupting whatever the agent was saying),
``update_io`` mutes the agent for everyone, ``get_agent_info`` returns its instructions.
:func:`gate_session_host` puts the session's host on :class:`GatedRoomTransport`, which
decides per request from what livekit-server vouches for of the sender
(``protocol/DECISIONS.md``, "The host framework's own channels"); the streams come through
the ``session host`` door of the table (``alicia.agent.gate.doors``), which bounds them:

* open to every participant (read-only, no reasoning, what the room sees anyway):
  ``ping``, ``get_chat_history``, ``get_session_state``, ``get_session_usage``,
  ``get_framework_info``;
* the operator grant (``alicia.operator=true``, vouched for by the server) only:
  ``run_input`` (it interrupts anyone's turn, which a ControlStop may do only with that
  grant), ``update_io``, ``get_agent_info`` (the instructions), ``finalize_simulation``
  and ``get_rtc_stats`` (its ICE candidates name the worker's network addresses).

A request waits (bounded) for the room to know its sender in a task of its own, at most
a few per sender, so no sender holds anyone else's; a sender that left, or whose grant
went while its request waited, is refused.

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
from collections import Counter, OrderedDict
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

from alicia.agent.engine.participants import OPERATOR_GRANT
from alicia.agent.engine.rights import Right, admits
from alicia.agent.gate.doors import SESSION_OPEN, SESSION_OPERATOR, door
from alicia.agent.gate.grants import peer_of
from alicia.agent.gate.refusals import refused
from alicia.agent.gate.room import Bounded, StreamCut, doors_of_room

__all__ = [
    "MAX_REQUEST_BYTES",
    "OPEN_REQUESTS",
    "OPERATOR_REQUESTS",
    "GatedRoomTransport",
    "gate_session_host",
]

logger = logging.getLogger("alicia.session")

SESSION_HOST: Final = door("session host")
OPEN_REQUESTS: Final = frozenset(SESSION_OPEN)
"""Requests any participant may send."""
OPERATOR_REQUESTS: Final = frozenset(SESSION_OPERATOR)
"""Requests only a participant with the operator grant may send."""
MAX_REQUEST_BYTES: Final = SESSION_HOST.bounds.bytes_each or 64 * 1024
"""A request stream longer than this is closed unread and gets no answer."""
_QUEUE: Final = 32
"""Requests admitted and waiting for the session host, all senders together."""
_WAITING_EACH: Final = SESSION_HOST.bounds.queued_each or 4
"""Requests of one sender read and not yet taken by the session host (waiting for the
room to know their sender, or queued); more of its are refused."""
_KNOWN_WITHIN_S: Final = 5.0
"""How long a request waits for the room to learn of its sender (its grants)."""
_PENDING: Final = 256
"""Requests answered to their senders that are still remembered (oldest forgotten)."""


class GatedRoomTransport(SessionTransport):
    """The room's ``lk.agent.session`` byte streams (the ``session host`` door), each
    request let through only from a sender entitled to it (see the module docstring)."""

    def __init__(self, room: rtc.Room, may_operate: Callable[[str], bool] | None = None) -> None:
        """``may_operate(identity)``: the sender holds the operator grant (by default, from
        what livekit-server vouches for, :func:`~alicia.agent.gate.grants.peer_of`)."""
        self._room = room
        self._may_operate = may_operate or self._operator
        self._incoming: asyncio.Queue[tuple[agent_pb.AgentSessionMessage, str]] = asyncio.Queue(
            _QUEUE
        )
        self._waiting: Counter[str] = Counter()
        """Requests of each sender read and not yet taken by the read loop."""
        self._readers: set[asyncio.Task[None]] = set()
        self._received: asyncio.Queue[agent_pb.AgentSessionMessage | None] = asyncio.Queue(_QUEUE)
        self._askers: OrderedDict[str, str] = OrderedDict()
        """request id -> the identity that sent it (its response goes there only)."""
        self._read_task: asyncio.Task[None] | None = None
        self._close_door: Callable[[], None] | None = None
        self._send_lock = asyncio.Lock()
        self._closed = False

    def _operator(self, identity: str) -> bool:
        participant = self._room.remote_participants.get(identity)
        if participant is None:
            return False
        return admits(Right.OPERATOR, peer_of(self._room, participant))

    def _allowed(self, kind: str, identity: str) -> bool:
        if kind in OPEN_REQUESTS:
            return True  # what the room sees anyway (a newcomer's, before it is announced)
        return kind in OPERATOR_REQUESTS and self._may_operate(identity)

    async def _known(self, identity: str) -> None:
        """Wait (bounded) until the room knows ``identity``: livekit-server announces a
        participant that publishes no track in its next batch of joins (up to 3 s), and
        its grants are unknown until then. Only this request waits (its sender's share)."""
        for _ in range(int(_KNOWN_WITHIN_S / 0.1)):
            if identity in self._room.remote_participants:
                return
            await asyncio.sleep(0.1)

    async def start(self) -> None:
        """Take the room's ``lk.agent.session`` streams through their door."""
        if self._read_task is not None:
            return
        self._close_door = doors_of_room(self._room).streams(SESSION_HOST, self._on_stream)
        self._read_task = asyncio.create_task(self._read_loop(), name="alicia-session-host")

    def _on_stream(self, reader: Bounded[bytes], identity: str) -> None:
        # The door bounds the streams open (per sender, per room), their size and time.
        task = asyncio.create_task(self._take(reader, identity), name="alicia-session-request")
        self._readers.add(task)
        task.add_done_callback(self._readers.discard)

    async def _take(self, reader: Bounded[bytes], identity: str) -> None:
        """Read one request stream (within its door's bounds), check it, and queue it."""
        try:
            data = await reader.read_all()
        except StreamCut:
            return  # refused by the door: counted and logged there
        except Exception as exc:
            logger.info("session host request not read", extra={"error": repr(exc)})
            return
        message = agent_pb.AgentSessionMessage()
        try:
            message.ParseFromString(data)
        except Exception:
            refused(SESSION_HOST, identity, "malformed")
            return
        if not message.HasField("request"):
            return  # not a request: the console's audio has no place in a room
        if self._waiting[identity] >= _WAITING_EACH:
            refused(SESSION_HOST, identity, "too many waiting")
            return
        self._waiting[identity] += 1
        queued = False
        try:
            request = message.request
            kind = request.WhichOneof("request") or ""
            if kind in OPERATOR_REQUESTS:
                await self._known(identity)
            if not self._allowed(kind, identity):
                await self._refuse(identity, request.request_id, kind)
                return
            try:
                self._incoming.put_nowait((message, identity))
                queued = True
            except asyncio.QueueFull:
                refused(SESSION_HOST, identity, "the room's queue is full")
        finally:
            if not queued:
                self._release(identity)

    def _release(self, identity: str) -> None:
        left = self._waiting[identity] - 1
        if left > 0:
            self._waiting[identity] = left
        else:
            del self._waiting[identity]

    async def _read_loop(self) -> None:
        while True:
            message, identity = await self._incoming.get()
            self._release(identity)
            request = message.request
            kind = request.WhichOneof("request") or ""
            if not self._allowed(kind, identity):  # it left, or its grant went meanwhile
                await self._refuse(identity, request.request_id, kind)
                continue
            self._askers[request.request_id] = identity
            while len(self._askers) > _PENDING:
                self._askers.popitem(last=False)
            await self._received.put(message)

    async def _refuse(self, identity: str, request_id: str, kind: str) -> None:
        rule = (
            f"not permitted: {kind} needs the operator grant ({OPERATOR_GRANT}=true)"
            if kind in OPERATOR_REQUESTS
            else f"not permitted: {kind or 'this request'} is not served here"
        )
        refused(SESSION_HOST, identity, rule)
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
        if self._close_door is not None:
            self._close_door()  # its open streams end
        readers = [*self._readers, *([self._read_task] if self._read_task else [])]
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
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
