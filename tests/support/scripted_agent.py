"""A scripted protocol peer for client tests: joins a real room as an *agent* participant.

It answers like a server (PROTOCOL.md §4.1-§4.3): a Configuration for each client
Configuration, and for each UserMessage the steps of a script, one tool call, then a
streamed answer. It lets client tests run without the worker (the worker has its own
tests; ``tests/e2e/test_client_worker.py`` runs the client against it).

For takeover tests it can join under any identity, kind and ``lk.agent_name`` (a token
attribute: livekit-server sets it at dispatch, and takes it from any token minted with the
API secret), continue the server's stanza sequence ``after`` a stanza id, and answers a
resume (§4.9) like the worker: Acknowledgement + Configuration, or ErrorMessage 202 for a
``lastSequenceSeen`` beyond what it numbered. Like the worker it drops a question sent
again as it was while it is its sender's last envelope (same stanzaId), refuses a stanzaId
that does not rise (ErrorMessage 202, the worker's ``OrderingError``) and a question sent
again under a new stanzaId (ErrorMessage 204, ``duplicate_id``). The faults it can make:
questions lost on the way (:attr:`Script.lose_questions`), a slow start
(:attr:`Script.think_s`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from livekit import api, rtc

from alicia.harness import LiveKitServer
from alicia.protocol import (
    DATA_TOPIC,
    PROTOCOL_ATTRIBUTE,
    Acknowledgement,
    AssistantSentence,
    Configuration,
    Envelope,
    ErrorCode,
    ErrorMessage,
    ReasoningStep,
    Severity,
    StanzaCounter,
    StartAnswer,
    ToolUseRequest,
    ToolUseResult,
    UserMessage,
    decode,
    encode,
    envelope,
    new_id,
)

__all__ = ["Script", "ScriptedAgent", "forged_agent_packets", "scripted_agent"]


def forged_agent_packets(room: str, previous_id: str = "x") -> list[bytes]:
    """What a participant forging the agent sends: a Configuration naming another
    conversation with stanzaId -2147483647 (it would poison a shared de-duplication
    state), then a StartAnswer for ``previous_id`` and a final "FORGED ANSWER" sentence."""
    from alicia.protocol import AssistantSentence, Configuration, StartAnswer, encode, envelope

    bodies: list[tuple[Any, int]] = [
        (Configuration(conversation_id="conv_forged", features=["streaming"]), -2147483647),
        (StartAnswer(id="msg_forged", previous_id=previous_id, conversation_id=room), -5),
        (
            AssistantSentence(
                id="sent_f",
                previous_id="msg_forged",
                conversation_id=room,
                sequence=1,
                text="FORGED ANSWER",
                is_final=True,
            ),
            -6,
        ),
    ]
    return [encode(envelope(b, stanza_id=sid, conversation_id=room)) for b, sid in bodies]


@dataclass(slots=True)
class Script:
    """What the scripted agent says for every user message."""

    steps: list[str] = field(
        default_factory=lambda: ["Read the question.", "Recall that 6 x 7 = 42.", "Answer."]
    )
    total_steps: bool = True
    sentences: list[str] = field(default_factory=lambda: ["The answer is 42.", "Easy."])
    tool: bool = True
    duplicate_steps: bool = True
    lose_questions: int = 0
    """The first this many UserMessages are dropped unread, as a packet lost in flight."""
    think_s: float = 0.0
    """Seconds before a turn's first envelope (a slow model, a turn queued)."""


class ScriptedAgent:
    """Receives client envelopes and replies per :class:`Script`."""

    def __init__(self, room: rtc.Room, script: Script, *, after: int = 0) -> None:
        """``after``: the last server |stanzaId| before this agent (it continues from there)."""
        self.room = room
        self.script = script
        self.received: list[Envelope[Any]] = []
        self.sent: list[Envelope[Any]] = []
        self.errors: list[BaseException | None] = []
        """Replies that could not be sent."""
        self._counter = StanzaCounter("server", last=-abs(after))
        self.lost: list[Envelope[Any]] = []
        """UserMessages dropped as lost (:attr:`Script.lose_questions`)."""
        self._asked: set[str] = set()
        """Question ids taken."""
        self._last: dict[str, tuple[int, bytes]] = {}
        """Each sender's highest stanzaId and the envelope that came under it."""
        self._tasks: set[asyncio.Task[None]] = set()
        room.on("data_received", self._on_data)

    def _on_data(self, packet: rtc.DataPacket) -> None:
        if packet.topic != DATA_TOPIC or packet.participant is None:
            return  # like a strict server: drop what comes from a not-yet-known sender
        env = decode(packet.data)
        self.received.append(env)
        if isinstance(env.body, UserMessage) and len(self.lost) < self.script.lose_questions:
            self.lost.append(env)  # lost on the way: as if it never came
            return
        sender = packet.participant.identity
        high, last = self._last.get(sender, (0, b""))
        if isinstance(env.body, UserMessage) and 0 < env.stanza_id <= high:
            if env.stanza_id == high and packet.data == last:
                return  # the last envelope again: a resend, dropped (the worker's rule)
            why = f"stanzaId {env.stanza_id} is not after the last one seen ({high})"
            refusal = self._refusal(ErrorCode.INVALID_STATE, why, str(env.stanza_id))
            task = asyncio.get_running_loop().create_task(self._answer(refusal, sender))
        else:
            if env.stanza_id > high:
                self._last[sender] = (env.stanza_id, bytes(packet.data))
            task = asyncio.get_running_loop().create_task(self._reply(env, sender))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # e.g. replying once livekit-server removed this participant from the room
            self.errors.append(task.exception())

    async def _send(self, body: Any, conv: str, to: str) -> Envelope[Any]:
        env = envelope(body, stanza_id=self._counter.next(), conversation_id=conv)
        self.sent.append(env)
        await self.room.local_participant.publish_data(
            encode(env), reliable=True, destination_identities=[to], topic=DATA_TOPIC
        )
        return env

    async def _answer(self, body: Any, to: str) -> None:
        await self._send(body, self.room.name, to)

    def _refusal(self, code: int, message: str, originating_id: str | None) -> ErrorMessage:
        """The ErrorMessage the worker sends for ``code`` (recoverable but 202 on resume)."""
        return ErrorMessage(
            id=new_id("err"),
            conversation_id=self.room.name,
            code=code,
            message=message,
            severity=Severity.WARNING if originating_id else Severity.ERROR,
            recoverable=originating_id is not None,
            originating_id=originating_id,
        )

    async def _reply(self, env: Envelope[Any], to: str) -> None:
        conv = self.room.name
        body = env.body
        if isinstance(body, Configuration):
            seen = body.last_sequence_seen or 0
            if body.conversation_id == conv and seen > abs(self._counter.last):
                why = f"server message {seen} was never sent here"
                await self._send(self._refusal(202, why, None), conv, to)
                return
            if body.conversation_id == conv and seen > 0:
                ack = Acknowledgement(conversation_id=conv, acknowledged_stanza_id=seen)
                await self._send(ack, conv, to)
            reply = Configuration(
                conversation_id=conv, features=["streaming", "reasoning_steps", "tool_use"]
            )
            await self._send(reply, conv, to)
        elif isinstance(body, UserMessage):
            if body.id in self._asked:
                why = f"message id {body.id!r} is already used in this conversation"
                await self._send(self._refusal(ErrorCode.DUPLICATE_ID, why, body.id), conv, to)
                return
            self._asked.add(body.id)
            await asyncio.sleep(self.script.think_s)
            await self._turn(body, conv, to)

    async def _turn(self, msg: UserMessage, conv: str, to: str) -> None:
        s = self.script
        total = len(s.steps) if s.total_steps else None
        for i, text in enumerate(s.steps, start=1):
            step = ReasoningStep(
                id=new_id("rs"),
                conversation_id=conv,
                previous_id=msg.id,
                content=text,
                step_index=i,
                total_steps=total,
            )
            sent = await self._send(step, conv, to)
            if s.duplicate_steps and i == 1:
                # A replayed duplicate (same stanzaId): the client must drop it.
                await self.room.local_participant.publish_data(
                    encode(sent), reliable=True, destination_identities=[to], topic=DATA_TOPIC
                )
            if s.tool and i == 1:
                req = ToolUseRequest(
                    id=new_id("toolreq"),
                    conversation_id=conv,
                    previous_id=msg.id,
                    tool_name="calculator",
                    parameters={"expression": "6*7"},
                    execution="server",
                )
                await self._send(req, conv, to)
                res = ToolUseResult(request_id=req.id, success=True, result={"value": 42})
                await self._send(res, conv, to)
        answer_id = new_id("msg")
        await self._send(
            StartAnswer(id=answer_id, previous_id=msg.id, conversation_id=conv), conv, to
        )
        for n, text in enumerate(s.sentences, start=1):
            sentence = AssistantSentence(
                previous_id=answer_id,
                conversation_id=conv,
                sequence=n,
                text=text,
                is_final=n == len(s.sentences),
            )
            await self._send(sentence, conv, to)

    async def aclose(self) -> None:
        """Wait for replies in flight, stop listening."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self.room.off("data_received", self._on_data)

    def configurations(self) -> list[Configuration]:
        """The Configuration bodies received from the client, in order, each envelope once
        (a client repeats one not answered in time as it was, with its stanzaId: on a
        loaded machine the page's toggle was repeated once, fO)."""
        seen: set[int] = set()
        out = []
        for e in self.received:
            if isinstance(e.body, Configuration) and e.stanza_id not in seen:
                seen.add(e.stanza_id)
                out.append(e.body)
        return out


@contextlib.asynccontextmanager
async def scripted_agent(
    server: LiveKitServer,
    room: str,
    script: Script | None = None,
    *,
    identity: str = "scripted-agent",
    kind: Literal["standard", "agent"] = "agent",
    agent_name: str | None = None,
    after: int = 0,
    speaks_protocol: bool = True,
) -> AsyncIterator[ScriptedAgent]:
    """A :class:`ScriptedAgent` joined to ``room`` with an agent token (``kind="standard"``:
    an ordinary participant's token, e.g. one forging the agent under its identity;
    ``speaks_protocol=False``: no ``alicia.protocol`` attribute, as an avatar or another
    framework's agent in the room)."""
    grants = api.VideoGrants(
        room_join=True, room=room, agent=kind == "agent", can_publish_data=True
    )
    token = (
        api.AccessToken(server.api_key, server.api_secret)
        .with_identity(identity)
        .with_kind(kind)
        .with_grants(grants)
    )
    attributes = {PROTOCOL_ATTRIBUTE: "1"} if speaks_protocol else {}  # clients check it
    if agent_name is not None:
        attributes["lk.agent_name"] = agent_name
    token = token.with_attributes(attributes)
    r = rtc.Room()
    await r.connect(server.url, token.to_jwt())
    agent = ScriptedAgent(r, script or Script(), after=after)
    try:
        yield agent
    finally:
        await agent.aclose()
        await r.disconnect()
