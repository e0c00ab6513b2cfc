"""``lk.chat`` in a voice room (issue 34, part 3): the worker's AgentSession leaves typed
input to the bridge's transport (RoomIO's text input off), under the ``chat`` row of the
table of doors; the attack harness (``tests/e2e/doors/test_room_doors.py``) attacks it in a
voice room. With LiveKit's conventions off, the room reads no chat at all.
"""

from __future__ import annotations

import asyncio

import pytest

from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import UserMessage, new_id
from tests.e2e.worker import running_worker
from tests.e2e.worker_client import client, final, worker_log_on_failure

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

FLOOD = 1000


async def test_with_the_conventions_off_a_voice_room_reads_no_chat(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    # RoomIO's own text input would read it unbounded and interrupt every queued answer,
    # outside the UserMessage and ControlStop rules.
    env = {
        "ALICIA_VOICE": "offline",
        "ALICIA_LOAD_THRESHOLD": "inf",
        "ALICIA_LK_CONVENTIONS": "false",
    }
    room = new_id("conv")
    spec = llm.spec("plain_no_reasoning")
    async with running_worker(livekit_server, llm.base_url, env=env) as w:
        with worker_log_on_failure(w):
            async with client(livekit_server, room, "vic") as vic:
                await vic.handshake()
                llm.route_model("recorded-model", "plain_no_reasoning")
                await vic.room.local_participant.send_text("tell me a fact", topic="lk.chat")
                await asyncio.sleep(5.0)  # RoomIO would have asked the model by now
                assert list(llm.requests) == []
                await vic.send(
                    UserMessage(id=new_id("msg"), conversation_id=room, content=spec.user)
                )
                await vic.wait_until(final, within=60.0)
    asked = [r["messages"][-1]["content"] for r in llm.requests]
    assert asked == [spec.user]
