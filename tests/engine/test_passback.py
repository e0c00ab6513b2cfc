"""Provider pass-back rules, both ways, through the engine's Turn and the real openai client.

The recorded server enforces each provider's request rule with its real HTTP error, so a
worker that gets a rule wrong fails here with the provider's error: DeepSeek V4 (the
tool round's ``reasoning_content``), deepseek-reasoner (no reasoning in input),
OpenRouter (signed ``reasoning_details``), Gemini (thought signatures on tool calls)
and the Responses API (``store: false`` with the encrypted reasoning items carried).
"""

from __future__ import annotations

import json
from typing import Any, Literal

import openai
import pytest

from alicia.agent.engine.events import StepReady, ToolFinished, TurnEnded, TurnEvent
from alicia.agent.engine.keeper import Keeper
from alicia.agent.engine.sealing import ReasoningSealer
from alicia.agent.engine.tools import default_tools
from alicia.agent.engine.turn import Exchange, Turn, TurnOptions
from alicia.agent.llm.providers import PROFILES
from alicia.harness.recorded_llm import RecordedLLM

TOOL_STREAMS: dict[str, tuple[str, Literal["chat", "responses"]]] = {
    "deepseek_v4_tool_call": ("deepseek", "chat"),
    "openrouter_claude_tool_call": ("openrouter", "chat"),
    "gemini_tool_call": ("gemini", "chat"),
    "responses_summary_tool_call": ("openai", "responses"),
}
CANARY_KEY = ("k1", bytes(range(32)))
LLM_STREAMS = "shared"  # llm (tests/engine/conftest.py): the streams of tests/streams only


def options(provider: str, api: Literal["chat", "responses"], model: str) -> TurnOptions:
    return TurnOptions(
        model=model,
        system_prompt="Be brief.",
        step_max_delay_s=5.0,
        provider=PROFILES[provider],
        api=api,
    )


def sealed_keeper(conversation: str = "conv_passback") -> Keeper:
    sealer = ReasoningSealer([CANARY_KEY])
    return Keeper(
        lambda text: sealer.seal(conversation, text), lambda v: sealer.open(v, conversation)
    )


async def run(
    client: openai.AsyncOpenAI,
    opts: TurnOptions,
    text: str,
    *,
    history: list[Exchange] | None = None,
    keeper: Keeper | None = None,
    n: int = 1,
) -> tuple[list[TurnEvent], TurnEnded]:
    turn = Turn(
        user_id=f"msg_u{n}",
        text=text,
        answer_id=f"msg_a{n}",
        llm=client,
        options=opts,
        history=history or [],
        tools=default_tools(),
        keeper=keeper,
    )
    events = [e async for e in turn.events()]
    ended = events[-1]
    assert isinstance(ended, TurnEnded)
    return events, ended


def _assistant_tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        m
        for m in body.get("messages") or ()
        if m.get("role") == "assistant" and m.get("tool_calls")
    ]


@pytest.mark.parametrize("name", sorted(TOOL_STREAMS))
async def test_a_tool_round_gives_the_provider_what_its_rule_requires(
    llm: RecordedLLM, client: openai.AsyncOpenAI, name: str
) -> None:
    provider, api = TOOL_STREAMS[name]
    spec = llm.spec(name)
    assert spec.followup is not None
    follow = llm.spec(spec.followup)
    llm.script(name)
    events, ended = await run(
        client, options(provider, api, spec.model), spec.user, keeper=sealed_keeper()
    )
    assert list(llm.rejections) == []
    assert ended.status == "complete", ended.error
    assert ended.answer == follow.answer
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert len(finished) == len(spec.tool_calls)
    steps = [e.text for e in events if isinstance(e, StepReady)]
    assert steps == [*spec.steps, *follow.steps]
    # What went back with the tool round is exactly what the provider sent.
    second = llm.requests[-1]
    passback = spec.passback
    assert passback is not None
    if api == "responses":
        reasoning = [i for i in second["input"] if i.get("type") == "reasoning"]
        assert reasoning == [passback["reasoning_item"]]
        assert second["store"] is False
        assert second["include"] == ["reasoning.encrypted_content"]
        calls = [i for i in second["input"] if i.get("type") == "function_call"]
        assert [c["call_id"] for c in calls] == [c["id"] for c in spec.tool_calls]
    else:
        (assistant,) = _assistant_tool_messages(second)
        if "reasoning_content" in passback:
            assert assistant["reasoning_content"] == passback["reasoning_content"]
        if "reasoning_details" in passback:
            assert assistant["reasoning_details"] == passback["reasoning_details"]
        if "thought_signature" in passback:
            signatures = [
                c["extra_content"]["google"]["thought_signature"] for c in assistant["tool_calls"]
            ]
            assert signatures == [passback["thought_signature"]] * len(signatures)


@pytest.mark.parametrize("name", sorted(n for n, (_, api) in TOOL_STREAMS.items() if api == "chat"))
async def test_a_worker_that_does_not_pass_back_gets_the_providers_error(
    llm: RecordedLLM, client: openai.AsyncOpenAI, name: str
) -> None:
    """The generic profile never sends reasoning back (and speaks chat completions)."""
    spec = llm.spec(name)
    llm.script(name)
    _, ended = await run(client, options("generic", "chat", spec.model), spec.user)
    assert ended.status == "failed"
    assert ended.error is not None and "BadRequestError" in str(ended.error)
    assert [r.stream for r in llm.rejections] == [spec.followup]


async def test_responses_items_are_required_and_carried_into_the_next_turn(
    llm: RecordedLLM, client: openai.AsyncOpenAI
) -> None:
    spec = llm.spec("responses_summary_tool_call")
    opts = options("openai", "responses", spec.model)
    llm.script("responses_summary_tool_call")
    _, first = await run(client, opts, spec.user, keeper=sealed_keeper())
    assert first.status == "complete" and first.kept is not None
    # Sealed while it waits for the next turn: no summary or item text in the clear.
    assert first.kept.plain is None and first.kept.sealed is not None
    assert "gAAAA" not in first.kept.sealed
    history = [Exchange("msg_u1", spec.user, "msg_a1", first.answer, kept=first.kept)]
    raw = llm.spec("responses_raw_reasoning")
    llm.script("responses_raw_reasoning")
    _, second = await run(client, opts, raw.user, history=history, keeper=sealed_keeper(), n=2)
    assert second.status == "complete" and second.answer == raw.answer
    body = llm.requests[-1]
    items = body["input"]
    kinds = [i.get("type") or i.get("role") for i in items]
    assert kinds == ["user", "reasoning", "assistant", "user"]
    carried = items[1]
    assert carried["id"].startswith("rs_") and carried["encrypted_content"].startswith("gAAAA")
    assert spec.passback is not None
    assert carried["id"] != spec.passback["reasoning_item"]["id"]  # the answer round's item
    assert list(llm.rejections) == []


async def test_deepseek_reasoner_never_gets_reasoning_back(
    llm: RecordedLLM, client: openai.AsyncOpenAI
) -> None:
    spec = llm.spec("deepseek_reasoning_content")
    opts = options("deepseek-reasoner", "chat", spec.model)
    llm.script(spec.name, spec.name)
    _, first = await run(client, opts, spec.user)
    history = [Exchange("msg_u1", spec.user, "msg_a1", first.answer, kept=first.kept)]
    _, second = await run(client, opts, "And 9.9?", history=history, n=2)
    assert (first.status, second.status) == ("complete", "complete")
    assert list(llm.rejections) == []
    body = json.dumps(llm.requests[-1])
    assert "reasoning_content" not in body
    assert spec.steps[0] not in body


async def test_reasoning_sent_back_to_deepseek_reasoner_is_refused_by_the_server(
    llm: RecordedLLM, client: openai.AsyncOpenAI
) -> None:
    """The recorded rule itself: what a worker that always passed back would get."""
    llm.script("deepseek_reasoning_content")
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(
            model="deepseek-reasoner",
            stream=True,
            messages=[
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello", "reasoning_content": "R"},  # type: ignore[list-item]
                {"role": "user", "content": "again"},
            ],
        )
    assert [r.rule for r in llm.rejections] == ["deepseek_reasoner_no_reasoning_input"]


@pytest.mark.parametrize(
    ("provider", "effort", "key", "value"),
    [
        ("deepseek", "none", "thinking", {"type": "disabled"}),
        ("openrouter", "low", "reasoning", {"effort": "low"}),
        ("ollama", "none", "think", False),
        ("vllm", "none", "chat_template_kwargs", {"enable_thinking": False}),
        ("generic", "medium", "reasoning_effort", "medium"),
    ],
)
async def test_effort_reaches_the_provider_in_its_own_form(
    llm: RecordedLLM,
    client: openai.AsyncOpenAI,
    provider: str,
    effort: Literal["none", "low", "medium", "high"],
    key: str,
    value: object,
) -> None:
    spec = llm.spec("vllm_reasoning")
    llm.script("vllm_reasoning")
    opts = TurnOptions(
        model=spec.model, system_prompt="S", provider=PROFILES[provider], effort=effort
    )
    _, ended = await run(client, opts, spec.user)
    assert ended.status == "complete"
    assert llm.requests[-1][key] == value


async def test_after_a_failed_turn_the_next_request_is_well_formed(
    llm: RecordedLLM, client: openai.AsyncOpenAI
) -> None:
    """The observed failure: a DeepSeek V4 tool round refused with 400 left the user
    message alone in the history, and the next request held [system, user, user]."""
    spec = llm.spec("deepseek_v4_tool_call")
    opts = options("generic", "chat", spec.model)
    llm.script(spec.name)
    _, failed = await run(client, opts, spec.user)
    assert failed.status == "failed" and failed.answer == ""
    history = [Exchange("msg_u1", spec.user, "msg_a1", failed.answer)]
    plain = llm.spec("plain_no_reasoning")
    llm.script(plain.name)
    _, ok = await run(client, opts, plain.user, history=history, n=2)
    assert ok.status == "complete"
    roles = [m["role"] for m in llm.requests[-1]["messages"]]
    assert roles == ["system", "user"]  # the failed exchange is left out whole
