"""A turn that someone else runs, assembled into turn events piece by piece.

When a turn source does not run :class:`~alicia.agent.engine.turn.Turn` itself (an
AgentSession runs its own LLM rounds and tools), it hands the pieces it observes to a
:class:`TurnAssembler`: reasoning text, answer text, tool calls and their outcomes,
usage, then the end. The assembler makes the same :mod:`~alicia.agent.engine.events` a
:class:`Turn` yields, in the same order and under the same rules: reasoning is cut into
steps by :class:`~alicia.agent.llm.segmenter.StepSegmenter` (a step closes before the answer
or a tool call starts), ``stepIndex`` comes from the conversation's
:class:`~alicia.protocol.StepTracker`, the answer goes out sentence by sentence, and the end is
``AnswerStarted`` (if the answer never started), a final ``SentenceReady``, then
``TurnEnded``. It is synchronous and knows no transport.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from alicia.agent.llm.segmenter import StepSegmenter
from alicia.agent.llm.sentences import SentenceStream
from alicia.protocol import ProtocolError, StepTracker

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
from .tools import Outcome

__all__ = ["TurnAssembler"]


class TurnAssembler:
    """Pieces of one observed turn in, :mod:`~alicia.agent.engine.events` out."""

    def __init__(
        self,
        user_id: str,
        steps: StepTracker,
        *,
        step_max_delay_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Steps are numbered in ``steps``' chain of ``user_id``."""
        self.user_id = user_id
        self._steps = steps
        self._clock = clock
        self._segmenter = StepSegmenter(max_delay=step_max_delay_s, clock=clock)
        self._sentences = SentenceStream()
        self._answer: list[str] = []
        self._answer_open = False
        self._step_count = 0
        self._usage: Usage | None = None
        self._started_at = clock()
        self._first_reasoning_ms: float | None = None
        self._raw = False
        """Raw reasoning was seen in this round (a summary then belongs to its step)."""
        self._summaries: list[str] = []
        self.ended = False

    @property
    def answer(self) -> str:
        """The answer text so far."""
        return "".join(self._answer).strip()

    def round_started(self) -> None:
        """A new LLM round begins (summaries are matched to raw reasoning per round)."""
        self._raw = False

    def reasoning(self, text: str, *, summary: bool = False) -> list[TurnEvent]:
        """Reasoning text (``summary``: the provider's own summary) as it streams."""
        if not text:
            return []
        if self._first_reasoning_ms is None:
            self._first_reasoning_ms = (self._clock() - self._started_at) * 1000.0
        if summary and self._raw:  # the provider's summary of the raw reasoning
            self._summaries.append(text)
            return []
        if not summary:
            self._raw = True
        steps = self._steps_out(self._segmenter.push(text), summary_mode=summary)
        return [ReasoningDelta(text), *steps]

    def answer_text(self, text: str) -> list[TurnEvent]:
        """Answer text as it streams: the open step closes, the answer opens."""
        if not text:
            return []
        out = self._open_answer()
        self._answer.append(text)
        out.append(AnswerDelta(text))
        out.extend(SentenceReady(s) for s in self._sentences.push(text))
        return out

    def tool_requested(
        self, request_id: str, name: str, parameters: dict[str, Any], timeout_ms: int
    ) -> list[TurnEvent]:
        """The model asked for a tool (the open step closes first)."""
        out = self._steps_out(self._segmenter.close())
        out.append(ToolRequested(request_id, name or "unnamed", parameters, timeout_ms))
        return out

    def tool_finished(self, request_id: str, outcome: Outcome) -> list[TurnEvent]:
        """The tool of ``request_id`` returned or failed."""
        return [ToolFinished(request_id, outcome)]

    def add_usage(self, usage: Usage) -> None:
        """Provider-reported usage of one round (summed over the turn)."""
        self._usage = usage if self._usage is None else self._usage + usage

    def due(self) -> float | None:
        """When the open step must be cut by the time rule (``clock`` time), if ever."""
        return self._segmenter.due()

    def poll(self) -> list[TurnEvent]:
        """Cut the open step if it is due."""
        return self._steps_out(self._segmenter.poll())

    def end(
        self,
        status: TurnStatus,
        *,
        answer: str | None = None,
        error: ProtocolError | None = None,
    ) -> list[TurnEvent]:
        """The turn is over: the rest of its events, the last being ``TurnEnded``.

        ``answer``: the answer as it was really delivered (what was spoken before an
        interruption), if it differs from the text streamed.
        """
        if self.ended:
            return []
        self.ended = True
        out = self._steps_out(self._segmenter.close())
        out.extend(self._open_answer())
        rest = self._sentences.flush()
        out.extend(SentenceReady(text) for text in rest[:-1])
        out.append(SentenceReady(rest[-1] if rest else "", final=True))
        text = self.answer if answer is None else answer.strip()
        out.append(
            TurnEnded(
                status,
                text,
                self._step_count,
                self._usage,
                error,
                first_reasoning_ms=self._first_reasoning_ms,
            )
        )
        return out

    def _open_answer(self) -> list[TurnEvent]:
        if self._answer_open:
            return []
        out = self._steps_out(self._segmenter.close())
        self._answer_open = True
        out.append(AnswerStarted())
        return out

    def _steps_out(self, texts: list[str], *, summary_mode: bool = False) -> list[TurnEvent]:
        if not texts:
            return []
        closed = time.monotonic_ns()
        self._step_count += len(texts)
        out: list[TurnEvent] = []
        for text in texts:
            summary: str | None = None
            if summary_mode:
                summary = text
            elif self._summaries:
                summary = " ".join(" ".join(self._summaries).split())
                self._summaries.clear()
            out.append(StepReady(text, self._steps.next_index(self.user_id), closed, summary))
        return out
