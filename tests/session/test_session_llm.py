"""AliciaLLM: a livekit-agents LLM whose reasoning never reaches speech or the transcript.

Every test reads recorded provider streams over real HTTP through the real openai client
(:class:`alicia.harness.recorded_llm.RecordedLLM`, which also enforces each provider's request
rules with its real errors), and the AgentSession tests run livekit-agents' own
``AgentSession`` (text input, no room) with the session's own function tools.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from livekit.agents import Agent, AgentSession, llm

from alicia.agent.engine.events import Usage
from alicia.agent.engine.keeper import Keeper
from alicia.agent.engine.sealing import ReasoningSealer
from alicia.agent.engine.tools import default_tools
from alicia.agent.session import AliciaLLM
from alicia.agent.session.llm import PASSBACK_EXTRA, PassBackStore
from alicia.agent.session.tools import session_tools
from alicia.harness.recorded_llm import RecordedLLM

KEY = ("k1", bytes(range(32)))


def words(text: str) -> list[str]:
    return text.split()


def make_llm(server: RecordedLLM, model: str, **kwargs: Any) -> AliciaLLM:
    return AliciaLLM(model=model, base_url=server.base_url, api_key="test", **kwargs)


class Recorder:
    """A round observer that keeps what it saw."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.ended: list[tuple[list[llm.FunctionToolCall], Usage | None, object]] = []

    def round_started(self, round_id: str) -> None:
        self.seen.append(("start", round_id))

    def reasoning(self, round_id: str, text: str, *, summary: bool) -> None:
        self.seen.append(("summary" if summary else "reasoning", text))

    def answer(self, round_id: str, text: str) -> None:
        self.seen.append(("answer", text))

    def round_ended(
        self,
        round_id: str,
        *,
        tool_calls: list[llm.FunctionToolCall],
        usage: Usage | None,
        error: BaseException | None,
    ) -> None:
        self.ended.append((tool_calls, usage, error))


async def one_round(model: AliciaLLM, text: str) -> list[llm.ChatChunk]:
    ctx = llm.ChatContext()
    ctx.add_message(role="system", content="Be brief.")
    ctx.add_message(role="user", content=text)
    async with model.chat(chat_ctx=ctx) as stream:
        return [chunk async for chunk in stream]


@pytest.mark.parametrize(
    "shape",
    ["deepseek_reasoning_content", "ollama_qwen3_think_inline", "vllm_reasoning", "thinking_field"],
)
async def test_answer_is_content_and_reasoning_goes_only_to_observers(
    server: RecordedLLM, shape: str
) -> None:
    spec = server.spec(shape)
    server.script(shape)
    model = make_llm(server, spec.model)
    recorder = Recorder()
    model.observe(recorder)
    try:
        chunks = await one_round(model, spec.user)
    finally:
        await model.aclose()
    content = "".join(c.delta.content or "" for c in chunks if c.delta)
    assert words(content) == words(spec.answer)
    for step in spec.steps:
        assert step not in content
    assert "<think>" not in content and "</think>" not in content
    # No chunk carries reasoning: livekit-agents merges chunk extras into the message
    # its session host sends to every participant.
    assert [c.delta.extra for c in chunks if c.delta and c.delta.extra] == []
    canary = spec.steps[0][:60]
    assert canary not in json.dumps([c.model_dump(mode="json") for c in chunks])
    # The observer saw the reasoning and the answer, in order.
    seen_answer = "".join(t for k, t in recorder.seen if k == "answer")
    seen_reasoning = "".join(t for k, t in recorder.seen if k == "reasoning")
    assert seen_answer == content and words(seen_reasoning) == words(" ".join(spec.steps))
    kinds = [k for k, _ in recorder.seen]
    assert kinds[0] == "start" and kinds.index("answer") > kinds.index("reasoning")
    assert len(recorder.ended) == 1 and recorder.ended[0][2] is None


async def test_usage_carries_reasoning_tokens(server: RecordedLLM) -> None:
    spec = server.spec("deepseek_reasoning_content")
    server.script(spec.name)
    model = make_llm(server, spec.model)
    try:
        chunks = await one_round(model, spec.user)
    finally:
        await model.aclose()
    (usage,) = [c.usage for c in chunks if c.usage is not None]
    assert (usage.prompt_tokens, usage.completion_tokens, usage.reasoning_tokens) == (19, 172, 130)


async def test_responses_api_round(server: RecordedLLM) -> None:
    spec = server.spec("responses_raw_reasoning")
    server.script(spec.name)
    model = make_llm(server, spec.model, provider="vllm", api="responses")
    recorder = Recorder()
    model.observe(recorder)
    try:
        chunks = await one_round(model, spec.user)
    finally:
        await model.aclose()
    content = "".join(c.delta.content or "" for c in chunks if c.delta)
    reasoning = "".join(t for k, t in recorder.seen if k == "reasoning")
    assert words(content) == words(spec.answer)
    assert words(reasoning) == words(" ".join(spec.steps))
    assert spec.steps[0][:60] not in json.dumps([c.model_dump(mode="json") for c in chunks])
    body = server.requests[-1]
    assert body["store"] is False and body["input"][-1]["role"] == "user"


async def session_run(model: AliciaLLM, text: str) -> tuple[list[Any], list[llm.ChatItem]]:
    tools = session_tools(default_tools())
    async with AgentSession(llm=model) as session:
        await session.start(Agent(instructions="Be brief.", tools=tools), record=False)
        result: Any = await session.run(user_input=text)
        return list(result.events), list(session.history.items)


@pytest.mark.parametrize(
    ("name", "provider"), [("deepseek_v4_tool_call", "deepseek"), ("gemini_tool_call", "gemini")]
)
async def test_a_session_tool_round_passes_back_what_the_provider_requires(
    server: RecordedLLM, name: str, provider: str
) -> None:
    spec = server.spec(name)
    assert spec.followup is not None
    follow = server.spec(spec.followup)
    server.script(name)
    sealer = ReasoningSealer([KEY])
    keeper = Keeper(lambda t: sealer.seal("conv", t), lambda v: sealer.open(v, "conv"))
    model = make_llm(server, spec.model, provider=provider, keeper=keeper)
    try:
        events, history = await session_run(model, spec.user)
    finally:
        await model.aclose()
    assert list(server.rejections) == []
    calls = [e.item for e in events if type(e).__name__ == "FunctionCallEvent"]
    outputs = [e.item for e in events if type(e).__name__ == "FunctionCallOutputEvent"]
    assert [c.name for c in calls] == [c["name"] for c in spec.tool_calls]
    assert outputs and not any(o.is_error for o in outputs)
    assert "value" in json.loads(outputs[0].output)  # the session's own calculator ran
    messages = [e.item for e in events if type(e).__name__ == "ChatMessageEvent"]
    answer = " ".join(m.text_content or "" for m in messages if m.role == "assistant")
    assert words(answer) == words(follow.answer)
    # What went back on the tool round is exactly what the provider sent.
    second = server.requests[-1]
    (assistant,) = [m for m in second["messages"] if m.get("tool_calls")]
    passback = spec.passback
    assert passback is not None
    if "reasoning_content" in passback:
        assert assistant["reasoning_content"] == passback["reasoning_content"]
    if "thought_signature" in passback:
        signatures = {
            c["extra_content"]["google"]["thought_signature"] for c in assistant["tool_calls"]
        }
        assert signatures == {passback["thought_signature"]}
    # While it waited, the pass-back was sealed, and in the LLM, not on the history.
    assert not any(PASSBACK_EXTRA in item.extra for item in history if hasattr(item, "extra"))
    kept = model._passbacks.get(spec.tool_calls[0]["id"])
    if "reasoning_content" in passback:
        assert kept is not None and kept.plain is None and (kept.sealed or "").count(".") == 4
    else:  # Gemini's signatures travel on the calls themselves
        assert kept is None
    # No reasoning text anywhere in what the session keeps or says.
    said = json.dumps([i.model_dump(mode="json") for i in history])
    for step in [*spec.steps, *follow.steps]:
        assert step not in said


async def test_without_the_providers_rule_the_same_session_round_is_refused(
    server: RecordedLLM,
) -> None:
    spec = server.spec("deepseek_v4_tool_call")
    server.script(spec.name)
    model = make_llm(server, spec.model, provider="generic")
    try:
        await session_run(model, spec.user)
    except Exception:  # the session may surface the failed round as an error
        pass
    finally:
        await model.aclose()
    assert [r.stream for r in server.rejections] == [spec.followup]


def test_the_passback_store_is_bounded_oldest_out_first() -> None:
    from alicia.agent.engine.keeper import Kept

    store = PassBackStore(limit=3)
    for i in range(5):
        store.put(f"k{i}", Kept(plain={"i": i}))
    assert len(store) == 3
    assert store.get("k0") is None and store.get("k1") is None
    assert [store.get(f"k{i}") for i in (2, 3, 4)] == [Kept(plain={"i": i}) for i in (2, 3, 4)]
    assert store.get(None) is None and store.get(["k2"]) is None
