"""The Alicia protocol for one conversation (one room), whoever runs its turns.

:class:`ProtocolSession` reads packets from a :class:`~alicia.agent.engine.transport.Transport`
and answers them. For every packet, in order: the sender's rate limit (token bucket), the
size limit, decoding, the sender's stanza order (its last envelope again is a resend:
ignored), dispatch. Bad input gets an ErrorMessage to that sender only (rate-limited).

Turns are run by a :class:`~alicia.agent.engine.source.TurnSource` (our own runner, or an
AgentSession through its bridge); each reports its events through :meth:`open_turn`, a
:class:`~alicia.agent.engine.projection.TurnProjection`: every source sends the same traffic.

Who may do what (one rule, :meth:`ProtocolSession.may_act_for`): a participant may stop
only turns it asked for and edit or regenerate only its own messages; a participant
holding the operator grant (token attribute ``alicia.operator=true``, honoured only when
it cannot update its own attributes) may do both for anyone. Refusals get ErrorMessage
203 to the sender only. A UserMessage whose id is taken (known, or stored) gets 204.
Types only the agent sends (ReasoningStep, answers, sentences, tool use, transcriptions)
are refused from clients with 203 and never stored; packets from other agents in the
room are ignored. Every refusal is counted in :attr:`ProtocolSession.refused`.

Every sent envelope is stored (:class:`~alicia.agent.engine.outbox.Outbox`); of what clients
send, only accepted UserMessages (and the ControlStops that stopped a turn) are. A client
that resumes (Configuration naming this conversation with ``lastSequenceSeen`` L > 0,
PROTOCOL.md §4.9) gets an Acknowledgement of L, the Configuration, then every kept
envelope addressed to it after L, unchanged, each time it asks (its reply may have been
lost; resumes are rate-limited); a gap the outbox no longer covers is served
from storage with failover on (:mod:`.takeover`, which also restores a conversation an
agent takes over), else (or for an L never sent) answered with ErrorMessage 202. This
module knows nothing of LiveKit; front ends hand it a Transport. Typed input from outside
the protocol (``Typed``: ``lk.chat``) is a user turn under a UserMessage's rules; a grant
changed (``Regranted``) holds from the next envelope; observers see each turn's answer,
never its reasoning (:mod:`.observer`). Variations: :mod:`.variation`; a turn whose asker
left is named to it by a recoverable error when it resumes: :mod:`.away`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any

import msgspec
import openai

from alicia.protocol import (
    MAX_PACKET_BYTES,
    TEXT_BUDGET_BYTES,
    Acknowledgement,
    Commentary,
    Configuration,
    ControlStop,
    ControlVariation,
    DecodeError,
    Envelope,
    ErrorMessage,
    OrderingError,
    ProtocolError,
    ReasoningStep,
    StepTracker,
    Transcription,
    UnknownBody,
    UserMessage,
    decode,
    envelope,
    error_body,
    new_id,
)
from alicia.protocol import ids as id_prefix

from .away import CutWhileAway
from .data_key import DataKeyLoader, SealedSteps
from .observer import AnswerObserver
from .options import EngineOptions
from .outbox import Outbox, ReplayBudget, ReplayGap
from .participants import (
    FROM_CLIENTS,
    DuplicateId,
    NotPermitted,
    Overloaded,
    PacketTooLarge,
    Participant,
    TurnRequest,
    WrongConversation,
)
from .projection import TurnProjection
from .retention import HISTORY_LIMIT, KNOWN_IDS, STEP_CHAINS
from .sealing import DataKeys, ReasoningSealer
from .sink import META_FROM, ConversationStore, StepSink, lookup_message
from .source import TurnSource
from .takeover import replay_stored, restore, seal_for
from .telemetry import NO_TELEMETRY, TurnTelemetry
from .transport import Left, Packet, Peer, Regranted, Transport, Typed
from .turn import Exchange
from .variation import on_variation

__all__ = ["ProtocolSession", "ReplayGap"]

logger = logging.getLogger("alicia.conversation")


class ProtocolSession:
    """One conversation's protocol with every client in it (see the module docstring)."""

    def __init__(
        self,
        *,
        conversation_id: str,
        options: EngineOptions,
        transport: Transport,
        sink: StepSink,
        keys: DataKeys | None = None,
        llm: openai.AsyncOpenAI | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Wire the parts; nothing runs until :meth:`run` (after :meth:`attach`). ``llm``
        serves the summarizer model (``ALICIA_SUMMARY_MODEL``); failover stores via ``sink``."""
        self.id = conversation_id
        self.options = options
        self.llm = llm
        self.clock = clock
        self.outbox = Outbox(
            conversation_id, transport=transport, sink=sink, keep=options.replay_keep
        )
        if options.failover and isinstance(sink, ConversationStore):
            self.outbox.store = sink
            self.outbox.zdr = options.zdr
        self._transport = transport
        master = options.reasoning_keys
        self.sealer: ReasoningSealer | None = ReasoningSealer(master) if master else None
        """Seals with the conversation's data key once loaded, else the master key."""
        self.data_sealer: ReasoningSealer | None = None
        """Seals with the conversation's own data key (from ``keys``), if there is one."""
        self._key_loader = (
            None if keys is None else DataKeyLoader(keys, conversation_id, self._use_data_key)
        )
        self._zdr_steps = SealedSteps(conversation_id, lambda b, m: self.outbox.send(b, [], meta=m))
        self.steps = StepTracker(max_chains=STEP_CHAINS)
        """``stepIndex`` chains of this conversation (shared by every turn)."""
        self.participants: dict[str, Participant] = {}
        self.history: list[Exchange] = []
        """Finished exchanges, oldest first (at most :data:`HISTORY_LIMIT`)."""
        self.turns: list[TurnProjection] = []
        """Turns being served, oldest first."""
        self._ids: OrderedDict[str, None] = OrderedDict()
        """Message ids of this conversation (user messages, answers), to refuse reuse."""
        self._cut_away = CutWhileAway()  # named to who left (see .away)
        self.summary_slots = asyncio.Semaphore(options.summary_concurrency)
        self.late_summaries = 0  # model summaries dropped because the answer had started
        self.refused: Counter[str] = Counter()
        """Incoming packets refused or dropped, by reason (for logs, metrics and tests)."""
        self.tasks: set[asyncio.Task[Any]] = set()
        """Background tasks of this session (summaries), cancelled by :meth:`aclose`."""
        self.closed = False
        self.observers: list[AnswerObserver] = []
        """Front ends' own views of each turn (answer text only, never reasoning)."""
        self.telemetry: TurnTelemetry = NO_TELEMETRY
        """Each turn's figures and events, without content (:mod:`.telemetry`)."""
        self._source: TurnSource | None = None
        self.restored = asyncio.Event()
        """Set once :meth:`run` has taken the conversation over from storage (failover)."""

    @property
    def sink(self) -> StepSink:
        """Where everything sent (and accepted client input) is stored."""
        return self.outbox.sink

    @property
    def source(self) -> TurnSource:
        """The turn source (:meth:`attach`)."""
        if self._source is None:
            raise RuntimeError("no turn source attached")
        return self._source

    def attach(self, source: TurnSource) -> None:
        """Let ``source`` run this conversation's turns (once, before :meth:`run`)."""
        self._source = source

    # -- lifecycle ------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the room until the transport ends, then stop every task."""
        try:
            if self._key_loader is not None and not await self._key_loader.load():
                self._key_loader.retry(self.tasks)
            await restore(self)
            self.restored.set()
            async for item in self._transport:
                if isinstance(item, Left | Regranted):
                    await self._on_roster(item)
                    continue
                try:
                    if isinstance(item, Typed):
                        await self._on_typed(item)
                    else:
                        await self._on_packet(item)
                except Exception:  # a bug must not end the room for everyone
                    logger.exception("packet handling failed", extra={"sender": item.sender})
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Stop the source, cancel timers and summaries, and wait for them. Idempotent."""
        self.closed = True
        if self._source is not None:
            await self._source.aclose()
        tasks = [t for t in self.tasks if not t.done()]
        for p in self.participants.values():
            if p.edit_timer is not None and not p.edit_timer.done():
                tasks.append(p.edit_timer)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self.tasks.clear()

    async def load_data_key(self) -> bool:
        """Fetch (or make) this conversation's data key. False: the key store failed, so
        trying again (:class:`~.data_key.DataKeyLoader`) may get it."""
        return self._key_loader is None or await self._key_loader.load()

    async def _use_data_key(self, key: bytes) -> None:
        # Also opens what a run sealed with the master keys without this key (a hiccup).
        master = list(self.options.reasoning_keys or ())
        self.data_sealer = ReasoningSealer([(f"data:{self.id}", key), *master])
        self.sealer = self.data_sealer
        seal_for(self)
        await self._zdr_steps.release(self.data_sealer)

    async def store_sealed(
        self, step: ReasoningStep, text: str, meta: dict[str, Any] | None
    ) -> None:
        """ZDR: ``step`` (content ``text``) stored only sealed (:class:`SealedSteps`)."""
        awaited = self._key_loader is not None and not self._key_loader.done
        await self._zdr_steps.put(step, text, meta, awaited=awaited)

    # -- for turn sources -----------------------------------------------------------

    def open_turn(
        self, request: TurnRequest, answer_id: str, *, stop: Callable[[], None]
    ) -> TurnProjection:
        """Start serving a turn: its events go through the returned projection, and
        ``stop`` is called when an authorised ControlStop (or the requester leaving)
        ends it. The turn is served until its ``TurnEnded``."""
        turn = TurnProjection(self, request, answer_id, stop=stop)
        self.remember(answer_id)
        self.turns.append(turn)
        for observer in self.observers:
            observer.turn_opened(answer_id, request)
        return turn

    def close_turn(self, turn: TurnProjection, exchange: Exchange | None) -> None:
        """``turn`` is over (called by its projection): keep its exchange, if any."""
        if turn in self.turns:
            self.turns.remove(turn)
        if exchange is not None:
            self.history.append(exchange)
            del self.history[:-HISTORY_LIMIT]

    async def transcription(self, identity: str, text: str) -> str | None:
        """A final transcript of ``identity``'s speech: send a Transcription to every
        client and return its id, the user message id of the turn it starts (None: empty
        text or closed)."""
        if self.closed or not text.strip():
            return None
        self.participant(identity)
        transcript_id = new_id(id_prefix.MESSAGE)
        body = Transcription(
            id=transcript_id,
            conversation_id=self.id,
            text=text,
            final=True,
            previous_id=self.history[-1].answer_id if self.history else None,
        )
        await self.outbox.send(body, self.clients(), everyone=True)
        self.remember(transcript_id)
        return transcript_id

    async def _on_roster(self, item: Left | Regranted) -> None:
        if isinstance(item, Left):
            await self.forget(item.identity)
        elif p := self.participants.get(item.identity):  # held from the next envelope
            p.peer = item.peer

    def participant(self, identity: str, peer: Peer | None = None) -> Participant:
        """The participant ``identity`` (made on first sight)."""
        p = self.participants.get(identity)
        if p is None:
            p = Participant.new(identity, self.options.participants, clock=self.clock)
            self.participants[identity] = p
        if peer is not None:
            p.peer = peer
        return p

    def clients(self) -> list[str]:
        """Every client that sent a valid envelope (they receive answers)."""
        return [p.identity for p in self.participants.values() if p.active]

    def remember(self, message_id: str) -> None:
        """Note ``message_id`` as used in this conversation (reuse is refused)."""
        self._ids[message_id] = None
        self._ids.move_to_end(message_id)
        while len(self._ids) > KNOWN_IDS:
            self._ids.popitem(last=False)

    def may_act_for(self, p: Participant, owner: str | None) -> bool:
        """The one authorisation rule: own messages and turns, or the operator grant."""
        return p.operator or (owner is not None and owner == p.identity)

    async def error(
        self, p: Participant, exc: ProtocolError, originating_id: str | None = None
    ) -> None:
        """Answer ``p`` with the ErrorMessage for ``exc`` (rate-limited per participant, and
        so is its log line; every refusal is counted)."""
        self.telemetry.refused(str(int(exc.code)))
        if not p.errors.take():
            return
        logger.info(
            "bad input from participant",
            extra={"participant": p.identity, "code": int(exc.code), "error": str(exc)},
        )
        body = error_body(
            exc, id=new_id(id_prefix.ERROR), conversation_id=self.id, originating_id=originating_id
        )
        await self.outbox.send(body, [p.identity])

    # -- incoming packets -----------------------------------------------------------

    def refuse(self, reason: str, sender: str, **extra: object) -> None:
        """Count (and log) input refused or dropped for ``reason``."""
        self.refused[reason] += 1
        self.telemetry.refused(reason)
        logger.info(
            "input refused",
            extra={"reason": reason, "participant": sender, "count": self.refused[reason], **extra},
        )

    async def _on_packet(self, packet: Packet) -> None:
        if packet.peer.kind == "agent":
            # Another agent (a second worker, a recorder): not a client of this one.
            self.refuse("from_agent", packet.sender)
            return
        p = self.participant(packet.sender, packet.peer)
        if not p.packets.take(packet.received_at):
            await self.error(p, Overloaded("too many packets: slow down"))
            return
        if len(packet.data) > MAX_PACKET_BYTES:
            await self.error(p, PacketTooLarge(len(packet.data), MAX_PACKET_BYTES))
            return
        try:
            env = decode(packet.data)
        except DecodeError as exc:
            await self.error(p, exc)
            return
        try:
            if not p.accept(env.stanza_id, packet.data):
                await self._repeated(p, env, packet.received_at)
                return
        except OrderingError as exc:
            await self.error(p, exc, str(env.stanza_id))
            return
        body = env.body
        if not isinstance(body, Configuration) and not self._ours(env):
            await self.error(
                p, WrongConversation(f"this room is conversation {self.id!r}"), _body_id(body)
            )
            return
        if env.conversation_id != self.id:
            env = msgspec.structs.replace(env, conversation_id=self.id)
        if not isinstance(body, FROM_CLIENTS):
            # Only the agent sends these; one from a client is a forgery or a bug.
            self.refuse("server_only_type", p.identity, type=int(env.type))
            await self.error(
                p,
                NotPermitted(f"message type {int(env.type)} is sent by the agent only"),
                _body_id(body),
            )
            return
        p.active = True
        try:
            await self._dispatch(p, env)
        except ProtocolError as exc:
            await self.error(p, exc, _body_id(body))

    async def _on_typed(self, item: Typed) -> None:
        """Typed input from outside the protocol: a user turn, as a UserMessage is (same
        limits and rules), shown to protocol clients as a final Transcription."""
        if item.peer.kind == "agent":
            self.refuse("from_agent", item.sender)
            return
        p = self.participant(item.sender, item.peer)
        size = len(item.text.encode())
        if item.refused is not None:
            await self.error(p, item.refused)
        elif not p.packets.take():
            await self.error(p, Overloaded("too many messages: slow down"))
        elif size > TEXT_BUDGET_BYTES:
            await self.error(p, PacketTooLarge(size, TEXT_BUDGET_BYTES))
        elif item.text.strip() and not self.closed:
            user_id = new_id(id_prefix.MESSAGE)
            previous = self.history[-1].answer_id if self.history else None
            try:
                await self.source.submit(p, TurnRequest(user_id, item.text, p.identity))
            except ProtocolError as exc:
                await self.error(p, exc)
                return
            self.remember(user_id)
            body = Transcription(
                id=user_id,
                conversation_id=self.id,
                text=item.text,
                final=True,
                previous_id=previous,
            )
            await self.outbox.send(
                body, self.clients(), everyone=True, store_meta={META_FROM: p.identity}
            )

    def _ours(self, env: Envelope[Any]) -> bool:
        """The envelope (and its body) name this conversation, or none at all."""
        cid = getattr(env.body, "conversation_id", None)
        return env.conversation_id in ("", self.id) and cid in (None, "", self.id)

    async def _dispatch(self, p: Participant, env: Envelope[Any]) -> None:
        body = env.body
        if isinstance(body, Configuration):
            await self._on_configuration(p, body)
        elif isinstance(body, UserMessage):
            await self._on_user_message(p, env, body)
        elif isinstance(body, ControlStop):
            await self._on_stop(p, body, env.stanza_id)
        elif isinstance(body, ControlVariation):
            await on_variation(self, p, body, env.stanza_id)
        elif isinstance(body, Commentary):
            ack = Acknowledgement(
                conversation_id=self.id,
                acknowledged_stanza_id=env.stanza_id,
                acknowledged_message_id=body.id,
            )
            await self.outbox.send(ack, [p.identity])
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

    async def _repeated(self, p: Participant, env: Envelope[Any], received_at: float) -> None:
        """The same envelope again. A client repeats its Configuration each second until
        the reply arrives (§4.1 makes the reply a must): one received after the last
        answer went out says that answer was lost (it went into a link not up yet, as in
        a room started again on another node), so it is answered again, a resume with its
        whole replay, while the resume rate allows. A repeat that crossed the answer, one
        over the rate, one whose answer is an error (the client cannot tell that error
        from one about its next request), and anything else repeated: ignored."""
        if isinstance(env.body, Configuration) and received_at > p.answered_at:
            with contextlib.suppress(ProtocolError):
                await self._on_configuration(p, env.body)

    async def _on_configuration(self, p: Participant, body: Configuration) -> None:
        if body.conversation_id and body.conversation_id != self.id:
            raise WrongConversation(
                f"conversation {body.conversation_id!r} is not this room's ({self.id!r}); "
                "join its room to resume it"
            )
        p.apply_features(body.features)
        features = p.features(sealing=self.sealer is not None, tool_use=self.source.tool_use)
        reply = Configuration(conversation_id=self.id, features=features)
        seen = abs(body.last_sequence_seen or 0)
        if body.conversation_id != self.id or seen == 0:
            p.configured = True
            await self.outbox.send(reply, [p.identity])
            p.answered_at = time.monotonic()
            return
        if p.resumes is not None and not p.resumes.take():
            self.refuse("resume_rate", p.identity)
            raise Overloaded("too many resume requests: slow down")
        out = self.outbox
        async with out.lock:  # nothing else goes out between the replies and the replay
            budget = self.options.replay_max_bytes
            try:
                if out.store is not None and not out.covers(seen):
                    replay = await replay_stored(self, seen, p, max_bytes=budget)
                else:
                    replay = out.replay(
                        seen, p.identity, p.step_level, visibility=p.visibility, max_bytes=budget
                    )
            except ReplayBudget:
                self.refuse("replay_budget", p.identity)
                raise
            p.configured = True
            ack = Acknowledgement(conversation_id=self.id, acknowledged_stanza_id=seen)
            await out.emit(ack, [p.identity], None)
            await out.emit(reply, [p.identity], None)
            for data in replay:
                await out.transmit(data, [p.identity], "replay")
            p.answered_at = time.monotonic()
        logger.info(
            "resumed", extra={"participant": p.identity, "seen": seen, "replayed": len(replay)}
        )

    async def _on_user_message(self, p: Participant, env: Envelope[Any], body: UserMessage) -> None:
        if body.id in self._ids or await lookup_message(self.sink, body.id) is not None:
            self.refuse("duplicate_id", p.identity)  # in memory, or stored (older, elsewhere)
            raise DuplicateId(f"message id {body.id!r} is already used in this conversation")
        replaces = p.pending_edit
        if replaces is not None:
            p.pending_edit = None
            if p.edit_timer is not None:
                p.edit_timer.cancel()
                p.edit_timer = None
        owner = self.owner(replaces) if replaces is not None else None
        request = TurnRequest(body.id, body.content, owner or p.identity, replaces=replaces)
        await self.source.submit(p, request)
        self.remember(body.id)
        # An accepted user message: the only client input stored, with who sent it.
        self.sink.submit(
            msgspec.structs.replace(env, meta={**(env.meta or {}), META_FROM: p.identity})
        )

    async def _on_stop(self, p: Participant, body: ControlStop, stanza_id: int) -> None:
        kind = body.stop_type or "generation"
        turn = self._find_turn(body.target_id, p)
        if body.target_id is not None:
            if turn is not None:
                owner: str | None = turn.request.requester
            else:  # a finished turn, or one still waiting in a queue
                owner = self.owner(body.target_id) or self.source.queued_owner(body.target_id)
            if owner is not None and not self.may_act_for(p, owner):
                self.refuse("not_permitted", p.identity, action="stop")
                raise NotPermitted(f"{body.target_id!r} is another participant's turn")
        if kind in ("speech", "all"):  # only the source knows whose turn is being said
            self.source.interrupt_speech(lambda speaking: self.may_act_for(p, speaking))
        if kind in ("generation", "all") and turn is not None:
            turn.stop(ack=(p.identity, stanza_id))  # acknowledged once the answer is closed
            stop = ControlStop(conversation_id=self.id, target_id=turn.answer_id, stop_type=kind)
            self.sink.submit(envelope(stop, stanza_id=stanza_id, conversation_id=self.id))
            return
        notes = None if kind == "speech" else "nothing to stop"
        # A turn still waiting in a queue never started: drop it, nothing to close.
        target = body.target_id
        if kind != "speech" and target is not None and self.source.drop_queued(target):
            notes = "queued turn dropped before it started"
        ack = Acknowledgement(
            conversation_id=self.id, acknowledged_stanza_id=stanza_id, notes=notes
        )
        await self.outbox.send(ack, [p.identity])

    async def forget(self, identity: str) -> None:
        """``identity`` left: its running turns stop, its waiting ones are dropped, and it is
        sent a 503 for each turn stopped (replayed if it resumes, see .away)."""
        p = self.participants.pop(identity, None)
        if p is None:
            return
        if p.edit_timer is not None:
            p.edit_timer.cancel()
        cut = self._cut_away.note(identity, self.turns)
        for turn in [t for t in self.turns if t.request.requester == identity]:
            turn.stop()  # its source closes the answer for the others, then ends
        if self._source is not None:
            self._source.forget(identity)
        for user_id in cut:
            await self.outbox.send(self._cut_away.error(self.id, user_id), [identity])

    # -- lookups --------------------------------------------------------------------

    def _find_turn(self, target: str | None, p: Participant) -> TurnProjection | None:
        if target is not None:
            for turn in reversed(self.turns):
                if target in (turn.answer_id, turn.request.user_id):
                    return turn
            return None
        mine = [t for t in self.turns if t.request.requester == p.identity]
        if mine:
            return mine[-1]
        return self.turns[-1] if self.turns and p.operator else None

    def owner(self, message_id: str) -> str | None:
        """Who asked the turn of ``message_id`` (a user message or answer id)."""
        for turn in self.turns:
            if message_id in (turn.request.user_id, turn.answer_id):
                return turn.request.requester
        for ex in reversed(self.history):
            if message_id in (ex.user_id, ex.answer_id):
                return ex.requester
        return None


def _body_id(body: object) -> str | None:
    value = getattr(body, "id", None)
    return value if isinstance(value, str) else None
