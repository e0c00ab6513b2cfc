"""The assembler makes, from observed pieces, the events the engine's own Turn makes.

A turn source that does not run :class:`Turn` itself (the AgentSession bridge) hands the
pieces it sees to :class:`TurnAssembler`. Fed the pieces of a recorded stream, read over
real HTTP, it yields the same kinds of events in the same order, the same steps and
step indexes, and the same answer sentences as a Turn on the same recording.
"""

from __future__ import annotations

import openai
import pytest

from alicia.agent.engine.assembler import TurnAssembler
from alicia.agent.engine.events import (
    ReasoningDelta,
    SentenceReady,
    StepReady,
    TurnEnded,
    TurnEvent,
)
from alicia.agent.engine.turn import Turn, TurnOptions
from alicia.agent.llm.reasoning import Answer, Reasoning, ReasoningExtractor, Summary
from alicia.agent.llm.stream import stream_deltas
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import StepTracker

OPTIONS = TurnOptions(model="test-model", system_prompt="Be brief.", step_max_delay_s=30.0)
SHAPES = ["deepseek_reasoning_content", "ollama_qwen3_think_inline", "vllm_reasoning_boundary"]


async def _assembled(client: openai.AsyncOpenAI, text: str) -> list[TurnEvent]:
    """The recorded stream read piece by piece, as an observer of someone else's turn."""
    assembler = TurnAssembler("msg_user1", StepTracker(), step_max_delay_s=30.0)
    extractor = ReasoningExtractor()
    events: list[TurnEvent] = []
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]
    async for delta in stream_deltas(client, model="test-model", messages=messages):
        for part in extractor.feed(delta):
            if isinstance(part, Answer):
                events.extend(assembler.answer_text(part.text))
            else:
                events.extend(assembler.reasoning(part.text, summary=isinstance(part, Summary)))
    for part in extractor.flush():
        if isinstance(part, Answer):
            events.extend(assembler.answer_text(part.text))
        elif isinstance(part, Reasoning):
            events.extend(assembler.reasoning(part.text))
    events.extend(assembler.end("complete"))
    return events


@pytest.mark.parametrize("shape", SHAPES)
async def test_observed_pieces_make_the_same_events_as_the_turn(
    llm: RecordedLLM, client: openai.AsyncOpenAI, shape: str
) -> None:
    spec = llm.spec(shape)
    turn = Turn(user_id="msg_user1", text=spec.user, answer_id="msg_a", llm=client, options=OPTIONS)
    own = [event async for event in turn.events()]
    llm.route_model("test-model", shape)
    observed = await _assembled(client, spec.user)

    def shape_of(events: list[TurnEvent]) -> list[str]:
        return [type(e).__name__ for e in events if type(e).__name__ != "AnswerDelta"]

    assert shape_of(observed) == shape_of(own)
    steps = [(e.text, e.index) for e in observed if isinstance(e, StepReady)]
    assert steps == [(e.text, e.index) for e in own if isinstance(e, StepReady)]
    assert [t for t, _ in steps] == list(spec.steps)
    sentences = [e.text for e in observed if isinstance(e, SentenceReady)]
    assert sentences == [e.text for e in own if isinstance(e, SentenceReady)]
    end = observed[-1]
    assert isinstance(end, TurnEnded) and end.answer == spec.answer
    assert not any(step in end.answer for step in spec.steps)


def test_a_stopped_turn_ends_with_what_was_delivered_and_one_final_sentence() -> None:
    assembler = TurnAssembler("msg_u", StepTracker())
    events = assembler.reasoning("Thinking about it.\n\nStill thinking")
    events += assembler.answer_text("The first sentence is long enough. The second one")
    events += assembler.end("stopped", answer="The first sentence is long enough.")
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "ReasoningDelta",
        "StepReady",
        "StepReady",
        "AnswerStarted",
        "AnswerDelta",
        "SentenceReady",
        "SentenceReady",
        "TurnEnded",
    ]
    final = events[-2]
    assert isinstance(final, SentenceReady) and final.final
    end = events[-1]
    assert isinstance(end, TurnEnded)
    assert (end.status, end.answer, end.steps) == (
        "stopped",
        "The first sentence is long enough.",
        2,
    )
    assert assembler.end("complete") == []  # ends once


def test_a_tool_call_closes_the_open_step_first_and_indexes_continue() -> None:
    tracker = StepTracker()
    tracker.seed("msg_u", 3)
    assembler = TurnAssembler("msg_u", tracker)
    events = assembler.reasoning("I should use the calculator")
    assert events == [ReasoningDelta("I should use the calculator")]  # no step yet
    events = assembler.tool_requested("tu_1", "calculator", {"expression": "2+2"}, 5000)
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["StepReady", "ToolRequested"]
    step = events[0]
    assert isinstance(step, StepReady) and step.index == 4
