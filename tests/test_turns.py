"""The turn runner over an in-memory transport and the recorded-stream LLM (real HTTP).

Every test drives :class:`alicia.agent.engine.conversation.Conversation` through
:class:`tests.fakes.MemoryTransport`
with the real ``openai`` client against ``alicia.harness.recorded_llm.RecordedLLM`` on
127.0.0.1, and
asserts what each client receives: types, order, ids, indexes and texts.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgpack
import msgspec
import openai
import pytest
import pytest_asyncio

from alicia.agent.engine.conversation import META_MODEL, Conversation
from alicia.agent.engine.sink import META_FIRST_REASONING_MS, META_USAGE
from alicia.agent.engine.tools import default_tools
from alicia.agent.engine.transport import Peer
from alicia.agent.settings import Settings
from alicia.harness.recorded_llm import ENDLESS, Play, RecordedLLM, load_manifest
from alicia.protocol import (
    MAX_PACKET_BYTES,
    Acknowledgement,
    AssistantMessage,
    AssistantSentence,
    Commentary,
    Configuration,
    ControlStop,
    ControlVariation,
    Envelope,
    ErrorMessage,
    MessageType,
    ReasoningStep,
    StartAnswer,
    ToolUseRequest,
    ToolUseResult,
    UnknownBody,
    UserMessage,
    encode,
    envelope,
    new_id,
)
from tests.fakes import DEBUG_PEER, FakeClient, MemoryTransport, RecordingSink
from tests.worker_streams import combined_streams

CONV = "conv_turns_test"
MODEL = "test-model"
SHOW = ["reasoning_step_display", "streaming"]

T = MessageType


@pytest_asyncio.fixture
async def llm(tmp_path: Path) -> AsyncIterator[RecordedLLM]:
    """The recorded-stream server with the shared streams plus the calculator ones."""
    async with RecordedLLM(streams_dir=combined_streams(tmp_path / "streams")) as server:
        yield server


def settings_for(llm: RecordedLLM, **changes: Any) -> Settings:
    base = Settings(
        livekit_url="ws://127.0.0.1:1",
        livekit_api_key="key",
        livekit_api_secret="secret",
        llm_base_url=llm.base_url,
        llm_model=MODEL,
    )
    return dataclasses.replace(base, **changes)


@dataclasses.dataclass
class Room:
    transport: MemoryTransport
    sink: RecordingSink
    conversation: Conversation

    def client(self, identity: str, peer: Peer = DEBUG_PEER) -> FakeClient:
        return FakeClient(self.transport, identity, CONV, peer)


@contextlib.asynccontextmanager
async def room(
    llm: RecordedLLM, sink: RecordingSink | None = None, **changes: Any
) -> AsyncIterator[Room]:
    """A running Conversation; on exit the transport closes and the run task ends."""
    settings = settings_for(llm, **changes)
    transport = MemoryTransport()
    sink = sink or RecordingSink()
    client = openai.AsyncOpenAI(base_url=settings.llm_base_url, api_key="test", max_retries=0)
    conversation = Conversation(
        conversation_id=CONV,
        options=settings.engine_options(),
        transport=transport,
        sink=sink,
        llm=client,
        tools=default_tools(),
    )
    task = asyncio.create_task(conversation.run())
    try:
        yield Room(transport, sink, conversation)
    finally:
        await transport.aclose()
        await asyncio.wait_for(task, 5)
        await client.close()


def _is_followup(name: str) -> bool:
    return any(spec.followup == name for spec in load_manifest().values())


def types(box: list[Envelope[Any]]) -> list[int]:
    return [e.type for e in box]


def of(box: list[Envelope[Any]], kind: type[Any]) -> list[Any]:
    return [e.body for e in box if isinstance(e.body, kind)]


def final_sentence(box: list[Envelope[Any]]) -> bool:
    return any(isinstance(e.body, AssistantSentence) and e.body.is_final for e in box)


def count(kind: type[Any], n: int) -> Callable[[list[Envelope[Any]]], bool]:
    return lambda box: len(of(box, kind)) >= n


async def handshake(client: FakeClient, features: list[str] | None = SHOW) -> None:
    client.send(Configuration(features=features))
    await client.wait_for(count(Configuration, 1))


def user_message(text: str) -> UserMessage:
    return UserMessage(id=new_id("msg"), conversation_id=CONV, content=text)


def turn_of(box: list[Envelope[Any]], after: int = 0) -> list[Envelope[Any]]:
    """Envelopes of the turn types (steps, tools, answer), from index ``after``."""
    kinds = {T.REASONING_STEP, T.TOOL_USE_REQUEST, T.TOOL_USE_RESULT, T.START_ANSWER}
    kinds |= {T.ASSISTANT_SENTENCE, T.ASSISTANT_MESSAGE}
    return [e for e in box[after:] if e.type in kinds]


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
    async with room(llm) as r:
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


async def test_control_stop_mid_reasoning_closes_the_turn_and_the_llm_stream(
    llm: RecordedLLM,
) -> None:
    async with room(llm, step_max_delay_s=0.2) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script(Play(ENDLESS, chunk_delay=0.005))
        msg = user_message("think forever")
        alice.send(msg)
        await alice.wait_for(count(ReasoningStep, 2))
        stop_sid = alice.send(ControlStop(conversation_id=CONV))
        t0 = time.monotonic()
        box = await alice.wait_for(
            lambda box: any(e.type == T.ACKNOWLEDGEMENT for e in box), within=2
        )
        elapsed = time.monotonic() - t0
        steps_at_stop = len(of(box, ReasoningStep))
        await asyncio.sleep(0.3)
        after = alice.inbox()
        async with asyncio.timeout(2):
            while llm.disconnects < 1:
                await asyncio.sleep(0.01)

    assert elapsed < 0.5
    tail = turn_of(box)[-2:]
    assert [e.type for e in tail] == [T.START_ANSWER, T.ASSISTANT_SENTENCE]
    assert tail[1].body.is_final and tail[1].body.sequence == 1
    assert tail[1].body.previous_id == tail[0].body.id
    ack = box[-1]
    assert ack.type == T.ACKNOWLEDGEMENT and ack.body.acknowledged_stanza_id == stop_sid
    assert ack.body.acknowledged_message_id == tail[0].body.id
    # Nothing more after the end: the stream really stopped.
    assert len(of(after, ReasoningStep)) == steps_at_stop and len(after) == len(box)


async def test_control_stop_mid_answer_keeps_sent_text_and_ends_with_a_final_chunk(
    llm: RecordedLLM,
) -> None:
    spec = llm.spec("vllm_reasoning")
    async with room(llm) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script(Play("vllm_reasoning", chunk_delay=0.02))
        alice.send(user_message(spec.user))
        await alice.wait_for(count(AssistantSentence, 1))
        alice.send(ControlStop(conversation_id=CONV, stop_type="all"))
        box = await alice.wait_for(lambda box: box[-1].type == T.ACKNOWLEDGEMENT)
    sentences: list[AssistantSentence] = of(box, AssistantSentence)
    assert sentences[-1].is_final and len(sentences) >= 2
    assert [s.sequence for s in sentences] == list(range(1, len(sentences) + 1))
    text = " ".join(s.text for s in sentences)
    assert spec.answer.startswith(text[:40]) and len(text) < len(spec.answer)


async def test_stop_with_nothing_running_is_acknowledged(llm: RecordedLLM) -> None:
    async with room(llm) as r:
        alice = r.client("alice")
        await handshake(alice)
        sid = alice.send(ControlStop(conversation_id=CONV))
        box = await alice.wait_for(lambda box: box[-1].type == T.ACKNOWLEDGEMENT)
    assert box[-1].body.acknowledged_stanza_id == sid


async def test_stop_naming_a_queued_turn_drops_it_before_it_starts(llm: RecordedLLM) -> None:
    async with room(llm, queue_size=2) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script(Play(ENDLESS, chunk_delay=0.01))
        first = user_message("one")
        alice.send(first)
        await alice.wait_for(count(ReasoningStep, 1))
        queued = user_message("two")
        alice.send(queued)  # waits behind the running turn
        sid = alice.send(ControlStop(conversation_id=CONV, target_id=queued.id))
        box = await alice.wait_for(lambda box: box[-1].type == T.ACKNOWLEDGEMENT)
        ack = box[-1].body
        alice.send(ControlStop(conversation_id=CONV))  # now end the running turn
        box = await alice.wait_for(count(Acknowledgement, 2))
        await asyncio.sleep(0.3)
        box = alice.inbox()
    assert ack.acknowledged_stanza_id == sid
    assert ack.notes == "queued turn dropped before it started"
    answered = {s.previous_id for s in of(box, StartAnswer)}
    assert answered == {first.id}  # the dropped turn never opened an answer
    asked = [m["content"] for req in llm.requests for m in req["messages"] if m["role"] == "user"]
    assert "two" not in asked


async def test_regenerate_answers_again_with_a_new_id_and_continues_step_indexes(
    llm: RecordedLLM,
) -> None:
    spec = llm.spec("vllm_reasoning")
    async with room(llm) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script("vllm_reasoning", "vllm_reasoning")
        msg = user_message(spec.user)
        alice.send(msg)
        await alice.wait_for(final_sentence)
        sid = alice.send(
            ControlVariation(conversation_id=CONV, target_id=msg.id, mode="regenerate")
        )
        box = await alice.wait_for(
            lambda box: (
                len(of(box, StartAnswer)) == 2
                and box[-1].type == T.ASSISTANT_SENTENCE
                and box[-1].body.is_final
            )
        )
    acks = [e for e in box if e.type == T.ACKNOWLEDGEMENT]
    assert acks[0].body.acknowledged_stanza_id == sid
    first, second = of(box, StartAnswer)
    assert first.id != second.id and second.previous_id == msg.id
    steps: list[ReasoningStep] = of(box, ReasoningStep)
    assert [s.step_index for s in steps] == list(range(1, 9))
    assert {s.previous_id for s in steps} == {msg.id}
    # The regenerated request does not contain the superseded answer.
    assert [m["role"] for m in llm.requests[1]["messages"]] == ["system", "user"]


async def test_edit_then_new_user_message_replaces_the_old_turn(llm: RecordedLLM) -> None:
    async with room(llm) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script("plain_no_reasoning", "plain_no_reasoning", "plain_no_reasoning")
        first = user_message("first question")
        alice.send(first)
        await alice.wait_for(final_sentence)
        second = user_message("second question")
        alice.send(second)
        await alice.wait_for(lambda box: len(of(box, StartAnswer)) == 2)
        await alice.wait_for(
            lambda box: sum(bool(s.is_final) for s in of(box, AssistantSentence)) == 2
        )
        alice.send(ControlVariation(conversation_id=CONV, target_id=second.id, mode="edit"))
        await alice.wait_for(lambda box: box[-1].type == T.ACKNOWLEDGEMENT)
        edited = user_message("second question, edited")
        alice.send(edited)
        box = await alice.wait_for(
            lambda box: sum(bool(s.is_final) for s in of(box, AssistantSentence)) == 3
        )
    assert box[-1].type == T.ASSISTANT_SENTENCE
    assert of(box, StartAnswer)[-1].previous_id == edited.id
    contents = [m["content"] for m in llm.requests[2]["messages"] if m["role"] == "user"]
    assert contents == ["first question", "second question, edited"]


async def test_edit_without_a_new_message_times_out_with_an_error(llm: RecordedLLM) -> None:
    async with room(llm, edit_timeout_s=0.2) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script("plain_no_reasoning")
        msg = user_message("question")
        alice.send(msg)
        await alice.wait_for(final_sentence)
        alice.send(ControlVariation(conversation_id=CONV, target_id=msg.id, mode="edit"))
        box = await alice.wait_for(count(ErrorMessage, 1))
    assert of(box, ErrorMessage)[0].code == 202


async def test_variation_of_an_unknown_message_is_an_error(llm: RecordedLLM) -> None:
    async with room(llm) as r:
        alice = r.client("alice")
        await handshake(alice)
        alice.send(ControlVariation(conversation_id=CONV, target_id="msg_nope", mode="regenerate"))
        box = await alice.wait_for(count(ErrorMessage, 1))
    error: ErrorMessage = of(box, ErrorMessage)[0]
    assert error.code == 202 and error.recoverable


async def test_bad_input_gets_an_error_to_the_sender_only_and_others_keep_their_turn(
    llm: RecordedLLM,
) -> None:
    async with room(llm) as r:
        alice, mallory = r.client("alice"), r.client("mallory")
        await handshake(alice)
        await handshake(mallory)
        llm.script(Play("vllm_reasoning", chunk_delay=0.005))
        alice.send(user_message("eggs"))
        mallory.send_raw(b"\xc1\xff not msgpack")  # undecodable
        mallory.send_raw(b"\x00" * (MAX_PACKET_BYTES + 1))  # oversize
        bad = {"stanzaId": 50, "conversationId": CONV, "type": 2, "body": {"id": 1, "content": 2}}
        mallory.send_raw(msgpack.packb(bad))  # wrong types
        mallory.send(
            Commentary(
                id="cmt_1", conversation_id=CONV, target_id=None, author_role="user", content="x"
            ),
            stanza_id=1,
        )  # stanza order
        mallory.send(UserMessage(id="msg_x", conversation_id="conv_other", content="x"))
        box = await mallory.wait_for(count(ErrorMessage, 5))
        a = await alice.wait_for(final_sentence)

    errors: list[ErrorMessage] = of(box, ErrorMessage)
    assert [e.code for e in errors] == [101, 101, 101, 202, 201]
    assert all(e.recoverable and e.conversation_id == CONV for e in errors)
    assert "over the" in errors[1].message
    assert of(a, ErrorMessage) == []
    assert len(of(a, ReasoningStep)) == 4 and final_sentence(a)


async def test_flood_is_rate_limited_and_errors_are_limited_too(llm: RecordedLLM) -> None:
    async with room(llm, rate_per_s=5.0, rate_burst=10, error_rate_per_s=1.0, error_burst=3) as r:
        alice, mallory = r.client("alice"), r.client("mallory")
        await handshake(alice)
        for _ in range(300):
            mallory.send(
                Commentary(
                    id=new_id("cmt"),
                    conversation_id=CONV,
                    target_id=None,
                    author_role="user",
                    content="spam",
                )
            )
        llm.script("plain_no_reasoning")
        alice.send(user_message("still there?"))
        a = await alice.wait_for(final_sentence)
        await asyncio.sleep(0.1)
        box = mallory.inbox()
    errors: list[ErrorMessage] = of(box, ErrorMessage)
    assert 1 <= len(errors) <= 4
    assert {e.code for e in errors} == {504}
    assert sum(1 for e in box if e.type == T.ACKNOWLEDGEMENT) == 10  # the burst got through
    assert of(a, ErrorMessage) == []


async def test_a_full_queue_answers_504(llm: RecordedLLM) -> None:
    async with room(llm, queue_size=1) as r:
        alice = r.client("alice")
        await handshake(alice)
        llm.script(Play(ENDLESS, chunk_delay=0.01))
        first = user_message("one")
        alice.send(first)
        await alice.wait_for(count(ReasoningStep, 1))
        alice.send(user_message("two"))  # waits in the queue
        third = user_message("three")
        alice.send(third)  # queue full
        box = await alice.wait_for(count(ErrorMessage, 1))
        alice.send(ControlStop(conversation_id=CONV, target_id=first.id))
    error: ErrorMessage = of(box, ErrorMessage)[0]
    assert error.code == 504 and error.originating_id == third.id


async def test_unknown_types_are_skipped_and_commentary_is_acknowledged(llm: RecordedLLM) -> None:
    async with room(llm) as r:
        alice = r.client("alice")
        await handshake(alice)
        raw = envelope(UnknownBody(99, {"x": 1}), stanza_id=2, conversation_id=CONV)
        alice.send_raw(encode(raw))
        alice.counter.next()
        sid = alice.send(
            Commentary(
                id="cmt_1",
                conversation_id=CONV,
                target_id=None,
                author_role="user",
                content="nice",
                rating=5,
            )
        )
        box = await alice.wait_for(lambda box: box[-1].type == T.ACKNOWLEDGEMENT)
    assert of(box, ErrorMessage) == []
    assert box[-1].body.acknowledged_stanza_id == sid
    assert box[-1].body.acknowledged_message_id == "cmt_1"
    # Nothing a client sends is stored but accepted user messages (and honoured stops).
    assert [e.type for e in r.sink.envelopes if e.stanza_id > 0] == []


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
