"""The parts every front end wires from :class:`~alicia.agent.settings.Settings`.

The LiveKit worker (``agent/rooms/``) and the AG-UI endpoint (``agent/agui/``) serve the
same engine with the same storage, keys and model client; this module makes them once,
so both front ends open them the same way.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import logging
import os
import shutil
import tempfile
from typing import TYPE_CHECKING

import openai

from alicia.agent.engine.sink import NullSink, StepSink
from alicia.agent.engine.telemetry import TraceContent, TurnTelemetry

if TYPE_CHECKING:
    from alicia.agent.settings import Settings
    from alicia.agent.storage.keys import KeyStore
    from alicia.agent.storage.leases import Fence

__all__ = [
    "flush_metrics",
    "metrics_folder",
    "open_keys",
    "open_llm",
    "open_sink",
    "open_telemetry",
]

logger = logging.getLogger("alicia.worker")


async def open_sink(
    url: str | None,
    *,
    close_timeout_s: float = 10.0,
    linger_s: float | None = None,
    fence: Fence | None = None,
    pool_size: int | None = None,
) -> StepSink:
    """The storage sink for ``url`` (None: persistence off); ``linger_s``: how long a
    batch waits to fill (0 for failover, where every envelope is stored before it leaves);
    ``fence``: failover, every write conditional on the room's lease epoch; ``pool_size``:
    connections at most, shared with the other sinks on this loop (``ALICIA_DB_POOL_SIZE``)."""
    if not url:
        return NullSink()
    # SQLAlchemy only when storing.
    from alicia.agent.storage.writer import WriterOptions
    from alicia.agent.storage.writer import open_sink as open_storage

    options = WriterOptions(close_timeout_s=close_timeout_s, fence=fence)
    if linger_s is not None:
        options = dataclasses.replace(options, linger_s=linger_s)
    if pool_size is not None:
        options = dataclasses.replace(options, pool_size=pool_size)
    return await open_storage(url, options)


def open_keys(settings: Settings) -> KeyStore | None:
    """The per-conversation data keys (storage and master keys both configured)."""
    if not (settings.database_url and settings.reasoning_keys):
        if settings.zdr:
            logger.warning(
                "ALICIA_ZDR without DATABASE_URL and ALICIA_REASONING_KEYS: no step is stored"
            )
        return None
    from alicia.agent.engine.sealing import ReasoningSealer
    from alicia.agent.storage.keys import KeyStore

    return KeyStore(settings.database_url, ReasoningSealer(settings.reasoning_keys))


def open_llm(settings: Settings) -> openai.AsyncOpenAI:
    """The model client: the ``openai`` client on its aiohttp transport."""
    return openai.AsyncOpenAI(
        base_url=settings.llm_base_url,
        api_key=settings.llm_api_key,
        timeout=settings.llm_timeout_s,
        max_retries=1,
        # aiohttp transport (openai's documented option): the default anyio one pauses and
        # resumes the socket for every streamed read, a selector error path each time.
        http_client=openai.DefaultAioHttpClient(timeout=settings.llm_timeout_s),
    )


def open_telemetry(settings: Settings) -> TurnTelemetry:
    """The engine's telemetry for ``settings``' turns: OpenTelemetry when the ``OTEL_*``
    environment asks for traces or ``ALICIA_METRICS_PORT`` for metrics
    (``alicia.agent.telemetry.setup``), else nothing per turn. One per process and
    provider."""
    return _telemetry(
        settings.turn_options().provider.name,
        settings.metrics_port is not None,
        settings.trace_content,
    )


@functools.cache
def _telemetry(provider_name: str, metrics_on: bool, content: TraceContent) -> TurnTelemetry:
    from alicia.agent.telemetry import telemetry_from_env

    return telemetry_from_env(provider_name, metrics_on=metrics_on, content=content)


def flush_metrics() -> None:
    """Export this process's metrics now, if it has any (blocking, bounded): see
    :func:`alicia.agent.telemetry.flush_metrics`."""
    if _telemetry.cache_info().currsize:
        from alicia.agent.telemetry import flush_metrics as flush

        flush()


def metrics_folder() -> str:
    """Prometheus' multiprocess folder of this process and its children:
    ``PROMETHEUS_MULTIPROC_DIR``, or a new temporary folder (removed at exit) set there.
    Call it before anything imports ``prometheus_client`` (livekit-agents does, and
    ``alicia.agent.telemetry``)."""
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
    if not folder:
        folder = tempfile.mkdtemp(prefix="alicia-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder
