"""A livekit-server node that dies (``kill -9``) with rooms mid-turn, on a 2-node cluster.

The module's cluster (two nodes, one Redis, haproxy in front, webhooks from both nodes to
both watchers), Postgres, two watchers and two failover workers, all reaching LiveKit
through the balancer, as a deployment would. Four rooms mid-turn; the node hosting most of
them (Redis's ``room_node_map``) is killed, and half a second later one of the watchers
(``kill -9``, started again a second later). The node's rooms are gone from LiveKit. LiveKit's SDK
brings every participant back through the balancer to the node that is left, where the
room starts again; the agent serves it again (the same one: its process lives, with its
lease), and every client resumes from what it had when its link or the agent was lost
(§4.9; on the SDK's ``reconnected`` if the agent is there, else once it is back),
repeating its Configuration as the clients do until the reply arrives (a first reply can
go into the agent's or the client's link before it is up: the agent answers each repeat
received after its answer went out, in full). Each client then holds every envelope
logged for it (nothing lost: one whose sender the SDK could not name yet, as the agent's
data can outrun the news of its rejoining, is asked for again by a resume from below it,
as the clients do), none twice and none sent twice unasked, the stepIndex chains are
whole, what it holds is what is stored, the cut turn is closed (its answer finished, or
ErrorMessage 503), and a new turn works everywhere. The time from the kill to each lost
room's first envelope is printed (``NODE_DEATH`` line).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from pathlib import Path

import pytest

from alicia.harness import PostgresServer
from alicia.harness.cluster import LiveKitCluster
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import AssistantSentence, ErrorMessage
from tests.e2e.failover.helpers import (
    LEASE,
    FollowingClient,
    rooms_mid_turn,
    running_watcher,
    worker_env,
)
from tests.e2e.failover.test_failover import check_consistent, summary
from tests.e2e.worker import running_worker
from tests.support.db import new_database

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

LLM_STREAMS = "shared"  # llm (tests/conftest.py): the streams of tests/streams only
LLM_OPTIONS = {"chunk_delay": 0.02}
STREAM = "deepseek_reasoning_content"
ROOMS = 4


def _since(client: FollowingClient, killed_at: float) -> str:
    """What a client went through after the kill (for failure messages)."""

    def rel(times: list[float]) -> list[float]:
        return [round(t - killed_at, 2) for t in times if t > killed_at]

    heard = [t for _, t, _ in client.heard]
    return (
        f"reconnected={rel(client.reconnected)} resumed={rel(client.resumed)} "
        f"heard={rel(heard)[:20]} duplicates={client.duplicates} {summary(client)}"
    )


async def test_a_node_that_dies_leaves_no_room_without_its_conversation(
    cluster: LiveKitCluster,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    watch_port: int,
    second_watch_port: int,
    tmp_path: Path,
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "nodes")
    env = worker_env(url, **LEASE)
    spec = llm.spec(STREAM)
    async with contextlib.AsyncExitStack() as stack:
        watchers = [
            await stack.enter_async_context(
                running_watcher(cluster, url, port=port, env=LEASE)  # type: ignore[arg-type]
            )
            for port in (watch_port, second_watch_port)
        ]
        workers = [
            await stack.enter_async_context(running_worker(cluster, llm.base_url, env=env))  # type: ignore[arg-type]
            for _ in range(2)
        ]
        rooms = await rooms_mid_turn(cluster, llm, stack, ROOMS, STREAM, pace=0.25)  # type: ignore[arg-type]
        placed = {room: cluster.node_of(room) for room, _, _ in rooms}
        victim = Counter(placed.values()).most_common(1)[0][0]
        assert victim is not None, placed
        lost = [(room, c, u) for room, c, u in rooms if placed[room] == victim]
        killed_at = time.monotonic()
        cluster.nodes[victim].kill()
        # One watcher dies too, and comes back while the rooms start again on the other
        # node (its webhooks go to both): the rooms' fate is decided in the database.
        await asyncio.sleep(0.5)
        watchers[0].kill()
        await asyncio.sleep(1.0)
        watchers[0] = await stack.enter_async_context(
            running_watcher(cluster, url, port=watch_port, env=LEASE)  # type: ignore[arg-type]
        )
        try:
            for _, client, user_id in rooms:
                await client.wait_turn_end(user_id, within=90)
            for _, client, _ in lost:
                async with asyncio.timeout(30):
                    while not [t for t in client.resumed if t > killed_at]:
                        await asyncio.sleep(0.05)
        except BaseException as exc:
            state = "\n".join(
                f"{room} (node {placed[room]}): {_since(c, killed_at)}" for room, c, _ in rooms
            )
            notable = "\n".join(w.notable() for w in workers)
            logs = "\n".join(w.log() for w in watchers)
            raise AssertionError(f"{exc!r}\n{state}\n{logs}\n{notable}") from exc
        back = []
        for room, client, user_id in lost:
            assert cluster.node_of(room) not in (None, victim)  # started again on the other
            assert client.reconnected and client.reconnected[-1] > killed_at
            back.append(min(t for _, t, _ in client.heard if t > killed_at) - killed_at)
            errors = [b for b in client.of(ErrorMessage) if b.originating_id == user_id]
            answered = any(
                isinstance(b, AssistantSentence) and b.is_final
                for b in client.of(AssistantSentence)
            )
            # The cut turn is closed: its answer finished, or a recoverable error names it.
            assert answered or [(e.code, e.recoverable) for e in errors] == [(503, True)], errors
        # A new turn works in every room.
        llm.script(*[STREAM] * ROOMS)
        again = [(room, client, await client.ask(spec.user)) for room, client, _ in rooms]
        for _, client, user_id in again:
            await client.wait_turn_end(user_id, within=90)
        await asyncio.sleep(1.0)  # the last envelopes reach the database
        for i, (room, client, _) in enumerate(rooms):
            await check_consistent(url, room, client, f"user{i}", unseen_empty=True)
    print(
        f"NODE_DEATH rooms={ROOMS} lost_with_the_node={len(lost)} "
        f"max_s_to_first_envelope={max(back):.2f} lost=0 "  # check_consistent: no gap
        f"repeated={sum(len(c.conflicts) + len(c.unexplained) for _, c, _ in rooms)} "
        f"replayed_again_dropped={sum(c.duplicates for _, c, _ in rooms)} "
        f"unnamed_asked_again={sum(c.unnamed for _, c, _ in rooms)} "
        f"questions_repeated={sum(c.asked_again for _, c, _ in rooms)}"
    )
