"""One turn's events as Alicia envelopes: the single projection every turn source uses.

:class:`TurnProjection` is made by
:meth:`~alicia.agent.engine.session.ProtocolSession.open_turn` and fed the turn's
:mod:`~alicia.agent.engine.events` in order:

* ``StepReady`` -> ReasoningStep (``previousId`` = user message) in the rendition each
  participant's level allows: ``full`` the step, ``summary`` the provider's own summary
  (else the summarizer model's, else an extractive one) with the step sealed as its
  ``encryptedValue``, ``encrypted`` only the sealed value; under zero data retention
  only the sealed step is stored;
* ``ToolRequested`` / ``ToolFinished`` -> ToolUseRequest (``execution: server``) and
  ToolUseResult, to every client;
* ``AnswerStarted`` / ``SentenceReady`` -> StartAnswer (``previousId`` = the user message,
  or the answer a ``continue`` continues) and AssistantSentence (``sequence`` 1..M, last
  one ``isFinal``) to streaming clients;
* ``TurnEnded`` -> one AssistantMessage to the clients that do not stream, the exchange
  into the history, an ErrorMessage to the requester if the turn failed, and the
  Acknowledgements of the ControlStops that ended it.

The session's :class:`~alicia.agent.engine.observer.AnswerObserver` s see the turn's
opening, answer start, sentences and end, never its reasoning.

Reasoning never reaches answer text: only ``SentenceReady`` text is ever an answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

import msgspec
import openai

from alicia.agent.llm.summary import extractive_summary, model_summary
from alicia.protocol import (
    Acknowledgement,
    AssistantMessage,
    AssistantSentence,
    ProtocolError,
    ReasoningStep,
    StartAnswer,
    ToolUseRequest,
    ToolUseResult,
    new_id,
)
from alicia.protocol import ids as id_prefix

from .events import (
    AnswerStarted,
    SentenceReady,
    StepReady,
    ToolFinished,
    ToolRequested,
    TurnEnded,
    TurnEvent,
)
from .observer import AnswerObserver
from .options import EngineOptions
from .outbox import Outbox
from .participants import Participant, TurnRequest, Visibility
from .sealing import ReasoningSealer
from .sink import META_FIRST_REASONING_MS, META_USAGE
from .source import TurnSource
from .telemetry import TurnTelemetry
from .turn import Exchange

__all__ = ["META_CLOSED_AT", "META_MODEL", "TurnHost", "TurnProjection", "merge"]

logger = logging.getLogger("alicia.conversation")

META_MODEL: Final = "model"
"""Meta key on StartAnswer/AssistantMessage: the LLM model name."""
META_CLOSED_AT: Final = "alicia.closedMonoNs"
"""Meta key on ReasoningStep (``EngineOptions.timing_meta``): ``time.monotonic_ns()`` when the
segmenter closed the step (CLOCK_MONOTONIC: comparable between processes on one host)."""


class TurnHost(Protocol):
    """What a turn's projection needs of its conversation (the port
    :class:`~alicia.agent.engine.session.ProtocolSession` implements)."""

    late_summaries: int
    """Model summaries dropped because the answer had started."""

    @property
    def id(self) -> str:
        """The conversation id."""

    @property
    def options(self) -> EngineOptions:
        """The conversation's options."""

    @property
    def llm(self) -> openai.AsyncOpenAI | None:
        """The summarizer model's client, if any."""

    @property
    def outbox(self) -> Outbox:
        """Where envelopes leave."""

    @property
    def participants(self) -> dict[str, Participant]:
        """Participants by identity."""

    @property
    def history(self) -> list[Exchange]:
        """Finished exchanges, oldest first."""

    @property
    def telemetry(self) -> TurnTelemetry:
        """Where each turn's figures go (never its content)."""

    @property
    def observers(self) -> Sequence[AnswerObserver]:
        """Front ends' views of each turn's answer."""

    @property
    def source(self) -> TurnSource:
        """Who runs the turns."""

    @property
    def tasks(self) -> set[asyncio.Task[Any]]:
        """Background tasks the conversation owns."""

    @property
    def sealer(self) -> ReasoningSealer | None:
        """Seals encrypted values."""

    @property
    def summary_slots(self) -> asyncio.Semaphore:
        """Model summaries being made at once."""

    def clients(self) -> list[str]:
        """Every client that receives answers."""

    async def store_sealed(
        self, step: ReasoningStep, text: str, meta: dict[str, Any] | None
    ) -> None:
        """Zero data retention: store ``step`` only sealed with the data key (held for
        the key while it is being fetched)."""

    def close_turn(self, turn: TurnProjection, exchange: Exchange | None) -> None:
        """``turn`` is over; ``exchange`` joins the history."""

    async def error(
        self, p: Participant, exc: ProtocolError, originating_id: str | None = None
    ) -> None:
        """Answer ``p`` with an ErrorMessage."""


class TurnProjection:
    """One turn being served: its events in, envelopes out (see the module docstring)."""

    def __init__(
        self,
        session: TurnHost,
        request: TurnRequest,
        answer_id: str,
        *,
        stop: Callable[[], None],
        model: str | None = None,
    ) -> None:
        """Made by :meth:`ProtocolSession.open_turn`; ``stop`` ends the turn at its source."""
        self.request = request
        self.answer_id = answer_id
        self.model = model or session.options.model
        """The model name sent as ``meta.model`` on the answer."""
        self._session = session
        self._stop = stop
        self._acks: list[tuple[str, int]] = []
        """ControlStops to acknowledge once the answer is closed: (identity, stanzaId)."""
        self._stream_form = True
        self._streaming_to: list[str] = []
        self._message_to: list[str] = []
        self._sequence = 0
        self._answer_started = False
        """The answer has begun: from now on no (late) step summary goes out."""
        self._final_text: str | None = None
        """The last sentence, sent with the turn's end (its stored copy carries the figures)."""
        self.ended = False
        self.trace = session.telemetry.turn_opened(session.id, answer_id, self.model)
        self._trace_content = session.telemetry.content

    def stop(self, ack: tuple[str, int] | None = None) -> None:
        """Stop the turn; ``ack`` is acknowledged after the answer is closed."""
        if ack is not None:
            self._acks.append(ack)
        self._stop()

    async def emit(self, event: TurnEvent) -> None:
        """One turn event as envelopes (see the module docstring)."""
        s = self._session
        if self.ended:
            raise RuntimeError("the turn has ended")
        if isinstance(event, SentenceReady):
            if event.text:
                for observer in s.observers:
                    observer.answer_sentence(self.answer_id, event.text)
            if event.final:  # goes out with TurnEnded, right behind it
                self._final_text = event.text
            else:
                await self._sentence(event.text, final=False)
        elif isinstance(event, StepReady):
            await self._step(event)
        elif isinstance(event, AnswerStarted):
            await self._open_answer()
        elif isinstance(event, ToolRequested):
            request = ToolUseRequest(
                id=event.request_id,
                tool_name=event.name,
                parameters=event.parameters,
                execution="server",
                conversation_id=s.id,
                previous_id=self.request.user_id,
                timeout_ms=event.timeout_ms,
            )
            await s.outbox.send(request, s.clients(), everyone=True)
            self.trace.tool_called(event.name)
        elif isinstance(event, ToolFinished):
            outcome = event.outcome
            result = ToolUseResult(
                request_id=event.request_id,
                success=outcome.success,
                result=outcome.result,
                error_code=outcome.error_code,
                error_message=outcome.error_message,
                id=new_id(id_prefix.TOOL_USE_RESULT),
                conversation_id=s.id,
            )
            await s.outbox.send(result, s.clients(), everyone=True)
        elif isinstance(event, TurnEnded):
            await self._finish(event)
        # AnswerDelta: the sentences carry the same text; ReasoningDelta: steps go whole.

    async def _finish(self, ended: TurnEnded) -> None:
        s = self._session
        request = self.request
        if not self._answer_started:
            await self._open_answer()
        # The turn's figures (usage, time to first reasoning) ride on the stored copies of
        # the answer's last envelopes only; they are never sent.
        figures = _figures(ended)
        await self._sentence(self._final_text or "", final=True, store_meta=figures)
        if self._message_to:
            message = AssistantMessage(
                id=self.answer_id,
                previous_id=self._answers,
                conversation_id=s.id,
                content=ended.answer,
                state="complete" if ended.status == "complete" else "partial",
            )
            await s.outbox.send(
                message, self._message_to, meta={META_MODEL: self.model}, store_meta=figures
            )
        self.ended = True
        exchange = Exchange(
            request.user_id,
            request.text,
            self.answer_id,
            ended.answer,
            request.requester,
            kept=ended.kept,
        )
        if request.continues is not None:  # one answer (both texts) for the model
            merge(s.history, request.continues, exchange)
        s.close_turn(self, None if request.continues is not None else exchange)
        for observer in s.observers:
            observer.turn_closed(self.answer_id, ended.status)
        self.trace.ended(ended.status, ended.usage, ended.first_reasoning_ms)
        if ended.error is not None:
            p = s.participants.get(request.requester)
            if p is not None:
                await s.error(p, ended.error, request.user_id)
        for identity, stanza_id in self._acks:
            ack = Acknowledgement(
                conversation_id=s.id,
                acknowledged_stanza_id=stanza_id,
                acknowledged_message_id=self.answer_id,
            )
            await s.outbox.send(ack, [identity])
        logger.info(
            "turn finished",
            extra={
                "conversation": s.id,
                "steps": ended.steps,
                "sentences": self._sequence,
                "stopped": ended.status == "stopped",
            },
        )

    async def _step(self, event: StepReady) -> None:
        s = self._session
        step = ReasoningStep(
            id=new_id(id_prefix.REASONING_STEP),
            conversation_id=s.id,
            previous_id=self.request.user_id,
            content=event.text,
            step_index=event.index,
        )
        meta = {META_CLOSED_AT: event.closed_ns} if s.options.timing_meta else None
        groups: dict[Visibility, list[str]] = {}
        for p in s.participants.values():
            level = p.step_level if p.active else None
            if level is not None:
                groups.setdefault(level, []).append(p.identity)
        # The step as it is goes to those granted full reasoning. It is stored as it is,
        # or, under zero data retention, only encrypted with the conversation's data key.
        zdr = s.options.zdr
        out = s.outbox
        await out.send(step, groups.get("full", []), meta=meta, level="full", store=not zdr)
        if zdr:
            await s.store_sealed(step, event.text, meta)
        self._traced(event, groups)
        if not (groups.get("summary") or groups.get("encrypted")):
            return
        sealer = s.sealer
        sealed = None if sealer is None else sealer.seal(s.id, event.text, knd="step", ref=step.id)
        if groups.get("summary"):
            to = groups["summary"]
            if event.summary is not None:  # the provider's own summary comes first
                summary = msgspec.structs.replace(
                    step, content=event.summary, encrypted_value=sealed
                )
                await out.send(summary, to, meta=meta, store=False, level="summary")
            elif s.options.summary_model and s.llm is not None and not s.summary_slots.locked():
                task = asyncio.create_task(
                    self._summarize(step, sealed, to, meta), name="alicia-summary"
                )
                s.tasks.add(task)
                task.add_done_callback(s.tasks.discard)
            else:  # no summarizer, or all its slots busy: the extractive summary, now
                summary = msgspec.structs.replace(
                    step, content=extractive_summary(step.content), encrypted_value=sealed
                )
                await out.send(summary, to, meta=meta, store=False, level="summary")
        if groups.get("encrypted") and sealed is not None:
            hidden = msgspec.structs.replace(step, content="", encrypted_value=sealed)
            await out.send(hidden, groups["encrypted"], meta=meta, store=False, level="encrypted")

    def _traced(self, event: StepReady, groups: dict[Visibility, list[str]]) -> None:
        """Telemetry sees the step's index, length and recipients per level, and only the
        text its content policy asks for."""
        recipients: dict[str, int] = {level: len(who) for level, who in groups.items()}
        content, text = self._trace_content, None
        if content == "full":
            text = event.text
        elif content == "summary":
            text = event.summary or extractive_summary(event.text)
        self.trace.step_sent(event.index, len(event.text), recipients, text)

    async def _summarize(
        self,
        step: ReasoningStep,
        sealed: str | None,
        to: list[str],
        meta: dict[str, Any] | None,
    ) -> None:
        """The summarizer model's summary of ``step``, sent to ``to`` only if it is ready
        before the answer starts (else dropped); its failure or timeout: extractive."""
        s = self._session
        model = s.options.summary_model
        assert model is not None and s.llm is not None
        async with s.summary_slots:
            try:
                async with asyncio.timeout(s.options.summary_timeout_s):
                    text = await model_summary(s.llm, model, step.content)
            except Exception as exc:  # a timeout, the endpoint, an empty reply
                logger.info("summary fallback", extra={"error": type(exc).__name__})
                text = extractive_summary(step.content)
        body = msgspec.structs.replace(step, content=text, encrypted_value=sealed)
        async with s.outbox.lock:
            if self._answer_started:
                s.late_summaries += 1
                logger.info("late summary dropped", extra={"conversation": s.id})
                return
            await s.outbox.emit(body, to, meta, store=False, level="summary")

    @property
    def _answers(self) -> str:
        """What the answer follows: the user message, or the answer it continues."""
        return self.request.continues or self.request.user_id

    async def _open_answer(self) -> None:
        s = self._session
        self._answer_started = True
        for observer in s.observers:
            observer.answer_opened(self.answer_id)
        self.trace.answer_started()
        active = [p for p in s.participants.values() if p.active]
        self._streaming_to = [p.identity for p in active if p.streaming]
        self._message_to = [p.identity for p in active if not p.streaming]
        self._stream_form = bool(self._streaming_to) or not self._message_to
        if self._stream_form:
            start = StartAnswer(
                id=self.answer_id,
                previous_id=self._answers,
                conversation_id=s.id,
                answer_type="text+voice" if s.source.speaks else "text",
            )
            await s.outbox.send(start, self._streaming_to, meta={META_MODEL: self.model})

    async def _sentence(
        self, text: str, *, final: bool, store_meta: dict[str, Any] | None = None
    ) -> None:
        if not self._stream_form:
            return
        self._sequence += 1
        sentence = AssistantSentence(
            id=new_id(id_prefix.SENTENCE),
            previous_id=self.answer_id,
            conversation_id=self._session.id,
            sequence=self._sequence,
            text=text,
            is_final=True if final else None,
        )
        await self._session.outbox.send(sentence, self._streaming_to, store_meta=store_meta)


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


def merge(history: list[Exchange], continues: str, exchange: Exchange) -> None:
    """Fold the continuation ``exchange`` into the exchange of the answer it continues:
    one answer (both texts), named by the continuation's id. Nothing if that is gone."""
    for i, ex in enumerate(history):
        if ex.answer_id == continues:
            text = " ".join(p for p in (ex.answer_text.strip(), exchange.answer_text.strip()) if p)
            history[i] = Exchange(
                ex.user_id, ex.user_text, exchange.answer_id, text, ex.requester, exchange.kept
            )
            return
