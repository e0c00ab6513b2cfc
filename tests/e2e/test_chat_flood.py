"""``lk.chat`` streams that never end cost a room nothing it cannot bound.

The real worker (thread executor: every room in one process, on one loop), two rooms.
In one, ``mallory`` (a process of its own: ``tests/e2e/chat_flooder.py``) opens 1,000
``lk.chat`` text streams, writes a piece of each and closes none. The worker reads at
most ``CHAT_OPEN_PER_SENDER`` of them at once and refuses the rest as they open (an
Overloaded ErrorMessage, rate-limited); once the deadline has passed, her open streams
are dropped and a whole message of hers is a turn again. In the other room, ``alice``'s
turns go on during the flood; the ratio of their times (during / before) is printed (a
figure, not a promise: ``bench/`` measures).
"""

from __future__ import annotations

import asyncio
import statistics
import time

import pytest

from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import ErrorMessage, new_id
from tests.e2e.chat_flooder import assert_refused_as_they_open, mallory, refusals_then_a_turn
from tests.e2e.conftest import WORKER_ENV as BASE_ENV
from tests.e2e.worker import WorkerProcess
from tests.e2e.worker_client import Client, client, final, of, user_message, worker_log_on_failure

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fresh_script")]

LLM_STREAMS = "shared"
WORKER_ENV = {**BASE_ENV, "ALICIA_JOB_EXECUTOR": "thread", "ALICIA_MAX_ROOMS": "8"}
FLOOD = 1000
TURNS = 4
PACE_S = 0.5
"""Between alice's turns (her packet rate limit is a user's, not a benchmark's)."""


async def turn_seconds(alice: Client, llm: RecordedLLM, room: str) -> float:
    """One whole turn of alice's: seconds from her UserMessage to the final sentence."""
    llm.script("plain_no_reasoning")
    before = len(alice.box)
    started = time.monotonic()
    await alice.send(user_message(room, "tell me a fact"))
    await alice.wait_until(lambda b: final(b[before:]), within=30.0)
    return time.monotonic() - started


async def test_a_thousand_open_chat_streams_are_refused_and_the_other_room_goes_on(
    livekit_server: LiveKitServer, worker: WorkerProcess, llm: RecordedLLM
) -> None:
    quiet, flooded = new_id("conv"), new_id("conv")
    with worker_log_on_failure(worker):
        async with (
            client(livekit_server, quiet, "alice") as alice,
            client(livekit_server, flooded, "vic") as vic,
        ):
            await alice.handshake()
            await vic.handshake()
            await turn_seconds(alice, llm, quiet)  # warm
            calm = []
            for _ in range(TURNS):
                calm.append(await turn_seconds(alice, llm, quiet))
                await asyncio.sleep(PACE_S)
            async with mallory(
                livekit_server.url, livekit_server.token("mallory", flooded), FLOOD
            ) as ask:
                flooding = asyncio.create_task(ask(""))
                during: list[float] = []
                while not flooding.done() or len(during) < 2:
                    during.append(await turn_seconds(alice, llm, quiet))
                    await asyncio.sleep(PACE_S)
                assert (await flooding)["opened"] == FLOOD
                # Past the deadline her streams are dropped: a whole message is a turn.
                errors, box = await refusals_then_a_turn(ask, time.monotonic(), vic, llm)
    ratio = statistics.median(during) / statistics.median(calm)
    print(
        f"chat flood: {FLOOD} streams opened; alice's turn {statistics.median(calm):.3f} s "
        f"before, {statistics.median(during):.3f} s during ({len(during)} turns): "
        f"ratio {ratio:.2f}; mallory got {len(errors)} ErrorMessages"
    )
    assert_refused_as_they_open(errors)
    assert not of(box, ErrorMessage)
