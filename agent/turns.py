"""The Alicia protocol for one conversation (one room): handshake, turns, stop, variation.

:class:`Conversation` reads packets from a :class:`~agent.transport.Transport` and
answers them. For every packet, in this order: the sender's rate limit (token bucket),
the size limit, decoding, the sender's stanza order, then dispatch. Bad input of any
kind is answered with an ErrorMessage to that sender only (itself rate-limited) and
never disturbs other participants.

A turn (UserMessage, or a final transcript from :meth:`Conversation.user_said`) runs in
the sender's own task, one at a time per sender, from a bounded queue:

1. the LLM is streamed (OpenAI-compatible, ``stream=True``); each delta goes through
   :class:`~agent.reasoning.ReasoningExtractor`;
2. reasoning text goes through :class:`~agent.segmenter.StepSegmenter` and leaves as
   ReasoningSteps (``previousId`` = user message, ``stepIndex`` from the conversation's
   :class:`~protocol.StepTracker`), sent only to clients that show reasoning;
3. tool calls close the open step, are announced (ToolUseRequest, ``execution: server``),
   run by the :class:`~agent.tools.ToolBox`, reported (ToolUseResult) and fed back to the
   LLM for another round;
4. answer text opens the answer (StartAnswer) and leaves sentence by sentence
   (AssistantSentence, ``sequence`` 1..M, last one ``isFinal``) to streaming clients,
   and as one AssistantMessage to the others; with a speaker, sentences are spoken.

Reasoning never reaches answer text or speech and never goes back to the LLM: the chat
context keeps user messages and answers only. Every sent envelope and every valid
received one is handed to the :class:`~agent.sink.StepSink`.

The last ``Settings.replay_keep`` sent envelopes are kept as sent (bytes, stanzaId,
recipients). A client that resumes (Configuration naming this conversation with
``lastSequenceSeen`` L > 0, PROTOCOL.md §4.9) gets an Acknowledgement of L, the
Configuration, then every kept envelope addressed to it with |stanzaId| > L, unchanged;
a gap the buffer no longer covers (or over 1000), or an L this worker never sent (it
restarted), is answered with ErrorMessage 202.

This module knows nothing of LiveKit: ``livekit.rtc`` stays in ``agent/transport.py``
and ``agent/voice.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any, Final, Protocol, TypeVar, cast

import msgspec
import openai
from openai.types.chat import ChatCompletionMessageParam

from protocol import (
    MAX_PACKET_BYTES,
    Acknowledgement,
    AssistantMessage,
    AssistantSentence,
    Body,
    Commentary,
    Configuration,
    ControlStop,
    ControlVariation,
    DecodeError,
    Envelope,
    ErrorCode,
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

from .llm_stream import stream_deltas
from .reasoning import Answer, Reasoning, ReasoningExtractor, strip_reasoning
from .segmenter import StepSegmenter
from .sentences import SentenceStream
from .session import (
    InvalidState,
    LLMUnavailable,
    Overloaded,
    PacketTooLarge,
    Participant,
    TokenBucket,
    TurnRequest,
    WrongConversation,
)
from .settings import Settings
from .sink import StepSink
from .tools import Outcome, ToolBox, ToolError, parse_arguments
from .transport import Left, Packet, Transport, TransportError

__all__ = ["META_CLOSED_AT", "META_MODEL", "Conversation", "Speaker"]

logger = logging.getLogger("alicia.turns")

META_MODEL: Final = "model"
"""Meta key on StartAnswer/AssistantMessage: the LLM model name."""
META_CLOSED_AT: Final = "alicia.closedMonoNs"
"""Meta key on ReasoningStep (``Settings.timing_meta``): ``time.monotonic_ns()`` when the
segmenter closed the step (CLOCK_MONOTONIC: comparable between processes on one host)."""

_HISTORY_LIMIT: Final = 200
_MAX_REPLAY_GAP: Final = 1000
_SEED_TIMEOUT_S: Final = 1.0


class Speaker(Protocol):
    """Speech output for answers (``agent/voice.py``); optional."""

    def say(self, text: str) -> None:
        """Queue one answer sentence for speech."""
        ...

    def interrupt(self) -> None:
        """Stop speaking now and drop queued sentences."""
        ...


class InternalError(ProtocolError):
    """Something unexpected failed inside the worker during a turn (501)."""

    code = ErrorCode.INTERNAL_ERROR


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
    reasoning: bool
    """A ReasoningStep (not replayed to clients that hide reasoning)."""


@dataclasses.dataclass(slots=True)
class _Exchange:
    user_id: str
    user_text: str
    answer_id: str
    answer_text: str


@dataclasses.dataclass(slots=True)
class _ToolCall:
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclasses.dataclass(slots=True, eq=False)
class _Turn:
    request: TurnRequest
    answer_id: str
    sentences: SentenceStream
    generation: asyncio.Task[None] | None = None
    seed: asyncio.Task[int] | None = None
    stopped: bool = False
    acks: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    answer_open: bool = False
    stream_form: bool = True
    streaming_to: list[str] = dataclasses.field(default_factory=list)
    message_to: list[str] = dataclasses.field(default_factory=list)
    sequence: int = 0
    answer: list[str] = dataclasses.field(default_factory=list)
    round_text: list[str] = dataclasses.field(default_factory=list)
    steps: int = 0

    def stop(self, ack: tuple[str, int] | None = None) -> None:
        """Stop generating (the LLM stream is closed); ``ack`` is sent after the end."""
        if ack is not None:
            self.acks.append(ack)
        self.stopped = True
        if self.generation is not None and not self.generation.done():
            self.generation.cancel()


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Wire the parts; nothing runs until :meth:`run`."""
        self.id = conversation_id
        self._settings = settings
        self._transport = transport
        self._sink = sink
        self._llm = llm
        self._tools = tools if settings.tools_enabled else None
        self._speaker = speaker
        self._clock = clock
        self._stanza = StanzaCounter("server")
        self._steps = StepTracker(max_chains=256)
        self._send_lock = asyncio.Lock()
        self._kept: deque[_Kept] = deque(maxlen=settings.replay_keep)
        self._evicted = 0
        """|stanzaId| of the newest envelope pushed out of ``_kept`` (0: none yet)."""
        self._participants: dict[str, Participant] = {}
        self._turns: list[_Turn] = []
        self._history: list[_Exchange] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        features = [Feature.REASONING_STEPS, Feature.STREAMING]
        if self._tools is not None:
            features.append(Feature.TOOL_USE)
        self._features = [str(f) for f in features]

    # -- lifecycle ------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the room until the transport ends, then stop every task."""
        try:
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

    def _participant(self, identity: str) -> Participant:
        p = self._participants.get(identity)
        if p is None:
            s = self._settings
            p = Participant(
                identity=identity,
                show_reasoning=s.show_reasoning_default,
                packets=TokenBucket(s.rate_per_s, s.rate_burst, clock=self._clock),
                errors=TokenBucket(s.error_rate_per_s, s.error_burst, clock=self._clock),
                queue=asyncio.Queue(maxsize=s.queue_size),
            )
            self._participants[identity] = p
        return p

    async def _on_packet(self, packet: Packet) -> None:
        p = self._participant(packet.sender)
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
        p.active = True
        self._sink.submit(env)
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
            await self._on_user_message(p, body)
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
        else:
            logger.debug("message type ignored", extra={"type": env.type})

    async def _on_configuration(self, p: Participant, body: Configuration) -> None:
        if body.conversation_id and body.conversation_id != self.id:
            raise WrongConversation(
                f"conversation {body.conversation_id!r} is not this room's ({self.id!r}); "
                "join its room to resume it"
            )
        p.apply_features(body.features)
        reply = Configuration(conversation_id=self.id, features=self._features)
        seen = abs(body.last_sequence_seen or 0)
        if body.conversation_id != self.id or seen == 0:
            p.configured = True
            await self._send(reply, [p.identity])
            return
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
                and (p.show_reasoning or not k.reasoning)
            ]
            p.configured = True
            ack = Acknowledgement(conversation_id=self.id, acknowledged_stanza_id=seen)
            await self._emit(ack, [p.identity], None)
            await self._emit(reply, [p.identity], None)
            for kept in replay:
                await self._transmit(kept.data, [p.identity], "replay")
        logger.info(
            "resumed", extra={"participant": p.identity, "seen": seen, "replayed": len(replay)}
        )

    async def _on_user_message(self, p: Participant, body: UserMessage) -> None:
        replaces = p.pending_edit
        if replaces is not None:
            p.pending_edit = None
            if p.edit_timer is not None:
                p.edit_timer.cancel()
                p.edit_timer = None
        request = TurnRequest(body.id, body.content, p.identity, replaces=replaces)
        await self._enqueue(p, request, body.id)

    async def _on_stop(self, p: Participant, body: ControlStop, stanza_id: int) -> None:
        kind = body.stop_type or "generation"
        if kind in ("speech", "all") and self._speaker is not None:
            self._speaker.interrupt()
        turn = self._find_turn(body.target_id, p)
        if kind in ("generation", "all") and turn is not None:
            turn.stop(ack=(p.identity, stanza_id))  # acknowledged once the answer is closed
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

    async def _on_variation(self, p: Participant, body: ControlVariation, stanza_id: int) -> None:
        target = body.target_id
        text = self._user_text(target)
        if text is None:
            raise InvalidState(f"no user message {target!r} in this conversation")
        for turn in self._turns:
            if turn.request.user_id == target:
                turn.stop()
        ack = Acknowledgement(
            conversation_id=self.id,
            acknowledged_stanza_id=stanza_id,
            acknowledged_message_id=target,
        )
        await self._send(ack, [p.identity])
        if body.mode == "regenerate":
            await self._enqueue(p, TurnRequest(target, text, p.identity, replaces=target), None)
        elif body.new_content is not None:
            new = TurnRequest(new_id(id_prefix.MESSAGE), body.new_content, p.identity, target)
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
    ) -> None:
        """Number, store, keep and send one envelope (to nobody if ``to`` is empty).

        ``everyone``: ``to`` is every client in the room; a resuming client gets it too.
        """
        async with self._send_lock:
            await self._emit(body, to, meta, everyone=everyone)

    async def _emit(
        self,
        body: Body,
        to: Sequence[str],
        meta: dict[str, Any] | None,
        *,
        everyone: bool = False,
    ) -> None:
        """:meth:`_send` with the send lock already held."""
        env = envelope(body, stanza_id=self._stanza.next(), conversation_id=self.id, meta=meta)
        self._sink.submit(env)
        if not to and not everyone:
            return
        try:
            data = encode(env)
        except EncodeError:
            logger.exception("envelope not encodable", extra={"type": env.type})
            return
        kept = _Kept(
            -env.stanza_id, data, None if everyone else tuple(to), isinstance(body, ReasoningStep)
        )
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

    async def _enqueue(self, p: Participant, request: TurnRequest, origin: str | None) -> None:
        try:
            p.queue.put_nowait(request)
        except asyncio.QueueFull:
            await self._error(p, Overloaded(f"{p.queue.maxsize} turns already waiting"), origin)
            return
        if p.runner is None or p.runner.done():
            p.runner = asyncio.create_task(self._serve(p), name=f"alicia-turns-{p.identity}")

    async def _serve(self, p: Participant) -> None:
        """Run ``p``'s queued turns one after another while ``p`` is in the room."""
        while self._participants.get(p.identity) is p:
            request = await p.queue.get()
            turn = _Turn(request, new_id(id_prefix.MESSAGE), SentenceStream())
            self._turns.append(turn)
            try:
                await self._run_turn(turn)
            except Exception:  # keep serving this participant's next turns
                logger.exception("turn runner failed", extra={"participant": p.identity})
            finally:
                self._turns.remove(turn)

    def _find_turn(self, target: str | None, p: Participant) -> _Turn | None:
        if target is not None:
            for turn in reversed(self._turns):
                if target in (turn.answer_id, turn.request.user_id):
                    return turn
            return None
        mine = [t for t in self._turns if t.request.requester == p.identity]
        if mine:
            return mine[-1]
        return self._turns[-1] if self._turns else None

    def _user_text(self, user_id: str) -> str | None:
        for turn in self._turns:
            if turn.request.user_id == user_id:
                return turn.request.text
        for ex in reversed(self._history):
            if ex.user_id == user_id:
                return ex.user_text
        return None

    async def _run_turn(self, turn: _Turn) -> None:
        request = turn.request
        if request.replaces is not None:
            self._history = _before(self._history, request.replaces)
        turn.seed = asyncio.create_task(self._sink.last_step_index(request.user_id))
        turn.generation = asyncio.create_task(self._generate(turn))
        failure: ProtocolError | None = None
        try:
            await turn.generation
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not turn.stopped or (current is not None and current.cancelling()):
                if turn.seed is not None:
                    _discard(turn.seed)
                raise
        except openai.APIError as exc:
            logger.warning("llm request failed", extra={"error": str(exc)})
            failure = LLMUnavailable(f"the language model failed: {type(exc).__name__}")
        except Exception:
            logger.exception("turn failed")
            failure = InternalError("the turn failed inside the worker")
        await self._finish(turn, failure)

    async def _finish(self, turn: _Turn, failure: ProtocolError | None) -> None:
        request = turn.request
        if turn.seed is not None:
            _discard(turn.seed)
            turn.seed = None
        if not turn.answer_open:
            await self._open_answer(turn)
        rest = turn.sentences.flush()
        if turn.stream_form:
            for text in rest[:-1]:
                await self._sentence(turn, text, final=False)
            await self._sentence(turn, rest[-1] if rest else "", final=True)
        else:
            for text in rest:
                await self._sentence(turn, text, final=False)
        complete = failure is None and not turn.stopped
        answer = strip_reasoning("".join(turn.answer)).strip()
        if turn.message_to:
            message = AssistantMessage(
                id=turn.answer_id,
                previous_id=request.user_id,
                conversation_id=self.id,
                content=answer,
                state="complete" if complete else "partial",
            )
            await self._send(message, turn.message_to, meta={META_MODEL: self._settings.llm_model})
        self._history.append(_Exchange(request.user_id, request.text, turn.answer_id, answer))
        del self._history[:-_HISTORY_LIMIT]
        if failure is not None:
            p = self._participants.get(request.requester)
            if p is not None:
                await self._error(p, failure, request.user_id)
        for identity, stanza_id in turn.acks:
            ack = Acknowledgement(
                conversation_id=self.id,
                acknowledged_stanza_id=stanza_id,
                acknowledged_message_id=turn.answer_id,
            )
            await self._send(ack, [identity])
        logger.info(
            "turn finished",
            extra={
                "conversation": self.id,
                "steps": turn.steps,
                "sentences": turn.sequence,
                "stopped": turn.stopped,
            },
        )

    def _context(self, request: TurnRequest) -> list[dict[str, Any]]:
        """System prompt, past user messages and answers (never reasoning), the new one."""
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": self._settings.system_prompt}
        ]
        keep = self._settings.history_turns
        for ex in self._history[-keep:] if keep else ():
            messages.append({"role": "user", "content": ex.user_text})
            if ex.answer_text:
                messages.append({"role": "assistant", "content": strip_reasoning(ex.answer_text)})
        messages.append({"role": "user", "content": request.text})
        return messages

    async def _generate(self, turn: _Turn) -> None:
        messages = self._context(turn.request)
        rounds = self._settings.max_tool_rounds
        schemas = self._tools.schemas() if self._tools is not None else None
        for round_no in range(rounds + 1):
            offer = schemas if round_no < rounds else None
            turn.round_text.clear()
            calls = await self._stream_round(turn, messages, offer)
            if not calls or offer is None:
                return
            messages.append(
                {
                    "role": "assistant",
                    "content": "".join(turn.round_text) or None,
                    "tool_calls": [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments},
                        }
                        for c in calls
                    ],
                }
            )
            for call in calls:
                outcome = await self._run_tool(turn, call)
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": outcome.for_llm()}
                )

    async def _stream_round(
        self,
        turn: _Turn,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
    ) -> list[_ToolCall]:
        """One streamed completion: steps, answer text, and the tool calls it asks for."""
        extractor = ReasoningExtractor(open_at_start=self._settings.llm_thinking_open)
        segmenter = StepSegmenter(max_delay=self._settings.step_max_delay_s, clock=self._clock)
        calls: dict[int, _ToolCall] = {}
        extra: dict[str, Any] = {"tools": tools} if tools else {}
        deltas = stream_deltas(
            self._llm,
            model=self._settings.llm_model,
            messages=cast("list[ChatCompletionMessageParam]", messages),
            **extra,
        )
        async with (
            contextlib.aclosing(deltas) as stream,
            contextlib.aclosing(_paced(stream, segmenter.due, self._clock)) as it,
        ):
            async for delta in it:
                if delta is None:  # the open step is due: cut it
                    await self._steps_out(turn, segmenter.poll())
                    continue
                for tc in delta.get("tool_calls") or ():
                    if isinstance(tc, dict):
                        _merge_tool_call(calls, tc)
                for part in extractor.feed(delta):
                    await self._part(turn, part, segmenter)
        for part in extractor.flush():
            await self._part(turn, part, segmenter)
        await self._steps_out(turn, segmenter.close())
        found = [calls[i] for i in sorted(calls)]
        for i, call in enumerate(found):
            if not call.id:
                call.id = f"call_{turn.answer_id}_{i}"
        return found

    async def _part(self, turn: _Turn, part: Reasoning | Answer, segmenter: StepSegmenter) -> None:
        if isinstance(part, Reasoning):
            await self._steps_out(turn, segmenter.push(part.text))
            return
        if not turn.answer_open:
            await self._steps_out(turn, segmenter.close())
            await self._open_answer(turn)
        turn.answer.append(part.text)
        turn.round_text.append(part.text)
        for text in turn.sentences.push(part.text):
            await self._sentence(turn, text, final=False)

    async def _steps_out(self, turn: _Turn, texts: list[str]) -> None:
        if not texts:
            return
        closed = time.monotonic_ns()
        user_id = turn.request.user_id
        if turn.seed is not None:
            seed, turn.seed = turn.seed, None
            try:
                async with asyncio.timeout(_SEED_TIMEOUT_S):
                    last = await seed
            except Exception:
                logger.warning("stored step index unavailable", extra={"previous_id": user_id})
                last = 0
            self._steps.seed(user_id, max(last, self._steps.last_index(user_id)))
        meta = {META_CLOSED_AT: closed} if self._settings.timing_meta else None
        for text in texts:
            step = ReasoningStep(
                id=new_id(id_prefix.REASONING_STEP),
                conversation_id=self.id,
                previous_id=user_id,
                content=text,
                step_index=self._steps.next_index(user_id),
            )
            turn.steps += 1
            to = [p.identity for p in self._participants.values() if p.active and p.show_reasoning]
            await self._send(step, to, meta=meta)

    async def _open_answer(self, turn: _Turn) -> None:
        turn.answer_open = True
        active = [p for p in self._participants.values() if p.active]
        turn.streaming_to = [p.identity for p in active if p.streaming]
        turn.message_to = [p.identity for p in active if not p.streaming]
        turn.stream_form = bool(turn.streaming_to) or not turn.message_to
        if turn.stream_form:
            start = StartAnswer(
                id=turn.answer_id,
                previous_id=turn.request.user_id,
                conversation_id=self.id,
                answer_type="text+voice" if self._speaker is not None else "text",
            )
            await self._send(start, turn.streaming_to, meta={META_MODEL: self._settings.llm_model})

    async def _sentence(self, turn: _Turn, text: str, *, final: bool) -> None:
        if text and self._speaker is not None:
            self._speaker.say(text)
        if not turn.stream_form:
            return
        turn.sequence += 1
        sentence = AssistantSentence(
            id=new_id(id_prefix.SENTENCE),
            previous_id=turn.answer_id,
            conversation_id=self.id,
            sequence=turn.sequence,
            text=text,
            is_final=True if final else None,
        )
        await self._send(sentence, turn.streaming_to)

    async def _run_tool(self, turn: _Turn, call: _ToolCall) -> Outcome:
        assert self._tools is not None
        request_id = new_id(id_prefix.TOOL_USE)
        try:
            arguments = parse_arguments(call.arguments)
            bad: ToolError | None = None
        except ToolError as exc:
            arguments, bad = {}, exc
        request = ToolUseRequest(
            id=request_id,
            tool_name=call.name or "unnamed",
            parameters=arguments if bad is None else {"raw": call.arguments},
            execution="server",
            conversation_id=self.id,
            previous_id=turn.request.user_id,
            timeout_ms=self._tools.timeout_ms(call.name),
        )
        await self._send(request, self._clients(), everyone=True)
        if bad is not None:
            outcome = Outcome(False, error_code=bad.code, error_message=str(bad))
        else:
            outcome = await self._tools.call(call.name, arguments)
        result = ToolUseResult(
            request_id=request_id,
            success=outcome.success,
            result=outcome.result,
            error_code=outcome.error_code,
            error_message=outcome.error_message,
            id=new_id(id_prefix.TOOL_USE_RESULT),
            conversation_id=self.id,
        )
        await self._send(result, self._clients(), everyone=True)
        return outcome


T = TypeVar("T")


async def _paced(
    stream: AsyncIterator[T],
    due: Callable[[], float | None],
    clock: Callable[[], float],
) -> AsyncGenerator[T | None, None]:
    """The stream's chunks, with ``None`` whenever ``due()`` passes while waiting.

    The pending read is never cancelled by a timeout (that would break the HTTP stream);
    it is only cancelled when the consumer stops iterating.
    """
    pending: asyncio.Task[T] | None = None
    try:
        while True:
            deadline = due()
            if deadline is None and pending is None:
                try:
                    yield await anext(stream)
                except StopAsyncIteration:
                    return
                continue
            if pending is None:
                pending = asyncio.ensure_future(anext(stream))
            timeout = None if deadline is None else max(0.0, deadline - clock())
            done, _ = await asyncio.wait((pending,), timeout=timeout)
            if not done:
                yield None
                if due() == deadline and deadline is not None and deadline <= clock():
                    await asyncio.sleep(0.001)  # the cut made no progress: do not spin
                continue
            task, pending = pending, None
            try:
                chunk = task.result()
            except StopAsyncIteration:
                return
            yield chunk
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending


def _merge_tool_call(calls: dict[int, _ToolCall], tc: dict[str, Any]) -> None:
    """Fold one streamed tool-call fragment (a delta's ``tool_calls`` item) into ``calls``."""
    index = tc.get("index")
    call = calls.setdefault(index if isinstance(index, int) else 0, _ToolCall())
    if isinstance(tc_id := tc.get("id"), str) and tc_id:
        call.id = tc_id
    function = tc.get("function")
    if isinstance(function, dict):
        name = function.get("name")
        if isinstance(name, str) and name and not call.name:
            call.name = name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call.arguments += arguments


def _discard(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` if it still runs, else retrieve its outcome (no "never retrieved")."""
    if task.done():
        if not task.cancelled():
            task.exception()
    else:
        task.cancel()


def _before(history: list[_Exchange], user_id: str) -> list[_Exchange]:
    """History up to (not including) the exchange of ``user_id``; unchanged if absent."""
    for i, ex in enumerate(history):
        if ex.user_id == user_id:
            return history[:i]
    return history


def _body_id(body: object) -> str | None:
    value = getattr(body, "id", None)
    return value if isinstance(value, str) else None
