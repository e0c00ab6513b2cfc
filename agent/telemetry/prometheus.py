"""OpenTelemetry metrics into Prometheus' multiprocess files, for one ``/metrics`` per worker.

livekit-agents serves ``/metrics`` on its ``prometheus_port`` from ``prometheus_client``;
with ``PROMETHEUS_MULTIPROC_DIR`` set it merges the files every process of the worker
writes there (its job processes included). :class:`PrometheusFiles` is an OpenTelemetry
metric exporter that writes this process's cumulative numbers into those files, through
the same ``prometheus_client`` value class as the framework's own metrics, so the worker's
one ``/metrics`` holds every job's turns.

A job process that ended stops counting where it should and costs nothing more: at each
scrape, :class:`RetiringCollector` folds the counter and histogram files of every process
that ended into one file per type (their totals kept: counters never go back) and drops its
live gauges (``prometheus_client``'s ``mark_process_dead``; ours are ``livesum``, so a
gauge such as the rooms served counts live processes only). The page then reads a number
of files bounded by the processes alive, not by every job since the worker started.

Names follow OpenTelemetry's Prometheus conventions: dots become underscores, the unit is
appended (``s`` -> ``_seconds``; annotations such as ``{turn}`` are dropped), counters end
in ``_total``; attribute keys become labels the same way.
"""

from __future__ import annotations

import glob
import os
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from opentelemetry.sdk.metrics import Counter, Histogram, ObservableCounter, UpDownCounter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.metrics.export import Histogram as HistogramData
from opentelemetry.sdk.metrics.export import Sum as SumData
from opentelemetry.util.types import AttributeValue

__all__ = ["PrometheusFiles", "RetiringCollector", "prometheus_name", "retire_ended"]

_UNITS = {"s": "seconds", "ms": "milliseconds", "By": "bytes", "1": "ratio"}
_INVALID = re.compile(r"[^a-zA-Z0-9_:]")


def prometheus_name(name: str, unit: str, *, counter: bool) -> str:
    """The Prometheus name of the metric ``name`` in ``unit`` (see the module docstring)."""
    base = _INVALID.sub("_", name)
    suffix = _UNITS.get(unit, "" if unit.startswith("{") else _INVALID.sub("_", unit))
    if suffix and not base.endswith(f"_{suffix}"):
        base = f"{base}_{suffix}"
    return f"{base}_total" if counter else base


def _labels(attributes: Mapping[str, AttributeValue] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((_INVALID.sub("_", k), str(v)) for k, v in (attributes or {}).items()))


class PrometheusFiles(MetricExporter):
    """Writes each export's cumulative values as ``prometheus_client`` values (files when
    ``PROMETHEUS_MULTIPROC_DIR`` was set before ``prometheus_client`` loaded)."""

    def __init__(self, value_class: Any = None) -> None:
        """An exporter asking for cumulative numbers; ``value_class``: where a value is
        kept (default: ``prometheus_client``'s own, files in multiprocess mode)."""
        cumulative = AggregationTemporality.CUMULATIVE
        super().__init__(
            preferred_temporality={
                Counter: cumulative,
                UpDownCounter: cumulative,
                Histogram: cumulative,
                ObservableCounter: cumulative,
            }
        )
        self._value_class = value_class
        self._lock = threading.Lock()
        self._values: dict[tuple[str, str, tuple[tuple[str, str], ...]], Any] = {}

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        """Write every data point of ``metrics_data``."""
        with self._lock:
            for resource in metrics_data.resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        data = metric.data
                        if isinstance(data, HistogramData):
                            self._histogram(metric.name, metric.unit or "", metric, data)
                        elif isinstance(data, SumData | Gauge):
                            counter = isinstance(data, SumData) and data.is_monotonic
                            name = prometheus_name(metric.name, metric.unit or "", counter=counter)
                            family = name.removesuffix("_total") if counter else name
                            for point in data.data_points:
                                self._set(
                                    "counter" if counter else "gauge",
                                    family,
                                    name,
                                    _labels(point.attributes),
                                    float(point.value),
                                    metric.description or "",
                                )
        return MetricExportResult.SUCCESS

    def _histogram(self, name: str, unit: str, metric: Any, data: HistogramData) -> None:
        family = prometheus_name(name, unit, counter=False)
        help_text = metric.description or ""
        for point in data.data_points:
            labels = _labels(point.attributes)
            bounds: Sequence[float] = [*point.explicit_bounds, float("inf")]
            for bound, count in zip(bounds, point.bucket_counts, strict=True):
                le = (("le", "+Inf" if bound == float("inf") else repr(float(bound))),)
                self._set("histogram", family, f"{family}_bucket", labels + le, count, help_text)
            self._set("histogram", family, f"{family}_sum", labels, point.sum, help_text)

    def _set(
        self,
        typ: str,
        family: str,
        sample: str,
        labels: tuple[tuple[str, str], ...],
        value: float,
        help_text: str,
    ) -> None:
        key = (typ, sample, labels)
        slot = self._values.get(key)
        if slot is None:
            names, label_values = [k for k, _ in labels], [v for _, v in labels]
            from prometheus_client import values  # late: after PROMETHEUS_MULTIPROC_DIR is set

            value_class = self._value_class or values.ValueClass
            slot = value_class(
                typ, family, sample, names, label_values, help_text, multiprocess_mode="livesum"
            )
            self._values[key] = slot
        slot.set(value)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Nothing is buffered."""
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Nothing to release (the files belong to ``prometheus_client``)."""


_FOLDED: Final = ("counter", "histogram")
"""File types whose values add up across processes: an ended process's go into one file."""
_ENDED: Final = "ended"
"""The pid part of the files that hold ended processes' totals."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def retire_ended(folder: str) -> int:
    """Fold the files of ``folder``'s processes that ended (see the module docstring);
    returns how many processes were retired. Not concurrently with a read of the folder."""
    from prometheus_client import multiprocess
    from prometheus_client.mmap_dict import MmapedDict

    ended: set[int] = set()
    for path in glob.glob(os.path.join(folder, "*.db")):
        pid = os.path.basename(path)[: -len(".db")].rsplit("_", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            ended.add(int(pid))
    for dead in sorted(ended):
        multiprocess.mark_process_dead(dead, folder)  # type: ignore[no-untyped-call]
        for typ in _FOLDED:
            source = os.path.join(folder, f"{typ}_{dead}.db")
            if not os.path.exists(source):
                continue
            total = MmapedDict(os.path.join(folder, f"{typ}_{_ENDED}.db"))  # type: ignore[no-untyped-call]
            try:
                for key, value, timestamp, _ in MmapedDict.read_all_values_from_file(source):  # type: ignore[no-untyped-call]
                    before, _ = total.read_value(key)  # type: ignore[no-untyped-call]
                    total.write_value(key, before + value, timestamp)  # type: ignore[no-untyped-call]
            finally:
                total.close()  # type: ignore[no-untyped-call]
            os.remove(source)
    return len(ended)


class RetiringCollector:
    """The folder's metrics as ``prometheus_client``'s ``MultiProcessCollector`` reads
    them, each read preceded by :func:`retire_ended` under one lock (reads and folding
    never overlap: the only reader of the folder is this collector)."""

    def __init__(self, folder: str) -> None:
        """Collects ``folder`` (``PROMETHEUS_MULTIPROC_DIR``)."""
        self._folder = folder
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Any]:
        """Retire the ended processes, then every metric of the folder."""
        from prometheus_client import multiprocess

        with self._lock:
            retire_ended(self._folder)
            reader = multiprocess.MultiProcessCollector(None, path=self._folder)  # type: ignore[no-untyped-call]
            metrics = list(reader.collect())  # type: ignore[no-untyped-call]
        yield from metrics
