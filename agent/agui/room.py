"""A live LiveKit conversation as AG-UI events, for dashboards and web tools that do not
speak LiveKit (``GET /agui/rooms/{room}/events``).

For each caller the endpoint joins the room as a participant of its own that publishes
no media and sends nothing but its Configuration (identity ``agui.<caller>.<suffix>``,
the caller's reasoning level as its grant, never the right to change its own
attributes), trusts only the room's agent (:class:`~alicia.client.session.ClientSession`),
and turns what the agent sends it into AG-UI events (:class:`RoomProjection`). So the
caller's grant decides what reasoning it sees, exactly as for a LiveKit client: the
worker decides, never this endpoint.

The room's agent is the participant of kind AGENT whose ``lk.agent_name`` is
``ALICIA_AGENT_NAME`` (:class:`NamedAgentTrust`). With ``ALICIA_AGENT_NAME`` unset the
workers run under livekit-agents' automatic dispatch, which gives their agents no name:
then only an agent with no (or an empty) ``lk.agent_name`` is trusted, never one
dispatched under a name. The listener is a standard participant, so the failover
watcher counts it as a client: a room that only a dashboard follows gets its agent.

The stream opens with ``RUN_STARTED`` (thread = the room) once the agent has answered the
listener's handshake, so everything after it is seen; then, per turn: the user's
words (a final Transcription, or a UserMessage the agent echoes) as a user text message;
each ReasoningStep as a reasoning message inside one reasoning span per user message
(its encrypted value, if any, as ``REASONING_ENCRYPTED_VALUE``); tool use as tool-call
events; the answer (StartAnswer + AssistantSentences, or one AssistantMessage) as an
assistant text message. It ends with ``RUN_FINISHED`` when the room closes, or
``RUN_ERROR`` when it cannot join or the caller reads too slowly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, Mapping
from typing import Any, Final

from ag_ui.core import (
    BaseEvent,
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from livekit import api, rtc

from alicia.agent.settings import Settings
from alicia.client.trust import AGENT_NAME_ATTRIBUTE, AgentTrust
from alicia.protocol import (
    PROTOCOL_ATTRIBUTE,
    AssistantMessage,
    AssistantSentence,
    Envelope,
    ReasoningStep,
    StartAnswer,
    ToolUseRequest,
    ToolUseResult,
    Transcription,
    new_id,
)

from .auth import Caller

__all__ = ["NamedAgentTrust", "RoomEvents", "RoomProjection", "trusts_agent"]

logger = logging.getLogger("alicia.agui")

_QUEUE: Final = 2048
"""Events a room stream may be ahead of its caller; beyond, the stream ends (RUN_ERROR)."""
_JOIN_TIMEOUT_S: Final = 30.0


class RoomProjection:
    """What the agent sends one participant, as AG-UI events (see the module docstring)."""

    def __init__(self) -> None:
        """No turn seen yet."""
        self._spans: dict[str, str] = {}
        """user message id -> its open reasoning span."""
        self._answers: dict[str, str] = {}
        """answer (StartAnswer) id -> the user message id it answers."""
        self._tool_parents: dict[str, str] = {}
        """user message id -> the assistant message carrying its current tool calls."""

    def feed(self, env: Envelope[Any]) -> list[BaseEvent]:
        """The AG-UI events for one envelope from the agent."""
        body = env.body
        if isinstance(body, ReasoningStep):
            return self._step(body)
        if isinstance(body, Transcription) and body.final:
            return _whole_message(body.id, "user", body.text)
        if isinstance(body, ToolUseRequest):
            out: list[BaseEvent] = self._close_span(body.previous_id or "")
            parent = self._tool_parents.setdefault(body.previous_id or "", new_id("msg"))
            out += [
                ToolCallStartEvent(
                    tool_call_id=body.id, tool_call_name=body.tool_name, parent_message_id=parent
                ),
                ToolCallArgsEvent(
                    tool_call_id=body.id,
                    delta=json.dumps(body.parameters or {}, ensure_ascii=False),
                ),
                ToolCallEndEvent(tool_call_id=body.id),
            ]
            return out
        if isinstance(body, ToolUseResult):
            result: Any = (
                body.result
                if body.success
                else {
                    "error": body.error_code,
                    "message": body.error_message,
                }
            )
            return [
                ToolCallResultEvent(
                    message_id=body.id or new_id("tr"),
                    tool_call_id=body.request_id,
                    content=json.dumps(result, ensure_ascii=False),
                    role="tool",
                )
            ]
        if isinstance(body, StartAnswer):
            self._answers[body.id] = body.previous_id or ""
            out = self._close_span(body.previous_id or "")
            self._tool_parents.pop(body.previous_id or "", None)
            out.append(TextMessageStartEvent(message_id=body.id, role="assistant"))
            return out
        if isinstance(body, AssistantSentence):
            answer = body.previous_id or ""
            if answer not in self._answers:
                return []
            pieces: list[BaseEvent] = []
            if body.text:
                delta = body.text if body.sequence <= 1 else " " + body.text
                pieces.append(TextMessageContentEvent(message_id=answer, delta=delta))
            if body.is_final:
                del self._answers[answer]
                pieces.append(TextMessageEndEvent(message_id=answer))
            return pieces
        if isinstance(body, AssistantMessage):
            out = self._close_span(body.previous_id or "")
            return out + _whole_message(body.id, "assistant", body.content)
        return []

    def _step(self, step: ReasoningStep) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        span = self._spans.get(step.previous_id)
        if span is None:
            span = self._spans[step.previous_id] = new_id("rsn")
            out.append(ReasoningStartEvent(message_id=span))
        out.append(ReasoningMessageStartEvent(message_id=step.id, role="reasoning"))
        if step.content:
            out.append(ReasoningMessageContentEvent(message_id=step.id, delta=step.content))
        out.append(ReasoningMessageEndEvent(message_id=step.id))
        if step.encrypted_value:
            out.append(
                ReasoningEncryptedValueEvent(
                    subtype="message", entity_id=step.id, encrypted_value=step.encrypted_value
                )
            )
        return out

    def _close_span(self, user_id: str) -> list[BaseEvent]:
        span = self._spans.pop(user_id, None)
        return [] if span is None else [ReasoningEndEvent(message_id=span)]

    def close(self) -> list[BaseEvent]:
        """Close whatever is open (the room ended)."""
        out: list[BaseEvent] = [ReasoningEndEvent(message_id=s) for s in self._spans.values()]
        out += [TextMessageEndEvent(message_id=a) for a in self._answers]
        self._spans.clear()
        self._answers.clear()
        return out


def _whole_message(message_id: str, role: Any, text: str) -> list[BaseEvent]:
    out: list[BaseEvent] = [TextMessageStartEvent(message_id=message_id, role=role)]
    if text:
        out.append(TextMessageContentEvent(message_id=message_id, delta=text))
    out.append(TextMessageEndEvent(message_id=message_id))
    return out


def trusts_agent(kind: int, attributes: Mapping[str, str], agent_name: str) -> bool:
    """A participant of ``kind`` with ``attributes`` may speak for the room's agent named
    ``agent_name`` (``ALICIA_AGENT_NAME``; empty: an agent of automatic dispatch, which
    has no name)."""
    if kind != rtc.ParticipantKind.PARTICIPANT_KIND_AGENT:
        return False
    if attributes.get(PROTOCOL_ATTRIBUTE) != "1":
        return False  # an avatar or another framework's agent: not ours
    return attributes.get(AGENT_NAME_ATTRIBUTE, "") == agent_name


class NamedAgentTrust(AgentTrust):
    """:class:`~alicia.client.trust.AgentTrust` for exactly one agent name, the empty
    name included (automatic dispatch), checked for every packet."""

    def __init__(self, agent_name: str) -> None:
        """Trust only agents named ``agent_name``."""
        super().__init__(agent_name=agent_name, expected_identity=None)

    def matches(self, p: rtc.RemoteParticipant) -> bool:
        """``p`` is an agent of kind AGENT with this agent name."""
        return trusts_agent(p.kind, p.attributes, self.agent_name or "")


class RoomEvents:
    """Every live room stream of one process (counted by :mod:`.limits`)."""

    def __init__(self, settings: Settings) -> None:
        """Streams start with :meth:`stream`."""
        self.settings = settings
        self._closing = asyncio.Event()

    async def aclose(self) -> None:
        """End every open stream (the server is stopping)."""
        self._closing.set()

    def token(self, caller: Caller) -> str:
        """The join token of ``caller``'s listening participant."""
        s = self.settings
        identity = f"agui.{caller.identity}"[:120] + "." + new_id("x")[2:8]
        grants = api.VideoGrants(
            room_join=True,
            room=caller.room,
            can_publish=False,
            can_publish_data=True,  # its Configuration only: the worker answers nobody else
            can_subscribe=True,
            can_update_own_metadata=False,
        )
        return (
            api.AccessToken(s.livekit_api_key, s.livekit_api_secret)
            .with_identity(identity)
            .with_name(f"AG-UI stream for {caller.identity}")
            .with_attributes({"alicia.reasoning": caller.level})
            .with_grants(grants)
            .to_jwt()
        )

    async def stream(self, caller: Caller) -> AsyncGenerator[BaseEvent, None]:
        """The room of ``caller``'s token as AG-UI events, until the room or caller ends."""
        from alicia.client.session import ClientError, ClientSession

        queue: asyncio.Queue[list[BaseEvent] | None] = asyncio.Queue(_QUEUE)
        view = RoomProjection()
        session = ClientSession(show_reasoning=caller.level != "none", device="agui")
        session.trust = NamedAgentTrust(self.settings.agent_name)
        overflow = False

        def push(env: Envelope[Any]) -> None:
            nonlocal overflow
            events = view.feed(env)
            if events and not overflow:
                try:
                    queue.put_nowait(events)
                except asyncio.QueueFull:
                    overflow = True
                    queue._queue.clear()  # type: ignore[attr-defined]
                    queue.put_nowait(None)

        session.on_envelope(push)

        def ended(*_: object) -> None:
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(None)

        session.room.on("disconnected", ended)
        run_id = new_id("run")
        try:
            try:
                await session.connect(self.settings.livekit_url, self.token(caller))
                await session.wait_for_agent(_JOIN_TIMEOUT_S)
                await session.handshake(conversation_id=caller.room)
            except ClientError as exc:
                yield RunErrorEvent(message=f"cannot follow room {caller.room!r}: {exc}")
                return
            # Only now: from here on the agent sends this participant everything.
            yield RunStartedEvent(thread_id=caller.room, run_id=run_id)
            closing = asyncio.ensure_future(self._closing.wait())
            try:
                while True:
                    getter = asyncio.ensure_future(queue.get())
                    done, _ = await asyncio.wait(
                        (getter, closing), return_when=asyncio.FIRST_COMPLETED
                    )
                    if getter not in done:
                        getter.cancel()
                        break
                    events = getter.result()
                    if events is None:
                        break
                    for event in events:
                        yield event
            finally:
                closing.cancel()
            if overflow:
                yield RunErrorEvent(message="the stream fell too far behind the room")
                return
            for event in view.close():
                yield event
            yield RunFinishedEvent(thread_id=caller.room, run_id=run_id)
        finally:
            with contextlib.suppress(Exception):
                await session.aclose()
