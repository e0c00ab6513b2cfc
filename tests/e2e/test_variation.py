"""ControlVariation ``continue`` and ``retry`` through the real worker (DECISIONS.md row 14).

The original Alicia front end sends both. ``continue``: an answer stopped mid-way
(ControlStop) is continued by the model from where it stopped, as a new assistant
message whose ``previousId`` is the stopped one; the model is sent the conversation
with the stopped answer last and one user message asking it to continue, and later
turns see both parts as one answer. ``retry`` is ``regenerate``.
"""

from __future__ import annotations

from typing import Any

import pytest

from alicia.agent.engine.variation import CONTINUE_PROMPT
from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import Play, RecordedLLM
from alicia.protocol import (
    Acknowledgement,
    AssistantSentence,
    ControlStop,
    ControlVariation,
    Envelope,
    ErrorMessage,
    ReasoningStep,
    StartAnswer,
    new_id,
)
from tests.e2e.worker import WorkerProcess
from tests.e2e.worker_client import client, of, user_message, worker_log_on_failure

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fresh_script")]

LLM_STREAMS = "shared"  # llm (tests/conftest.py): the streams of tests/streams only


def answer_of(box: list[Envelope[Any]], answer_id: str) -> tuple[str, bool]:
    """The text of ``answer_id``'s sentences (joined) and whether its final one came."""
    mine = [s for s in of(box, AssistantSentence) if s.previous_id == answer_id]
    return " ".join(s.text for s in mine if s.text), any(s.is_final for s in mine)


def finished(answer_id: str) -> Any:
    return lambda box: answer_of(box, answer_id)[1]


async def test_continue_after_a_stop_gets_the_rest_as_a_new_message_after_the_stopped_one(
    livekit_server: LiveKitServer, worker: WorkerProcess, llm: RecordedLLM
) -> None:
    room = new_id("conv")
    first, rest = llm.spec("vllm_reasoning"), llm.spec("deepseek_reasoning_content")
    with worker_log_on_failure(worker):
        async with client(livekit_server, room, "alice") as alice:
            await alice.handshake()
            llm.script(Play("vllm_reasoning", chunk_delay=0.06), "deepseek_reasoning_content")
            msg = user_message(room, first.user)
            await alice.send(msg)
            await alice.wait_until(lambda b: any(not s.is_final for s in of(b, AssistantSentence)))
            await alice.send(ControlStop(conversation_id=room))
            box = await alice.wait_until(lambda b: len(of(b, Acknowledgement)) >= 1)
            stopped: StartAnswer = of(box, StartAnswer)[0]
            await alice.wait_until(finished(stopped.id))
            # The original front end names the answer it continues.
            continue_sid = await alice.send(
                ControlVariation(conversation_id=room, target_id=stopped.id, mode="continue")
            )
            box = await alice.wait_until(lambda b: len(of(b, StartAnswer)) >= 2)
            more: StartAnswer = of(box, StartAnswer)[1]
            box = await alice.wait_until(finished(more.id))
            # The next turn sees one answer: the stopped part, then the rest.
            llm.script("plain_no_reasoning")
            await alice.send(user_message(room, "and a soft one?"))
            box = await alice.wait_until(lambda b: len(of(b, StartAnswer)) >= 3)
            box = await alice.wait_until(finished(of(box, StartAnswer)[2].id))

    assert of(box, ErrorMessage) == []
    partial, _ = answer_of(box, stopped.id)
    assert partial and first.answer.startswith(partial) and len(partial) < len(first.answer)
    acks: list[Acknowledgement] = of(box, Acknowledgement)
    assert [a.acknowledged_stanza_id for a in acks][-1] == continue_sid
    assert acks[-1].acknowledged_message_id == msg.id
    # A new assistant message, after the stopped one; its steps continue the chain.
    assert more.id != stopped.id and more.previous_id == stopped.id
    continued, done = answer_of(box, more.id)
    assert done and continued.split() == rest.answer.split()
    steps: list[ReasoningStep] = of(box, ReasoningStep)
    assert {s.previous_id for s in steps} == {msg.id}
    assert [s.step_index for s in steps] == list(range(1, len(steps) + 1))
    assert [s.content for s in steps][-len(rest.steps) :] == list(rest.steps)
    # What the model was asked: the conversation with the stopped answer last, then a user
    # message (no trailing assistant message, which some providers refuse).
    asked = llm.requests[1]["messages"]
    assert [m["role"] for m in asked] == ["system", "user", "assistant", "user"]
    assert asked[1]["content"] == first.user
    assert asked[2]["content"].split() == partial.split()
    assert asked[3]["content"] == CONTINUE_PROMPT
    later = llm.requests[2]["messages"]
    assert [m["role"] for m in later] == ["system", "user", "assistant", "user"]
    assert later[2]["content"].split() == f"{partial} {continued}".split()
    assert later[3]["content"] == "and a soft one?"


async def test_continue_naming_the_user_message_continues_its_latest_answer(
    livekit_server: LiveKitServer, worker: WorkerProcess, llm: RecordedLLM
) -> None:
    room = new_id("conv")
    with worker_log_on_failure(worker):
        async with client(livekit_server, room, "alice") as alice:
            await alice.handshake()
            llm.script("plain_no_reasoning", "openrouter_reasoning")
            msg = user_message(room, "hello")
            await alice.send(msg)
            box = await alice.wait_until(lambda b: len(of(b, StartAnswer)) >= 1)
            answered: StartAnswer = of(box, StartAnswer)[0]
            await alice.wait_until(finished(answered.id))
            await alice.send(
                ControlVariation(conversation_id=room, target_id=msg.id, mode="continue")
            )
            box = await alice.wait_until(lambda b: len(of(b, StartAnswer)) >= 2)
            box = await alice.wait_until(finished(of(box, StartAnswer)[1].id))
    assert of(box, StartAnswer)[1].previous_id == answered.id
    asked = llm.requests[1]["messages"]
    assert [m["role"] for m in asked] == ["system", "user", "assistant", "user"]
    assert asked[-1]["content"] == CONTINUE_PROMPT


async def test_retry_is_regenerate(
    livekit_server: LiveKitServer, worker: WorkerProcess, llm: RecordedLLM
) -> None:
    room = new_id("conv")
    first = llm.spec("deepseek_reasoning_content")
    with worker_log_on_failure(worker):
        async with client(livekit_server, room, "alice") as alice:
            await alice.handshake()
            llm.script("deepseek_reasoning_content", "vllm_reasoning")
            msg = user_message(room, first.user)
            await alice.send(msg)
            box = await alice.wait_until(lambda b: len(of(b, StartAnswer)) >= 1)
            await alice.wait_until(finished(of(box, StartAnswer)[0].id))
            sid = await alice.send(
                ControlVariation(conversation_id=room, target_id=msg.id, mode="retry")
            )
            box = await alice.wait_until(lambda b: len(of(b, StartAnswer)) >= 2)
            box = await alice.wait_until(finished(of(box, StartAnswer)[1].id))

    old, new = of(box, StartAnswer)
    assert new.id != old.id and new.previous_id == old.previous_id == msg.id
    ack: Acknowledgement = of(box, Acknowledgement)[0]
    assert (ack.acknowledged_stanza_id, ack.acknowledged_message_id) == (sid, msg.id)
    steps: list[ReasoningStep] = of(box, ReasoningStep)
    assert [s.step_index for s in steps] == list(range(1, len(first.steps) + 5))
    assert {s.previous_id for s in steps} == {msg.id}
    # As regenerate: asked again without the superseded answer.
    assert [m["role"] for m in llm.requests[1]["messages"]] == ["system", "user"]
    assert llm.requests[1]["messages"][1]["content"] == first.user
