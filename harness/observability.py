"""The real trace and metrics backends on loopback: Jaeger v2 and Prometheus.

* :class:`Jaeger` runs the pinned Jaeger v2 (built by ``scripts/install-jaeger``) with an
  in-memory store, receiving OTLP/HTTP on :attr:`Jaeger.otlp_url` and answering its
  query API (the one its UI uses) on :attr:`Jaeger.url`.
* :class:`Prometheus` runs Debian's ``prometheus`` scraping the given ``/metrics``
  targets every second, and answers PromQL on :attr:`Prometheus.url`.

Both are context managers that wait until the server answers and stop it on exit.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .ports import free_port
from .served import ServedProcess

__all__ = ["Jaeger", "JaegerAPI", "Prometheus", "jaeger_binary"]

ROOT = Path(__file__).resolve().parent.parent
INSTALLER = ROOT / "scripts" / "install-jaeger"


def jaeger_binary() -> Path:
    """Path of the Jaeger binary, building it (once per machine) if needed."""
    out = subprocess.run([str(INSTALLER)], check=True, stdout=subprocess.PIPE, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def _get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


JAEGER_CONFIG = """\
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query_port}
    grpc:
      endpoint: 127.0.0.1:{query_grpc_port}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp_port}
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


class Jaeger(ServedProcess):
    """Jaeger v2, all in one, in memory (see the module docstring)."""

    name = "jaeger"

    def __init__(self) -> None:
        """Pick free loopback ports."""
        super().__init__()
        self.pick_ports()

    def pick_ports(self) -> None:
        """Free loopback ports for OTLP/HTTP and the query API (HTTP and gRPC)."""
        self.otlp_port = free_port()
        self.query_port = free_port()
        self.query_grpc_port = free_port()

    @property
    def otlp_url(self) -> str:
        """The OTLP/HTTP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT``)."""
        return f"http://127.0.0.1:{self.otlp_port}"

    @property
    def url(self) -> str:
        """The UI and its query API."""
        return f"http://127.0.0.1:{self.query_port}"

    @property
    def ready_url(self) -> str:
        """The services list of the query API."""
        return f"{self.url}/api/services"

    def command(self, folder: Path) -> list[str]:
        config = folder / "jaeger.yaml"
        config.write_text(
            JAEGER_CONFIG.format(
                otlp_port=self.otlp_port,
                query_port=self.query_port,
                query_grpc_port=self.query_grpc_port,
            )
        )
        return [str(jaeger_binary()), "--config", f"file:{config}"]

    def traces(self, service: str, **params: str) -> list[dict[str, Any]]:
        """The traces of ``service`` (see :class:`JaegerAPI`)."""
        return JaegerAPI(self.url).traces(service, **params)


class JaegerAPI:
    """Jaeger's query API (the one its UI uses) at ``url``."""

    def __init__(self, url: str) -> None:
        """``url``: the UI's base URL (``http://host:port``)."""
        self.url = url.rstrip("/")

    def traces(self, service: str, **params: str) -> list[dict[str, Any]]:
        """The traces of ``service`` the query API returns (its JSON ``data``)."""
        query = urllib.parse.urlencode({"service": service, "limit": "100", **params})
        data: list[dict[str, Any]] = _get_json(f"{self.url}/api/traces?{query}")["data"]
        return data


PROMETHEUS_CONFIG = """\
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: alicia
    static_configs:
      - targets: [{targets}]
"""


class Prometheus(ServedProcess):
    """Debian's Prometheus scraping ``targets`` (``host:port`` of ``/metrics``) every second."""

    name = "prometheus"

    def __init__(self, targets: Sequence[str]) -> None:
        """``targets``: what to scrape."""
        super().__init__()
        self.targets = list(targets)
        self.pick_ports()

    def pick_ports(self) -> None:
        """A free loopback port for the UI and the API."""
        self.port = free_port()

    @property
    def url(self) -> str:
        """The UI and the HTTP API."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def ready_url(self) -> str:
        """Prometheus' readiness endpoint."""
        return f"{self.url}/-/ready"

    def command(self, folder: Path) -> list[str]:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("prometheus not found: run ./scripts/setup (Debian's prometheus)")
        config = folder / "prometheus.yml"
        config.write_text(PROMETHEUS_CONFIG.format(targets=", ".join(self.targets)))
        return [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector ``promql`` returns (the API's ``data.result``)."""
        query = urllib.parse.urlencode({"query": promql})
        answer = _get_json(f"{self.url}/api/v1/query?{query}")
        if answer.get("status") != "success":
            raise RuntimeError(f"PromQL {promql!r}: {answer}")
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result
