"""The observability backends for a module: real Jaeger v2 and Prometheus on loopback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from alicia.harness.observability import Jaeger

T = TypeVar("T")


@pytest.fixture(scope="module")
def jaeger() -> Iterator[Jaeger]:
    """Jaeger for the module (OTLP/HTTP in, query API out), memory storage."""
    with Jaeger() as server:
        assert isinstance(server, Jaeger)
        yield server


async def eventually(what: str, probe: Callable[[], T | None], within: float = 30.0) -> T:
    """``probe()`` (run in a thread: the backends' APIs are blocking) until it returns
    something, for at most ``within`` seconds."""
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = await asyncio.to_thread(probe)
        except OSError as exc:
            last = exc
        if last is not None and not isinstance(last, OSError):
            return last  # type: ignore[no-any-return]
        await asyncio.sleep(0.5)
    raise AssertionError(f"{what}: nothing within {within} s (last: {last!r})")


def traced(jaeger: Jaeger, service: str, **extra: str) -> dict[str, str]:
    """A process's environment for traces to ``jaeger`` under ``service`` (exported every
    200 ms), with ``extra`` on top."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp_url,
        "OTEL_SERVICE_NAME": service,
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        **extra,
    }


def tags(item: dict[str, Any]) -> dict[str, Any]:
    """A Jaeger span's (or log's) key/value list as a dict."""
    return {t["key"]: t["value"] for t in item.get("tags", item.get("fields", []))}
