"""An AG-UI run's turn in real Jaeger (issue 35).

``python -m alicia.agent.agui`` runs with ``OTEL_EXPORTER_OTLP_ENDPOINT`` at Jaeger v2; a
web app's caller granted ``full`` posts one run answered by the recorded DeepSeek stream
(canary ``classic trap`` in its reasoning). The caller gets the reasoning (it is
entitled to it); the trace Jaeger returns has the turn's span with the GenAI attributes,
the stream's usage, one event per step, and no canary.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from alicia.harness import LiveKitServer, free_port
from alicia.harness.observability import Jaeger
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import new_id
from tests.e2e.observability.conftest import eventually, tags, traced
from tests.support.agui_endpoint import AguiProcess, agui_token, post_run, run_input, running_agui

pytestmark = [pytest.mark.integration]

STREAM = "deepseek_reasoning_content"
CANARY = "classic trap"
USAGE = {"input": 19, "output": 172, "reasoning": 130}
SERVICE = f"alicia-agui-{new_id('t')}"
METRICS_PORT = free_port()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def agui(
    livekit_server: LiveKitServer, llm: RecordedLLM, jaeger: Jaeger
) -> AsyncIterator[AguiProcess]:
    env = traced(jaeger, SERVICE, ALICIA_METRICS_PORT=str(METRICS_PORT))
    async with running_agui(livekit_server, llm.base_url, env=env) as process:
        yield process


def the_turn(jaeger: Jaeger, thread: str) -> dict[str, Any] | None:
    """The run's ended turn span, once Jaeger has it."""
    for trace in jaeger.traces(SERVICE):
        for span in trace["spans"]:
            attrs = tags(span)
            if attrs.get("gen_ai.conversation.id") == thread and "alicia.turn.status" in attrs:
                return {"trace": trace, "span": span}
    return None


async def test_an_agui_run_is_a_trace_in_jaeger_without_its_reasoning(
    agui: AguiProcess, livekit_server: LiveKitServer, llm: RecordedLLM, jaeger: Jaeger
) -> None:
    spec = llm.spec(STREAM)
    thread = new_id("conv")
    llm.script(STREAM)
    token = agui_token(livekit_server, thread, "web-full", "full")
    message = {"id": new_id("msg"), "role": "user", "content": spec.user}
    status, events, text = await post_run(agui.url, token, run_input(thread, [message]))
    assert status == 200, f"{text}\n{agui.log()}"
    deltas = [e["delta"] for e in events if e["type"] == "REASONING_MESSAGE_CONTENT"]
    assert CANARY in "".join(deltas)  # the entitled caller reads it
    found = await eventually("the run's trace in Jaeger", lambda: the_turn(jaeger, thread))

    span, trace = found["span"], found["trace"]
    attrs = tags(span)
    assert span["operationName"] == "chat recorded-model"
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.usage.input_tokens"] == USAGE["input"]
    assert attrs["gen_ai.usage.output_tokens"] == USAGE["output"]
    assert attrs["gen_ai.usage.reasoning.output_tokens"] == USAGE["reasoning"]
    assert attrs["alicia.turn.status"] == "complete"
    assert attrs["alicia.reasoning.time_to_first_step"] > 0
    events_ = [tags(log) for log in span["logs"]]
    indices = [e["alicia.step.index"] for e in events_ if e.get("event") == "alicia.reasoning.step"]
    assert indices == list(range(1, len(spec.steps) + 1))
    whole = json.dumps(trace)
    assert whole.count(CANARY) == 0
    for step in spec.steps:
        assert step[:30] not in whole

    def reasoning_tokens() -> float | None:
        page = urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5)
        for family in text_string_to_metric_families(page.read().decode()):
            for sample in family.samples:
                if (
                    sample.name == "gen_ai_client_token_usage_sum"
                    and sample.labels.get("gen_ai_token_type") == "reasoning"
                ):
                    return sample.value
        return None

    counted = await eventually("reasoning tokens on /metrics", reasoning_tokens)
    assert counted == USAGE["reasoning"]  # asked for: the server sends usage only then


async def test_the_endpoint_counts_runs_and_refusals_by_status_on_its_metrics_page(
    agui: AguiProcess, livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    def counts() -> dict[str, float]:
        page = urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5)
        found: dict[str, float] = {}
        for family in text_string_to_metric_families(page.read().decode()):
            if family.name == "alicia_agui_requests":
                for sample in family.samples:
                    code = sample.labels["http_response_status_code"]
                    found[code] = found.get(code, 0.0) + sample.value
        return found

    before = await asyncio.to_thread(counts)
    thread = new_id("conv")
    message = {"id": new_id("msg"), "role": "user", "content": "hi"}
    status, _, _ = await post_run(agui.url, None, run_input(thread, [message]))
    assert status == 401
    llm.script("plain_no_reasoning")
    token = agui_token(livekit_server, thread, "web-none", "none")
    status, _, text = await post_run(agui.url, token, run_input(thread, [message]))
    assert status == 200, text

    def counted() -> dict[str, float] | None:
        now = counts()
        grown = {k: now.get(k, 0.0) - before.get(k, 0.0) for k in now}
        return grown if grown.get("401") == 1 and grown.get("200", 0) >= 1 else None

    grown = await eventually("the requests counted on /metrics", counted, within=15.0)
    assert {k for k, v in grown.items() if v} <= {"200", "401"}, grown
