"""OpenTelemetry metrics as Prometheus reads them from a worker's processes (issue 35).

Two "processes" (two value classes with their own process ids, as two job processes
would have) record through the OpenTelemetry SDK into one multiprocess folder;
``prometheus_client``'s ``MultiProcessCollector`` (what livekit-agents' ``/metrics``
serves) merges them: counters and histogram buckets add up, names carry their units.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, generate_latest, multiprocess, values
from prometheus_client.parser import text_string_to_metric_families

from alicia.agent.telemetry.otel import SECONDS_BUCKETS
from alicia.agent.telemetry.prometheus import PrometheusFiles, prometheus_name


def test_names_carry_their_unit_and_counters_end_in_total() -> None:
    assert prometheus_name("alicia.turns", "{turn}", counter=True) == "alicia_turns_total"
    assert (
        prometheus_name("alicia.reasoning.thinking_time", "s", counter=False)
        == "alicia_reasoning_thinking_time_seconds"
    )
    assert (
        prometheus_name("gen_ai.client.token.usage", "{token}", counter=False)
        == "gen_ai_client_token_usage"
    )
    assert prometheus_name("alicia.queue.bytes", "By", counter=False) == "alicia_queue_bytes"


def record(pid: int, folder: Path, turns: int, thinking: list[float]) -> None:
    """What one process of the worker records and writes."""
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    counter = meter.create_counter("alicia.turns", unit="{turn}", description="Turns")
    histogram = meter.create_histogram(
        "alicia.reasoning.thinking_time",
        unit="s",
        description="Thinking",
        explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
    )
    for _ in range(turns):
        counter.add(1, {"gen_ai.request.model": "m", "alicia.turn.status": "complete"})
    for seconds in thinking:
        histogram.record(seconds, {"gen_ai.request.model": "m"})
    data = reader.get_metrics_data()
    assert data is not None
    files = PrometheusFiles(values.MultiProcessValue(lambda: pid))
    files.export(data)
    files.export(data)  # again, as the periodic reader does: values are set, not added


def test_two_processes_numbers_add_up_in_one_metrics_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    record(101, tmp_path, turns=2, thinking=[0.3, 1.5])
    record(102, tmp_path, turns=1, thinking=[3.0])
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(tmp_path))  # type: ignore[no-untyped-call]
    page = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(page)}
    turns = families["alicia_turns"]
    assert turns.type == "counter"
    [sample] = turns.samples
    assert sample.name == "alicia_turns_total" and sample.value == 3
    assert sample.labels == {"gen_ai_request_model": "m", "alicia_turn_status": "complete"}
    thinking = families["alicia_reasoning_thinking_time_seconds"]
    assert thinking.type == "histogram"
    by_name = {(s.name, s.labels.get("le")): s.value for s in thinking.samples}
    assert by_name[("alicia_reasoning_thinking_time_seconds_count", None)] == 3
    assert by_name[("alicia_reasoning_thinking_time_seconds_sum", None)] == pytest.approx(4.8)
    assert by_name[("alicia_reasoning_thinking_time_seconds_bucket", "0.32")] == 1
    assert by_name[("alicia_reasoning_thinking_time_seconds_bucket", "2.56")] == 2
    assert by_name[("alicia_reasoning_thinking_time_seconds_bucket", "+Inf")] == 3


_CHILD = """
import os, sys, time
from prometheus_client import Counter, Gauge, Histogram
Counter("jobs_turns", "turns").inc(2)
Gauge("jobs_rooms", "rooms served", multiprocess_mode="livesum").set(1)
Histogram("jobs_wait_seconds", "wait", buckets=(1.0,)).observe(0.5)
print("written", flush=True)
if sys.argv[1] == "stay":
    time.sleep(60)
"""


def test_processes_that_ended_keep_their_totals_leave_their_gauges_and_one_file_per_type(
    tmp_path: Path,
) -> None:
    """Three job processes end and one stays: the page counts all four's turns, the rooms
    served by the one alive only, and reads one file per type for the three that ended."""
    import subprocess
    import sys

    from alicia.agent.telemetry.prometheus import RetiringCollector

    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for _ in range(3):
        subprocess.run([sys.executable, "-c", _CHILD, "end"], env=env, check=True)
    staying = subprocess.Popen(
        [sys.executable, "-c", _CHILD, "stay"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert staying.stdout is not None and staying.stdout.readline().strip() == "written"
        assert len(list(tmp_path.glob("*.db"))) == 4 * 3  # a counter, gauge, histogram each
        registry = CollectorRegistry()
        registry.register(RetiringCollector(str(tmp_path)))
        page = {
            (s.name, s.labels.get("le", "")): s.value
            for f in text_string_to_metric_families(generate_latest(registry).decode())
            for s in f.samples
        }
        assert page[("jobs_turns_total", "")] == 4 * 2  # the ended ones' totals kept
        assert page[("jobs_rooms", "")] == 1  # the live one's gauge only
        assert page[("jobs_wait_seconds_count", "")] == 4
        assert page[("jobs_wait_seconds_bucket", "1.0")] == 4
        names = sorted(p.name for p in tmp_path.glob("*.db"))
        alive = staying.pid
        assert names == sorted(
            [
                "counter_ended.db",
                "histogram_ended.db",
                f"counter_{alive}.db",
                f"gauge_livesum_{alive}.db",
                f"histogram_{alive}.db",
            ]
        ), names
        again = {  # a second scrape: nothing counted twice
            (s.name, s.labels.get("le", "")): s.value
            for f in text_string_to_metric_families(generate_latest(registry).decode())
            for s in f.samples
        }
        assert again == page
    finally:
        staying.kill()
        staying.wait()
