"""The Alicia protocol for one conversation (one room): handshake, turns, stop, variation.

:class:`Conversation` reads packets from a :class:`~agent.engine.transport.Transport` and
answers them. For every packet, in this order: the sender's rate limit (token bucket),
the size limit, decoding, the sender's stanza order, then dispatch. Bad input of any
kind is answered with an ErrorMessage to that sender only (itself rate-limited) and
never disturbs other participants.

A turn (UserMessage, or a final transcript from :meth:`Conversation.user_said`) runs in
the sender's own task, one at a time per sender, from a bounded queue. The turn itself
is :class:`~agent.engine.turn.Turn` (context, LLM rounds, tools); this module turns its
events into envelopes:

* ``StepReady`` -> ReasoningStep (``previousId`` = user message), sent only to clients
  that show reasoning;
* ``ToolRequested`` / ``ToolFinished`` -> ToolUseRequest (``execution: server``) and
  ToolUseResult, to every client;
* ``AnswerStarted`` / ``SentenceReady`` -> StartAnswer and AssistantSentence
  (``sequence`` 1..M, last one ``isFinal``) to streaming clients; with a speaker,
  sentences are spoken;
* ``TurnEnded`` -> one AssistantMessage to the clients that do not stream, the
  exchange into the history, an ErrorMessage to the requester if the turn failed, and
  the Acknowledgements of the ControlStops that ended it.

Reasoning never reaches answer text or speech. It goes back to the LLM only where the
provider's pass-back rule needs it (:mod:`agent.llm.providers`), sealed with the
conversation's data key while it waits (:class:`~agent.engine.keeper.Keeper`). Every
sent envelope is handed to the :class:`~agent.engine.sink.StepSink`; of what clients
send, only accepted UserMessages (and the ControlStops that stopped a turn) are.

Who may do what (one rule, :meth:`Conversation._may_act_for`): a participant may stop
only turns it asked for and edit or regenerate only its own messages; a participant
holding the operator grant (token attribute ``alicia.operator=true``, honoured only when
it cannot update its own attributes) may do both for anyone. Refusals get ErrorMessage
203 to the sender only. A UserMessage whose id the conversation already has gets 204.
Types only the agent sends (ReasoningStep, answers, sentences, tool use, transcriptions)
are refused from clients with 203 and never stored; packets from other agents in the
room are ignored. Every refusal is counted in :attr:`Conversation.refused`.

The last ``Settings.replay_keep`` sent envelopes are kept as sent (bytes, stanzaId,
recipients). A client that resumes (Configuration naming this conversation with
``lastSequenceSeen`` L > 0, PROTOCOL.md §4.9) gets an Acknowledgement of L, the
Configuration, then every kept envelope addressed to it with |stanzaId| > L, unchanged;
a gap the buffer no longer covers (or over 1000), or an L this worker never sent (it
restarted), is answered with ErrorMessage 202.

This module knows nothing of LiveKit; front ends hand it a
:class:`~agent.engine.transport.Transport`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

import msgspec
import openai

from agent.llm.summary import extractive_summary, model_summary
from agent.settings import Settings
from protocol import (
    MAX_PACKET_BYTES,
    Acknowledgement,
    AssistantMessage,
    AssistantSentence,
    AudioChunk,
    Body,
    Commentary,
    Configuration,
    ControlStop,
    ControlVariation,
    DecodeError,
    Envelope,
    ErrorMessage,
    Feature,
    OrderingError,
    ProtocolError,
    ReasoningStep,
    StanzaCounter,
    StartAnswer,
    StepTracker,
    ToolUseRequest,
    ToolUseResult,
    Transcription,
    UnknownBody,
    UserMessage,
    decode,
    encode,
    envelope,
    error_body,
    new_id,
)
from protocol import ids as id_prefix
from protocol.errors import EncodeError

from .events import (
    AnswerStarted,
    SentenceReady,
    StepReady,
    ToolFinished,
    ToolRequested,
    TurnEnded,
    TurnEvent,
)
from .keeper import Keeper
from .participants import (
    DuplicateId,
    InvalidState,
    NotPermitted,
    Overloaded,
    PacketTooLarge,
    Participant,
    TokenBucket,
    TurnRequest,
    Visibility,
    WrongConversation,
)
from .sealing import DataKeys, ReasoningSealer
from .sink import META_FIRST_REASONING_MS, META_USAGE, StepSink
from .tools import ToolBox
from .transport import Left, Packet, Peer, Transport, TransportError
from .turn import Exchange, Turn, TurnOptions

__all__ = ["META_CLOSED_AT", "META_MODEL", "Conversation", "Speaker"]

logger = logging.getLogger("alicia.conversation")

META_MODEL: Final = "model"
"""Meta key on StartAnswer/AssistantMessage: the LLM model name."""
META_CLOSED_AT: Final = "alicia.closedMonoNs"
"""Meta key on ReasoningStep (``Settings.timing_meta``): ``time.monotonic_ns()`` when the
segmenter closed the step (CLOCK_MONOTONIC: comparable between processes on one host)."""

_HISTORY_LIMIT: Final = 200
_MAX_REPLAY_GAP: Final = 1000
_KEY_TIMEOUT_S: Final = 5.0
_KNOWN_IDS: Final = 10_000
"""Message ids remembered per conversation to refuse reuse (oldest forgotten first)."""
_FROM_CLIENTS: Final = (
    Configuration,
    UserMessage,
    ControlStop,
    ControlVariation,
    Commentary,
    Acknowledgement,
    AudioChunk,
    ErrorMessage,
    UnknownBody,
)
"""Body types a client may send (PROTOCOL.md §3: C→S or both). Everything else is
server-only here: refused, counted, never stored. ToolUseResult counts as server-only
because this worker delegates no tool to clients; an ErrorMessage from a client is
logged, never answered (no error ping-pong)."""


class Speaker(Protocol):
    """Speech output for answers (``agent/rooms/voice.py``); optional."""

    def say(self, text: str) -> None:
        """Queue one answer sentence for speech."""
        ...

    def interrupt(self) -> None:
        """Stop speaking now and drop queued sentences."""
        ...


class ReplayGap(InvalidState):
    """A resuming client missed more than the kept envelopes (or over 1000): 202, fatal."""

    recoverable = False


@dataclasses.dataclass(frozen=True, slots=True)
class _Kept:
    """One sent envelope as it went out, for replay on resume (§4.9)."""

    seq: int
    """|stanzaId|."""
    data: bytes
    to: tuple[str, ...] | None
    """Recipients; ``None`` = every client in the room."""
    level: Visibility | None
    """The reasoning level of a ReasoningStep (replayed only to clients of that level);
    ``None`` for every other type."""


@dataclasses.dataclass(slots=True, eq=False)
class _Running:
    """A turn being served: the engine's :class:`Turn` and who gets its answer how."""

    request: TurnRequest
    turn: Turn
    acks: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    """ControlStops to acknowledge once the answer is closed: (identity, stanzaId)."""
    stream_form: bool = True
    streaming_to: list[str] = dataclasses.field(default_factory=list)
    message_to: list[str] = dataclasses.field(default_factory=list)
    sequence: int = 0
    answer_started: bool = False
    """The answer has begun: from now on no (late) step summary goes out."""
    final_text: str | None = None
    """The last sentence, sent with the turn's end (its stored copy carries the figures)."""

    @property
    def answer_id(self) -> str:
        """The id of this turn's answer (StartAnswer / AssistantMessage)."""
        return self.turn.answer_id

    def stop(self, ack: tuple[str, int] | None = None) -> None:
        """Stop generating; ``ack`` is acknowledged after the answer is closed."""
        if ack is not None:
            self.acks.append(ack)
        self.turn.stop()


class Conversation:
    """One room's conversation with every protocol client in it."""

    def __init__(
        self,
        *,
        conversation_id: str,
        settings: Settings,
        transport: Transport,
        sink: StepSink,
        llm: openai.AsyncOpenAI,
        tools: ToolBox | None = None,
        speaker: Speaker | None = None,
        keys: DataKeys | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Wire the parts; nothing runs until :meth:`run`."""
        self.id = conversation_id
        self._settings = settings
        self._transport = transport
        self._sink = sink
        self._llm = llm
        self._tools = tools if settings.tools_enabled else None
        self._turn_options = TurnOptions.from_settings(settings)
        master = settings.reasoning_keys
        self._sealer = ReasoningSealer(master) if master else None
        """Seals encrypted values: the conversation's data key once loaded, else the
        master key (values then survive an erase; under ZDR nothing is stored so)."""
        self._keys = keys
        self._data_sealer: ReasoningSealer | None = None
        """Seals with the conversation's own data key (from ``keys``), if there is one."""
        self._speaker = speaker
        self._clock = clock
        self._stanza = StanzaCounter("server")
        self._steps = StepTracker(max_chains=256)
        self._send_lock = asyncio.Lock()
        self._kept: deque[_Kept] = deque(maxlen=settings.replay_keep)
        self._evicted = 0
        """|stanzaId| of the newest envelope pushed out of ``_kept`` (0: none yet)."""
        self._participants: dict[str, Participant] = {}
        self._turns: list[_Running] = []
        self._history: list[Exchange] = []
        self._ids: OrderedDict[str, None] = OrderedDict()
        """Message ids of this conversation (user messages, answers), to refuse reuse."""
        self._summary_slots = asyncio.Semaphore(settings.summary_concurrency)
        self.late_summaries = 0
        """Model summaries dropped because the answer had started."""
        self.refused: Counter[str] = Counter()
        """Incoming packets refused or dropped, by reason (for logs, metrics and tests)."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        features = [Feature.STREAMING]
        if self._tools is not None:
            features.append(Feature.TOOL_USE)
        self._features = [str(f) for f in features]

    # -- lifecycle ------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the room until the transport ends, then stop every task."""
        try:
            await self._load_data_key()
            async for item in self._transport:
                if isinstance(item, Left):
                    self._forget(item.identity)
                    continue
                try:
                    await self._on_packet(item)
                except Exception:  # a bug must not end the room for everyone
                    logger.exception("packet handling failed", extra={"sender": item.sender})
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Cancel running turns and timers and wait for them. Idempotent."""
        self._closed = True
        tasks = [t for t in self._tasks if not t.done()]
        for p in self._participants.values():
            for task in (p.runner, p.edit_timer):
                if task is not None and not task.done():
                    tasks.append(task)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()

    async def _load_data_key(self) -> None:
        """Fetch (or make) this conversation's data key; without one, nothing is sealed
        with it (and under ZDR no step is stored)."""
        if self._keys is None:
            return
        try:
            async with asyncio.timeout(_KEY_TIMEOUT_S):
                key = await self._keys.data_key(self.id)
        except Exception:
            logger.exception("data key unavailable", extra={"conversation": self.id})
            return
        if key is None:
            logger.warning(
                "data key erased: reasoning is not stored", extra={"conversation": self.id}
            )
            return
        self._data_sealer = ReasoningSealer([(f"data:{self.id}", key)])
        self._sealer = self._data_sealer

    # -- voice entry point ----------------------------------------------------------

    async def user_said(self, identity: str, text: str) -> None:
        """A final transcript of ``identity``'s speech: send a Transcription, run a turn."""
        if self._closed or not text.strip():
            return
        p = self._participant(identity)
        transcript_id = new_id(id_prefix.MESSAGE)
        body = Transcription(
            id=transcript_id,
            conversation_id=self.id,
            text=text,
            final=True,
            previous_id=self._history[-1].answer_id if self._history else None,
        )
        await self._send(body, self._clients(), everyone=True)
        await self._enqueue(p, TurnRequest(transcript_id, text, identity, voice=True), None)

    # -- incoming packets -----------------------------------------------------------

    def _participant(self, identity: str, peer: Peer | None = None) -> Participant:
        p = self._participants.get(identity)
        if p is None:
            s = self._settings
            p = Participant(
                identity=identity,
                show_reasoning=s.show_reasoning_default,
                packets=TokenBucket(s.rate_per_s, s.rate_burst, clock=self._clock),
                errors=TokenBucket(s.error_rate_per_s, s.error_burst, clock=self._clock),
                queue=asyncio.Queue(maxsize=s.queue_size),
                resumes=TokenBucket(s.resume_rate_per_s, s.resume_burst, clock=self._clock),
                default_visibility=s.reasoning_visibility,
            )
            self._participants[identity] = p
        if peer is not None:
            p.peer = peer
        return p

    def _features_for(self, p: Participant) -> list[str]:
        """The Configuration reply's features: what reasoning this participant gets, as
        granted and asked for (the server decides), then the rest."""
        level = p.step_level
        sealing = self._sealer is not None
        reasoning: list[Feature] = []
        if level == "full":
            reasoning = [Feature.REASONING_STEPS]
        elif level == "summary":
            reasoning = [Feature.REASONING_SUMMARY]
            if sealing:
                reasoning.append(Feature.REASONING_ENCRYPTED)
        elif level == "encrypted" and sealing:
            reasoning = [Feature.REASONING_ENCRYPTED]
        return [*(str(f) for f in reasoning), *self._features]

    def _refuse(self, reason: str, sender: str, **extra: object) -> None:
        self.refused[reason] += 1
        logger.info(
            "input refused",
            extra={"reason": reason, "participant": sender, "count": self.refused[reason], **extra},
        )

    def _remember(self, message_id: str) -> None:
        self._ids[message_id] = None
        self._ids.move_to_end(message_id)
        while len(self._ids) > _KNOWN_IDS:
            self._ids.popitem(last=False)

    async def _on_packet(self, packet: Packet) -> None:
        if packet.peer.kind == "agent":
            # Another agent (a second worker, a recorder): not a client of this one.
            self._refuse("from_agent", packet.sender)
            return
        p = self._participant(packet.sender, packet.peer)
        if not p.packets.take():
            await self._error(p, Overloaded("too many packets: slow down"))
            return
        if len(packet.data) > MAX_PACKET_BYTES:
            await self._error(p, PacketTooLarge(len(packet.data), MAX_PACKET_BYTES))
            return
        try:
            env = decode(packet.data)
        except DecodeError as exc:
            await self._error(p, exc)
            return
        try:
            p.order.check(env.stanza_id)
        except OrderingError as exc:
            await self._error(p, exc, str(env.stanza_id))
            return
        body = env.body
        if not isinstance(body, Configuration) and not self._ours(env):
            await self._error(
                p, WrongConversation(f"this room is conversation {self.id!r}"), _body_id(body)
            )
            return
        if env.conversation_id != self.id:
            env = msgspec.structs.replace(env, conversation_id=self.id)
        if not isinstance(body, _FROM_CLIENTS):
            # Only the agent sends these; one from a client is a forgery or a bug.
            self._refuse("server_only_type", p.identity, type=int(env.type))
            await self._error(
                p,
                NotPermitted(f"message type {int(env.type)} is sent by the agent only"),
                _body_id(body),
            )
            return
        p.active = True
        try:
            await self._dispatch(p, env)
        except ProtocolError as exc:
            await self._error(p, exc, _body_id(body))

    def _ours(self, env: Envelope[Any]) -> bool:
        """The envelope (and its body) name this conversation, or none at all."""
        body_cid = getattr(env.body, "conversation_id", None)
        return env.conversation_id in ("", self.id) and body_cid in (None, "", self.id)

    async def _dispatch(self, p: Participant, env: Envelope[Any]) -> None:
        body = env.body
        if isinstance(body, Configuration):
            await self._on_configuration(p, body)
        elif isinstance(body, UserMessage):
            await self._on_user_message(p, env, body)
        elif isinstance(body, ControlStop):
            await self._on_stop(p, body, env.stanza_id)
        elif isinstance(body, ControlVariation):
            await self._on_variation(p, body, env.stanza_id)
        elif isinstance(body, Commentary):
            ack = Acknowledgement(
                conversation_id=self.id,
                acknowledged_stanza_id=env.stanza_id,
                acknowledged_message_id=body.id,
            )
            await self._send(ack, [p.identity])
        elif isinstance(body, UnknownBody):
            logger.info("unknown message type skipped", extra={"type": body.type_code})
        elif isinstance(body, ErrorMessage):
            logger.info(
                "client reported an error",
                extra={
                    "participant": p.identity,
                    "code": body.code,
                    "originating": body.originating_id,
                },
            )
        else:
            logger.debug("message type ignored", extra={"type": env.type})

    async def _on_configuration(self, p: Participant, body: Configuration) -> None:
        if body.conversation_id and body.conversation_id != self.id:
            raise WrongConversation(
                f"conversation {body.conversation_id!r} is not this room's ({self.id!r}); "
                "join its room to resume it"
            )
        p.apply_features(body.features)
        reply = Configuration(conversation_id=self.id, features=self._features_for(p))
        seen = abs(body.last_sequence_seen or 0)
        if body.conversation_id != self.id or seen == 0:
            p.configured = True
            await self._send(reply, [p.identity])
            return
        if p.resumes is not None and not p.resumes.take():
            self._refuse("resume_rate", p.identity)
            raise Overloaded("too many resume requests: slow down")
        async with self._send_lock:  # nothing else goes out between the replies and the replay
            last = abs(self._stanza.last)
            if seen > last:
                raise ReplayGap(f"server message {seen} was never sent here (last is {last})")
            if self._evicted > seen or last - seen > _MAX_REPLAY_GAP:
                raise ReplayGap(
                    f"cannot replay server messages after {seen}: {last - seen} missed, "
                    f"only those after {self._evicted} are kept"
                )
            replay = [
                k
                for k in self._kept
                if k.seq > seen
                and (k.to is None or p.identity in k.to)
                and (k.level is None or k.level == p.step_level)
            ]
            size = sum(len(k.data) for k in replay)
            if size > self._settings.replay_max_bytes:
                self._refuse("replay_budget", p.identity)
                raise ReplayGap(
                    f"cannot replay server messages after {seen}: {size} bytes missed, "
                    f"over the {self._settings.replay_max_bytes}-byte replay budget"
                )
            p.configured = True
            ack = Acknowledgement(conversation_id=self.id, acknowledged_stanza_id=seen)
            await self._emit(ack, [p.identity], None)
            await self._emit(reply, [p.identity], None)
            for kept in replay:
                await self._transmit(kept.data, [p.identity], "replay")
        logger.info(
            "resumed", extra={"participant": p.identity, "seen": seen, "replayed": len(replay)}
        )

    async def _on_user_message(self, p: Participant, env: Envelope[Any], body: UserMessage) -> None:
        if body.id in self._ids:
            self._refuse("duplicate_id", p.identity)
            raise DuplicateId(f"message id {body.id!r} is already used in this conversation")
        replaces = p.pending_edit
        if replaces is not None:
            p.pending_edit = None
            if p.edit_timer is not None:
                p.edit_timer.cancel()
                p.edit_timer = None
        owner = self._owner(replaces) if replaces is not None else None
        request = TurnRequest(body.id, body.content, owner or p.identity, replaces=replaces)
        if await self._enqueue(p, request, body.id):
            self._sink.submit(env)  # an accepted user message: the only client input stored

    def _may_act_for(self, p: Participant, owner: str | None) -> bool:
        """The one authorisation rule: own messages and turns, or the operator grant."""
        return p.operator or (owner is not None and owner == p.identity)

    async def _on_stop(self, p: Participant, body: ControlStop, stanza_id: int) -> None:
        kind = body.stop_type or "generation"
        turn = self._find_turn(body.target_id, p)
        if body.target_id is not None:
            if turn is not None:
                owner: str | None = turn.request.requester
            else:  # a finished turn, or one still waiting in a queue
                owner = self._owner(body.target_id) or self._queued_owner(body.target_id)
            if owner is not None and not self._may_act_for(p, owner):
                self._refuse("not_permitted", p.identity, action="stop")
                raise NotPermitted(f"{body.target_id!r} is another participant's turn")
        if kind in ("speech", "all") and self._speaker is not None:
            speaking = self._turns[-1].request.requester if self._turns else self._last_owner()
            if self._may_act_for(p, speaking):
                self._speaker.interrupt()
        if kind in ("generation", "all") and turn is not None:
            turn.stop(ack=(p.identity, stanza_id))  # acknowledged once the answer is closed
            stop = ControlStop(conversation_id=self.id, target_id=turn.answer_id, stop_type=kind)
            self._sink.submit(self._accepted(stop, stanza_id))
            return
        notes = None if kind == "speech" else "nothing to stop"
        if kind != "speech" and body.target_id is not None:
            # A turn still waiting in a queue never started: drop it, nothing to close.
            for other in self._participants.values():
                if other.drop_queued(body.target_id):
                    notes = "queued turn dropped before it started"
                    break
        ack = Acknowledgement(
            conversation_id=self.id, acknowledged_stanza_id=stanza_id, notes=notes
        )
        await self._send(ack, [p.identity])

    def _accepted(self, body: ControlStop, stanza_id: int) -> Envelope[Any]:
        """An authorised control message as the sink records it (direction: from a client)."""
        return envelope(body, stanza_id=stanza_id, conversation_id=self.id)

    def _queued_owner(self, user_id: str) -> str | None:
        for other in self._participants.values():
            request = other.find_queued(user_id)
            if request is not None:
                return request.requester
        return None

    async def _on_variation(self, p: Participant, body: ControlVariation, stanza_id: int) -> None:
        target = body.target_id
        text = self._user_text(target)
        if text is None:
            raise InvalidState(f"no user message {target!r} in this conversation")
        owner = self._owner(target)
        if not self._may_act_for(p, owner):
            self._refuse("not_permitted", p.identity, action=body.mode)
            raise NotPermitted(f"{target!r} is another participant's message")
        for turn in self._turns:
            if turn.request.user_id == target:
                turn.stop()
        ack = Acknowledgement(
            conversation_id=self.id,
            acknowledged_stanza_id=stanza_id,
            acknowledged_message_id=target,
        )
        await self._send(ack, [p.identity])
        requester = owner or p.identity
        if body.mode == "regenerate":
            await self._enqueue(p, TurnRequest(target, text, requester, replaces=target), None)
        elif body.new_content is not None:
            new = TurnRequest(new_id(id_prefix.MESSAGE), body.new_content, requester, target)
            await self._enqueue(p, new, None)
        else:
            p.pending_edit = target
            if p.edit_timer is not None:
                p.edit_timer.cancel()
            p.edit_timer = asyncio.create_task(self._edit_timeout(p, target))

    async def _edit_timeout(self, p: Participant, target: str) -> None:
        await asyncio.sleep(self._settings.edit_timeout_s)
        if p.pending_edit == target:
            p.pending_edit = None
            p.edit_timer = None
            await self._error(p, InvalidState(f"no UserMessage followed the edit of {target!r}"))

    def _forget(self, identity: str) -> None:
        p = self._participants.pop(identity, None)
        if p is None:
            return
        if p.edit_timer is not None:
            p.edit_timer.cancel()
        running = [t for t in self._turns if t.request.requester == identity]
        for turn in running:
            turn.stop()  # its runner closes the answer for the others, then ends
        if not running and p.runner is not None:
            p.runner.cancel()

    async def _error(
        self, p: Participant, exc: ProtocolError, originating_id: str | None = None
    ) -> None:
        logger.info(
            "bad input from participant",
            extra={"participant": p.identity, "code": int(exc.code), "error": str(exc)},
        )
        if not p.errors.take():
            return
        body = error_body(
            exc,
            id=new_id(id_prefix.ERROR),
            conversation_id=self.id,
            originating_id=originating_id,
        )
        await self._send(body, [p.identity])

    # -- recipients and sending -----------------------------------------------------

    def _clients(self) -> list[str]:
        return [p.identity for p in self._participants.values() if p.active]

    async def _send(
        self,
        body: Body,
        to: Sequence[str],
        *,
        meta: dict[str, Any] | None = None,
        everyone: bool = False,
        store: bool = True,
        level: Visibility | None = None,
        store_meta: dict[str, Any] | None = None,
    ) -> None:
        """Number, store, keep and send one envelope (to nobody if ``to`` is empty).

        ``everyone``: ``to`` is every client in the room; a resuming client gets it too.
        ``store``: hand it to the sink (a step's other renditions are not stored again).
        ``level``: the reasoning level of a ReasoningStep rendition.
        ``store_meta``: meta for the stored copy only (analytics), never sent.
        """
        async with self._send_lock:
            await self._emit(
                body, to, meta, everyone=everyone, store=store, level=level, store_meta=store_meta
            )

    async def _emit(
        self,
        body: Body,
        to: Sequence[str],
        meta: dict[str, Any] | None,
        *,
        everyone: bool = False,
        store: bool = True,
        level: Visibility | None = None,
        store_meta: dict[str, Any] | None = None,
    ) -> None:
        """:meth:`_send` with the send lock already held."""
        env = envelope(body, stanza_id=self._stanza.next(), conversation_id=self.id, meta=meta)
        if store:
            if store_meta:
                self._sink.submit(
                    envelope(
                        body,
                        stanza_id=env.stanza_id,
                        conversation_id=self.id,
                        meta={**(meta or {}), **store_meta},
                    )
                )
            else:
                self._sink.submit(env)
        if not to and not everyone:
            return
        try:
            data = encode(env)
        except EncodeError:
            logger.exception("envelope not encodable", extra={"type": env.type})
            return
        kept = _Kept(-env.stanza_id, data, None if everyone else tuple(to), level)
        if len(self._kept) == self._kept.maxlen:
            self._evicted = self._kept[0].seq
        self._kept.append(kept)
        if to:
            await self._transmit(data, to, env.type)

    async def _transmit(self, data: bytes, to: Sequence[str], what: object) -> None:
        try:
            await self._transport.send(data, to=to)
        except TransportError as exc:
            logger.warning("send failed", extra={"type": what, "error": str(exc)})

    # -- turns ----------------------------------------------------------------------

    async def _enqueue(self, p: Participant, request: TurnRequest, origin: str | None) -> bool:
        """Queue ``request`` on ``p``'s runner; False (and 504 to ``p``) if the queue is full."""
        try:
            p.queue.put_nowait(request)
        except asyncio.QueueFull:
            await self._error(p, Overloaded(f"{p.queue.maxsize} turns already waiting"), origin)
            return False
        self._remember(request.user_id)
        if p.runner is None or p.runner.done():
            p.runner = asyncio.create_task(self._serve(p), name=f"alicia-turns-{p.identity}")
        return True

    async def _serve(self, p: Participant) -> None:
        """Run ``p``'s queued turns one after another while ``p`` is in the room."""
        while self._participants.get(p.identity) is p:
            request = await p.queue.get()
            running = _Running(request, self._new_turn(request))
            self._remember(running.answer_id)
            self._turns.append(running)
            try:
                await self._run_turn(running)
            except Exception:  # keep serving this participant's next turns
                logger.exception("turn runner failed", extra={"participant": p.identity})
            finally:
                self._turns.remove(running)

    def _new_turn(self, request: TurnRequest) -> Turn:
        history = self._history
        if request.replaces is not None:
            history = _before(history, request.replaces)
        return Turn(
            user_id=request.user_id,
            text=request.text,
            answer_id=new_id(id_prefix.MESSAGE),
            llm=self._llm,
            options=self._turn_options,
            history=history,
            tools=self._tools,
            steps=self._steps,
            seed=self._sink.last_step_index,
            clock=self._clock,
            keeper=self._keeper(),
        )

    def _keeper(self) -> Keeper:
        """Pass-back reasoning sealed with this conversation's data key (or the master
        key); kept in memory only when the deployment has no reasoning keys."""
        sealer = self._sealer
        if sealer is None:
            return Keeper()
        cid = self.id
        return Keeper(lambda text: sealer.seal(cid, text), lambda value: sealer.open(value, cid))

    def _find_turn(self, target: str | None, p: Participant) -> _Running | None:
        if target is not None:
            for running in reversed(self._turns):
                if target in (running.answer_id, running.request.user_id):
                    return running
            return None
        mine = [t for t in self._turns if t.request.requester == p.identity]
        if mine:
            return mine[-1]
        return self._turns[-1] if self._turns and p.operator else None

    def _owner(self, message_id: str) -> str | None:
        """Who asked the turn of ``message_id`` (a user message or answer id)."""
        for running in self._turns:
            if message_id in (running.request.user_id, running.answer_id):
                return running.request.requester
        for ex in reversed(self._history):
            if message_id in (ex.user_id, ex.answer_id):
                return ex.requester
        return None

    def _last_owner(self) -> str | None:
        return self._history[-1].requester if self._history else None

    def _user_text(self, user_id: str) -> str | None:
        for running in self._turns:
            if running.request.user_id == user_id:
                return running.request.text
        for ex in reversed(self._history):
            if ex.user_id == user_id:
                return ex.user_text
        return None

    async def _run_turn(self, running: _Running) -> None:
        if running.request.replaces is not None:
            self._history = _before(self._history, running.request.replaces)
        async with contextlib.aclosing(running.turn.events()) as events:
            async for event in events:
                await self._on_event(running, event)

    async def _on_event(self, running: _Running, event: TurnEvent) -> None:
        """One turn event as envelopes (see the module docstring)."""
        if isinstance(event, SentenceReady):
            if event.final:  # goes out with TurnEnded, right behind it
                running.final_text = event.text
            else:
                await self._sentence(running, event.text, final=False)
        elif isinstance(event, StepReady):
            await self._step(running, event)
        elif isinstance(event, AnswerStarted):
            await self._open_answer(running)
        elif isinstance(event, ToolRequested):
            request = ToolUseRequest(
                id=event.request_id,
                tool_name=event.name,
                parameters=event.parameters,
                execution="server",
                conversation_id=self.id,
                previous_id=running.request.user_id,
                timeout_ms=event.timeout_ms,
            )
            await self._send(request, self._clients(), everyone=True)
        elif isinstance(event, ToolFinished):
            outcome = event.outcome
            result = ToolUseResult(
                request_id=event.request_id,
                success=outcome.success,
                result=outcome.result,
                error_code=outcome.error_code,
                error_message=outcome.error_message,
                id=new_id(id_prefix.TOOL_USE_RESULT),
                conversation_id=self.id,
            )
            await self._send(result, self._clients(), everyone=True)
        elif isinstance(event, TurnEnded):
            await self._finish(running, event)
        # AnswerDelta: the sentences carry the same text.

    async def _finish(self, running: _Running, ended: TurnEnded) -> None:
        request = running.request
        # The turn's figures (usage, time to first reasoning) ride on the stored copies of
        # the answer's last envelopes only; they are never sent.
        figures = _figures(ended)
        await self._sentence(running, running.final_text or "", final=True, store_meta=figures)
        if running.message_to:
            message = AssistantMessage(
                id=running.answer_id,
                previous_id=request.user_id,
                conversation_id=self.id,
                content=ended.answer,
                state="complete" if ended.status == "complete" else "partial",
            )
            await self._send(
                message,
                running.message_to,
                meta={META_MODEL: self._settings.llm_model},
                store_meta=figures,
            )
        self._history.append(
            Exchange(
                request.user_id,
                request.text,
                running.answer_id,
                ended.answer,
                request.requester,
                kept=ended.kept,
            )
        )
        del self._history[:-_HISTORY_LIMIT]
        if ended.error is not None:
            p = self._participants.get(request.requester)
            if p is not None:
                await self._error(p, ended.error, request.user_id)
        for identity, stanza_id in running.acks:
            ack = Acknowledgement(
                conversation_id=self.id,
                acknowledged_stanza_id=stanza_id,
                acknowledged_message_id=running.answer_id,
            )
            await self._send(ack, [identity])
        logger.info(
            "turn finished",
            extra={
                "conversation": self.id,
                "steps": ended.steps,
                "sentences": running.sequence,
                "stopped": ended.status == "stopped",
            },
        )

    async def _step(self, running: _Running, event: StepReady) -> None:
        step = ReasoningStep(
            id=new_id(id_prefix.REASONING_STEP),
            conversation_id=self.id,
            previous_id=running.request.user_id,
            content=event.text,
            step_index=event.index,
        )
        meta = {META_CLOSED_AT: event.closed_ns} if self._settings.timing_meta else None
        groups: dict[Visibility, list[str]] = {}
        for p in self._participants.values():
            level = p.step_level if p.active else None
            if level is not None:
                groups.setdefault(level, []).append(p.identity)
        # The step as it is goes to those granted full reasoning. It is stored as it is,
        # or, under zero data retention, only encrypted with the conversation's data key.
        zdr = self._settings.zdr
        await self._send(step, groups.get("full", []), meta=meta, level="full", store=not zdr)
        if zdr and self._data_sealer is not None:
            kept = self._data_sealer.seal(self.id, event.text)
            stored = msgspec.structs.replace(step, content="", encrypted_value=kept)
            await self._send(stored, [], meta=meta)
        if not (groups.get("summary") or groups.get("encrypted")):
            return
        sealed = self._sealer.seal(self.id, event.text) if self._sealer is not None else None
        if groups.get("summary"):
            if event.summary is not None:  # the provider's own summary comes first
                summary = msgspec.structs.replace(
                    step, content=event.summary, encrypted_value=sealed
                )
                await self._send(
                    summary, groups["summary"], meta=meta, store=False, level="summary"
                )
            elif self._settings.summary_model and not self._summary_slots.locked():
                task = asyncio.create_task(
                    self._summarize(running, step, sealed, groups["summary"], meta),
                    name="alicia-summary",
                )
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            else:  # no summarizer, or all its slots busy: the extractive summary, now
                summary = msgspec.structs.replace(
                    step, content=extractive_summary(step.content), encrypted_value=sealed
                )
                await self._send(
                    summary, groups["summary"], meta=meta, store=False, level="summary"
                )
        if groups.get("encrypted") and sealed is not None:
            hidden = msgspec.structs.replace(step, content="", encrypted_value=sealed)
            await self._send(hidden, groups["encrypted"], meta=meta, store=False, level="encrypted")

    async def _summarize(
        self,
        running: _Running,
        step: ReasoningStep,
        sealed: str | None,
        to: list[str],
        meta: dict[str, Any] | None,
    ) -> None:
        """The summarizer model's summary of ``step``, sent to ``to`` only if it is ready
        before the answer starts (else dropped); its failure or timeout: extractive."""
        model = self._settings.summary_model
        assert model is not None
        async with self._summary_slots:
            try:
                async with asyncio.timeout(self._settings.summary_timeout_s):
                    text = await model_summary(self._llm, model, step.content)
            except Exception as exc:  # a timeout, the endpoint, an empty reply
                logger.info("summary fallback", extra={"error": type(exc).__name__})
                text = extractive_summary(step.content)
        body = msgspec.structs.replace(step, content=text, encrypted_value=sealed)
        async with self._send_lock:
            if running.answer_started:
                self.late_summaries += 1
                logger.info("late summary dropped", extra={"conversation": self.id})
                return
            await self._emit(body, to, meta, store=False, level="summary")

    async def _open_answer(self, running: _Running) -> None:
        running.answer_started = True
        active = [p for p in self._participants.values() if p.active]
        running.streaming_to = [p.identity for p in active if p.streaming]
        running.message_to = [p.identity for p in active if not p.streaming]
        running.stream_form = bool(running.streaming_to) or not running.message_to
        if running.stream_form:
            start = StartAnswer(
                id=running.answer_id,
                previous_id=running.request.user_id,
                conversation_id=self.id,
                answer_type="text+voice" if self._speaker is not None else "text",
            )
            await self._send(
                start, running.streaming_to, meta={META_MODEL: self._settings.llm_model}
            )

    async def _sentence(
        self,
        running: _Running,
        text: str,
        *,
        final: bool,
        store_meta: dict[str, Any] | None = None,
    ) -> None:
        if text and self._speaker is not None:
            self._speaker.say(text)
        if not running.stream_form:
            return
        running.sequence += 1
        sentence = AssistantSentence(
            id=new_id(id_prefix.SENTENCE),
            previous_id=running.answer_id,
            conversation_id=self.id,
            sequence=running.sequence,
            text=text,
            is_final=True if final else None,
        )
        await self._send(sentence, running.streaming_to, store_meta=store_meta)


def _figures(ended: TurnEnded) -> dict[str, Any] | None:
    """The turn's token usage and time to first reasoning, for the stored answer only."""
    figures: dict[str, Any] = {}
    if ended.usage is not None:
        figures[META_USAGE] = {
            "promptTokens": ended.usage.prompt_tokens,
            "completionTokens": ended.usage.completion_tokens,
            "reasoningTokens": ended.usage.reasoning_tokens,
        }
    if ended.first_reasoning_ms is not None:
        figures[META_FIRST_REASONING_MS] = round(ended.first_reasoning_ms, 3)
    return figures or None


def _before(history: list[Exchange], user_id: str) -> list[Exchange]:
    """History up to (not including) the exchange of ``user_id``; unchanged if absent."""
    for i, ex in enumerate(history):
        if ex.user_id == user_id:
            return history[:i]
    return history


def _body_id(body: object) -> str | None:
    value = getattr(body, "id", None)
    return value if isinstance(value, str) else None
