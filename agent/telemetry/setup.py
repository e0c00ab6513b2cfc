"""Tracing from the standard OpenTelemetry environment.

Tracing is on when an OTLP endpoint is configured (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), unless ``OTEL_SDK_DISABLED=true`` or
``OTEL_TRACES_EXPORTER=none``. The SDK reads the rest itself: ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` (the resource), ``OTEL_TRACES_SAMPLER`` and its argument,
the exporter's headers, timeout and protocol options. Off, the engine keeps
:data:`~alicia.agent.engine.telemetry.NO_TELEMETRY`: nothing is done per turn.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from alicia.agent.engine.telemetry import NO_TELEMETRY, TurnTelemetry

from .otel import OtelTelemetry

__all__ = ["telemetry_from_env", "tracer_provider", "tracing_enabled"]

_LOCK = threading.Lock()
_PROVIDER: TracerProvider | None = None


def tracing_enabled(env: Mapping[str, str] = os.environ) -> bool:
    """Whether ``env`` asks for traces (see the module docstring)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def tracer_provider() -> TracerProvider:
    """This process's tracer provider exporting over OTLP/HTTP, made once and set as the
    global one (so the host framework's spans and ours share it and its traces)."""
    global _PROVIDER
    with _LOCK:
        if _PROVIDER is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider = TracerProvider(resource=Resource.create())
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            trace.set_tracer_provider(provider)
            _PROVIDER = provider
        return _PROVIDER


def telemetry_from_env(provider_name: str, env: Mapping[str, str] = os.environ) -> TurnTelemetry:
    """The engine's telemetry: :class:`OtelTelemetry` on :func:`tracer_provider` when
    ``env`` asks for traces, else :data:`NO_TELEMETRY`."""
    if not tracing_enabled(env):
        return NO_TELEMETRY
    return OtelTelemetry(provider_name=provider_name, tracer_provider=tracer_provider())
