"""A worker that loses only the database (issue 34, part 5), with the partition made for real.

The first worker reaches Postgres through a TCP proxy (``tests/support/tcp_proxy.py``);
the watcher and the second worker reach it directly. Mid-turn, the proxy is cut (a black
hole: no reset, only silence). The first worker's renewals fail; the watcher, which
still reaches the database, sees its leases go stale and moves its rooms. The old agent,
whose model goes on streaming, sends nothing once its lease is unconfirmed for the
lease timeout: no client gets a packet from it after the new agent's first. The watcher's
dispatches for the takeover ask for the lease, so the cut-off worker (livekit-server may
hand it one) refuses them: each room has one agent, the new one. Once the link heals the
old agents are out of their rooms.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from alicia.agent.rooms.lease_keeper import ACCEPT_REQUIRED_FACTOR
from alicia.harness import LiveKitServer, PostgresServer
from alicia.harness.recorded_llm import Play, RecordedLLM
from alicia.protocol import ReasoningStep, new_id
from tests.e2e.failover.helpers import (
    LEASE,
    agents_in,
    following_client,
    rooms_mid_turn,
    running_watcher,
    worker_env,
)
from tests.e2e.worker import running_worker
from tests.support.db import fetch, new_database
from tests.support.tcp_proxy import tcp_proxy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

LLM_STREAMS = "shared"
STREAM = "deepseek_reasoning_content"
ROOMS = 2


async def test_a_worker_cut_off_from_the_database_sends_nothing_once_its_rooms_move(
    livekit: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    watch_port: int,
    tmp_path: Path,
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "partition")
    async with tcp_proxy(postgres_server.port) as proxy, contextlib.AsyncExitStack() as stack:
        behind = url.replace(f":{postgres_server.port}/", f":{proxy.port}/")
        assert behind != url
        watching = running_watcher(livekit, url, port=watch_port, env=LEASE)
        watcher = await stack.enter_async_context(watching)
        first = await stack.enter_async_context(
            running_worker(livekit, llm.base_url, env=worker_env(behind, **LEASE))
        )
        rooms = await rooms_mid_turn(livekit, llm, stack, ROOMS, STREAM)
        olds = {c.agent for _, c, _ in rooms}
        # Through the proxy, the first worker holds its rooms' leases.
        async with asyncio.timeout(10):
            while True:
                held = await fetch(url, "SELECT agent_identity FROM alicia_agents")
                if {r["agent_identity"] for r in held} == olds:
                    break
                await asyncio.sleep(0.2)
        second = await stack.enter_async_context(
            running_worker(livekit, llm.base_url, env=worker_env(url, **LEASE))
        )
        joined_before_cut = first.log(tail=10**8).count('"room joined"')
        proxy.cut()
        try:
            async with asyncio.timeout(30):
                while not all(c.resumed and c.agent not in olds for _, c, _ in rooms):
                    await asyncio.sleep(0.05)
        except TimeoutError as exc:
            state = "\n".join(f"{r}: {c.agents} resumed={c.resumed}" for r, c, _ in rooms)
            raise AssertionError(f"not moved\n{state}\n{watcher.log()}\n{second.log()}") from exc
        await asyncio.sleep(4.0)  # the old agents' model streams on meanwhile
        for room, client, _ in rooms:
            new = client.agent
            taken = min(t for who, t, _ in client.heard if who == new)
            late = [(who, round(t - taken, 2)) for who, t, _ in client.heard if who in olds]
            late = [(who, after) for who, after in late if after >= 0]
            assert late == [], f"{room}: the old agent sent after the new one: {late}"
        # The partitioned worker served none of the takeover's dispatches (they ask for the
        # lease, which it cannot reach; livekit-server may or may not offer it one): it
        # joined no room after the cut (before it, a loaded machine may have moved a room
        # within it already), and each room has one agent, the new one.
        log = first.log(tail=10**8)
        assert log.count('"room joined"') == joined_before_cut, log[-3000:]
        for room, client, _ in rooms:
            assert await agents_in(livekit, room) == {client.agent}, room
        # The link heals: the old agents' renewals find their rooms taken; they are out.
        proxy.heal()
        healed = time.monotonic()
        async with asyncio.timeout(20):
            while [room for room, _, _ in rooms if (await agents_in(livekit, room)) & olds]:
                await asyncio.sleep(0.2)
        print(f"old agents out {time.monotonic() - healed:.2f} s after the link healed")
        await asyncio.sleep(2.0)
        for room, client, _ in rooms:
            assert await agents_in(livekit, room) == {client.agent}, room


async def test_a_worker_that_cannot_reach_the_database_never_serves_a_room_beside_a_leased_one(
    livekit: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    watch_port: int,
    tmp_path: Path,
) -> None:
    """The same door from the start: a worker cut off before a room's first dispatch could
    serve it only without a lease, which nothing could fence. The watcher, which reaches
    the database, asks every dispatch it decided there to hold the lease: the cut-off
    worker refuses them, and the room gets its agent from a worker that holds the lease."""
    url = await new_database("postgres", postgres_server, tmp_path, "unclaimed")
    room = new_id("conv")
    async with tcp_proxy(postgres_server.port) as proxy, contextlib.AsyncExitStack() as stack:
        behind = url.replace(f":{postgres_server.port}/", f":{proxy.port}/")
        await stack.enter_async_context(running_watcher(livekit, url, port=watch_port, env=LEASE))
        first = await stack.enter_async_context(
            running_worker(livekit, llm.base_url, env=worker_env(behind, **LEASE))
        )
        proxy.cut()  # before any room: the worker could claim no lease
        client = await stack.enter_async_context(following_client(livekit, room, "user0"))
        # The watcher's dispatch reaches the only worker, which waits for the database as
        # long as a dispatch that asks for the lease may wait (a black hole: no reset), then
        # refuses it (a fresh clone's run: 32 s at this lease, past a 30 s wait).
        refused_within = ACCEPT_REQUIRED_FACTOR * float(LEASE["ALICIA_HEARTBEAT_TIMEOUT"]) + 15
        async with asyncio.timeout(refused_within):
            while "job refused" not in first.log(tail=10**8):
                await asyncio.sleep(0.2)
        assert await agents_in(livekit, room) == set()
        # livekit-server may offer the room to the cut-off worker again and again (a
        # fresh-clone run's four dispatches in 30 s all went there): it is stopped, having
        # served nothing, so that the next dispatch finds the worker that can hold a lease.
        os.killpg(first.proc.pid, signal.SIGTERM)
        await asyncio.wait_for(first.proc.wait(), 30)
        assert '"room joined"' not in first.log(tail=10**8)
        second = await stack.enter_async_context(
            running_worker(livekit, llm.base_url, env=worker_env(url, **LEASE))
        )
        try:
            await client.wait_for_agent(40)  # the watcher dispatches again
        except TimeoutError as exc:
            raise AssertionError(f"{first.log()}\n---\n{second.log()}") from exc
        await client.handshake()
        llm.script(Play(STREAM))
        await client.ask(llm.spec(STREAM).user)
        await client.wait_for(ReasoningStep, within=30)
        [lease] = await fetch(url, "SELECT agent_identity, epoch FROM alicia_agents")
        assert lease["agent_identity"] == client.agent and lease["epoch"] >= 1
        assert await agents_in(livekit, room) == {client.agent}
        assert {who for who, _, _ in client.heard} == {client.agent}
