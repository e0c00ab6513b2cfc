"""End to end: the real worker process, the real livekit-server, the recorded LLM over HTTP.

The worker runs as ``python -m alicia.agent start`` (``tests/e2e/worker.py``) with the env of
the session's livekit-server and ``LLM_BASE_URL`` of a recorded-stream server in this
process. Clients are plain ``rtc.Room`` participants speaking the protocol on
``DATA_TOPIC``; every assertion is on decoded envelopes as a client receives them.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import ENDLESS, Play, RecordedLLM
from alicia.protocol import (
    AssistantSentence,
    ControlStop,
    ErrorMessage,
    MessageType,
    ReasoningStep,
    StartAnswer,
    ToolUseRequest,
    ToolUseResult,
    UserMessage,
    new_id,
)
from tests.e2e.conftest import WORKER_ENV as DEFAULT_ENV
from tests.e2e.worker import PROCESS_EXECUTOR, WorkerProcess
from tests.e2e.worker_client import client, final, of, user_message, worker_log_on_failure

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fresh_script")]
WORKER_ENV = {**DEFAULT_ENV, **PROCESS_EXECUTOR}  # the module worker: a process per room
WORKER_AS_PRINTED = True  # python -m alicia.agent start, as the README shows it

T = MessageType


async def test_a_full_turn_reaches_clients_in_order_and_steps_only_those_who_show_them(
    livekit_server: LiveKitServer, worker: WorkerProcess, llm: RecordedLLM
) -> None:
    room = new_id("conv")
    call, follow = llm.spec("calculator_tool_call"), llm.spec("calculator_tool_followup")
    with worker_log_on_failure(worker):
        async with (
            client(livekit_server, room, "alice") as alice,
            client(livekit_server, room, "bob") as bob,
        ):
            reply = await alice.handshake()
            assert reply.conversation_id == room
            assert {"reasoning_steps", "streaming", "tool_use"} <= set(reply.features or [])
            await bob.handshake(["streaming"])
            llm.script("calculator_tool_call")
            msg = user_message(room, call.user)
            await alice.send(msg)
            a = await alice.wait_until(final)
            b = await bob.wait_until(final)
            senders = {sender for _, sender, _ in alice.received}

    assert len(senders) == 1 and senders.pop().startswith("agent-")
    n1, n2 = len(call.steps), len(follow.steps)
    expected = [T.CONFIGURATION] + [T.REASONING_STEP] * n1
    expected += [T.TOOL_USE_REQUEST, T.TOOL_USE_RESULT] + [T.REASONING_STEP] * n2
    expected += [T.START_ANSWER]
    assert [e.type for e in a[: len(expected)]] == expected
    assert {e.type for e in a[len(expected) :]} == {T.ASSISTANT_SENTENCE}
    stanzas = [e.stanza_id for e in a]
    assert all(s < 0 for s in stanzas) and stanzas == sorted(stanzas, reverse=True)

    steps: list[ReasoningStep] = of(a, ReasoningStep)
    assert [s.content for s in steps] == [*call.steps, *follow.steps]
    assert [s.step_index for s in steps] == list(range(1, n1 + n2 + 1))
    assert {s.previous_id for s in steps} == {msg.id}
    request: ToolUseRequest = of(a, ToolUseRequest)[0]
    result: ToolUseResult = of(a, ToolUseResult)[0]
    assert (request.tool_name, request.execution) == ("calculator", "server")
    assert request.parameters == json.loads(call.tool_calls[0]["arguments"])
    assert result.request_id == request.id and result.success
    assert result.result == {"expression": "(17 * 23) + 4.0", "value": 395}

    start: StartAnswer = of(a, StartAnswer)[0]
    assert start.previous_id == msg.id
    assert next(e.meta for e in a if e.type == T.START_ANSWER) == {"model": "recorded-model"}
    sentences: list[AssistantSentence] = of(a, AssistantSentence)
    assert [s.sequence for s in sentences] == list(range(1, len(sentences) + 1))
    assert [bool(s.is_final) for s in sentences] == [False] * (len(sentences) - 1) + [True]
    assert {s.previous_id for s in sentences} == {start.id}
    answer = " ".join(s.text for s in sentences)
    assert answer.split() == follow.answer.split()
    for step in [*call.steps, *follow.steps]:
        assert step not in answer

    # bob listed features without reasoning: everything but the steps.
    assert of(b, ReasoningStep) == []
    assert [e.type for e in b[:4]] == [
        T.CONFIGURATION,
        T.TOOL_USE_REQUEST,
        T.TOOL_USE_RESULT,
        T.START_ANSWER,
    ]
    assert of(b, AssistantSentence) == sentences
    # The tool result went back to the LLM, the reasoning did not.
    assert llm.requests[1]["messages"][-1]["content"] == call.tool_result
    assert call.steps[0] not in json.dumps(llm.requests[1])


async def test_reasoning_is_not_sent_back_to_the_llm_on_the_next_turn(
    livekit_server: LiveKitServer, worker: WorkerProcess, llm: RecordedLLM
) -> None:
    room = new_id("conv")
    first = llm.spec("deepseek_reasoning_content")
    with worker_log_on_failure(worker):
        async with client(livekit_server, room, "alice") as alice:
            await alice.handshake()
            llm.script("deepseek_reasoning_content", "vllm_reasoning")
            await alice.send(user_message(room, first.user))
            await alice.wait_until(final)
            await alice.send(user_message(room, "thanks, and eggs?"))
            box = await alice.wait_until(
                lambda b: sum(bool(s.is_final) for s in of(b, AssistantSentence)) == 2
            )
    assert len(of(box, ReasoningStep)) == len(first.steps) + 4
    messages = llm.requests[1]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[2]["content"].split() == first.answer.split()
    dumped = json.dumps(messages)
    assert all(step not in dumped for step in first.steps)


async def test_control_stop_mid_reasoning_ends_the_turn_within_500_ms(
    livekit_server: LiveKitServer, worker: WorkerProcess, llm: RecordedLLM
) -> None:
    room = new_id("conv")
    with worker_log_on_failure(worker):
        async with client(livekit_server, room, "alice") as alice:
            await alice.handshake()
            llm.script(Play(ENDLESS, chunk_delay=0.005))
            msg = user_message(room, "think about everything")
            await alice.send(msg)
            await alice.wait_until(lambda b: len(of(b, ReasoningStep)) >= 2)
            sent_at = time.monotonic()
            stop_sid = await alice.send(ControlStop(conversation_id=room))
            box = await alice.wait_until(lambda b: any(e.type == T.ACKNOWLEDGEMENT for e in b))
            acked_at = next(t for t, _, e in alice.received if e.type == T.ACKNOWLEDGEMENT)
            count = len(alice.received)
            await asyncio.sleep(0.5)
            assert len(alice.received) == count, "the worker kept sending after the stop"
            async with asyncio.timeout(5):
                while llm.disconnects < 1:
                    await asyncio.sleep(0.02)

    assert acked_at - sent_at < 0.5
    tail = [e for e in box if e.type != T.REASONING_STEP][-3:]
    assert [e.type for e in tail] == [T.START_ANSWER, T.ASSISTANT_SENTENCE, T.ACKNOWLEDGEMENT]
    assert tail[0].body.previous_id == msg.id
    assert tail[1].body.is_final and tail[1].body.previous_id == tail[0].body.id
    assert tail[2].body.acknowledged_stanza_id == stop_sid
    steps: list[ReasoningStep] = of(box, ReasoningStep)
    assert [s.step_index for s in steps] == list(range(1, len(steps) + 1))


async def test_bad_input_gets_an_error_to_the_sender_only_and_the_worker_keeps_serving(
    livekit_server: LiveKitServer, worker: WorkerProcess, llm: RecordedLLM
) -> None:
    room = new_id("conv")
    with worker_log_on_failure(worker):
        async with (
            client(livekit_server, room, "alice") as alice,
            client(livekit_server, room, "mallory") as mallory,
        ):
            await alice.handshake()
            await mallory.handshake()
            await mallory.send_raw(b"\xc1 definitely not msgpack")
            await mallory.send(
                UserMessage(id="msg_x", conversation_id="conv_elsewhere", content="x")
            )
            errors = await mallory.wait_until(lambda b: len(of(b, ErrorMessage)) >= 2)
            llm.script("vllm_reasoning")
            await alice.send(user_message(room, "eggs"))
            a = await alice.wait_until(final)
            await asyncio.sleep(0.2)
            m = mallory.box

    assert [e.code for e in of(errors, ErrorMessage)] == [101, 201]
    assert of(a, ErrorMessage) == []
    assert len(of(a, ReasoningStep)) == 4
    # mallory shows reasoning too and is a protocol client: she gets the turn, no more errors.
    assert len(of(m, ErrorMessage)) == 2 and final(m)
    assert worker.proc.returncode is None
