"""One turn: the user's message in, typed events out. No transport, no protocol envelopes.

:meth:`Turn.events` builds the chat context (system prompt, past user messages and
answers, never reasoning), streams the LLM (OpenAI-compatible, ``stream=True``) and
yields :mod:`~alicia.agent.engine.events` as the text arrives:

1. each delta goes through :class:`~alicia.agent.llm.reasoning.ReasoningExtractor`; reasoning
   text goes through :class:`~alicia.agent.llm.segmenter.StepSegmenter` and leaves as
   :class:`~alicia.agent.engine.events.StepReady` (``stepIndex`` from the conversation's
   :class:`~alicia.protocol.StepTracker`, seeded once from storage);
2. tool calls close the open step, are announced (``ToolRequested``), run by the
   :class:`~alicia.agent.engine.tools.ToolBox`, reported (``ToolFinished``) and fed back to the
   LLM for another round (at most ``max_tool_rounds`` rounds offer tools);
3. answer text opens the answer (``AnswerStarted``) and leaves as ``AnswerDelta`` and,
   sentence by sentence, ``SentenceReady``;
4. the turn ends with ``TurnEnded`` (complete, stopped or failed, with usage).

:meth:`Turn.stop` may be called from any task: the LLM stream or running tool is
abandoned at once and the turn still ends properly (the answer so far, ``stopped``).
A stop that arrives while the consumer is busy with an event takes effect when it asks
for the next one, so the consumer never sees a cancellation of its own work. The stream
is read a little ahead of the consumer: a stop still sends the answer text already read
(what leaves is the answer kept), while steps not yet given are dropped, uncounted and
unnumbered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import openai

from alicia.agent.llm.passback import (
    PASSBACK_KEY,
    PassBackCollector,
)
from alicia.agent.llm.providers import PROFILES, Effort, PassBack, PassBackForm, Profile
from alicia.agent.llm.reasoning import Answer, Part, Reasoning, ReasoningExtractor, strip_reasoning
from alicia.agent.llm.request import stream_round
from alicia.agent.llm.segmenter import StepSegmenter
from alicia.agent.llm.sentences import SentenceStream
from alicia.agent.llm.toolcalls import ToolCall, merge_tool_call
from alicia.protocol import ProtocolError, StepTracker, new_id
from alicia.protocol import ids as id_prefix

from .events import (
    AnswerDelta,
    AnswerStarted,
    ReasoningDelta,
    SentenceReady,
    StepReady,
    ToolFinished,
    ToolRequested,
    TurnEnded,
    TurnEvent,
    TurnStatus,
    Usage,
)
from .keeper import Keeper, Kept
from .pacing import pump
from .participants import InternalError, LLMUnavailable
from .tools import Outcome, ToolBox, ToolError, parse_arguments

__all__ = ["Exchange", "Turn", "TurnOptions"]

logger = logging.getLogger("alicia.turn")

_SEED_TIMEOUT_S: Final = 1.0


@dataclass
class _Shown:
    """What a turn has given its consumer: the answer's start, answer characters (as
    deltas), sentences and steps."""

    started: bool = False
    answer_chars: int = 0
    sentences: int = 0
    steps: int = 0

    def note(self, event: TurnEvent) -> None:
        """Count ``event``, which the consumer is given now."""
        if isinstance(event, StepReady):
            self.steps += 1
        elif isinstance(event, AnswerStarted):
            self.started = True
        elif isinstance(event, AnswerDelta):
            self.answer_chars += len(event.text)
        elif isinstance(event, SentenceReady):
            self.sentences += 1


@dataclass(frozen=True, slots=True)
class _Closed:
    """A step closed while streaming; it gets its chain index when it leaves the turn."""

    text: str
    closed: int
    summary: str | None


_Item = TurnEvent | _Closed


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnOptions:
    """How turns talk to the model (the worker builds it from its settings)."""

    model: str
    """Model name sent with each request."""
    system_prompt: str
    """The system message of every request."""
    history_turns: int = 20
    """Past user/answer pairs sent to the LLM (answers only; never reasoning)."""
    max_tool_rounds: int = 4
    """LLM calls per turn that may end in tool calls."""
    thinking_open: bool = False
    """The model's output starts inside reasoning (only ``</think>`` appears)."""
    step_max_delay_s: float = 1.0
    """Seconds an open reasoning step may wait before it is cut."""
    provider: Profile = PROFILES["generic"]
    """The provider profile: pass-back rule and effort form."""
    api: Literal["chat", "responses"] = "chat"
    """Chat completions or the Responses API."""
    effort: Effort | None = None
    """Reasoning effort to ask for (None: the provider's default)."""

    @property
    def passback(self) -> tuple[PassBack, PassBackForm]:
        """When and in which form reasoning goes back to the model: the Responses API
        always carries its reasoning items; chat completions follow the profile."""
        if self.api == "responses":
            return "all_turns", "reasoning_items"
        return self.provider.passback, self.provider.passback_form


@dataclass(slots=True)
class Exchange:
    """One past turn as the model sees it: the user's text and the answer (no reasoning)."""

    user_id: str
    user_text: str
    answer_id: str
    answer_text: str
    requester: str = ""
    """Identity of the participant whose turn this was (owner of the user message)."""
    kept: Kept | None = None
    """Reasoning the provider needs back in later turns (sealed), if its rule says so."""


class Turn:
    """One turn for the user message ``user_id``; iterate :meth:`events` once."""

    def __init__(
        self,
        *,
        user_id: str,
        text: str,
        answer_id: str,
        llm: openai.AsyncOpenAI,
        options: TurnOptions,
        history: Sequence[Exchange] = (),
        tools: ToolBox | None = None,
        steps: StepTracker | None = None,
        seed: Callable[[str], Awaitable[int]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        keeper: Keeper | None = None,
        deltas: bool = True,
    ) -> None:
        """Prepare the turn; nothing runs until :meth:`events` is iterated.

        ``steps`` numbers the steps (shared by the conversation, so a regenerated
        message continues its chain); ``seed`` returns the highest stored index of a
        chain, awaited (at most 1 s) before the first step is numbered. ``keeper``
        seals reasoning kept for the provider's pass-back rule. ``deltas=False`` leaves out
        :class:`ReasoningDelta` and :class:`AnswerDelta` (for consumers that only use whole
        steps and sentences: a token then costs no event).
        """
        self.user_id = user_id
        self.text = text
        self.answer_id = answer_id
        self._llm = llm
        self._options = options
        self._history = list(history)
        self._tools = tools
        self._steps = steps if steps is not None else StepTracker()
        self._seed_fn = seed
        self._seed: asyncio.Task[int] | None = None
        self._clock = clock
        self._sentences = SentenceStream()
        self._answer: list[str] = []
        self._round_text: list[str] = []
        self._answer_open = False
        """The answer has begun (its ``AnswerStarted`` is made; maybe not yet yielded)."""
        self._made: list[str] = []
        """Answer sentences made, in order (the stream is read ahead of the consumer)."""
        self._shown = _Shown()
        """What the consumer has been given so far."""
        self._usage: Usage | None = None
        self._stopped = False
        self._started = False
        self._inside = False
        """The generator is running its own awaits (not suspended at a ``yield``)."""
        self._task: asyncio.Task[Any] | None = None
        self._cancels = 0
        self._keeper = keeper if keeper is not None else Keeper()
        self._deltas = deltas
        self._kept: Kept | None = None
        self._started_at: float | None = None
        self._first_reasoning_ms: float | None = None
        self._round_raw = False
        """This round streamed raw reasoning."""
        self._round_summarised = False
        """This round streamed provider summaries (steps of their own without raw text)."""
        self._summaries: list[str] = []
        """Provider summary text waiting for the step it belongs to (raw reasoning seen)."""

    @property
    def stopped(self) -> bool:
        """:meth:`stop` was called."""
        return self._stopped

    def stop(self) -> None:
        """End the turn early: the stream and any running tool are abandoned. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self._inside and self._task is not None and not self._task.done():
            self._cancels += 1
            self._task.cancel()

    async def events(self) -> AsyncGenerator[TurnEvent, None]:
        """Run the turn, yielding its events; the last one is :class:`TurnEnded`."""
        if self._started:
            raise RuntimeError("a Turn runs once")
        self._started = True
        self._task = asyncio.current_task()
        status: TurnStatus = "complete"
        error: ProtocolError | None = None
        if self._seed_fn is not None:
            self._seed = asyncio.ensure_future(self._seed_fn(self.user_id))
        try:
            if self._stopped:
                status = "stopped"
            else:
                self._inside = True
                async with contextlib.aclosing(self._rounds()) as rounds:
                    async for event in rounds:
                        self._inside = False
                        self._shown.note(event)
                        yield event
                        self._inside = True
                        if self._stopped:
                            status = "stopped"
                            break
        except asyncio.CancelledError:
            if not self._own_cancel():
                raise
            status = "stopped"
        except openai.APIError as exc:
            logger.warning("llm request failed", extra={"error": str(exc)})
            status, error = (
                "failed",
                LLMUnavailable(f"the language model failed: {type(exc).__name__}"),
            )
        except Exception:
            logger.exception("turn failed")
            status, error = "failed", InternalError("the turn failed inside the worker")
        finally:
            self._inside = False
            if self._seed is not None:
                _discard(self._seed)
                self._seed = None
        for event in self._tail(status, error):
            yield event

    def _own_cancel(self) -> bool:
        """A CancelledError came from :meth:`stop` only: swallow it (uncancel)."""
        task = self._task
        if not self._stopped or task is None:
            return False
        if task.cancelling() > self._cancels:
            return False  # someone else cancels too: let it through
        while self._cancels:
            task.uncancel()
            self._cancels -= 1
        return True

    def _tail(self, status: TurnStatus, error: ProtocolError | None) -> list[TurnEvent]:
        """The end of the answer and ``TurnEnded``. The answer text read before a stop but
        not yet given to the consumer goes out here, so what leaves is the answer kept;
        steps not yet given are dropped (and not counted)."""
        shown = self._shown
        text = "".join(self._answer)
        out: list[TurnEvent] = []
        if not shown.started:
            self._answer_open = True
            out.append(AnswerStarted())
        if self._deltas:
            unsent = text[shown.answer_chars :]
            if unsent:
                out.append(AnswerDelta(unsent))
        out.extend(SentenceReady(text) for text in self._made[shown.sentences :])
        rest = self._sentences.flush()
        out.extend(SentenceReady(text) for text in rest[:-1])
        out.append(SentenceReady(rest[-1] if rest else "", final=True))
        answer = strip_reasoning(text).strip()
        out.append(
            TurnEnded(
                status,
                answer,
                shown.steps,
                self._usage,
                error,
                kept=self._kept if status == "complete" else None,
                first_reasoning_ms=self._first_reasoning_ms,
            )
        )
        return out

    # -- the model ------------------------------------------------------------------

    def _context(self) -> list[dict[str, Any]]:
        """System prompt, past user messages and answers, the new one.

        Roles always alternate: a past turn that left no answer (it failed or was stopped
        before any answer text) is left out with its user message, so a request never
        holds two user messages in a row. Reasoning goes back only where the provider's
        pass-back rule needs it in later turns (``all_turns``), sealed until rendered.
        """
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": self._options.system_prompt}
        ]
        keep = self._options.history_turns
        carry = self._options.passback[0] == "all_turns"
        past: list[tuple[Exchange, str]] = []  # the last ``keep`` with an answer, newest first
        for ex in reversed(self._history) if keep else ():
            if said := strip_reasoning(ex.answer_text).strip():
                past.append((ex, said))
                if len(past) == keep:  # the retained history may hold 256 turns: stop here
                    break
        for ex, said in reversed(past):
            messages.append({"role": "user", "content": ex.user_text})
            answer: dict[str, Any] = {"role": "assistant", "content": said}
            if carry and ex.kept is not None:
                answer[PASSBACK_KEY] = ex.kept
            messages.append(answer)
        messages.append({"role": "user", "content": self.text})
        return messages

    def _request(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The streamed request for ``messages`` in the configured API's shape."""
        options = self._options
        transcript = [
            {**m, PASSBACK_KEY: self._keeper.open(m[PASSBACK_KEY])} if PASSBACK_KEY in m else m
            for m in messages
        ]
        return stream_round(
            self._llm,
            transcript,
            model=options.model,
            profile=options.provider,
            api=options.api,
            effort=options.effort,
            tools=tools,
            on_usage=self._add_usage,
        )

    async def _rounds(self) -> AsyncGenerator[TurnEvent, None]:
        messages = self._context()
        rounds = self._options.max_tool_rounds
        schemas = self._tools.schemas() if self._tools is not None else None
        rule, form = self._options.passback
        collector = PassBackCollector(form)
        self._started_at = self._clock()
        for round_no in range(rounds + 1):
            offer = schemas if round_no < rounds else None
            self._round_text.clear()
            calls: list[ToolCall] = []
            async for event in self._stream_round(messages, offer, calls, collector):
                yield event
            material = collector.take() if rule != "never" else None
            if not calls or offer is None:
                if rule == "all_turns":
                    self._kept = self._keeper.keep(material)
                return
            assistant: dict[str, Any] = {
                "role": "assistant",
                "content": "".join(self._round_text) or None,
                "tool_calls": [c.message(extra=form == "thought_signature") for c in calls],
            }
            if material is not None:
                assistant[PASSBACK_KEY] = self._keeper.keep(material)
            messages.append(assistant)
            for call in calls:
                outcome: Outcome | None = None
                async for event in self._run_tool(call):
                    if isinstance(event, ToolFinished):
                        outcome = event.outcome
                    yield event
                assert outcome is not None
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": outcome.for_llm()}
                )

    async def _stream_round(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        found: list[ToolCall],
        collector: PassBackCollector,
    ) -> AsyncGenerator[TurnEvent, None]:
        """One streamed completion: steps and answer text; its tool calls go to ``found``."""
        extractor = ReasoningExtractor(open_at_start=self._options.thinking_open)
        segmenter = StepSegmenter(max_delay=self._options.step_max_delay_s, clock=self._clock)
        calls: dict[int, ToolCall] = {}
        collect = collector.feed if collector.active else None
        self._round_raw = self._round_summarised = False
        deltas = self._request(messages, tools)

        def process(delta: dict[str, Any]) -> list[_Item]:
            for tc in delta.get("tool_calls") or ():
                if isinstance(tc, dict):
                    merge_tool_call(calls, tc)
            if collect is not None:
                collect(delta)
            out: list[_Item] = []
            for part in extractor.feed(delta):
                self._part(part, segmenter, out)
            return out

        def cut() -> list[_Item]:  # the open step is due
            return self._closed(segmenter.poll())

        async with (
            contextlib.aclosing(deltas) as stream,
            contextlib.aclosing(pump(stream, process, cut, segmenter.due, self._clock)) as it,
        ):
            async for batch in it:
                await self._seeded(batch)
                for item in batch:
                    yield self._event(item)
        tail: list[_Item] = []
        for part in extractor.flush():
            self._part(part, segmenter, tail)
        tail.extend(self._closed(segmenter.close()))
        await self._seeded(tail)
        for item in tail:
            yield self._event(item)
        found.extend(calls[i] for i in sorted(calls))
        for i, call in enumerate(found):
            if not call.id:
                call.id = f"call_{self.answer_id}_{i}"

    def _add_usage(self, usage: dict[str, Any]) -> None:
        self._usage = (self._usage or Usage()) + Usage.from_provider(usage)

    def _part(self, part: Part, segmenter: StepSegmenter, out: list[_Item]) -> None:
        """What ``part`` makes, appended to ``out`` (synchronous: it runs per token)."""
        if not isinstance(part, Answer):
            if self._first_reasoning_ms is None and self._started_at is not None:
                self._first_reasoning_ms = (self._clock() - self._started_at) * 1000.0
            if isinstance(part, Reasoning):
                self._round_raw = True
            elif self._round_raw:  # the provider's summary of the raw reasoning
                self._summaries.append(part.text)
                return
            else:
                self._round_summarised = True
            if self._deltas:
                out.append(ReasoningDelta(part.text))
            texts = segmenter.push(part.text)
            if texts:
                out.extend(self._closed(texts))
            return
        if not self._answer_open:
            out.extend(self._closed(segmenter.close()))
            self._answer_open = True
            out.append(AnswerStarted())
        self._answer.append(part.text)
        self._round_text.append(part.text)
        if self._deltas:
            out.append(AnswerDelta(part.text))
        for text in self._sentences.push(part.text):
            self._made.append(text)
            out.append(SentenceReady(text))

    def _closed(self, texts: list[str]) -> list[_Item]:
        """Closed steps, with their summaries and closing time, waiting for their indexes."""
        if not texts:
            return []
        summary_mode = self._round_summarised and not self._round_raw
        closed = time.monotonic_ns()
        out: list[_Item] = []
        for text in texts:
            summary: str | None = None
            if summary_mode:
                summary = text
            elif self._summaries:
                summary = " ".join(" ".join(self._summaries).split())
                self._summaries.clear()
            out.append(_Closed(text, closed, summary))
        return out

    async def _seeded(self, items: list[_Item]) -> None:
        """Before the first closed step leaves, wait (at most 1 s) for the stored index
        that seeds the chain of this turn's user message."""
        if self._seed is None or not any(isinstance(item, _Closed) for item in items):
            return
        seed, self._seed = self._seed, None
        try:
            async with asyncio.timeout(_SEED_TIMEOUT_S):
                last = await seed
        except Exception:
            logger.warning("stored step index unavailable", extra={"previous_id": self.user_id})
            last = 0
        self._steps.seed(self.user_id, max(last, self._steps.last_index(self.user_id)))

    def _event(self, item: _Item) -> TurnEvent:
        """``item`` as it leaves: a closed step takes the next index of its chain only
        now, so a step dropped by a stop leaves no gap."""
        if isinstance(item, _Closed):
            index = self._steps.next_index(self.user_id)
            return StepReady(item.text, index, item.closed, item.summary)
        return item

    async def _run_tool(self, call: ToolCall) -> AsyncIterator[TurnEvent]:
        assert self._tools is not None
        request_id = new_id(id_prefix.TOOL_USE)
        try:
            arguments = parse_arguments(call.arguments)
            bad: ToolError | None = None
        except ToolError as exc:
            arguments, bad = {}, exc
        yield ToolRequested(
            request_id=request_id,
            name=call.name or "unnamed",
            parameters=arguments if bad is None else {"raw": call.arguments},
            timeout_ms=self._tools.timeout_ms(call.name),
        )
        if bad is not None:
            outcome = Outcome(False, error_code=bad.code, error_message=str(bad))
        else:
            outcome = await self._tools.call(call.name, arguments)
        yield ToolFinished(request_id, outcome)


def _discard(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` if it still runs, else retrieve its outcome (no "never retrieved")."""
    if task.done():
        if not task.cancelled():
            task.exception()
    else:
        task.cancel()
