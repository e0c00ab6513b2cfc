"""The engine's Turn on its own: typed events from the recorded LLM over real HTTP.

No transport and no envelopes: what an AG-UI endpoint or an AgentSession adapter sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest

from alicia.agent.engine.events import (
    AnswerDelta,
    AnswerStarted,
    ReasoningDelta,
    SentenceReady,
    StepReady,
    ToolFinished,
    ToolRequested,
    TurnEnded,
    TurnEvent,
    Usage,
)
from alicia.agent.engine.participants import LLMUnavailable
from alicia.agent.engine.tools import default_tools
from alicia.agent.engine.turn import Exchange, Turn, TurnOptions
from alicia.harness.recorded_llm import (
    ENDLESS,
    TOKEN_TURN,
    TURN_ANSWER,
    Play,
    RecordedLLM,
    load_manifest,
)
from alicia.protocol import StepTracker
from tests.support.chat_server import body_handler, chunk, sse

# Steps cut by paragraph only: under a loaded CI machine a 0.2 s time rule cut a recorded
# step in two (5 steps where 4 were asserted).
OPTIONS = TurnOptions(model="test-model", system_prompt="Be brief.", step_max_delay_s=30.0)


def turn_for(client: openai.AsyncOpenAI, text: str, **kwargs: object) -> Turn:
    return Turn(
        user_id="msg_user1",
        text=text,
        answer_id="msg_answer1",
        llm=client,
        options=OPTIONS,
        **kwargs,  # type: ignore[arg-type]
    )


async def collect(turn: Turn) -> list[TurnEvent]:
    return [event async for event in turn.events()]


async def test_a_reasoning_turn_yields_steps_then_the_answer_then_one_end(
    llm: RecordedLLM, client: openai.AsyncOpenAI
) -> None:
    spec = llm.spec("deepseek_reasoning_content")
    events = await collect(turn_for(client, spec.user))
    kinds = [type(e).__name__ for e in events]
    first_answer = kinds.index("AnswerStarted")
    assert set(kinds[:first_answer]) == {"ReasoningDelta", "StepReady"}
    assert kinds.count("AnswerStarted") == 1 and kinds[-1] == "TurnEnded"
    # The reasoning streams token by token: one delta per recorded reasoning chunk, and
    # every delta comes before the step that holds its text is closed.
    reasoning = [e.text for e in events if isinstance(e, ReasoningDelta)]
    assert "".join(reasoning) == spec.reasoning and len(reasoning) > 4 * len(spec.steps)
    assert kinds.index("ReasoningDelta") < kinds.index("StepReady")
    steps = [e for e in events if isinstance(e, StepReady)]
    assert [s.text for s in steps] == list(spec.steps)
    assert [s.index for s in steps] == list(range(1, len(spec.steps) + 1))
    deltas = "".join(e.text for e in events if isinstance(e, AnswerDelta))
    sentences = [e for e in events if isinstance(e, SentenceReady)]
    assert sentences[-1].final and not any(s.final for s in sentences[:-1])
    assert " ".join(s.text for s in sentences if s.text).split() == spec.answer.split()
    assert deltas.strip() == spec.answer
    end = events[-1]
    assert isinstance(end, TurnEnded)
    assert (end.status, end.answer, end.steps, end.error) == ("complete", spec.answer, 4, None)
    assert end.usage == Usage(prompt_tokens=19, completion_tokens=172, reasoning_tokens=130)


async def test_without_deltas_a_turn_yields_the_same_steps_and_sentences_only(
    llm: RecordedLLM, client: openai.AsyncOpenAI
) -> None:
    """``deltas=False`` (the protocol's runner): no per-token event, nothing else changes."""
    spec = llm.spec("deepseek_reasoning_content")
    full = await collect(turn_for(client, spec.user))
    llm.reset()
    lean = await collect(turn_for(client, spec.user, deltas=False))
    assert not any(isinstance(e, ReasoningDelta | AnswerDelta) for e in lean)
    expected = [e for e in full if not isinstance(e, ReasoningDelta | AnswerDelta)]
    assert [type(e) for e in lean] == [type(e) for e in expected]
    assert [e.text for e in lean if isinstance(e, StepReady | SentenceReady)] == [
        e.text for e in expected if isinstance(e, StepReady | SentenceReady)
    ]


async def test_tool_rounds_announce_run_and_feed_back_the_tool_and_sum_usage(
    llm: RecordedLLM, client: openai.AsyncOpenAI
) -> None:
    call = llm.spec("calculator_tool_call")
    followup = llm.spec("calculator_tool_followup")
    events = await collect(turn_for(client, call.user, tools=default_tools()))
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("ToolRequested") < kinds.index("ToolFinished") < kinds.index("AnswerStarted")
    requested = next(e for e in events if isinstance(e, ToolRequested))
    finished = next(e for e in events if isinstance(e, ToolFinished))
    assert requested.name == "calculator" and finished.request_id == requested.request_id
    assert finished.outcome.success and finished.outcome.result is not None
    assert finished.outcome.result["value"] == 395
    steps = [e for e in events if isinstance(e, StepReady)]
    assert [s.text for s in steps] == [*call.steps, *followup.steps]
    end = events[-1]
    assert isinstance(end, TurnEnded) and end.answer == followup.answer
    assert end.usage == Usage(prompt_tokens=212 + 305, completion_tokens=59 + 72)
    second = llm.requests[-1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    assert json.loads(second[3]["content"])["value"] == 395


async def test_history_holds_answers_only_and_the_step_chain_continues_from_the_seed(
    llm: RecordedLLM, client: openai.AsyncOpenAI
) -> None:
    spec = llm.spec("deepseek_reasoning_content")
    seeds: list[str] = []

    async def seed(previous_id: str) -> int:
        seeds.append(previous_id)
        return 7

    history = [Exchange("msg_old", "hello", "msg_old_answer", "<think>secret</think>Hi there.")]
    tracker = StepTracker()
    events = await collect(turn_for(client, spec.user, history=history, steps=tracker, seed=seed))
    assert seeds == ["msg_user1"]
    assert [e.index for e in events if isinstance(e, StepReady)] == [8, 9, 10, 11]
    sent = llm.requests[-1]["messages"]
    assert sent[1:3] == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "Hi there."},
    ]


async def test_stop_while_streaming_ends_the_turn_stopped_with_the_answer_so_far(
    llm: RecordedLLM, client: openai.AsyncOpenAI
) -> None:
    llm.script(Play(ENDLESS, chunk_delay=0.005))
    turn = turn_for(client, "think forever")
    events: list[TurnEvent] = []
    async with contextlib.aclosing(turn.events()) as stream:
        async for event in stream:
            events.append(event)
            if isinstance(event, StepReady) and event.index == 2:
                asyncio.get_running_loop().call_later(0.05, turn.stop)  # mid-read
    end = events[-1]
    assert isinstance(end, TurnEnded) and end.status == "stopped" and end.error is None
    assert any(isinstance(e, AnswerStarted) for e in events)
    assert isinstance(events[-2], SentenceReady) and events[-2].final
    assert asyncio.current_task() is not None
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    await asyncio.sleep(0.05)  # the task was uncancelled: it can still await
    for _ in range(100):
        if llm.disconnects == 1:
            break
        await asyncio.sleep(0.02)
    assert llm.disconnects == 1  # the HTTP stream was closed, not left running


async def test_a_stop_while_the_consumer_is_busy_takes_effect_at_the_next_event(
    llm: RecordedLLM, client: openai.AsyncOpenAI
) -> None:
    llm.script(Play(ENDLESS, chunk_delay=0.005))
    turn = turn_for(client, "think forever")
    events: list[TurnEvent] = []
    async for event in turn.events():
        events.append(event)
        if isinstance(event, StepReady) and event.index == 1:
            turn.stop()
            await asyncio.sleep(0.05)  # the consumer's own await is never cancelled
    steps = [e for e in events if isinstance(e, StepReady)]
    assert len(steps) == 1
    end = events[-1]
    assert isinstance(end, TurnEnded) and end.status == "stopped"


@pytest.mark.parametrize("deltas", [False, True])
async def test_a_stop_after_the_stream_was_read_ahead_sends_the_answer_it_keeps(
    deltas: bool,
) -> None:
    """The stream is read while the consumer is busy: a stop then sends the answer text
    already read (so what leaves is the answer kept), drops the steps not yet given, and
    leaves no gap in the step chain."""
    written = asyncio.Event()

    def on_stream(body: object, stream: str) -> Callable[[str, int], None]:
        def on_event(event: str, ns: int) -> None:
            if event == "data: [DONE]":
                asyncio.get_running_loop().call_soon(written.set)

        return on_event

    async with (
        RecordedLLM(on_stream=on_stream) as llm,
        openai.AsyncOpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as client,
    ):
        llm.script(Play(TOKEN_TURN, chunk_delay=0.001, paragraphs=2))
        chains = StepTracker()
        turn = turn_for(client, "rice", deltas=deltas, steps=chains)
        events: list[TurnEvent] = []
        async for event in turn.events():
            events.append(event)
            if isinstance(event, StepReady) and event.index == 1:
                await asyncio.wait_for(written.wait(), 10)  # step 2 and the answer are out
                # and read ahead (without deltas: all of it; with deltas: some), however
                # long that takes on a busy machine (a fixed 0.3 s once read nothing)
                whole = TURN_ANSWER.strip() if not deltas else ""
                async with asyncio.timeout(10):
                    while not (read := "".join(turn._answer).strip()) or not read.startswith(whole):
                        await asyncio.sleep(0.01)
                turn.stop()
    end = events[-1]
    assert isinstance(end, TurnEnded) and end.status == "stopped"
    assert end.answer and TURN_ANSWER.startswith(end.answer)
    if not deltas:  # a few batches: the whole answer was read (deltas: 64 tokens ahead)
        assert end.answer == TURN_ANSWER.strip()
    steps = [e for e in events if isinstance(e, StepReady)]
    assert [s.index for s in steps] == [1] and end.steps == 1
    assert chains.last_index("msg_user1") == 1  # a regeneration goes on at 2
    kinds = [type(e) for e in events]
    assert kinds.count(AnswerStarted) == 1
    assert kinds.index(StepReady) < kinds.index(AnswerStarted)
    sentences = [e for e in events if isinstance(e, SentenceReady)]
    assert sentences[-1].final and not any(s.final for s in sentences[:-1])
    assert " ".join(s.text for s in sentences).split() == end.answer.split()
    if deltas:
        text = "".join(e.text for e in events if isinstance(e, AnswerDelta))
        assert text.strip() == end.answer


async def test_a_stop_before_the_turn_starts_calls_no_model(
    llm: RecordedLLM, client: openai.AsyncOpenAI
) -> None:
    turn = turn_for(client, "never asked")
    turn.stop()
    events = await collect(turn)
    assert [type(e).__name__ for e in events] == ["AnswerStarted", "SentenceReady", "TurnEnded"]
    assert len(llm.requests) == 0


async def test_a_failing_model_ends_the_turn_failed_with_a_typed_error(tmp_path: Path) -> None:
    async with openai.AsyncOpenAI(
        base_url="http://127.0.0.1:9/v1", api_key="x", max_retries=0, timeout=5
    ) as client:
        events = await collect(turn_for(client, "hello"))
    end = events[-1]
    assert isinstance(end, TurnEnded) and end.status == "failed"
    assert isinstance(end.error, LLMUnavailable)
    assert "APIConnectionError" in str(end.error)


async def test_an_outside_cancel_is_not_swallowed(
    llm: RecordedLLM, client: openai.AsyncOpenAI
) -> None:
    llm.script(Play(ENDLESS, chunk_delay=0.005))
    turn = turn_for(client, "think forever")
    task = asyncio.create_task(collect(turn))
    await asyncio.sleep(0.3)
    turn.stop()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_turn_runs_once(llm: RecordedLLM, client: openai.AsyncOpenAI) -> None:
    turn = turn_for(client, llm.spec("plain_no_reasoning").user)
    await collect(turn)
    with pytest.raises(RuntimeError, match="runs once"):
        await collect(turn)


def test_the_manifest_has_the_streams_these_tests_use() -> None:
    names = set(load_manifest())
    assert {"deepseek_reasoning_content", "plain_no_reasoning"} <= names


async def test_a_providers_summary_of_raw_reasoning_goes_with_its_step(serve: Any) -> None:
    """Raw reasoning and the provider's summary of it (OpenRouter reasoning_details with
    both kinds): the steps are the raw text, the summary rides on the step it closes."""
    text = {"type": "reasoning.text", "index": 0}
    summary = {"type": "reasoning.summary", "index": 1}
    body = sse(
        chunk(reasoning_details=[{**text, "text": "First I check the units. "}]),
        chunk(reasoning_details=[{**text, "text": "Then I add them up."}]),
        chunk(reasoning_details=[{**summary, "summary": "Checked units, "}]),
        chunk(reasoning_details=[{**summary, "summary": "added them."}]),
        chunk(content="It is 12."),
    )
    own = await serve(body_handler(body))
    events = await collect(turn_for(own, "sum"))
    steps = [e for e in events if isinstance(e, StepReady)]
    assert [(s.text, s.summary) for s in steps] == [
        ("First I check the units. Then I add them up.", "Checked units, added them.")
    ]
    ended = events[-1]
    assert isinstance(ended, TurnEnded) and ended.answer == "It is 12."


@pytest.mark.parametrize("keep", [0, 1, 5, 40])
def test_the_context_holds_the_last_answered_exchanges_in_order(
    client: openai.AsyncOpenAI, keep: int
) -> None:
    # 30 past turns, every third without an answer (failed, or stopped before any text).
    history = [
        Exchange(f"u{i}", f"q{i}", f"a{i}", "" if i % 3 == 0 else f"<think>x</think>A{i}.")
        for i in range(30)
    ]
    options = dataclasses.replace(OPTIONS, history_turns=keep)
    turn = Turn(
        user_id="u30", text="now", answer_id="a30", llm=client, options=options, history=history
    )
    answered = [i for i in range(30) if i % 3][-keep:] if keep else []
    expected = [{"role": "system", "content": "Be brief."}]
    for i in answered:
        expected += [
            {"role": "user", "content": f"q{i}"},
            {"role": "assistant", "content": f"A{i}."},
        ]
    assert turn._context() == [*expected, {"role": "user", "content": "now"}]
