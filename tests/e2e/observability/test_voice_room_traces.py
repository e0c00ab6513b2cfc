"""A voice room's turn in real Jaeger: our span inside livekit-agents' trace (issue 35).

The worker runs with ``ALICIA_VOICE=offline`` (an AgentSession with AliciaLLM and the
reasoning bridge) and ``OTEL_EXPORTER_OTLP_ENDPOINT`` at Jaeger v2. A protocol client
types its question into the voice room (the session's ``generate_reply``, no speech
needed to reach the LLM); the recorded DeepSeek stream's reasoning holds the canary
``classic trap``. The trace Jaeger returns is one trace: livekit-agents' spans
(``llm_request`` among them) with the turn's ``chat`` span under the LLM request, the
reasoning tokens the stream reported, one event per step, and no canary in any span,
livekit-agents' own included (its PII switch is off by default).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from alicia.harness import LiveKitServer
from alicia.harness.observability import Jaeger
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import AssistantSentence, ReasoningStep, UserMessage, new_id
from alicia.protocol import ids as id_prefix
from tests.e2e.observability.conftest import eventually, tags, traced
from tests.e2e.worker import WorkerProcess, running_worker
from tests.support.livekit_rooms import ProtocolClient, joined

pytestmark = [pytest.mark.integration]

STREAM = "deepseek_reasoning_content"
CANARY = "classic trap"
REASONING_TOKENS = 130
SERVICE = f"alicia-voice-{new_id('t')}"


@pytest_asyncio.fixture
async def voice_worker(
    livekit_server: LiveKitServer, llm: RecordedLLM, jaeger: Jaeger
) -> AsyncIterator[WorkerProcess]:
    env = traced(jaeger, SERVICE, ALICIA_VOICE="offline")
    async with running_worker(livekit_server, llm.base_url, env=env) as w:
        yield w


def ours(trace: dict[str, Any]) -> dict[str, Any] | None:
    """The turn's ended ``chat`` span in ``trace``, if there."""
    for span in trace["spans"]:
        if span["operationName"] == "chat recorded-model" and "alicia.turn.status" in tags(span):
            return span
    return None


def chain(trace: dict[str, Any], span: dict[str, Any]) -> list[str] | None:
    """The names of ``span``'s ancestors up to livekit-agents' ``llm_request``, nearest
    first; None while one of them is not in ``trace`` yet (spans arrive as they end)."""
    spans = {s["spanID"]: s for s in trace["spans"]}
    names: list[str] = []
    while span["references"]:
        [ref] = span["references"]
        assert ref["refType"] == "CHILD_OF" and ref["traceID"] == span["traceID"]
        if ref["spanID"] not in spans:
            return None
        span = spans[ref["spanID"]]
        names.append(span["operationName"])
        if span["operationName"] == "llm_request":
            return names
    return names


def the_turn(jaeger: Jaeger) -> dict[str, Any] | None:
    """The trace with the turn's span and its ancestors up to ``llm_request``, ended."""
    for trace in jaeger.traces(SERVICE):
        span = ours(trace)
        if span is not None and chain(trace, span) is not None:
            return trace
    return None


async def test_a_voice_turn_is_one_trace_with_our_span_under_the_llm_request(
    livekit_server: LiveKitServer, llm: RecordedLLM, voice_worker: WorkerProcess, jaeger: Jaeger
) -> None:
    spec = llm.spec(STREAM)
    assert CANARY in spec.reasoning
    llm.route_model("recorded-model", STREAM)
    room = f"voice-{new_id('r')}"
    async with joined(livekit_server, room, "alice") as r:
        client = ProtocolClient(r, room)
        await client.wait_for_agent()
        await client.handshake()
        user_id = new_id(id_prefix.MESSAGE)
        await client.send(UserMessage(id=user_id, content=spec.user, conversation_id=room))
        await client.wait_for(AssistantSentence, within=60.0, is_final=True)
    steps = [s for s in client.of(ReasoningStep) if s.previous_id == user_id]
    assert [s.content for s in steps] == list(spec.steps), voice_worker.log()
    trace = await eventually("the voice turn's trace in Jaeger", lambda: the_turn(jaeger))

    spans = {s["spanID"]: s for s in trace["spans"]}
    assert len({s["traceID"] for s in spans.values()}) == 1
    span = ours(trace)
    assert span is not None
    ancestors = chain(trace, span)
    assert "llm_request" in ancestors, ancestors
    attrs = tags(span)
    assert attrs["gen_ai.usage.reasoning.output_tokens"] == REASONING_TOKENS
    assert attrs["gen_ai.conversation.id"] == room
    assert attrs["alicia.turn.status"] == "complete"
    assert attrs["alicia.reasoning.time_to_first_step"] > 0
    events = [tags(log) for log in span["logs"]]
    indices = [e["alicia.step.index"] for e in events if e.get("event") == "alicia.reasoning.step"]
    assert indices == [s.step_index for s in steps]
    [request] = [s for s in spans.values() if s["operationName"] == "llm_request"]
    assert tags(request).get("gen_ai.usage.reasoning.output_tokens") in (None, REASONING_TOKENS)
    # No reasoning, answer or user text in any span: ours and livekit-agents'.
    whole = json.dumps(trace)
    assert whole.count(CANARY) == 0, [
        (s["operationName"], k)
        for s in spans.values()
        for k, v in tags(s).items()
        if CANARY in str(v)
    ]
    for text in (*spec.steps, spec.user):
        assert text[:30] not in whole
    for each in sorted(spans.values(), key=lambda x: x["startTime"]):  # the trace, shortened
        refs = each["references"]
        parent = (
            spans[refs[0]["spanID"]]["operationName"]
            if refs and refs[0]["spanID"] in spans
            else "-"
        )
        shown = {k: str(v)[:40] for k, v in sorted(tags(each).items())}
        logs = [tags(log) for log in each["logs"]]
        print(f"span {each['operationName']} (parent {parent}) {shown} logs={logs}")
