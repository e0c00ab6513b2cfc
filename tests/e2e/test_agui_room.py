"""A live LiveKit room as AG-UI (``GET /agui/rooms/{room}/events``), checked against what a
LiveKit protocol client in the same room received: the real worker, the real
livekit-server, the recorded LLM, the endpoint as a subprocess.

The caller's grant decides what reasoning the stream carries, as in the room itself: a
``full`` caller sees every step as the LiveKit client saw it; a ``summary`` caller gets
summaries and the sealed steps, never the canary; a token for another room gets 403.
"""

from __future__ import annotations

import base64
import contextlib
from typing import Any

import pytest
from ag_ui.core import Event
from pydantic import TypeAdapter

from alicia.agent.engine.sealing import ReasoningSealer
from alicia.agent.llm.summary import extractive_summary
from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import (
    AssistantSentence,
    ReasoningStep,
    StartAnswer,
    ToolUseRequest,
    UserMessage,
    new_id,
)
from tests.e2e.worker import running_worker
from tests.support.agui_endpoint import EventStream, agui_token, running_agui
from tests.support.livekit_rooms import protocol_client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

KEY = bytes(range(32))
KEYS = f"k1={base64.b64encode(KEY).decode()}"
EVENT = TypeAdapter(Event)


def of(events: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == type_]


async def test_a_live_room_as_agui_is_what_a_livekit_client_in_it_received(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    call = llm.spec("calculator_tool_call")
    followup = llm.spec("calculator_tool_followup")
    room = new_id("conv")
    env = {"ALICIA_REASONING_KEYS": KEYS, "ALICIA_LOAD_THRESHOLD": "inf"}
    async with (
        running_worker(livekit_server, llm.base_url, env=env) as worker,
        running_agui(livekit_server, llm.base_url, env=env) as agui,
        protocol_client(livekit_server, room) as alice,
        contextlib.AsyncExitStack() as stack,
    ):
        url = f"{agui.url}/rooms/{room}/events"
        streams = {
            level: await stack.enter_async_context(
                EventStream(url, agui_token(livekit_server, room, f"dash-{level}", level))
            )
            for level in ("full", "summary")
        }
        other = await stack.enter_async_context(
            EventStream(url, agui_token(livekit_server, "conv_elsewhere", "dash-x", "full"))
        )
        try:
            for stream in streams.values():
                await stream.wait("RUN_STARTED")  # joined and answered: from here on it sees all
            llm.script("calculator_tool_call")
            await alice.send(UserMessage(id=new_id("msg"), conversation_id=room, content=call.user))
            await alice.wait_for(AssistantSentence, is_final=True)
            answer_id = alice.of(StartAnswer)[0].id
            for stream in streams.values():
                await stream.wait("TEXT_MESSAGE_END", messageId=answer_id)
        except BaseException as exc:
            raise AssertionError(f"{exc!r}\n{worker.log()}\n{agui.log()}") from exc
    assert other.status == 403 and other.events == []
    full, summary = streams["full"].events, streams["summary"].events
    for event in full + summary:
        EVENT.validate_python(event)
    steps = alice.of(ReasoningStep)
    assert [s.content for s in steps] == [*call.steps, *followup.steps]
    # full: every step as the LiveKit client received it, in order, one message each.
    assert [e["delta"] for e in of(full, "REASONING_MESSAGE_CONTENT")] == [s.content for s in steps]
    assert [e["messageId"] for e in of(full, "REASONING_MESSAGE_START")] == [s.id for s in steps]
    requests = alice.of(ToolUseRequest)
    starts = of(full, "TOOL_CALL_START")
    assert [(e["toolCallId"], e["toolCallName"]) for e in starts] == [
        (r.id, r.tool_name) for r in requests
    ]
    assert of(full, "TOOL_CALL_RESULT")[0]["toolCallId"] == requests[0].id
    sentences = [s.text for s in alice.of(AssistantSentence) if s.text]
    text = "".join(e["delta"] for e in of(full, "TEXT_MESSAGE_CONTENT"))
    assert text == " ".join(sentences) and text.split() == followup.answer.split()
    kinds = [e["type"] for e in full]
    assert kinds.index("REASONING_END") < kinds.index("TOOL_CALL_START")
    # summary: the worker's summaries and sealed steps, never the plaintext.
    assert [e["delta"] for e in of(summary, "REASONING_MESSAGE_CONTENT")] == [
        extractive_summary(s.content) for s in steps
    ]
    values = of(summary, "REASONING_ENCRYPTED_VALUE")
    sealer = ReasoningSealer([("k1", KEY)])
    assert [sealer.open(v["encryptedValue"], room) for v in values] == [s.content for s in steps]
    canary = "arithmetic slips"  # the first step's second half, never in its summary
    assert canary in steps[0].content and canary not in str(summary)
    assert "".join(e["delta"] for e in of(summary, "TEXT_MESSAGE_CONTENT")) == text
