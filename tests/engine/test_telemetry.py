"""A turn as OpenTelemetry sees it (issue 35, first part): one GenAI span per turn with
its figures, one event per step in order, no reasoning text anywhere; metrics recorded.

The engine runs a recorded turn (real HTTP, the real ``openai`` client) with
:class:`alicia.agent.telemetry.OtelTelemetry` on the OpenTelemetry SDK's own in-memory
exporter and reader.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from alicia.agent.engine.telemetry import NO_TELEMETRY, TraceContent
from alicia.agent.llm.summary import extractive_summary
from alicia.agent.telemetry import OtelTelemetry, telemetry_from_env, tracing_enabled
from alicia.agent.telemetry.setup import otlp_metrics_enabled
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import ReasoningStep
from tests.engine.room import CONV, MODEL, final_sentence, handshake, of, room, user_message

STREAM = "deepseek_reasoning_content"
USAGE = {"input": 19, "output": 172, "reasoning": 130}
"""The recorded stream's own ``usage`` (``prompt_tokens``, ``completion_tokens``,
``completion_tokens_details.reasoning_tokens``)."""


async def test_a_turn_is_one_span_with_its_figures_and_one_event_per_step_and_no_text(
    llm: RecordedLLM,
) -> None:
    spans = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    metering = MeterProvider(metric_readers=[reader])
    spec = llm.spec(STREAM)
    async with room(llm) as r:
        r.conversation.session.telemetry = OtelTelemetry(
            provider_name="deepseek", tracer_provider=tracing, meter_provider=metering
        )
        alice = r.client("alice")
        await handshake(alice)
        llm.script(STREAM)
        asked = user_message(spec.user)
        alice.send(asked)
        box = await alice.wait_for(final_sentence)
    sent = of(box, ReasoningStep)
    assert [s.content for s in sent] == list(spec.steps)
    [span] = spans.get_finished_spans()
    assert span.name == f"chat {MODEL}" and span.kind == SpanKind.CLIENT
    attrs = dict(span.attributes or {})
    assert {k: attrs[k] for k in ("gen_ai.operation.name", "gen_ai.request.model")} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": MODEL,
    }
    assert attrs["gen_ai.provider.name"] == "deepseek"
    assert attrs["gen_ai.conversation.id"] == CONV
    assert attrs["gen_ai.usage.input_tokens"] == USAGE["input"]
    assert attrs["gen_ai.usage.output_tokens"] == USAGE["output"]
    assert attrs["gen_ai.usage.reasoning.output_tokens"] == USAGE["reasoning"]
    # OpenInference's names (Arize Phoenix reads these, not GenAI's reasoning count).
    assert {k: v for k, v in attrs.items() if k.startswith(("llm.", "openinference."))} == {
        "openinference.span.kind": "LLM",
        "llm.model_name": MODEL,
        "llm.provider": "deepseek",
        "llm.token_count.prompt": USAGE["input"],
        "llm.token_count.completion": USAGE["output"],
        "llm.token_count.total": USAGE["input"] + USAGE["output"],
        "llm.token_count.completion_details.reasoning": USAGE["reasoning"],
    }
    assert attrs["session.id"] == CONV
    assert attrs["alicia.turn.status"] == "complete"
    assert attrs["alicia.reasoning.steps"] == len(sent) == attrs["alicia.reasoning.steps.full"]
    first_step = attrs["alicia.reasoning.time_to_first_step"]
    first_reasoning = attrs["alicia.reasoning.time_to_first_reasoning"]
    assert isinstance(first_step, float) and isinstance(first_reasoning, float)
    assert 0 <= first_reasoning <= first_step
    assert isinstance(attrs["alicia.reasoning.thinking_time"], float)
    events = [e for e in span.events if e.name == "alicia.reasoning.step"]
    assert [dict(e.attributes or {}) for e in events] == [
        {
            "alicia.step.index": s.step_index,
            "alicia.step.length": len(s.content),
            "alicia.step.recipients.full": 1,
        }
        for s in sent
    ]
    # No reasoning, answer or user text anywhere in the trace.
    whole = span.to_json()
    for text in [*spec.steps, spec.answer, spec.user]:
        for phrase in re.findall(r"\w+(?: \w+){3}", text)[:3]:
            assert phrase not in whole, phrase
    # The metrics.
    metrics = reader.get_metrics_data()
    assert metrics is not None
    data = json.loads(metrics.to_json())
    points = {
        m["name"]: m["data"]["data_points"]
        for rm in data["resource_metrics"]
        for sm in rm["scope_metrics"]
        for m in sm["metrics"]
    }
    [turns] = points["alicia.turns"]
    assert turns["value"] == 1 and turns["attributes"]["alicia.turn.status"] == "complete"
    tokens = {
        p["attributes"]["gen_ai.token.type"]: p["sum"] for p in points["gen_ai.client.token.usage"]
    }
    assert tokens == USAGE
    [steps] = points["alicia.reasoning.steps"]
    assert steps["value"] == len(sent) and steps["attributes"] == {"alicia.reasoning.level": "full"}
    assert [p["count"] for p in points["alicia.reasoning.thinking_time"]] == [1]
    assert [p["count"] for p in points["alicia.reasoning.time_to_first_step"]] == [1]


def test_tracing_is_on_only_when_the_otel_environment_asks_for_it() -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert not tracing_enabled({})
    assert tracing_enabled(endpoint)
    assert tracing_enabled({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318"})
    assert not tracing_enabled({**endpoint, "OTEL_SDK_DISABLED": "true"})
    assert not tracing_enabled({**endpoint, "OTEL_TRACES_EXPORTER": "none"})
    assert telemetry_from_env("deepseek", {}) is NO_TELEMETRY


def test_metrics_go_over_otlp_only_when_the_sdk_s_variable_lists_otlp() -> None:
    """``OTEL_METRICS_EXPORTER`` (the SDK's own) decides; an OTLP endpoint alone does not
    (a trace backend such as Jaeger takes no metrics)."""
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert not otlp_metrics_enabled(endpoint)
    assert otlp_metrics_enabled({"OTEL_METRICS_EXPORTER": "otlp"})
    assert otlp_metrics_enabled({"OTEL_METRICS_EXPORTER": "console, OTLP"})
    assert not otlp_metrics_enabled({"OTEL_METRICS_EXPORTER": "none"})
    assert not otlp_metrics_enabled({"OTEL_METRICS_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"})


async def traced_turn(llm: RecordedLLM, content: TraceContent) -> tuple[dict[str, Any], Any]:
    """One recorded turn traced with the content policy ``content``: the span's
    attributes and the stream's spec."""
    spans = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(spans))
    spec = llm.spec(STREAM)
    async with room(llm) as r:
        r.conversation.session.telemetry = OtelTelemetry(
            provider_name="deepseek", tracer_provider=tracing, content=content
        )
        alice = r.client("alice")
        await handshake(alice)
        llm.script(STREAM)
        alice.send(user_message(spec.user))
        await alice.wait_for(final_sentence)
    [span] = spans.get_finished_spans()
    return dict(span.attributes or {}), spec


@pytest.mark.parametrize("content", ["full", "summary"])
async def test_an_explicit_content_policy_puts_reasoning_only_in_a_reasoning_part(
    llm: RecordedLLM, content: TraceContent
) -> None:
    attrs, spec = await traced_turn(llm, content)
    [message] = json.loads(str(attrs["gen_ai.output.messages"]))
    assert message["role"] == "assistant"
    assert message["finish_reason"] == "stop"  # required by the GenAI schema (else dropped)
    [part] = message["parts"]
    assert part["type"] == "reasoning"
    if content == "full":
        expected = list(spec.steps)
    else:
        expected = [extractive_summary(s) for s in spec.steps]
        assert part["content"] != "\n\n".join(spec.steps)
    assert part["content"] == "\n\n".join(expected)
    # Nowhere else: the other attributes carry no reasoning.
    rest = json.dumps({k: v for k, v in attrs.items() if k != "gen_ai.output.messages"})
    for step in spec.steps:
        assert step[:40] not in rest


async def test_by_default_the_span_has_no_output_messages(llm: RecordedLLM) -> None:
    attrs, _ = await traced_turn(llm, "none")
    assert "gen_ai.output.messages" not in attrs
