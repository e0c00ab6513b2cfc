"""Tracing from the standard OpenTelemetry environment.

Tracing is on when an OTLP endpoint is configured (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), unless ``OTEL_SDK_DISABLED=true`` or
``OTEL_TRACES_EXPORTER=none``. The SDK reads the rest itself: ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` (the resource), ``OTEL_TRACES_SAMPLER`` and its argument,
the exporter's headers, timeout and protocol options.

Metrics are on when the front end asks (the worker's ``ALICIA_METRICS_PORT``): the
OpenTelemetry meter, read every second into Prometheus' multiprocess files
(:mod:`.prometheus`) that the worker's ``/metrics`` merges. They also go out over OTLP/HTTP
when ``OTEL_METRICS_EXPORTER`` lists ``otlp`` (the SDK's own variable; its endpoint
``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``, every
``OTEL_METRIC_EXPORT_INTERVAL``), each process with its own ``service.instance.id`` so
that a backend keeps job processes' cumulative series apart. Not by default: a trace
backend such as Jaeger takes no metrics. With none of these, the engine keeps
:data:`~alicia.agent.engine.telemetry.NO_TELEMETRY`: nothing is done per turn.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Mapping
from typing import Literal

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import (
    AlwaysOffExemplarFilter,
    AlwaysOnExemplarFilter,
    ExemplarFilter,
    MeterProvider,
    TraceBasedExemplarFilter,
)
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from alicia.agent.engine.telemetry import NO_TELEMETRY, TurnTelemetry

from .content import ForeignContentFilter
from .otel import SCOPE, OtelTelemetry
from .prometheus import PrometheusFiles, RetiringCollector

__all__ = [
    "flush_metrics",
    "meter_provider",
    "otlp_metrics_enabled",
    "serve_metrics",
    "telemetry_from_env",
    "tracer_provider",
    "tracing_enabled",
]

_LOCK = threading.Lock()
_PROVIDER: TracerProvider | None = None
_METERS: MeterProvider | None = None
METRICS_INTERVAL_MS = 1000
"""How often a process writes its numbers for ``/metrics`` (milliseconds)."""


def tracing_enabled(env: Mapping[str, str] = os.environ) -> bool:
    """Whether ``env`` asks for traces (see the module docstring)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def otlp_metrics_enabled(env: Mapping[str, str] = os.environ) -> bool:
    """Whether ``env`` asks for metrics over OTLP (see the module docstring)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {e.strip().lower() for e in env.get("OTEL_METRICS_EXPORTER", "").split(",")}
    return "otlp" in exporters


def _resource() -> Resource:
    """The SDK's resource from the environment, with this process as its
    ``service.instance.id`` unless the environment names one."""
    resource = Resource.create()
    if "service.instance.id" in resource.attributes:
        return resource
    return resource.merge(
        Resource({"service.instance.id": f"{socket.gethostname()}:{os.getpid()}"})
    )


def tracer_provider(*, foreign_content: bool = False) -> TracerProvider:
    """This process's tracer provider exporting over OTLP/HTTP, made once and set as the
    global one (so the host framework's spans and ours share it and its traces). Other
    instrumentations' conversation text is stripped (:mod:`.content`) unless
    ``foreign_content`` (the first call decides)."""
    global _PROVIDER
    with _LOCK:
        if _PROVIDER is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider = TracerProvider(resource=_resource())
            if not foreign_content:
                provider.add_span_processor(ForeignContentFilter(SCOPE))
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            trace.set_tracer_provider(provider)
            _PROVIDER = provider
        return _PROVIDER


def meter_provider(*, files: bool = True) -> MeterProvider:
    """This process's meter provider, made once and set as the global one: writing to
    Prometheus' files every :data:`METRICS_INTERVAL_MS` (``files``), and exporting over
    OTLP when the environment asks (:func:`otlp_metrics_enabled`). The first call
    decides."""
    global _METERS
    with _LOCK:
        if _METERS is None:
            readers: list[MetricReader] = []
            if files:
                readers.append(
                    PeriodicExportingMetricReader(
                        PrometheusFiles(), export_interval_millis=METRICS_INTERVAL_MS
                    )
                )
            if otlp_metrics_enabled():
                from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                    OTLPMetricExporter,
                )

                # The interval: OTEL_METRIC_EXPORT_INTERVAL (the SDK's default 60 s).
                readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
            _METERS = MeterProvider(
                metric_readers=readers, resource=_resource(), exemplar_filter=exemplars()
            )
            metrics.set_meter_provider(_METERS)
        return _METERS


def flush_metrics(timeout_s: float = 5.0) -> None:
    """Export this process's numbers now, if it has a meter provider (blocking, bounded):
    a job process ends without running ``atexit`` (multiprocessing's children), and a
    room shorter than the export interval would otherwise leave none."""
    with _LOCK:
        provider = _METERS
    if provider is not None:
        provider.force_flush(timeout_millis=int(timeout_s * 1000))


def exemplars(env: Mapping[str, str] = os.environ) -> ExemplarFilter:
    """Which measurements become exemplars: none unless ``OTEL_METRICS_EXEMPLAR_FILTER``
    says (Prometheus' text files carry none; the SDK's default samples inside every
    traced span, a cost per measurement)."""
    chosen = env.get("OTEL_METRICS_EXEMPLAR_FILTER", "always_off").strip().lower()
    filters: dict[str, type[ExemplarFilter]] = {
        "always_on": AlwaysOnExemplarFilter,
        "trace_based": TraceBasedExemplarFilter,
    }
    return filters.get(chosen, AlwaysOffExemplarFilter)()


def serve_metrics(port: int, host: str = "127.0.0.1") -> None:
    """Serve Prometheus' ``/metrics`` on ``host:port`` (a thread of ``prometheus_client``):
    every process's numbers, merged from ``PROMETHEUS_MULTIPROC_DIR``, the processes that
    ended retired at each scrape (:class:`~.prometheus.RetiringCollector`); metrics on."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    registry.register(RetiringCollector(os.environ["PROMETHEUS_MULTIPROC_DIR"]))
    start_http_server(port, addr=host, registry=registry)
    meter_provider()


def telemetry_from_env(
    provider_name: str,
    env: Mapping[str, str] = os.environ,
    *,
    metrics_on: bool = False,
    content: Literal["none", "summary", "full"] = "none",
) -> TurnTelemetry:
    """The engine's telemetry: :class:`OtelTelemetry` with traces when ``env`` asks for
    them and metrics when ``metrics_on`` (Prometheus' files) or ``env`` asks for OTLP
    metrics, else :data:`NO_TELEMETRY`. ``content``: the
    reasoning a turn's span carries (``ALICIA_TRACE_CONTENT``)."""
    tracing = tracing_enabled(env)
    otlp_metrics = otlp_metrics_enabled(env)
    if not (tracing or metrics_on or otlp_metrics):
        return NO_TELEMETRY
    meters = meter_provider(files=metrics_on) if metrics_on or otlp_metrics else None
    return OtelTelemetry(
        provider_name=provider_name,
        tracer_provider=tracer_provider() if tracing else trace.NoOpTracerProvider(),
        meter_provider=meters if meters is not None else metrics.NoOpMeterProvider(),
        content=content,
    )
