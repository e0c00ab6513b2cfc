"""Turns through the turn runner over an in-memory transport and the recorded-stream LLM
(real HTTP): every provider shape, tools, storage, who sees steps, failures.

Every test drives :class:`alicia.agent.engine.conversation.Conversation` through
:class:`tests.support.fakes.MemoryTransport` (:func:`tests.engine.room.room`) with the
real ``openai`` client against ``alicia.harness.recorded_llm.RecordedLLM`` on 127.0.0.1,
and asserts what each client receives: types, order, ids, indexes and texts.
"""

from __future__ import annotations

import json

import msgspec
import pytest

from alicia.agent.engine.conversation import META_MODEL
from alicia.agent.engine.sink import META_FIRST_REASONING_MS, META_USAGE
from alicia.harness.recorded_llm import ENDLESS, Play, RecordedLLM, load_manifest
from alicia.protocol import (
    AssistantMessage,
    AssistantSentence,
    Configuration,
    ErrorMessage,
    MessageType,
    ReasoningStep,
    StartAnswer,
    ToolUseRequest,
    ToolUseResult,
)
from tests.engine.room import (
    CONV,
    MODEL,
    SHOW,
    count,
    final_sentence,
    handshake,
    of,
    room,
    turn_of,
    types,
    user_message,
)
from tests.support.fakes import RecordingSink

T = MessageType


def _is_followup(name: str) -> bool:
    return any(spec.followup == name for spec in load_manifest().values())


REASONING_STREAMS = [
    name
    for name, spec in load_manifest().items()
    if spec.api == "chat" and not spec.tool_calls and not _is_followup(name)
]


@pytest.mark.parametrize("stream", REASONING_STREAMS)
async def test_turn_sends_steps_then_streamed_answer_for_every_provider_shape(
    llm: RecordedLLM, stream: str
) -> None:
    spec = llm.spec(stream)
    async with room(llm, llm_thinking_open=spec.open_at_start) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script(stream)
        msg = user_message(spec.user)
        alice.send(msg)
        box = await alice.wait_for(final_sentence)

    reply = box[0]
    assert reply.type == T.CONFIGURATION and reply.body.conversation_id == CONV
    assert {"reasoning_steps", "streaming", "tool_use"} <= set(reply.body.features)
    turn = turn_of(box)
    n = len(spec.steps)
    assert types(turn)[:n] == [T.REASONING_STEP] * n
    assert turn[n].type == T.START_ANSWER
    assert set(types(turn[n + 1 :])) == {T.ASSISTANT_SENTENCE}

    steps: list[ReasoningStep] = of(turn, ReasoningStep)
    assert [s.content for s in steps] == list(spec.steps)
    assert [s.step_index for s in steps] == list(range(1, n + 1))
    assert all(s.previous_id == msg.id for s in steps)
    assert len({s.id for s in steps}) == n

    start: StartAnswer = turn[n].body
    assert start.previous_id == msg.id and start.id != msg.id
    assert turn[n].meta == {META_MODEL: MODEL}
    sentences: list[AssistantSentence] = of(turn, AssistantSentence)
    assert [s.sequence for s in sentences] == list(range(1, len(sentences) + 1))
    assert [bool(s.is_final) for s in sentences] == [False] * (len(sentences) - 1) + [True]
    assert {s.previous_id for s in sentences} == {start.id}
    answer = " ".join(s.text for s in sentences)
    assert answer.split() == spec.answer.split()
    for step in spec.steps:
        assert step not in answer
    # Server stanzaIds: -1, -2, ... in send order.
    assert [e.stanza_id for e in box] == list(range(-1, -len(box) - 1, -1))


async def test_sink_gets_every_sent_envelope_and_of_client_input_the_user_message(
    llm: RecordedLLM,
) -> None:
    async with room(llm) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script("vllm_reasoning")
        alice.send(user_message("hi"))
        box = await alice.wait_for(final_sentence)
    received = [e for e in r.sink.envelopes if e.stanza_id > 0]
    sent = [e for e in r.sink.envelopes if e.stanza_id < 0]
    assert types(received) == [T.USER_MESSAGE]
    # Everything sent is stored as sent; the stored copy of the last sentence also
    # carries the turn's figures, for analytics only (never sent).
    assert [msgspec.structs.replace(e, meta=None) for e in sent] == [
        msgspec.structs.replace(e, meta=None) for e in box
    ]
    assert [e.meta for e in sent[:-1]] == [e.meta for e in box[:-1]]
    last = sent[-1]
    assert last.type == T.ASSISTANT_SENTENCE and last.body.is_final
    assert last.meta is not None
    usage = last.meta[META_USAGE]
    assert usage["promptTokens"] == 23 and usage["completionTokens"] > 0
    assert last.meta[META_FIRST_REASONING_MS] >= 0
    assert all(META_USAGE not in (e.meta or {}) for e in box)
    assert [e.meta for e in sent if e.type == T.START_ANSWER] == [{META_MODEL: MODEL}]


async def test_calculator_tool_runs_on_the_server_and_its_result_goes_back_to_the_llm(
    llm: RecordedLLM,
) -> None:
    call = llm.spec("calculator_tool_call")
    follow = llm.spec("calculator_tool_followup")
    async with room(llm) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script("calculator_tool_call")
        msg = user_message(call.user)
        alice.send(msg)
        box = await alice.wait_for(final_sentence)

    turn = turn_of(box)
    expected = [T.REASONING_STEP] * len(call.steps) + [T.TOOL_USE_REQUEST, T.TOOL_USE_RESULT]
    expected += [T.REASONING_STEP] * len(follow.steps) + [T.START_ANSWER]
    assert types(turn)[: len(expected)] == expected
    steps: list[ReasoningStep] = of(turn, ReasoningStep)
    assert [s.content for s in steps] == [*call.steps, *follow.steps]
    assert [s.step_index for s in steps] == list(range(1, len(steps) + 1))

    request: ToolUseRequest = of(turn, ToolUseRequest)[0]
    result: ToolUseResult = of(turn, ToolUseResult)[0]
    assert request.tool_name == "calculator" and request.execution == "server"
    assert request.parameters == json.loads(call.tool_calls[0]["arguments"])
    assert request.previous_id == msg.id
    assert result.request_id == request.id and result.success
    assert result.result == json.loads(call.tool_result or "")

    answer = " ".join(s.text for s in of(turn, AssistantSentence))
    assert answer.split() == follow.answer.split()
    # The second request carries the call and the server's result, and no reasoning.
    assert len(llm.requests) == 2
    second = llm.requests[1]["messages"]
    assert second[-1] == {
        "role": "tool",
        "tool_call_id": call.tool_calls[0]["id"],
        "content": call.tool_result,
    }
    assert second[-2]["role"] == "assistant"
    assert second[-2]["tool_calls"][0]["function"]["name"] == "calculator"
    assert second[-2]["tool_calls"][0]["function"]["arguments"] == call.tool_calls[0]["arguments"]
    dumped = json.dumps(second)
    for step in call.steps:
        assert step not in dumped
    assert "tools" in llm.requests[0] and {
        t["function"]["name"] for t in llm.requests[0]["tools"]
    } == {
        "calculator",
        "current_time",
    }


async def test_unknown_tool_gets_a_failed_result_and_the_turn_goes_on(llm: RecordedLLM) -> None:
    async with room(llm) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script("vllm_tool_call")
        alice.send(user_message("umbrella?"))
        box = await alice.wait_for(final_sentence)
    result: ToolUseResult = of(box, ToolUseResult)[0]
    assert not result.success and result.error_code == "unknown_tool"
    assert json.loads(llm.requests[1]["messages"][-1]["content"])["error"] == "unknown_tool"


async def test_reasoning_is_never_sent_back_to_the_llm(llm: RecordedLLM) -> None:
    first = llm.spec("deepseek_reasoning_content")
    async with room(llm) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script("deepseek_reasoning_content", "vllm_reasoning")
        alice.send(user_message(first.user))
        await alice.wait_for(count(StartAnswer, 1))
        await alice.wait_for(final_sentence)
        alice.send(user_message("and another question"))
        await alice.wait_for(
            lambda box: sum(1 for b in of(box, AssistantSentence) if b.is_final) == 2
        )

    messages = llm.requests[1]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1]["content"] == first.user
    assert messages[2]["content"].split() == first.answer.split()
    dumped = json.dumps(messages)
    for step in first.steps:
        assert step not in dumped
    assert "<think>" not in dumped


async def test_steps_only_reach_clients_that_show_reasoning(llm: RecordedLLM) -> None:
    spec = llm.spec("vllm_reasoning")
    async with room(llm) as r:
        alice, bob, carol = r.client("alice"), r.client("bob"), r.client("carol")
        await handshake(alice)  # reasoning + streaming
        await handshake(bob, ["streaming"])  # lists features, not reasoning
        await handshake(carol, None)  # says nothing: server default (send), no streaming
        llm.script("vllm_reasoning")
        alice.send(user_message(spec.user))
        a = await alice.wait_for(final_sentence)
        b = await bob.wait_for(final_sentence)
        c = await carol.wait_for(count(AssistantMessage, 1))

    assert len(of(a, ReasoningStep)) == len(spec.steps)
    assert of(b, ReasoningStep) == []
    assert [s.content for s in of(c, ReasoningStep)] == list(spec.steps)
    assert of(b, AssistantSentence) == of(a, AssistantSentence)
    # carol did not ask for streaming: one AssistantMessage, no StartAnswer/sentences.
    assert of(c, StartAnswer) == [] and of(c, AssistantSentence) == []
    message: AssistantMessage = of(c, AssistantMessage)[0]
    assert message.content.split() == spec.answer.split()
    assert message.id == of(a, StartAnswer)[0].id and message.state == "complete"
    assert [e.meta for e in c if e.type == T.ASSISTANT_MESSAGE] == [{META_MODEL: MODEL}]


async def test_server_default_off_hides_steps_from_silent_clients(llm: RecordedLLM) -> None:
    async with room(llm, show_reasoning_default=False) as r:
        alice, bob = r.client("alice"), r.client("bob")
        await handshake(alice)
        await handshake(bob, None)
        llm.script("vllm_reasoning")
        alice.send(user_message("eggs"))
        await alice.wait_for(final_sentence)
        b = await bob.wait_for(count(AssistantMessage, 1))
    assert of(b, ReasoningStep) == []


async def test_mid_conversation_configuration_toggles_reasoning_for_that_client_only(
    llm: RecordedLLM,
) -> None:
    async with room(llm, step_max_delay_s=30.0) as r:  # steps are paragraphs here
        alice, bob = r.client("alice"), r.client("bob")
        await handshake(alice)
        await handshake(bob)
        alice.send(Configuration(conversation_id=CONV, features=["streaming"]))
        await alice.wait_for(count(Configuration, 2))
        llm.script("vllm_reasoning")
        alice.send(user_message("eggs"))
        a = await alice.wait_for(final_sentence)
        b = await bob.wait_for(final_sentence)
        assert of(a, ReasoningStep) == [] and len(of(b, ReasoningStep)) == 4
        alice.send(Configuration(conversation_id=CONV, features=SHOW))
        await alice.wait_for(count(Configuration, 3))
        llm.script("vllm_reasoning")
        alice.send(user_message("eggs again"))
        a = await alice.wait_for(lambda box: len(of(box, StartAnswer)) == 2)
    assert len(of(a, ReasoningStep)) == 4
    replies = of(a, Configuration)
    assert all(c.conversation_id == CONV for c in replies)


async def test_step_indexes_continue_after_the_stored_ones(llm: RecordedLLM) -> None:
    msg = user_message("eggs")
    sink = RecordingSink({msg.id: 7})
    async with room(llm, sink=sink) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script("vllm_reasoning")
        alice.send(msg)
        box = await alice.wait_for(final_sentence)
    assert [s.step_index for s in of(box, ReasoningStep)] == [8, 9, 10, 11]


async def test_llm_failure_ends_the_turn_with_an_error_and_a_closed_answer(
    llm: RecordedLLM,
) -> None:
    async with room(llm, llm_base_url="http://127.0.0.1:9/v1") as r:
        alice = r.client("alice")
        await handshake(alice)
        msg = user_message("hello?")
        alice.send(msg)
        box = await alice.wait_for(count(ErrorMessage, 1))
    turn = turn_of(box)
    assert types(turn) == [T.START_ANSWER, T.ASSISTANT_SENTENCE]
    assert turn[1].body.is_final and turn[1].body.text == ""
    error: ErrorMessage = of(box, ErrorMessage)[0]
    assert error.code == 503 and error.originating_id == msg.id


async def test_requester_leaving_mid_turn_still_closes_the_answer_for_the_others(
    llm: RecordedLLM,
) -> None:
    async with room(llm) as r:
        alice, bob = r.client("alice"), r.client("bob")
        await handshake(alice)
        await handshake(bob)
        llm.script(Play(ENDLESS, chunk_delay=0.005))
        alice.send(user_message("think"))
        await bob.wait_for(count(ReasoningStep, 1), within=5)
        r.transport.leave("alice")
        b = await bob.wait_for(final_sentence)
    assert types(turn_of(b))[-2:] == [T.START_ANSWER, T.ASSISTANT_SENTENCE]
