"""The engine's telemetry port (:mod:`alicia.agent.engine.telemetry`) on OpenTelemetry.

Each turn is one span, named as the GenAI semantic conventions name an inference
(``chat {model}``, kind CLIENT), under whatever span is current when the turn opens:

* attributes: ``gen_ai.operation.name``, ``gen_ai.request.model``,
  ``gen_ai.provider.name``, ``gen_ai.conversation.id``, the usage
  (``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens``,
  ``gen_ai.usage.reasoning.output_tokens``), and ours: ``alicia.answer.id``,
  ``alicia.turn.status``, ``alicia.reasoning.time_to_first_reasoning``,
  ``alicia.reasoning.time_to_first_step``, ``alicia.reasoning.thinking_time`` (seconds),
  ``alicia.reasoning.steps`` and ``alicia.reasoning.steps.<level>``,
  ``alicia.tool.calls``;
* OpenInference's names too, which Arize Phoenix reads (it does not convert the GenAI
  reasoning-token count): ``openinference.span.kind`` ``LLM``, ``llm.model_name``,
  ``llm.provider``, ``session.id`` (the conversation), ``llm.token_count.prompt``,
  ``llm.token_count.completion``, ``llm.token_count.total`` and
  ``llm.token_count.completion_details.reasoning``;
* one event per step, ``alicia.reasoning.step``, with ``alicia.step.index``,
  ``alicia.step.length`` and ``alicia.step.recipients.<level>``; one per tool call,
  ``alicia.tool.call`` (its name).

By default no reasoning text, summary, remark or user text goes into a span: the port
carries none. With ``content`` ``summary`` or ``full`` (``ALICIA_TRACE_CONTENT``), the
span's ``gen_ai.output.messages`` holds one assistant message whose only part is a
``ReasoningPart`` (``{"type": "reasoning", "content": ...}``): each step's summary or
its text, in order, with the ``finish_reason`` the schema requires (``stop``, or ``error``
for a failed turn).

The metrics (same names where a span attribute has one): ``alicia.turns`` (by status and
model), ``gen_ai.client.token.usage`` (by ``gen_ai.token.type``: ``input``, ``output``,
``reasoning``), ``alicia.reasoning.thinking_time``, ``alicia.reasoning.time_to_first_step``
(histograms, seconds), ``alicia.reasoning.steps`` (by level), ``alicia.packets.refused`` (by
``alicia.refusal.reason``) and ``alicia.remarks`` (by ``alicia.remark.level``).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping

from opentelemetry import context, metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode

from alicia.agent.engine.events import TurnStatus, Usage
from alicia.agent.engine.telemetry import TraceContent, TurnTrace

__all__ = ["OtelTelemetry", "OtelTurn"]

SCOPE = "alicia.reasoning"
_FINISH_REASONS: dict[TurnStatus, str] = {"complete": "stop", "stopped": "stop", "failed": "error"}
"""The GenAI ``finish_reason`` of the output message, per turn status."""
"""The instrumentation scope of our spans and metrics."""
SECONDS_BUCKETS = [
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
]
"""Histogram buckets of times: the GenAI conventions' advice for operation durations."""
TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304]
"""Histogram buckets of token counts: the GenAI conventions' advice."""


class OtelTelemetry:
    """Turns as spans and metrics through OpenTelemetry (see the module docstring)."""

    def __init__(
        self,
        *,
        provider_name: str,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        content: TraceContent = "none",
    ) -> None:
        """``provider_name``: ``gen_ai.provider.name`` (the model's provider); the
        providers: the global ones when not given; ``content``: the reasoning a span
        carries (see the module docstring)."""
        self.provider_name = provider_name
        self._content: TraceContent = content
        self.tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self.turns = meter.create_counter("alicia.turns", unit="{turn}", description="Turns")
        self.steps = meter.create_counter(
            "alicia.reasoning.steps", unit="{step}", description="Reasoning steps sent"
        )
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens per turn",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.thinking = meter.create_histogram(
            "alicia.reasoning.thinking_time",
            unit="s",
            description="From the first reasoning text to the answer's start",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self.first_step = meter.create_histogram(
            "alicia.reasoning.time_to_first_step",
            unit="s",
            description="From the turn's start to its first reasoning step sent",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self.refusals = meter.create_counter(
            "alicia.packets.refused", unit="{packet}", description="Input refused or dropped"
        )
        self.remarks = meter.create_counter(
            "alicia.remarks", unit="{remark}", description="Spoken progress remarks"
        )

    @property
    def content(self) -> TraceContent:
        """The reasoning a span may carry."""
        return self._content

    def refused(self, reason: str) -> None:
        """Count it by ``alicia.refusal.reason``."""
        self.refusals.add(1, {"alicia.refusal.reason": reason})

    def remark_spoken(self, level: str) -> None:
        """Count it by ``alicia.remark.level``."""
        self.remarks.add(1, {"alicia.remark.level": level})

    def turn_opened(self, conversation_id: str, answer_id: str, model: str) -> TurnTrace:
        """A span for the turn, under the current span."""
        return OtelTurn(self, conversation_id, answer_id, model)


class OtelTurn:
    """One turn's span and figures."""

    def __init__(
        self, owner: OtelTelemetry, conversation_id: str, answer_id: str, model: str
    ) -> None:
        """Note the turn; its span starts at the turn's first event (under
        :meth:`within`'s context if given by then, else the one current now), dated now."""
        self.owner = owner
        self.model = model
        self.opened = time.monotonic()
        self.opened_ns = time.time_ns()
        self.parent: Context = context.get_current()
        self.attributes: dict[str, str] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "gen_ai.provider.name": owner.provider_name,
            "gen_ai.conversation.id": conversation_id,
            "alicia.answer.id": answer_id,
            "openinference.span.kind": "LLM",
            "llm.model_name": model,
            "llm.provider": owner.provider_name,
            "session.id": conversation_id,
        }
        self._span: trace.Span | None = None
        self.first_step: float | None = None
        self.answer_at: float | None = None
        self.per_level: Counter[str] = Counter()
        self.steps = 0
        self.tools = 0
        self.reasoning: list[str] = []

    @property
    def span(self) -> trace.Span:
        """The turn's span, started on first use."""
        if self._span is None:
            self._span = self.owner.tracer.start_span(
                f"chat {self.model}",
                context=self.parent,
                kind=SpanKind.CLIENT,
                attributes=self.attributes,
                start_time=self.opened_ns,
            )
        return self._span

    def within(self, parent: object) -> None:
        """Nest the span under ``parent`` (an OpenTelemetry ``Context``), unless started."""
        if self._span is None and isinstance(parent, Context):
            self.parent = parent

    def step_sent(
        self, index: int, length: int, recipients: Mapping[str, int], text: str | None
    ) -> None:
        """An event for the step (no text); the first one's time; ``text`` kept for the
        reasoning part."""
        if text is not None:
            self.reasoning.append(text)
        now = time.monotonic()
        if self.first_step is None:
            self.first_step = now - self.opened
            self.owner.first_step.record(self.first_step, {"gen_ai.request.model": self.model})
        self.steps += 1
        attributes: dict[str, int] = {"alicia.step.index": index, "alicia.step.length": length}
        for level, count in recipients.items():
            attributes[f"alicia.step.recipients.{level}"] = count
            if count:
                self.per_level[level] += 1  # counted once, at the turn's end
        self.span.add_event("alicia.reasoning.step", attributes)

    def tool_called(self, name: str) -> None:
        """An event naming the tool."""
        self.tools += 1
        self.span.add_event("alicia.tool.call", {"gen_ai.tool.name": name})

    def answer_started(self) -> None:
        """Note when the answer began (for the thinking time)."""
        if self.answer_at is None:
            self.answer_at = time.monotonic() - self.opened

    def ended(
        self, status: TurnStatus, usage: Usage | None, first_reasoning_ms: float | None
    ) -> None:
        """Set the figures, record the metrics and end the span."""
        span, owner = self.span, self.owner
        model = {"gen_ai.request.model": self.model}
        figures: dict[str, str | int | float] = {
            "alicia.turn.status": status,
            "alicia.reasoning.steps": self.steps,
            "alicia.tool.calls": self.tools,
        }
        for level, count in self.per_level.items():
            figures[f"alicia.reasoning.steps.{level}"] = count
            owner.steps.add(count, {"alicia.reasoning.level": level})
        if self.first_step is not None:
            figures["alicia.reasoning.time_to_first_step"] = self.first_step
        if first_reasoning_ms is not None:
            first = first_reasoning_ms / 1000
            figures["alicia.reasoning.time_to_first_reasoning"] = first
            if self.answer_at is not None and self.answer_at >= first:
                thinking = self.answer_at - first
                figures["alicia.reasoning.thinking_time"] = thinking
                owner.thinking.record(thinking, model)
        if usage is not None:
            figures["gen_ai.usage.input_tokens"] = usage.prompt_tokens
            figures["gen_ai.usage.output_tokens"] = usage.completion_tokens
            figures["gen_ai.usage.reasoning.output_tokens"] = usage.reasoning_tokens
            figures["llm.token_count.prompt"] = usage.prompt_tokens
            figures["llm.token_count.completion"] = usage.completion_tokens
            figures["llm.token_count.total"] = usage.prompt_tokens + usage.completion_tokens
            figures["llm.token_count.completion_details.reasoning"] = usage.reasoning_tokens
            for kind, count in (
                ("input", usage.prompt_tokens),
                ("output", usage.completion_tokens),
                ("reasoning", usage.reasoning_tokens),
            ):
                owner.tokens.record(count, {**model, "gen_ai.token.type": kind})
        if self.reasoning:
            part = {"type": "reasoning", "content": "\n\n".join(self.reasoning)}
            # finish_reason is required by the GenAI schema: without it readers (Arize
            # Phoenix) drop the message.
            reason = _FINISH_REASONS[status]
            message = {"role": "assistant", "parts": [part], "finish_reason": reason}
            figures["gen_ai.output.messages"] = json.dumps([message])
        span.set_attributes(figures)
        owner.turns.add(1, {**model, "alicia.turn.status": status})
        if status == "failed":
            span.set_status(Status(StatusCode.ERROR, "the turn failed"))
        span.end()
