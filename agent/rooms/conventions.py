"""LiveKit's agent conventions in a text room, next to the Alicia protocol.

Stock LiveKit frontends (agent-starter-react, the agents playground) read what an agent
says from ``lk.transcription`` text streams, send typed input on ``lk.chat`` and show the
agent's state from its ``lk.agent.state`` attribute. :class:`RoomConventions` speaks them
in a text room, as livekit-agents' room I/O does for an AgentSession:

* each answer is one ``lk.transcription`` text stream from the agent, opened at the
  answer's first sentence with ``lk.transcription_final`` ``false`` and ``lk.segment_id``
  (the answer's message id, so a client can match it with the protocol's StartAnswer), one
  write per sentence (a space between them), closed with ``lk.transcription_final``
  ``true``; no ``lk.transcribed_track_id``, as the agent publishes no track. Streams and
  attribute updates go through the process's FFI router
  (:mod:`~alicia.agent.gate.ffi_routing`): the SDK's own calls cost every other room a
  wake-up per pending write;
* ``lk.agent.state`` is ``listening`` once the room is served, ``thinking`` from a turn's
  start until its answer begins (the model reads, reasons or calls tools), ``speaking``
  while it answers and ``listening`` again once no turn runs;
* typed input on ``lk.chat`` is read by the room's transport (``chat_topic``) and becomes
  a user turn in the session, under the rules of a UserMessage. livekit-agents echoes no
  transcription of typed input, and neither does this.

It is an :class:`~alicia.agent.engine.observer.AnswerObserver`: it sees answer text only.
Reasoning never reaches a LiveKit convention topic or attribute; only the Alicia protocol
carries it, to the participants granted it. The attribute and topic names are
livekit-agents' own constants.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Final, Literal

from livekit import rtc
from livekit.agents.types import (
    ATTRIBUTE_AGENT_STATE,
    ATTRIBUTE_TRANSCRIPTION_FINAL,
    ATTRIBUTE_TRANSCRIPTION_SEGMENT_ID,
    TOPIC_CHAT,
    TOPIC_TRANSCRIPTION,
)

from alicia.agent.engine.events import TurnStatus
from alicia.agent.engine.outbox import Tenure
from alicia.agent.engine.participants import TurnRequest
from alicia.agent.gate.ffi_routing import TextStream, set_attributes

__all__ = ["CHAT_TOPIC", "AgentState", "RoomConventions"]

logger = logging.getLogger("alicia.conventions")

CHAT_TOPIC: Final = TOPIC_CHAT
"""The topic of typed input (``lk.chat``), for the room's transport."""
AgentState = Literal["listening", "thinking", "speaking"]
"""The ``lk.agent.state`` values a text room goes through."""

_MAX_PENDING: Final = 4096
"""Room operations waiting at most (past that, transcript pieces are dropped: logged)."""


class RoomConventions:
    """LiveKit's agent conventions for one text room (see the module docstring)."""

    def __init__(self, room: rtc.Room) -> None:
        """Nothing is sent until :meth:`start`."""
        self._room = room
        self._answering: dict[str, bool] = {}
        """Open turns by answer id: whether their answer has begun."""
        self._writers: dict[str, TextStream] = {}
        self._state: AgentState | None = None
        """The state last set on the room."""
        self._ops: asyncio.Queue[Callable[[], Awaitable[None]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.tenure: Tenure | None = None
        """Failover: the room's lease. Once it is not held, nothing more is sent (a fenced
        agent that wakes sends no transcript piece and no state)."""

    def announced(self) -> dict[str, str]:
        """The attributes the agent sets on itself when it announces itself: ``listening``
        (one attribute update with the announcement; none of its own)."""
        self._state = "listening"
        return {ATTRIBUTE_AGENT_STATE: "listening"}

    def start(self) -> None:
        """Start sending, in order, what the turns produce."""
        if self._task is None:
            self._task = asyncio.create_task(self._send_all(), name="alicia-conventions")

    async def aclose(self) -> None:
        """Stop sending (what is still waiting is dropped). Idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @property
    def wanted(self) -> AgentState:
        """The state the open turns call for."""
        if any(self._answering.values()):
            return "speaking"
        return "thinking" if self._answering else "listening"

    # -- AnswerObserver ---------------------------------------------------------------

    def turn_opened(self, answer_id: str, request: TurnRequest) -> None:
        """A turn began: ``thinking``."""
        self._answering[answer_id] = False
        self._later(self._set_state)

    def answer_opened(self, answer_id: str) -> None:
        """Its answer begins: ``speaking``."""
        if answer_id in self._answering:
            self._answering[answer_id] = True
            self._later(self._set_state)

    def answer_sentence(self, answer_id: str, text: str) -> None:
        """One sentence into the answer's transcription stream (opened by the first)."""
        self._later(lambda: self._write(answer_id, text))

    def turn_closed(self, answer_id: str, status: TurnStatus) -> None:
        """The answer's stream is closed as final; ``listening`` once no turn runs."""
        self._answering.pop(answer_id, None)
        self._later(lambda: self._close(answer_id))
        self._later(self._set_state)

    # -- sending ----------------------------------------------------------------------

    def _later(self, op: Callable[[], Awaitable[None]]) -> None:
        if self._ops.qsize() >= _MAX_PENDING:
            logger.warning("conventions queue full: an update is dropped")
            return
        self._ops.put_nowait(op)

    async def _send_all(self) -> None:
        while True:
            op = await self._ops.get()
            if self.tenure is not None and not await self.tenure.held():
                continue  # fenced: what the turns produce stays here
            try:
                await op()
            except Exception as exc:  # as livekit-agents: a lost transcript piece is logged
                logger.warning("LiveKit convention update failed", extra={"error": repr(exc)})

    async def _set_state(self) -> None:
        """Set ``lk.agent.state`` to what the turns call for now (no repeats)."""
        state = self.wanted
        if state == self._state or not self._room.isconnected():
            return
        await set_attributes(self._room, {ATTRIBUTE_AGENT_STATE: state})
        self._state = state  # once set: after a failure the next update sets it again

    async def _write(self, answer_id: str, text: str) -> None:
        writer = self._writers.get(answer_id)
        if writer is None:
            attributes = {
                ATTRIBUTE_TRANSCRIPTION_FINAL: "false",
                ATTRIBUTE_TRANSCRIPTION_SEGMENT_ID: answer_id,
            }
            writer = TextStream(self._room, topic=TOPIC_TRANSCRIPTION, attributes=attributes)
            self._writers[answer_id] = writer
        else:
            text = " " + text
        await writer.write(text)

    async def _close(self, answer_id: str) -> None:
        writer = self._writers.pop(answer_id, None)
        if writer is not None:
            await writer.aclose({ATTRIBUTE_TRANSCRIPTION_FINAL: "true"})
