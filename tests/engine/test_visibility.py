"""Who sees the chain of thought: the server decides, from the join token.

The level is the participant's ``alicia.reasoning`` token attribute (ignored from a
participant that may set its own attributes), else ``ALICIA_REASONING_VISIBILITY``
(default ``none``). A client's Configuration can only narrow it. The recorded reasoning
is the canary: it must appear in plaintext only where the level is ``full``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from alicia.agent.engine.participants import visibility_of
from alicia.agent.engine.sealing import ReasoningSealer
from alicia.agent.engine.transport import UNKNOWN_PEER, Peer
from alicia.agent.llm.summary import extractive_summary
from alicia.harness.recorded_llm import Play, RecordedLLM
from alicia.protocol import AssistantSentence, Configuration, Envelope, ReasoningStep, StartAnswer
from tests.engine.room import SHOW, count, final_sentence, of, room, user_message


def granted(level: str, *, self_settable: bool = False) -> Peer:
    return Peer(attributes={"alicia.reasoning": level}, can_update_own_attributes=self_settable)


def test_a_grant_is_a_level_or_the_default() -> None:
    assert visibility_of("full", "none") == "full"
    assert visibility_of(" Summary ", "none") == "summary"
    assert visibility_of(None, "encrypted") == "encrypted"
    assert visibility_of("everything", "none") == "none"  # never more than a known level


async def run_turn(llm: RecordedLLM, peers: dict[str, Peer], **settings: Any) -> dict[str, Any]:
    """One reasoning turn asked by the first participant; everyone's inbox afterwards."""
    spec = llm.spec("deepseek_reasoning_content")
    async with room(llm, **settings) as r:
        clients = {name: r.client(name, peer) for name, peer in peers.items()}
        for client in clients.values():
            client.send(Configuration(features=SHOW))  # everyone asks for the steps
            await client.wait_for(count(Configuration, 1))
        first = next(iter(clients.values()))
        llm.script("deepseek_reasoning_content")
        first.send(user_message(spec.user))
        for client in clients.values():
            await client.wait_for(final_sentence)
        return {
            "spec": spec,
            "boxes": {name: c.inbox() for name, c in clients.items()},
            "raw": {
                name: b"".join(s.data for s in r.transport.sent if s.reaches(name))
                for name in clients
            },
        }


CANARY = b"classic trap"
"""In the second sentence of the recorded reasoning's first step: never in a summary."""


def levels() -> dict[str, Peer]:
    return {
        "full": granted("full"),
        "summary": granted("summary"),
        "encrypted": granted("encrypted"),
        "none": granted("none"),
        "no-grant": UNKNOWN_PEER,
        "self-made-full": granted("full", self_settable=True),
    }


async def test_each_level_gets_its_rendition_and_the_canary_only_reaches_full(
    llm: RecordedLLM,
) -> None:
    keys = (("k1", bytes(range(32))), ("k0", bytes(32)))
    out = await run_turn(llm, levels(), reasoning_keys=keys)
    spec, boxes, raw = out["spec"], out["boxes"], out["raw"]
    assert CANARY in spec.steps[0].encode()
    steps = {name: of(box, ReasoningStep) for name, box in boxes.items()}
    n = len(spec.steps)
    assert {k: len(v) for k, v in steps.items()} == {
        "full": n,
        "summary": n,
        "encrypted": n,
        "none": 0,
        "no-grant": 0,
        "self-made-full": 0,
    }
    assert {name for name, data in raw.items() if CANARY in data} == {"full"}
    sealer = ReasoningSealer(keys)
    conv = boxes["full"][0].conversation_id
    assert [s.content for s in steps["full"]] == list(spec.steps)
    assert all(s.encrypted_value is None for s in steps["full"])
    for s, text in zip(steps["summary"], spec.steps, strict=True):
        assert s.content == extractive_summary(text) and s.content != text
        assert sealer.open(s.encrypted_value, conv) == text
    for s, text in zip(steps["encrypted"], spec.steps, strict=True):
        assert s.content == "" and sealer.open(s.encrypted_value, conv) == text
    # Every rendition of a step has the same id and index: one step, several views.
    assert [(s.id, s.step_index) for s in steps["summary"]] == [
        (s.id, s.step_index) for s in steps["full"]
    ]
    replies = {name: of(box, Configuration)[0].features or [] for name, box in boxes.items()}
    reasoning = {n: [f for f in fs if f.startswith("reasoning")] for n, fs in replies.items()}
    assert reasoning == {
        "full": ["reasoning_steps"],
        "summary": ["reasoning_summary", "reasoning_encrypted"],
        "encrypted": ["reasoning_encrypted"],
        "none": [],
        "no-grant": [],
        "self-made-full": [],
    }


async def test_without_keys_summaries_still_go_out_and_encrypted_gets_nothing(
    llm: RecordedLLM,
) -> None:
    out = await run_turn(llm, {"summary": granted("summary"), "enc": granted("encrypted")})
    steps = {name: of(box, ReasoningStep) for name, box in out["boxes"].items()}
    assert len(steps["summary"]) == len(out["spec"].steps) and steps["enc"] == []
    assert all(s.encrypted_value is None for s in steps["summary"])
    assert not any(CANARY in data for data in out["raw"].values())


async def test_the_deployment_default_applies_without_a_grant_and_a_grant_overrides_it(
    llm: RecordedLLM,
) -> None:
    out = await run_turn(
        llm,
        {"no-grant": UNKNOWN_PEER, "denied": granted("none")},
        reasoning_visibility="full",
    )
    steps = {name: len(of(box, ReasoningStep)) for name, box in out["boxes"].items()}
    assert steps == {"no-grant": len(out["spec"].steps), "denied": 0}


async def test_a_configuration_only_narrows(llm: RecordedLLM) -> None:
    spec = llm.spec("deepseek_reasoning_content")
    async with room(llm) as r:
        hides = r.client("hides", granted("full"))
        hides.send(Configuration(features=["streaming"]))  # granted full, asks for none
        await hides.wait_for(count(Configuration, 1))
        llm.script("deepseek_reasoning_content")
        hides.send(user_message(spec.user))
        box = await hides.wait_for(final_sentence)
    assert of(box, ReasoningStep) == []
    assert "reasoning_steps" not in (of(box, Configuration)[0].features or [])


@pytest.mark.parametrize("level", ["summary", "encrypted", "none"])
async def test_replay_to_a_resuming_client_holds_only_what_it_may_see(
    llm: RecordedLLM, level: str
) -> None:
    spec = llm.spec("deepseek_reasoning_content")
    async with room(llm, reasoning_keys=(("k1", bytes(32)),)) as r:
        asker, other = r.client("asker", granted("full")), r.client("other", granted(level))
        for c in (asker, other):
            c.send(Configuration(features=SHOW))
            await c.wait_for(count(Configuration, 1))
        llm.script("deepseek_reasoning_content")
        asker.send(user_message(spec.user))
        await asker.wait_for(final_sentence)
        await other.wait_for(final_sentence)
        before = len(other.inbox())
        other.send(Configuration(conversation_id=r.conversation.id, last_sequence_seen=1))
        box = await other.wait_for(count(Configuration, 2))
        await asyncio.sleep(0.1)
        replayed = other.inbox()[before:]
    steps = of(replayed, ReasoningStep)
    assert len(steps) == (0 if level == "none" else len(spec.steps))
    assert all(s.content != text for s, text in zip(steps, spec.steps, strict=False))
    assert not any(CANARY in repr(e.body).encode() for e in box)


async def summarized_turn(
    llm: RecordedLLM, *, turn_delay: float, summary: Play, linger: float = 0.2, **settings: Any
) -> tuple[list[Envelope[Any]], list[Envelope[Any]], Any]:
    """A turn (its stream paced by ``turn_delay``) with a summarizer model answering as
    ``summary``; the inboxes of a ``full`` and a ``summary`` participant."""
    spec = llm.spec("deepseek_reasoning_content")
    llm.route_model("summarizer", summary)
    settings.setdefault("step_max_delay_s", 30.0)  # steps cut by paragraph only
    async with room(llm, summary_model="summarizer", **settings) as r:
        full, brief = r.client("full", granted("full")), r.client("brief", granted("summary"))
        for c in (full, brief):
            c.send(Configuration(features=SHOW))
            await c.wait_for(count(Configuration, 1))
        llm.script(Play("deepseek_reasoning_content", chunk_delay=turn_delay))
        full.send(user_message(spec.user))
        await full.wait_for(final_sentence, within=30)
        await brief.wait_for(final_sentence, within=30)
        await asyncio.sleep(linger)  # summaries still being made finish (and are dropped)
        return full.inbox(), brief.inbox(), r.conversation


def steps_before_answer(box: list[Envelope[Any]]) -> tuple[list[ReasoningStep], int]:
    """The steps, and how many of them came after StartAnswer."""
    start = next(i for i, e in enumerate(box) if isinstance(e.body, StartAnswer))
    steps = [e.body for e in box if isinstance(e.body, ReasoningStep)]
    late = [e for e in box[start:] if isinstance(e.body, ReasoningStep)]
    return steps, len(late)


async def test_a_summarizer_model_writes_the_summaries_when_it_is_in_time(
    llm: RecordedLLM,
) -> None:
    plain = llm.spec("plain_no_reasoning")
    full, brief, conv = await summarized_turn(
        llm, turn_delay=0.05, summary=Play("plain_no_reasoning", chunk_delay=0.0)
    )
    spec = llm.spec("deepseek_reasoning_content")
    steps, late = steps_before_answer(brief)
    # The last step closes as the answer starts: its summary can only be late.
    assert late == 0 and len(steps) + conv.late_summaries == len(spec.steps)
    assert len(steps) >= len(spec.steps) - 1
    assert [s.content for s in steps] == [" ".join(plain.answer.split())] * len(steps)
    asked = [r for r in llm.requests if r["model"] == "summarizer"]
    assert sorted(r["messages"][1]["content"] for r in asked) == sorted(spec.steps)  # one step each
    assert [s.content for s in of(full, ReasoningStep)] == list(spec.steps)


async def test_a_slow_summarizer_never_delays_the_answer_and_late_summaries_are_dropped(
    llm: RecordedLLM,
) -> None:
    spec = llm.spec("deepseek_reasoning_content")
    full, brief, conv = await summarized_turn(
        llm,
        turn_delay=0.0,
        summary=Play("plain_no_reasoning", chunk_delay=0.1),
        summary_timeout_s=30.0,
        summary_concurrency=8,
        linger=6.0,
    )
    steps, late = steps_before_answer(brief)
    assert late == 0  # never a step after the answer started
    assert steps == [] and conv.late_summaries == len(spec.steps)
    answer = " ".join(e.body.text for e in full if isinstance(e.body, AssistantSentence))
    assert answer.split() == spec.answer.split()


async def test_a_summarizer_past_its_timeout_falls_back_to_the_extractive_summary(
    llm: RecordedLLM,
) -> None:
    spec = llm.spec("deepseek_reasoning_content")
    _, brief, _ = await summarized_turn(
        llm,
        turn_delay=0.05,
        summary=Play("plain_no_reasoning", chunk_delay=1.0),
        summary_timeout_s=0.1,
        summary_concurrency=8,
    )
    steps, late = steps_before_answer(brief)
    assert late == 0
    by_index = {s.step_index: s.content for s in steps}
    expected = {i: extractive_summary(t) for i, t in enumerate(spec.steps, start=1)}
    assert by_index == {i: expected[i] for i in by_index}
    assert len(by_index) >= len(spec.steps) - 1  # the last one races the answer


@pytest.mark.parametrize("stream", ["openrouter_gpt5_summary"])
async def test_the_providers_own_summaries_come_first(llm: RecordedLLM, stream: str) -> None:
    """A provider that streams only summaries (OpenRouter ``reasoning.summary``): they
    are the steps, and ``summary`` participants get them as they are; the summarizer
    model is not asked."""
    spec = llm.spec(stream)
    assert spec.summaries and not spec.reasoning
    llm.route_model("summarizer", "plain_no_reasoning")
    async with room(llm, summary_model="summarizer", step_max_delay_s=30.0) as r:
        full, brief = r.client("full", granted("full")), r.client("brief", granted("summary"))
        for c in (full, brief):
            c.send(Configuration(features=SHOW))
            await c.wait_for(count(Configuration, 1))
        llm.script(stream)
        full.send(user_message(spec.user))
        await full.wait_for(final_sentence, within=30)
        await brief.wait_for(final_sentence, within=30)
    assert [s.content for s in of(full.inbox(), ReasoningStep)] == list(spec.summaries)
    assert [s.content for s in of(brief.inbox(), ReasoningStep)] == list(spec.summaries)
    assert [r for r in llm.requests if r["model"] == "summarizer"] == []
