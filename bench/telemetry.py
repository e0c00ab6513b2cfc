"""What tracing and metrics add to a turn: per token and per step, on against off, one run.

Run: ``.venv/bin/python bench/telemetry.py`` (about 40 s). Everything in this
process, on 127.0.0.1:

* **per token**: whole turns of the recorded ``vllm_reasoning`` stream (one SSE chunk per
  token-sized piece, real HTTP, the real ``openai`` client) through the engine
  (``Conversation`` with an in-memory transport, as ``tests/engine`` runs it), alternately
  with telemetry off (:data:`~alicia.agent.engine.telemetry.NO_TELEMETRY`) and on
  (:class:`~alicia.agent.telemetry.OtelTelemetry` on the SDK's ``TracerProvider`` with a
  ``BatchSpanProcessor`` and an exporter that drops what it gets, and the meter with a
  reader writing Prometheus' multiprocess files as the worker does, exemplars off as
  there). A trial is ``--rooms`` rooms of ``--turns`` turns each (about a second); the
  "on" trial ends by exporting what it made (its spans, the metrics once, as the worker
  does each second), counted in it: background exports would otherwise land in whichever
  trial runs. Each room starts from a collected heap and a reset recorder (their growth
  made the figure drift by 30 % over a run). The figure is the process's CPU time (every
  thread) per streamed chunk; ``token_overhead_pct`` = (on - off) / off, the best trial
  of each (the least disturbed by the rest of the machine). The recorded server runs in
  this process, so its CPU is in both. Telemetry costs per turn and per step, not per
  token: the percentage falls as turns grow (this stream has 159 chunks).
* **per step**: one traced turn of 20 steps (span start, 20 step events, end, the
  metrics) against the same calls on ``NO_TELEMETRY``, best of several ``timeit``
  repeats; ``step_overhead_us`` = the difference per step.

Caveat: a shared 2-core machine; pairs of trials differ by 0 to 2 µs per chunk, so the
per-token percentage moves by a point or two between runs. Targets (issue 35):
``token_overhead_pct <= 2``, ``step_overhead_us <= 50``.

Last line: ``RESULT token_overhead_pct=<x> step_overhead_us=<x>``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import sys
import tempfile
import time
import timeit
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The worker's metrics path: prometheus_client in multiprocess mode, set before it loads.
if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
    _FILES = tempfile.TemporaryDirectory(prefix="alicia-bench-")  # removed at exit
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = _FILES.name
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from alicia.agent.engine.telemetry import NO_TELEMETRY, TurnTelemetry
from alicia.agent.telemetry import OtelTelemetry
from alicia.agent.telemetry.prometheus import PrometheusFiles
from alicia.agent.telemetry.setup import exemplars
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import AssistantSentence, Envelope
from bench._exit import run_and_exit
from tests.engine.room import handshake, room, user_message

STREAM = "vllm_reasoning"


class Dropped(SpanExporter):
    """An exporter that takes every span and sends it nowhere (the network is not ours)."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Accept the batch."""
        return SpanExportResult.SUCCESS


class Traced:
    """Traces and metrics as the worker sets them up, minus the network; their background
    work (the span processor's export, the metrics written for Prometheus) runs only when
    :meth:`flush` is called, so that it is counted in the trial it belongs to (a background
    export landing in an "off" trial made the figure swing by ten points)."""

    def __init__(self) -> None:
        """The providers and the telemetry on them."""
        self.tracing = TracerProvider()
        self.tracing.add_span_processor(BatchSpanProcessor(Dropped(), schedule_delay_millis=3.6e6))
        self.reader = PeriodicExportingMetricReader(PrometheusFiles(), export_interval_millis=3.6e6)
        self.telemetry = OtelTelemetry(
            provider_name="vllm",
            tracer_provider=self.tracing,
            meter_provider=MeterProvider([self.reader], exemplar_filter=exemplars()),
        )

    def flush(self) -> None:
        """Export what the turns made: the spans, and the metrics once (the worker writes
        them once a second; a trial is about that long)."""
        self.tracing.force_flush()
        self.reader.force_flush()


def telemetry_on() -> OtelTelemetry:
    """Traces and metrics as the worker sets them up, minus the network."""
    return Traced().telemetry


async def turns(llm: RecordedLLM, telemetry: TurnTelemetry, count: int) -> tuple[float, int]:
    """CPU seconds of ``count`` turns of :data:`STREAM` and the chunks they streamed."""
    spec = llm.spec(STREAM)
    per_turn = (llm.streams_dir / spec.file).read_bytes().count(b"data: ")
    llm.reset()  # its record of every request would grow the heap, trial after trial
    async with room(llm) as r:
        r.conversation.session.telemetry = telemetry
        alice = r.client("alice")
        await handshake(alice)
        gc.collect()  # each room starts from the same heap (the drift was 30 % over a run)
        started = time.process_time()
        for n in range(1, count + 1):
            llm.script(STREAM)
            alice.send(user_message(spec.user))
            await alice.wait_for(lambda box, n=n: finals(box) >= n, within=60.0)
        return time.process_time() - started, per_turn * count


def finals(box: list[Envelope[Any]]) -> int:
    """Turns answered in ``box``."""
    return sum(1 for e in box if isinstance(e.body, AssistantSentence) and e.body.is_final)


def per_step_us(steps: int = 20, repeat: int = 7, number: int = 200) -> tuple[float, float]:
    """Microseconds per step of a traced turn of ``steps`` steps, off and on."""
    on = telemetry_on()

    def turn(telemetry: TurnTelemetry) -> None:
        trace = telemetry.turn_opened("conv_bench", "msg_bench", "m")
        for i in range(1, steps + 1):
            trace.step_sent(i, 240, {"full": 1, "summary": 1}, None)
        trace.answer_started()
        trace.ended("complete", None, 12.0)

    off_s = min(timeit.repeat(lambda: turn(NO_TELEMETRY), repeat=repeat, number=number))
    on_s = min(timeit.repeat(lambda: turn(on), repeat=repeat, number=number))
    scale = 1e6 / (number * steps)
    return off_s * scale, on_s * scale


async def amain(args: argparse.Namespace) -> None:
    """Alternate off and on trials, then the per-step figure; print the RESULT line."""
    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
        f"{args.trials} trials of {args.rooms} x {args.turns} turns of {STREAM} each way",
        file=sys.stderr,
    )
    on = Traced()
    off_us: list[float] = []
    on_us: list[float] = []
    async with RecordedLLM() as llm:
        await turns(llm, NO_TELEMETRY, 2)  # warm-up
        await turns(llm, on.telemetry, 2)
        on.flush()
        for trial in range(args.trials):
            for telemetry, out in ((NO_TELEMETRY, off_us), (on.telemetry, on_us)):
                seconds = chunks = 0.0
                for _ in range(args.rooms):
                    s, c = await turns(llm, telemetry, args.turns)
                    seconds, chunks = seconds + s, chunks + c
                if telemetry is on.telemetry:  # its exports, counted in its trial
                    started = time.process_time()
                    on.flush()
                    seconds += time.process_time() - started
                out.append(seconds / chunks * 1e6)
            print(
                f"trial {trial + 1}: off {off_us[-1]:.2f} us/chunk, on {on_us[-1]:.2f} us/chunk",
                file=sys.stderr,
            )
    off, on_ = min(off_us), min(on_us)
    pct = (on_ - off) / off * 100
    step_off, step_on = per_step_us()
    print(
        f"per token: off {off:.2f} us, on {on_:.2f} us (best of {args.trials}); "
        f"per step: off {step_off:.2f} us, on {step_on:.2f} us",
        file=sys.stderr,
    )
    print(f"RESULT token_overhead_pct={pct:.2f} step_overhead_us={step_on - step_off:.2f}")


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=9, help="off/on trial pairs")
    parser.add_argument("--turns", type=int, default=40, help="turns per room")
    parser.add_argument("--rooms", type=int, default=5, help="rooms per trial, one after the other")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    asyncio.run(amain(args))


if __name__ == "__main__":
    run_and_exit(main)
