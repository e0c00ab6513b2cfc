"""A text room's turn in real Jaeger and Prometheus (issue 35).

The worker runs as a newcomer would with observability on: ``OTEL_EXPORTER_OTLP_ENDPOINT``
at Jaeger v2 (OTLP/HTTP), ``OTEL_SERVICE_NAME``, ``ALICIA_METRICS_PORT`` for its
Prometheus ``/metrics``, and the default process job executor (the turn runs in a job
process; its numbers reach the worker's one ``/metrics``). A client asks one question
answered by the recorded DeepSeek stream, whose reasoning holds the canary
``classic trap``. Jaeger's query API returns the turn's span: its GenAI attributes, the
usage the stream reported, one event per step in order, and no canary anywhere. A PromQL
query against Prometheus scraping the worker returns the turn count and a thinking-time
quantile.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from alicia.harness import LiveKitServer, free_port
from alicia.harness.observability import Jaeger, Prometheus
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import ErrorMessage, ReasoningStep, new_id
from tests.e2e.conftest import WORKER_ENV
from tests.e2e.observability.conftest import eventually, tags, traced
from tests.e2e.worker import PROCESS_EXECUTOR, WorkerProcess, running_worker
from tests.e2e.worker_client import client, final, of, user_message, worker_log_on_failure
from tests.support.otlp_receiver import MetricsReceiver, metrics_receiver

pytestmark = [pytest.mark.integration]

STREAM = "deepseek_reasoning_content"
CANARY = "classic trap"
USAGE = {"input": 19, "output": 172, "reasoning": 130}
SERVICE = f"alicia-text-{new_id('t')}"
METRICS_PORT = free_port()


@pytest_asyncio.fixture
async def receiver() -> AsyncIterator[MetricsReceiver]:
    """An OTLP/HTTP metrics receiver (a test's own, on loopback)."""
    async with metrics_receiver() as received:
        yield received


@pytest_asyncio.fixture
async def observed_worker(
    livekit_server: LiveKitServer, llm: RecordedLLM, jaeger: Jaeger, receiver: MetricsReceiver
) -> AsyncIterator[WorkerProcess]:
    """The worker with traces to Jaeger, its /metrics on :data:`METRICS_PORT` and its
    metrics over OTLP to ``receiver`` too (the SDK's own variables); the only worker on the
    server while the test runs (a room goes to any registered worker)."""
    otlp_metrics = {
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": receiver.url,
        "OTEL_METRIC_EXPORT_INTERVAL": "1000",
    }
    extra = {"ALICIA_METRICS_PORT": str(METRICS_PORT), **otlp_metrics}
    env = {**WORKER_ENV, **PROCESS_EXECUTOR, **traced(jaeger, SERVICE, **extra)}
    async with running_worker(livekit_server, llm.base_url, env=env) as proc:
        yield proc


def the_turn(jaeger: Jaeger) -> dict[str, Any] | None:
    """The trace holding the turn's span, once Jaeger has it ended (with its status)."""
    for trace in jaeger.traces(SERVICE):
        for span in trace["spans"]:
            if span["operationName"].startswith("chat ") and "alicia.turn.status" in tags(span):
                return trace
    return None


async def test_a_text_turn_is_a_trace_in_jaeger_and_numbers_in_prometheus_and_over_otlp(
    livekit_server: LiveKitServer,
    observed_worker: WorkerProcess,
    llm: RecordedLLM,
    jaeger: Jaeger,
    receiver: MetricsReceiver,
) -> None:
    spec = llm.spec(STREAM)
    assert CANARY in spec.reasoning
    room = new_id("conv")
    with worker_log_on_failure(observed_worker):
        async with client(livekit_server, room, "alice") as alice:
            await alice.handshake()
            llm.script(STREAM)
            await alice.send(user_message(room, spec.user))
            box = await alice.wait_until(final)
            await alice.send_raw(b"\xc1 not MessagePack")  # refused: an ErrorMessage back
            box = await alice.wait_until(lambda b: bool(of(b, ErrorMessage)))
        steps = of(box, ReasoningStep)
        assert [s.content for s in steps] == list(spec.steps)
        [refusal] = of(box, ErrorMessage)
        trace = await eventually("the turn's trace in Jaeger", lambda: the_turn(jaeger))

    [span] = [s for s in trace["spans"] if s["operationName"].startswith("chat ")]
    attrs = tags(span)
    assert span["operationName"] == "chat recorded-model"
    assert span["references"] == []  # a text room's turn is a trace of its own
    assert attrs["span.kind"] == "client"
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.request.model"] == "recorded-model"
    assert attrs["gen_ai.conversation.id"] == room
    assert attrs["gen_ai.usage.input_tokens"] == USAGE["input"]
    assert attrs["gen_ai.usage.output_tokens"] == USAGE["output"]
    assert attrs["gen_ai.usage.reasoning.output_tokens"] == USAGE["reasoning"]
    assert attrs["alicia.turn.status"] == "complete"
    assert attrs["alicia.reasoning.time_to_first_step"] > 0
    assert attrs["alicia.reasoning.thinking_time"] > 0
    assert attrs["alicia.reasoning.steps"] == len(steps)
    events = [tags(log) for log in span["logs"]]
    step_events = [e for e in events if e.get("event") == "alicia.reasoning.step"]
    assert [e["alicia.step.index"] for e in step_events] == [s.step_index for s in steps]
    assert [e["alicia.step.length"] for e in step_events] == [len(s.content) for s in steps]
    assert all(e["alicia.step.recipients.full"] == 1 for e in step_events)
    # The default policy: no reasoning, answer or user text anywhere in the trace.
    whole = json.dumps(trace)
    assert whole.count(CANARY) == 0
    for text in (*spec.steps, spec.answer, spec.user):
        assert text[:30] not in whole

    # Prometheus scraping the worker's /metrics: the job process's numbers are there.
    with Prometheus([f"127.0.0.1:{METRICS_PORT}"]) as prometheus:
        assert isinstance(prometheus, Prometheus)
        turns_query = 'sum(alicia_turns_total{alicia_turn_status="complete"})'

        def turns() -> list[dict[str, Any]] | None:
            return prometheus.query(turns_query) or None

        [turn_count] = await eventually("the turn count in Prometheus", turns)
        assert float(turn_count["value"][1]) == 1
        quantile = (
            "histogram_quantile(0.5, sum by (le) (alicia_reasoning_thinking_time_seconds_bucket))"
        )
        [thinking] = prometheus.query(quantile)
        assert 0 < float(thinking["value"][1]) < 81.92
        reasoning = prometheus.query(
            'sum(gen_ai_client_token_usage_sum{gen_ai_token_type="reasoning"})'
        )
        assert float(reasoning[0]["value"][1]) == USAGE["reasoning"]
        refused = prometheus.query("sum by (alicia_refusal_reason) (alicia_packets_refused_total)")
        assert {r["metric"]["alicia_refusal_reason"]: float(r["value"][1]) for r in refused} == {
            str(refusal.code): 1.0
        }
    print(f"PromQL {turns_query} -> {turn_count['value'][1]}; {quantile} -> {thinking['value'][1]}")

    # The same instruments over OTLP (OTEL_METRICS_EXPORTER=otlp), from the job's process.
    def reasoning_over_otlp() -> list[tuple[dict[str, str], float]] | None:
        found = [
            (resource, point.sum)
            for resource, attrs, point in receiver.points("gen_ai.client.token.usage")
            if attrs.get("gen_ai.token.type") == "reasoning"
        ]
        return found or None

    exported = await eventually("reasoning tokens over OTLP", reasoning_over_otlp)
    resource, tokens = exported[-1]
    assert tokens == USAGE["reasoning"]
    assert resource["service.name"] == SERVICE and resource["service.instance.id"]
    names = {m.name for e in receiver.exports for r in e.resource_metrics for s in r.scope_metrics
             for m in s.metrics}  # fmt: skip
    assert {"alicia.turns", "alicia.reasoning.thinking_time"} <= names, names


async def test_with_trace_content_full_the_reasoning_is_only_in_the_reasoning_part(
    livekit_server: LiveKitServer, llm: RecordedLLM, jaeger: Jaeger
) -> None:
    service = f"alicia-full-{new_id('t')}"
    env = {**WORKER_ENV, **traced(jaeger, service, ALICIA_TRACE_CONTENT="full")}
    spec = llm.spec(STREAM)
    room = new_id("conv")
    async with running_worker(livekit_server, llm.base_url, env=env) as worker:
        with worker_log_on_failure(worker):
            async with client(livekit_server, room, "alice") as alice:
                await alice.handshake()
                llm.script(STREAM)
                await alice.send(user_message(room, spec.user))
                await alice.wait_until(final)

            def turn_span() -> dict[str, Any] | None:
                for trace in jaeger.traces(service):
                    for span in trace["spans"]:
                        if "alicia.turn.status" in tags(span):
                            return {"trace": trace, "span": span}
                return None

            found = await eventually("the turn's trace in Jaeger", turn_span)
    attrs = tags(found["span"])
    assert "gen_ai.output.messages" in attrs, sorted(attrs)
    [message] = json.loads(attrs["gen_ai.output.messages"])
    assert message["role"] == "assistant"
    assert message["parts"] == [{"type": "reasoning", "content": "\n\n".join(spec.steps)}]
    whole = json.dumps(found["trace"])
    assert whole.count(CANARY) == json.dumps(attrs["gen_ai.output.messages"]).count(CANARY) > 0
    print(f"full policy: the canary {whole.count(CANARY)} times in the trace, all in the part")
