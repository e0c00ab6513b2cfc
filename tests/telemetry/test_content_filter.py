"""Content by policy for every instrumentation: what other scopes' spans carry of the
conversation is stripped, and no span (ours included) keeps an exception's message or an
error status's description; the exception's type and frames stay."""

from __future__ import annotations

import json

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from alicia.agent.telemetry.content import ForeignContentFilter, frames_only
from alicia.agent.telemetry.otel import SCOPE

CANARY = "the user's secret plan"


def _tool(argument: str) -> None:
    raise ValueError(f"cannot evaluate {argument!r}")


def test_no_span_keeps_a_message_and_foreign_spans_keep_no_conversation() -> None:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(ForeignContentFilter(SCOPE))
    provider.add_span_processor(SimpleSpanProcessor(exported))
    for scope in ("livekit-agents", SCOPE):
        tracer = provider.get_tracer(scope)
        with tracer.start_as_current_span("function_tool", record_exception=False) as span:
            if scope != SCOPE:  # livekit-agents' attributes (ours carry none of these)
                span.set_attribute("gen_ai.tool.definitions", json.dumps([{"name": CANARY}]))
                span.set_attribute("lk.rpc.caller_identity", f"{CANARY}-caller")
            span.set_attribute("gen_ai.tool.name", "calculator")
            try:
                _tool(CANARY)
            except ValueError as exc:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, str(exc)))
    spans = exported.get_finished_spans()
    assert len(spans) == 2
    whole = "".join(s.to_json() for s in spans)
    assert CANARY not in whole  # no message, no status description, no foreign content
    for span in spans:
        assert span.status.status_code is StatusCode.ERROR
        [event] = [e for e in span.events if e.name == "exception"]
        attrs = dict(event.attributes or {})
        assert attrs["exception.type"] == "ValueError"
        assert "exception.message" not in attrs
        trace = str(attrs["exception.stacktrace"])
        assert trace.startswith("Traceback") and "in _tool" in trace
    foreign = spans[0]
    assert foreign.attributes is not None and set(foreign.attributes) == {"gen_ai.tool.name"}


def test_a_stack_trace_keeps_its_frames_and_loses_every_message() -> None:
    trace = (
        "Traceback (most recent call last):\n"
        '  File "/app/tool.py", line 3, in run\n'
        "    raise ValueError(arg)\n"
        f"ValueError: {CANARY}\n"
        "\nDuring handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n"
        '  File "/app/agent.py", line 9, in turn\n'
        f"RuntimeError: failed on {CANARY}"
    )
    kept = frames_only(trace)
    assert CANARY not in kept
    assert kept.count("Traceback") == 2 and 'File "/app/tool.py", line 3, in run' in kept
