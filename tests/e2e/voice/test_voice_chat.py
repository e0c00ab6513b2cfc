"""``lk.chat`` in a voice room (issue 34, part 3): the worker's AgentSession leaves typed
input to the bridge's transport (RoomIO's text input off), under a text room's bounds.

``mallory`` (a process of its own: ``tests/e2e/chat_flooder.py``) opens 1,000 ``lk.chat``
streams in a voice room (``ALICIA_VOICE=offline``) and closes none: she gets Overloaded
ErrorMessages as they open, rate-limited (RoomIO would read every one, unbounded, and
answer none). Past the deadline her streams are dropped and a whole message of hers is a
turn: its Transcription and the answer reach the room's protocol client.
"""

from __future__ import annotations

import time

import pytest

from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import ErrorMessage, new_id
from tests.e2e.chat_flooder import assert_refused_as_they_open, mallory, refusals_then_a_turn
from tests.e2e.worker import running_worker
from tests.e2e.worker_client import client, of, worker_log_on_failure

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
                errors, box = await refusals_then_a_turn(ask, time.monotonic(), vic, llm)
    print(f"voice room chat flood: mallory got {len(errors)} ErrorMessages")
    assert_refused_as_they_open(errors)
    assert not of(box, ErrorMessage)
