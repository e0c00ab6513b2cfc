"""Many workers on one livekit-server: LiveKit's dispatch spreads rooms by reported load.

Three real workers (``python -m alicia.agent start``, thread executor) register with one
real livekit-server, each with ``ALICIA_MAX_ROOMS`` 4 (its load 0.7 x rooms / 4, full at
4 rooms). 12 rooms, opened one after another, must end up 4, 4 and 4: every room with an
agent that answers, none on a full worker. (With a load of rooms / 4 the server sent none
of the last three: each worker was at 0.75, past the server's ``agents.target_load``.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter

import pytest

from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import AssistantSentence, UserMessage, new_id
from tests.e2e.worker import WorkerProcess, running_worker
from tests.support.livekit_rooms import protocol_client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

WORKERS = 3
CAPACITY = 4
ROOMS = 12


def rooms_of(worker: WorkerProcess) -> set[str]:
    """The rooms a worker joined, from its log."""
    rooms: set[str] = set()
    for line in worker.log(tail=10_000_000).splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("message") == "room joined":
                rooms.add(str(record.get("room")))
    return rooms


async def test_three_workers_share_the_rooms_as_their_load_says(
    livekit_server: LiveKitServer,
) -> None:
    env = {"ALICIA_JOB_EXECUTOR": "thread", "ALICIA_MAX_ROOMS": str(CAPACITY)}
    async with RecordedLLM() as llm, contextlib.AsyncExitStack() as stack:
        workers = [
            await stack.enter_async_context(running_worker(livekit_server, llm.base_url, env=env))
            for _ in range(WORKERS)
        ]
        rooms = [new_id("conv") for _ in range(ROOMS)]
        clients = []
        for room in rooms:  # one after another: each worker's load reaches the server
            clients.append(
                await stack.enter_async_context(protocol_client(livekit_server, room, "user"))
            )
            await asyncio.sleep(0.5)
        spec = llm.spec("deepseek_reasoning_content")
        llm.script(*["deepseek_reasoning_content"] * ROOMS)
        for room, client in zip(rooms, clients, strict=True):
            await client.send(
                UserMessage(id=new_id("msg"), conversation_id=room, content=spec.user)
            )
        for client in clients:
            await client.wait_for(AssistantSentence, within=60, is_final=True)
        served = [rooms_of(w) & set(rooms) for w in workers]
    assert sorted(len(s) for s in served) == [CAPACITY] * WORKERS, Counter(map(len, served))
    assert set().union(*served) == set(rooms)  # every room got an agent, exactly one
    assert sum(len(s) for s in served) == ROOMS
