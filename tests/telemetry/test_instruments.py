"""The worker's own instruments: queue depths read from the live queues only, and the
failover spans with their attributes."""

from __future__ import annotations

import gc

import pytest
from opentelemetry.metrics import CallbackOptions
from opentelemetry.sdk.metrics import (
    AlwaysOffExemplarFilter,
    AlwaysOnExemplarFilter,
    TraceBasedExemplarFilter,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from alicia.agent.telemetry import instruments
from alicia.agent.telemetry.setup import exemplars


class _Queue:
    def __init__(self, n: int) -> None:
        self.n = n


def depths() -> dict[str, int]:
    return {
        str(o.attributes["alicia.queue"]): int(o.value)
        for o in instruments._depths(CallbackOptions())
        if o.attributes is not None
    }


def test_queue_depths_sum_the_live_queues_of_each_kind_and_forget_the_gone() -> None:
    a, b, c = _Queue(3), _Queue(4), _Queue(5)
    instruments.watch_queue("test-storage", a, lambda q: q.n)
    instruments.watch_queue("test-storage", b, lambda q: q.n)
    instruments.watch_queue("test-incoming", c, lambda q: q.n)
    assert {k: v for k, v in depths().items() if k.startswith("test-")} == {
        "test-storage": 7,
        "test-incoming": 5,
    }
    a.n = 10
    del b, c
    gc.collect()  # held weakly: a closed room's queue is not counted
    assert {k: v for k, v in depths().items() if k.startswith("test-")} == {"test-storage": 10}


def test_a_lease_span_names_the_room_and_carries_its_attributes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(instruments, "_TRACER", provider.get_tracer(instruments.SCOPE))
    with instruments.lease_span("alicia.lease.claim", "conv_1") as span:
        span.set_attribute("alicia.lease.epoch", 2)
    with instruments.lease_span("alicia.lease.lost", "conv_1", **{"alicia.lease.epoch": 2}):
        pass
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["alicia.lease.claim", "alicia.lease.lost"]
    assert all(
        dict(s.attributes or {}) == {"gen_ai.conversation.id": "conv_1", "alicia.lease.epoch": 2}
        for s in spans
    )


def test_exemplars_are_off_unless_the_environment_asks() -> None:
    assert isinstance(exemplars({}), AlwaysOffExemplarFilter)
    assert isinstance(
        exemplars({"OTEL_METRICS_EXEMPLAR_FILTER": "trace_based"}), TraceBasedExemplarFilter
    )
    assert isinstance(
        exemplars({"OTEL_METRICS_EXEMPLAR_FILTER": "always_on"}), AlwaysOnExemplarFilter
    )
    assert isinstance(exemplars({"OTEL_METRICS_EXEMPLAR_FILTER": "bogus"}), AlwaysOffExemplarFilter)
