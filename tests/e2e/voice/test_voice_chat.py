"""``lk.chat`` in a voice room (issue 34, part 3): the worker's AgentSession leaves typed
input to the bridge's transport (RoomIO's text input off), under a text room's bounds.

``mallory`` (a process of its own: ``tests/e2e/chat_flooder.py``) opens 1,000 ``lk.chat``
streams in a voice room (``ALICIA_VOICE=offline``) and closes none: she gets Overloaded
ErrorMessages as they open, rate-limited (RoomIO would read every one, unbounded, and
answer none). Past the deadline her streams are dropped and a whole message of hers is a
turn: its Transcription and the answer reach the room's protocol client.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import ErrorMessage, UserMessage, new_id
from tests.e2e.chat_flooder import assert_refused_as_they_open, mallory, refusals_then_a_turn
from tests.e2e.worker import running_worker
from tests.e2e.worker_client import client, final, of, worker_log_on_failure

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

FLOOD = 1000


async def test_a_thousand_open_chat_streams_in_a_voice_room_are_refused_as_in_a_text_room(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    env = {"ALICIA_VOICE": "offline", "ALICIA_LOAD_THRESHOLD": "inf"}
    room = new_id("conv")
    async with running_worker(livekit_server, llm.base_url, env=env) as w:
        with worker_log_on_failure(w):
            async with (
                client(livekit_server, room, "vic") as vic,
                mallory(livekit_server.url, livekit_server.token("mallory", room), FLOOD) as ask,
            ):
                await vic.handshake()
                assert (await ask(""))["opened"] == FLOOD
                errors, box = await refusals_then_a_turn(ask, time.monotonic(), vic, llm)
    print(f"voice room chat flood: mallory got {len(errors)} ErrorMessages")
    assert_refused_as_they_open(errors)
    assert not of(box, ErrorMessage)


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
