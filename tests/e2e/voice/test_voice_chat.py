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

from alicia.agent.rooms.transport import CHAT_DEADLINE_S
from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import ErrorMessage, Transcription, new_id
from tests.e2e.chat_flooder import assert_refused_as_they_open, mallory
from tests.e2e.worker import running_worker
from tests.e2e.worker_client import client, final, of, worker_log_on_failure

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

FLOOD = 1000


async def test_a_thousand_open_chat_streams_in_a_voice_room_are_refused_as_in_a_text_room(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    env = {"ALICIA_VOICE": "offline", "ALICIA_LOAD_THRESHOLD": "inf"}
    room = new_id("conv")
    async with running_worker(livekit_server, llm.base_url, env=env, ready_timeout=120) as w:
        with worker_log_on_failure(w):
            async with (
                client(livekit_server, room, "vic") as vic,
                mallory(livekit_server.url, livekit_server.token("mallory", room), FLOOD) as ask,
            ):
                await vic.handshake()
                assert (await ask(""))["opened"] == FLOOD
                opened_at = time.monotonic()
                await asyncio.sleep(1.0)  # the last refusals on their way
                errors = (await ask("report"))["errors"]
                await asyncio.sleep(max(0.0, opened_at + CHAT_DEADLINE_S + 1.0 - time.monotonic()))
                llm.script("plain_no_reasoning")
                await ask("say a real question")
                box = await vic.wait_until(
                    lambda b: any(t.text == "a real question" for t in of(b, Transcription)),
                    within=30.0,
                )
                box = await vic.wait_until(final, within=60.0)
    print(f"voice room chat flood: mallory got {len(errors)} ErrorMessages")
    assert_refused_as_they_open(errors)
    assert not of(box, ErrorMessage)
