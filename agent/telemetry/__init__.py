"""OpenTelemetry for reasoning: each turn as a GenAI span with its steps as events, and
the turn's figures as metrics (:mod:`.otel`), set up from the standard ``OTEL_*``
environment (:mod:`.setup`)."""

from .otel import OtelTelemetry
from .setup import (
    flush_metrics,
    meter_provider,
    serve_metrics,
    telemetry_from_env,
    tracer_provider,
    tracing_enabled,
)

__all__ = [
    "OtelTelemetry",
    "flush_metrics",
    "meter_provider",
    "serve_metrics",
    "telemetry_from_env",
    "tracer_provider",
    "tracing_enabled",
]
