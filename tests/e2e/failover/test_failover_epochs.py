"""Fencing that never goes back (issue 34, part 4), with real processes and SIGSTOP.

Agent A (the first worker) holds a room mid-turn and is stopped. Agent B (the second
worker) takes the room over, then its worker is asked to stop (SIGTERM): B leaves
cleanly and releases the lease. Agent C (a third worker) gets the room. Then A wakes:
its model had gone on streaming into the socket, so it has steps to store and envelopes
to log at once. The lease's epoch only ever grows (a released row is kept, vacant), and
the fence names the holder, so A's writes are refused: nothing A made lands in C's
conversation, and the room hears nothing more from A.

On the earlier code, ``release`` deleted the row and C's claim started again at epoch 1,
A's epoch: A's fence check passed and its rows were stored in C's conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import signal
import time
from pathlib import Path

import pytest

from alicia.harness import LiveKitServer, PostgresServer
from alicia.harness.recorded_llm import RecordedLLM
from tests.e2e.failover.helpers import FollowingClient, rooms_mid_turn, running_watcher, worker_env
from tests.e2e.worker import running_worker
from tests.support.db import fetch, new_database

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

LLM_STREAMS = "shared"  # llm (tests/conftest.py): the streams of tests/streams only
STREAM = "deepseek_reasoning_content"
WAKE_WATCH_S = 6.0
"""How long the woken agent is given to write what it has."""


async def moved_from(client: FollowingClient, olds: set[str], within: float) -> str:
    """Wait until ``client`` follows an agent not in ``olds`` and resumed with it (one
    resume more than before)."""
    resumes = len(client.resumed)
    async with asyncio.timeout(within):
        while client.agent in olds or len(client.resumed) <= resumes:
            await asyncio.sleep(0.05)
    return client.agent


async def lease(url: str, room: str) -> tuple[str | None, int]:
    """The room's lease row: (holder, epoch)."""
    [row] = await fetch(
        url, f"SELECT agent_identity, epoch FROM alicia_agents WHERE conversation_id = '{room}'"
    )
    return row["agent_identity"], int(row["epoch"])


async def test_a_stopped_agent_whose_room_moved_twice_stores_nothing_when_it_wakes(
    livekit: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    watch_port: int,
    tmp_path: Path,
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "epochs")
    env = worker_env(url, ALICIA_DRAIN_TURN_TIMEOUT="5")
    async with contextlib.AsyncExitStack() as stack:
        watcher = await stack.enter_async_context(running_watcher(livekit, url, port=watch_port))
        first = await stack.enter_async_context(running_worker(livekit, llm.base_url, env=env))
        [(room, client, _)] = await rooms_mid_turn(livekit, llm, stack, 1, STREAM)
        a = client.agent
        second = await stack.enter_async_context(running_worker(livekit, llm.base_url, env=env))
        os.killpg(first.proc.pid, signal.SIGSTOP)
        try:
            b = await moved_from(client, {a}, 30)
            _, epoch_b = await lease(url, room)
            third = await stack.enter_async_context(running_worker(livekit, llm.base_url, env=env))
            os.killpg(second.proc.pid, signal.SIGTERM)  # B leaves cleanly: its lease released
            try:
                c = await moved_from(client, {a, b}, 45)
            except TimeoutError as exc:
                raise AssertionError(
                    f"no third agent: {client.agents}\n{watcher.log()}\n{third.log()}"
                ) from exc
            holder, epoch_c = await lease(url, room)
            assert holder == c
            assert epoch_c > epoch_b, (epoch_b, epoch_c)  # never back to A's epoch
            [now] = await fetch(url, "SELECT now() AS t")
            woke_at: dt.datetime = now["t"]
            woke = time.monotonic()
        finally:
            os.killpg(first.proc.pid, signal.SIGCONT)
        await asyncio.sleep(WAKE_WATCH_S)
        # Nobody asked anything since the takeovers: every step stored after A woke is A's.
        late_steps = await fetch(
            url,
            "SELECT id, content FROM alicia_reasoning_steps "
            f"WHERE created_at >= '{woke_at.isoformat()}'",
        )
        assert late_steps == [], f"the woken agent's steps were stored: {late_steps}"
        assert await lease(url, room) == (c, epoch_c)
        c_first = min((t for who, t, _ in client.heard if who == c), default=woke)
        late = [round(t - woke, 2) for who, t, _ in client.heard if who == a and t >= c_first]
        assert late == [], f"the room heard the woken agent: {late}"
        log = first.log(tail=10**7)
        assert "fenced" in log or "lease lost" in log, log[-3000:]
