"""Arize Phoenix on loopback: the trace UI made for LLM apps, receiving OTLP/HTTP.

:class:`Phoenix` runs ``phoenix serve`` from its own virtualenv (``scripts/install-phoenix``
installs it once per machine, when first needed), storing in SQLite in a temporary folder,
with its product telemetry, external resources (web fonts), AI assistant and MCP server
off: nothing leaves the machine. Traces go to :attr:`Phoenix.otlp_url`
(``OTEL_EXPORTER_OTLP_ENDPOINT``); a project is chosen per trace by the resource attribute
``openinference.project.name`` (:func:`project_resource`). Its REST API reads the spans
back (:meth:`Phoenix.spans`); its UI shows one trace at :meth:`Phoenix.trace_url`.
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Final

from .ports import free_port
from .served import ServedProcess

__all__ = [
    "PROJECT_ATTRIBUTE",
    "Phoenix",
    "phoenix_command",
    "phoenix_installed",
    "project_resource",
]

ROOT: Final = Path(__file__).resolve().parent.parent
INSTALLER: Final = ROOT / "scripts" / "install-phoenix"
PROJECT_ATTRIBUTE: Final = "openinference.project.name"
"""The resource attribute Phoenix files a trace's spans under (its project)."""


def phoenix_command() -> Path:
    """Path of the ``phoenix`` command, installing Phoenix (once per machine) if needed."""
    out = subprocess.run([str(INSTALLER)], check=True, stdout=subprocess.PIPE, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def phoenix_installed() -> bool:
    """Whether Phoenix is installed on this machine (nothing is installed to find out)."""
    check = subprocess.run([str(INSTALLER), "--check"], capture_output=True, check=False)
    return check.returncode == 0


def project_resource(project: str) -> str:
    """The ``OTEL_RESOURCE_ATTRIBUTES`` entry that files a process's spans under ``project``."""
    return f"{PROJECT_ATTRIBUTE}={project}"


class Phoenix(ServedProcess):
    """Arize Phoenix, its UI, OTLP/HTTP receiver and REST API on one loopback port."""

    name = "phoenix"
    start_timeout_s = 300.0
    """Its imports (pandas, pyarrow, scikit-learn) take ~15 s of CPU: more than 120 s on a
    loaded 2-core machine (fU)."""

    def __init__(self) -> None:
        """Pick free loopback ports."""
        super().__init__()
        self.pick_ports()

    def pick_ports(self) -> None:
        """Free loopback ports for the HTTP server and the OTLP/gRPC receiver."""
        self.port = free_port()
        self.grpc_port = free_port()

    @property
    def url(self) -> str:
        """The UI, the REST API and the OTLP/HTTP receiver."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def otlp_url(self) -> str:
        """The OTLP/HTTP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT``; traces at ``/v1/traces``)."""
        return self.url

    @property
    def ready_url(self) -> str:
        """Phoenix's readiness check (its database is migrated and answers)."""
        return f"{self.url}/readyz"

    def environment(self, folder: Path) -> dict[str, str]:
        return {
            "PHOENIX_WORKING_DIR": str(folder / "data"),
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(self.grpc_port),
            "PHOENIX_TELEMETRY_ENABLED": "false",
            "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
            # Its AI assistant (a chat with a hosted model) and its MCP server: nothing a
            # trace viewer here needs, one way out and one way in less (2 of its 20 CPU-s
            # to start).
            "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
            "PHOENIX_ENABLE_MCP_SERVER": "false",
        }

    def command(self, folder: Path) -> list[str]:
        return [str(phoenix_command()), "serve"]

    def spans(self, project: str, limit: int = 1000) -> list[dict[str, Any]]:
        """The spans of ``project`` (a name), newest first, as the REST API returns them
        (``name``, ``context.trace_id``, ``span_kind``, ``attributes``, ``events``)."""
        query = urllib.parse.urlencode({"limit": str(limit)})
        path = f"/v1/projects/{urllib.parse.quote(project, safe='')}/spans?{query}"
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:  # no span filed under it yet
                return []
            raise
        data: list[dict[str, Any]] = body["data"]
        return data

    def trace_url(self, trace_id: str) -> str:
        """The UI's page of one trace (``trace_id``: the OpenTelemetry id, 32 hex digits)."""
        return f"{self.url}/redirects/traces/{trace_id}"
