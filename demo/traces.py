"""``--traces``: Arize Phoenix beside the demo, the worker's traces sent there, and the
URL of each turn's trace in Phoenix's UI.

Phoenix is installed into a virtualenv of its own the first time it is needed
(``scripts/install-phoenix``); it listens on loopback only, keeps its data in a temporary
folder, and sends nothing off the machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final

from rich.console import Console

from alicia.harness.phoenix import Phoenix, phoenix_command, phoenix_installed, project_resource

__all__ = ["DEMO_PROJECT", "TRACE_LINE", "phoenix", "traced_env", "turn_traces"]

DEMO_PROJECT: Final = "alicia-demo"
"""The worker's ``OTEL_SERVICE_NAME`` and Phoenix project under ``--traces``."""
TRACE_LINE: Final = "Trace: "
"""How each line with a turn's trace URL begins."""
TURN_STATUS: Final = "alicia.turn.status"
"""The attribute only a finished turn's span carries."""


@contextlib.asynccontextmanager
async def phoenix(console: Console) -> AsyncIterator[Phoenix]:
    """Phoenix started (installed first if needed), stopped on exit."""
    if not await asyncio.to_thread(phoenix_installed):
        console.print("  traces          installing Arize Phoenix (once, a minute or two) ...")
        await asyncio.to_thread(phoenix_command)
    server = Phoenix()
    await asyncio.to_thread(server.start)
    try:
        console.print(
            f"  traces          Arize Phoenix at {server.url} "
            f"(OTLP/HTTP {server.otlp_url}/v1/traces, project {DEMO_PROJECT})"
        )
        yield server
    finally:
        await asyncio.to_thread(server.stop)


def traced_env(server: Phoenix, env: Mapping[str, str]) -> dict[str, str]:
    """The worker's variables that send its traces to ``server`` under :data:`DEMO_PROJECT`,
    exported every 0.5 s (resource attributes and a delay the caller set are kept)."""
    resource = ",".join(
        part
        for part in (env.get("OTEL_RESOURCE_ATTRIBUTES", ""), project_resource(DEMO_PROJECT))
        if part
    )
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": server.otlp_url,
        "OTEL_SERVICE_NAME": DEMO_PROJECT,
        "OTEL_RESOURCE_ATTRIBUTES": resource,
        # The SDK exports every 5 s by default: the turn's URL is printed once Phoenix has it.
        "OTEL_BSP_SCHEDULE_DELAY": env.get("OTEL_BSP_SCHEDULE_DELAY", "500"),
    }


async def turn_traces(server: Phoenix, room: str, turns: int, within: float = 60.0) -> list[str]:
    """The trace ids of the first ``turns`` finished turns of ``room``, in the order they
    started, once Phoenix has them (the worker exports in batches)."""
    deadline = time.monotonic() + within
    while True:
        spans = await asyncio.to_thread(server.spans, DEMO_PROJECT)
        found = sorted(
            (s for s in spans if _is_turn(s, room)), key=lambda s: str(s.get("start_time"))
        )
        if len(found) >= turns or time.monotonic() > deadline:
            return [str(s["context"]["trace_id"]) for s in found[:turns]]
        await asyncio.sleep(0.5)


def _is_turn(span: Mapping[str, Any], room: str) -> bool:
    attributes = span.get("attributes") or {}
    return (
        attributes.get("gen_ai.conversation.id") == room
        and TURN_STATUS in attributes
        and str(span.get("name", "")).startswith("chat ")
    )
