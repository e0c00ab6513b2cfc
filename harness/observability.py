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
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from .ports import free_port

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


class _Server:
    """A backend process in a temporary folder, up once ``ready_url`` answers 200."""

    name = "server"

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self.log_path: Path | None = None

    def _command(self, folder: Path) -> list[str]:
        raise NotImplementedError

    @property
    def ready_url(self) -> str:
        """A URL that answers 200 once the server serves."""
        raise NotImplementedError

    def start(self, timeout: float = 60.0) -> _Server:
        """Start the server and wait until it answers."""
        if self._proc is not None:
            raise RuntimeError(f"{self.name} already started")
        self._dir = tempfile.TemporaryDirectory(prefix=f"alicia-{self.name}-")
        folder = Path(self._dir.name)
        command = self._command(folder)
        self.log_path = folder / f"{self.name}.log"
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=folder)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self._proc.returncode}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.ready_url, timeout=1) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"{self.name} did not answer on {self.ready_url} in {timeout}s")

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's log."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s) and remove its files."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> _Server:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


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


class Jaeger(_Server):
    """Jaeger v2, all in one, in memory (see the module docstring)."""

    name = "jaeger"

    def __init__(self) -> None:
        """Pick free loopback ports."""
        super().__init__()
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

    def _command(self, folder: Path) -> list[str]:
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


class Prometheus(_Server):
    """Debian's Prometheus scraping ``targets`` (``host:port`` of ``/metrics``) every second."""

    name = "prometheus"

    def __init__(self, targets: Sequence[str]) -> None:
        """``targets``: what to scrape."""
        super().__init__()
        self.targets = list(targets)
        self.port = free_port()

    @property
    def url(self) -> str:
        """The UI and the HTTP API."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def ready_url(self) -> str:
        """Prometheus' readiness endpoint."""
        return f"{self.url}/-/ready"

    def _command(self, folder: Path) -> list[str]:
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
