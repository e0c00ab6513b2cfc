"""A test's OTLP/HTTP metrics receiver on loopback: what an exporter posts to
``/v1/metrics`` (protobuf, gzip or not), decoded with OpenTelemetry's own proto classes."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

from alicia.harness.loopback import serve_app

__all__ = ["MetricsReceiver", "metrics_receiver"]


@dataclass
class MetricsReceiver:
    """The exports received so far, and the URL to send them to."""

    url: str = ""
    exports: list[ExportMetricsServiceRequest] = field(default_factory=list)

    def points(self, name: str) -> Iterator[tuple[dict[str, str], dict[str, Any], Any]]:
        """Each data point of metric ``name``: (its resource's attributes, its own
        attributes, the point), in the order received."""
        for export in self.exports:
            for rm in export.resource_metrics:
                resource = {a.key: a.value.string_value for a in rm.resource.attributes}
                for sm in rm.scope_metrics:
                    for metric in sm.metrics:
                        if metric.name != name:
                            continue
                        kind = metric.WhichOneof("data")
                        if kind is None:
                            continue
                        for point in getattr(metric, kind).data_points:
                            attrs = {a.key: _value(a.value) for a in point.attributes}
                            yield resource, attrs, point


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@asynccontextmanager
async def metrics_receiver() -> AsyncIterator[MetricsReceiver]:
    """``async with metrics_receiver() as r:`` a started receiver at ``r.url``."""
    received = MetricsReceiver()

    async def export(request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        message = ExportMetricsServiceRequest()
        message.ParseFromString(body)
        received.exports.append(message)
        return web.Response(
            body=ExportMetricsServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    app = web.Application()
    app.router.add_post("/v1/metrics", export)
    runner, port = await serve_app(app)
    received.url = f"http://127.0.0.1:{port}/v1/metrics"
    try:
        yield received
    finally:
        await runner.cleanup()
