"""Failover in real Jaeger (issue 35): a worker killed mid-turn, its room taken over by a
second worker, which then drains on SIGTERM.

Both workers (and the watcher) run as in ``tests/e2e/failover``, the workers with
``OTEL_EXPORTER_OTLP_ENDPOINT`` at Jaeger under one service name. Jaeger's query API
returns the room's failover as spans on it (``gen_ai.conversation.id``): the first
agent's claim (epoch 1), the takeover's claim (epoch 2, with the seconds the room went
without a live agent) and the second worker's drain (its turns settled).
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from alicia.harness import LiveKitServer, PostgresServer
from alicia.harness.observability import Jaeger
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import new_id
from tests.e2e.failover.helpers import rooms_mid_turn, running_watcher, worker_env
from tests.e2e.observability.conftest import eventually, tags, traced
from tests.e2e.worker import running_worker
from tests.support.db import new_database

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

LLM_STREAMS = "shared"
STREAM = "deepseek_reasoning_content"
SERVICE = f"alicia-failover-{new_id('t')}"
LEASE = {"ALICIA_HEARTBEAT_TIMEOUT": "8"}
"""As in ``tests/e2e/failover/test_failover.py``: a loaded 2-core machine starved the first
worker's renewals (1.5 s by default) and the watcher moved the room before the kill (the
spans then told of a takeover by the same worker, with no ``vacant_s``)."""


def spans_on(jaeger: Jaeger, room: str) -> list[dict[str, Any]]:
    """The failover spans on ``room`` Jaeger has, oldest first."""
    found = [
        span
        for trace in jaeger.traces(SERVICE)
        for span in trace["spans"]
        if span["operationName"].startswith(("alicia.lease.", "alicia.drain"))
        and tags(span).get("gen_ai.conversation.id") == room
    ]
    return sorted(found, key=lambda s: int(s["startTime"]))


async def test_claims_a_takeover_and_a_drain_are_spans_on_the_room(
    livekit: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    watch_port: int,
    tmp_path: Path,
    jaeger: Jaeger,
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "traces")
    env = worker_env(url, **LEASE, **traced(jaeger, SERVICE))
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(running_watcher(livekit, url, port=watch_port, env=LEASE))
        first = await stack.enter_async_context(running_worker(livekit, llm.base_url, env=env))
        [(room, client, user_id)] = await rooms_mid_turn(livekit, llm, stack, 1, STREAM)

        def first_claim() -> list[dict[str, Any]] | None:
            return spans_on(jaeger, room) or None

        await eventually("the first claim in Jaeger", first_claim)
        async with running_worker(livekit, llm.base_url, env=env) as second:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(first.proc.pid, signal.SIGKILL)
            try:
                await client.wait_turn_end(user_id, within=60)
            except BaseException as exc:
                raise AssertionError(f"{exc!r}\n{second.log()}") from exc
        # The second worker drained on SIGTERM (leaving the context) and exported on exit.

        def all_three() -> list[dict[str, Any]] | None:
            spans = spans_on(jaeger, room)
            return spans if any(s["operationName"] == "alicia.drain" for s in spans) else None

        spans = await eventually("the drain in Jaeger", all_three)
    claims = [
        tags(s)
        for s in spans
        if s["operationName"] == "alicia.lease.claim"
        and tags(s).get("alicia.lease.outcome") == "held"
    ]
    assert [c["alicia.lease.epoch"] for c in claims] == [1, 2], spans
    assert "alicia.lease.vacant_s" not in claims[0]  # nobody held the room before
    assert 0 < claims[1]["alicia.lease.vacant_s"] < 60  # the takeover: the room's wait
    [drain] = [tags(s) for s in spans if s["operationName"] == "alicia.drain"]
    assert drain["alicia.drain.settled"] is True
    print(f"takeover after {claims[1]['alicia.lease.vacant_s']} s without a live agent")
