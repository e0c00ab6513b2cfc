"""Two livekit-server nodes sharing Redis, behind haproxy: what holds on one node holds
across nodes.

The module's cluster (``tests/e2e/conftest.py``: two nodes, one Redis, haproxy in front)
and two real workers (``python -m alicia.agent start``), each connected to a different
node. Four rooms, each created through the API of one node and joined through the other
node, and through the balancer: every room gets one agent, the workers share them as their
load says (two each, wherever the room was made), and in every room a participant with
the full grant sees the reasoning and the answer while one granted ``none``, connected
through the balancer, sees the answer and no step.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from livekit import api, rtc

from alicia.harness.cluster import LiveKitCluster
from alicia.harness.livekit_server import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import AssistantSentence, ReasoningStep, UserMessage, new_id
from tests.e2e.test_many_workers import rooms_of
from tests.e2e.worker import running_worker
from tests.support.livekit_rooms import ProtocolClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROOMS = 4
CAPACITY = 2
"""Rooms a worker takes (``ALICIA_MAX_ROOMS``): it is full at two, so two each."""


@contextlib.asynccontextmanager
async def client(
    through: LiveKitServer | LiveKitCluster, room: str, identity: str, level: str
) -> AsyncIterator[ProtocolClient]:
    """A protocol client granted ``level``, connected ``through`` a node or the balancer,
    that has seen the agent and been answered."""
    r = rtc.Room()
    await r.connect(
        through.url, through.token(identity, room, attributes={"alicia.reasoning": level})
    )
    try:
        c = ProtocolClient(r, room)
        await c.wait_for_agent(within=60)
        await c.handshake()
        yield c
    finally:
        await r.disconnect()


async def test_rooms_made_through_either_node_are_served_from_either_node(
    cluster: LiveKitCluster,
) -> None:
    env = {"ALICIA_MAX_ROOMS": str(CAPACITY)}
    async with RecordedLLM() as llm, contextlib.AsyncExitStack() as stack:
        workers = [
            await stack.enter_async_context(running_worker(node, llm.base_url, env=env))
            for node in cluster.nodes
        ]
        rooms = [new_id("conv") for _ in range(ROOMS)]
        full: list[ProtocolClient] = []
        none: list[ProtocolClient] = []
        for i, room in enumerate(rooms):  # one after another: each worker's load is known
            made, other = cluster.nodes[i % 2], cluster.nodes[(i + 1) % 2]
            async with api.LiveKitAPI(made.http_url, made.api_key, made.api_secret) as lk:
                await lk.room.create_room(api.CreateRoomRequest(name=room))
            full.append(await stack.enter_async_context(client(other, room, "user", "full")))
            none.append(await stack.enter_async_context(client(cluster, room, "guest", "none")))
            await asyncio.sleep(0.5)
        spec = llm.spec("deepseek_reasoning_content")
        llm.script(*["deepseek_reasoning_content"] * ROOMS)
        for room, c in zip(rooms, full, strict=True):
            await c.send(UserMessage(id=new_id("msg"), conversation_id=room, content=spec.user))
        for c in full + none:
            await c.wait_for(AssistantSentence, within=60, is_final=True)
        served = [rooms_of(w) & set(rooms) for w in workers]
    assert sorted(len(s) for s in served) == [CAPACITY, CAPACITY], served
    assert set().union(*served) == set(rooms)  # every room got an agent, exactly one
    for c in full:
        steps = " ".join(s.content for s in c.of(ReasoningStep))
        assert steps.split() == " ".join(spec.steps).split()
        assert " ".join(s.text for s in c.of(AssistantSentence)).split() == spec.answer.split()
    for c in none:
        assert c.of(ReasoningStep) == []
        assert " ".join(s.text for s in c.of(AssistantSentence)).split() == spec.answer.split()
