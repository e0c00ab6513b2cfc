"""Tool rounds of AliciaLLM: the session's own tools, tool calls as FunctionToolCalls,
and each provider's pass-back across an AgentSession's tool rounds.

Recorded provider streams over real HTTP through the real openai client
(:class:`alicia.harness.recorded_llm.RecordedLLM` enforces each provider's request rules
with its real errors); the session is livekit-agents' own ``AgentSession``, text only.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from livekit.agents import Agent, AgentSession, llm

from alicia.agent.engine.keeper import Keeper
from alicia.agent.engine.sealing import ReasoningSealer
from alicia.agent.engine.tools import default_tools
from alicia.agent.session import AliciaLLM
from alicia.agent.session.llm import PASSBACK_EXTRA
from alicia.agent.session.tools import session_tools
from alicia.harness.recorded_llm import RecordedLLM

KEY = ("k1", bytes(range(32)))


def words(text: str) -> list[str]:
    return text.split()


def sealed_keeper() -> Keeper:
    sealer = ReasoningSealer([KEY])
    return Keeper(lambda t: sealer.seal("conv", t), lambda v: sealer.open(v, "conv"))


def make_llm(server: RecordedLLM, model: str, **kwargs: Any) -> AliciaLLM:
    return AliciaLLM(model=model, base_url=server.base_url, api_key="test", **kwargs)


async def session_run(model: AliciaLLM, text: str) -> tuple[list[Any], list[llm.ChatItem]]:
    async with AgentSession(llm=model) as session:
        agent = Agent(instructions="Be brief.", tools=session_tools(default_tools()))
        await session.start(agent, record=False)
        result: Any = await session.run(user_input=text)
        return list(result.events), list(session.history.items)


# -- the session's own tools ------------------------------------------------------------


async def test_session_tools_offer_the_engines_schemas_and_outcomes() -> None:
    toolbox = default_tools()
    tools = session_tools(toolbox)
    schemas = llm.ToolContext(tools).parse_function_tools("openai", strict=False)
    assert sorted(s["function"]["name"] for s in schemas) == sorted(
        s["function"]["name"] for s in toolbox.schemas()
    )
    by_name = {s["function"]["name"]: s["function"] for s in schemas}
    for schema in toolbox.schemas():
        assert by_name[schema["function"]["name"]]["parameters"] == schema["function"]["parameters"]
    (calculator,) = [
        t for t in tools if isinstance(t, llm.RawFunctionTool) and t.info.name == "calculator"
    ]
    ok = json.loads(await calculator({"expression": "250 * 162.4"}))
    assert ok["value"] == 40600
    with pytest.raises(llm.ToolError) as failed:
        await calculator({"expression": "__import__('os')"})
    assert "error" in json.loads(failed.value.message)


# -- tool calls straight from chat() ----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "provider"), [("deepseek_v4_tool_call", "deepseek"), ("gemini_tool_call", "gemini")]
)
async def test_chat_yields_function_tool_calls_with_their_passback(
    server: RecordedLLM, name: str, provider: str
) -> None:
    spec = server.spec(name)
    server.script(name)
    model = make_llm(server, spec.model, provider=provider, keeper=sealed_keeper())
    ctx = llm.ChatContext()
    ctx.add_message(role="user", content=spec.user)
    tools = [t for t in session_tools(default_tools()) if isinstance(t, llm.Tool)]
    try:
        async with model.chat(chat_ctx=ctx, tools=tools) as stream:
            chunks = [chunk async for chunk in stream]
    finally:
        await model.aclose()
    calls = [c for chunk in chunks if chunk.delta for c in chunk.delta.tool_calls]
    assert [(c.name, json.loads(c.arguments), c.call_id) for c in calls] == [
        (t["name"], json.loads(t["arguments"]), t["id"]) for t in spec.tool_calls
    ]
    content = "".join(c.delta.content or "" for c in chunks if c.delta)
    for step in spec.steps:
        assert step not in content
    said = json.dumps([c.model_dump(mode="json") for c in chunks])
    for step in spec.steps:
        assert step[:60] not in said
    passback = spec.passback or {}
    if "reasoning_content" in passback:  # sealed, in the LLM, by the first call's id
        assert not any(PASSBACK_EXTRA in (c.extra or {}) for c in calls)
        kept = model._passbacks.get(calls[0].call_id)
        assert kept is not None and kept.plain is None and (kept.sealed or "").count(".") == 4
        assert passback["reasoning_content"] not in said
    if "thought_signature" in passback:
        assert {(c.extra or {})["google"]["thought_signature"] for c in calls} == {
            passback["thought_signature"]
        }


# -- pass-back across the session's tool rounds ----------------------------------------


@pytest.mark.parametrize(
    ("name", "provider", "api"),
    [
        ("responses_summary_tool_call", "openai", "responses"),
        ("openrouter_claude_tool_call", "openrouter", "chat"),
    ],
)
async def test_a_session_tool_round_passes_back_reasoning_items_and_details(
    server: RecordedLLM, name: str, provider: str, api: str
) -> None:
    spec = server.spec(name)
    assert spec.followup is not None
    follow = server.spec(spec.followup)
    server.script(name)
    model = make_llm(server, spec.model, provider=provider, api=api, keeper=sealed_keeper())
    try:
        events, history = await session_run(model, spec.user)
    finally:
        await model.aclose()
    assert list(server.rejections) == []
    assert server.served == [name, spec.followup]
    outputs = [e.item for e in events if type(e).__name__ == "FunctionCallOutputEvent"]
    assert len(outputs) == len(spec.tool_calls) and not any(o.is_error for o in outputs)
    messages = [e.item for e in events if type(e).__name__ == "ChatMessageEvent"]
    answer = " ".join(m.text_content or "" for m in messages if m.role == "assistant")
    assert words(answer) == words(follow.answer)
    second = server.requests[-1]
    if api == "responses":
        kinds = [i.get("type") for i in second["input"]]
        at = kinds.index("function_call")
        assert kinds[at - 1] == "reasoning" and second["input"][at - 1]["encrypted_content"]
    else:
        (assistant,) = [m for m in second["messages"] if m.get("tool_calls")]
        assert assistant["reasoning_details"] == (spec.passback or {})["reasoning_details"]
    said = json.dumps([i.model_dump(mode="json") for i in history])
    for step in [*spec.steps, *follow.steps, *spec.summaries, *follow.summaries]:
        assert step not in said


# -- nothing of the reasoning stays on the session's messages ---------------------------


@pytest.mark.parametrize("shape", ["deepseek_reasoning_content", "ollama_qwen3_think_inline"])
async def test_no_reasoning_canary_on_the_stored_assistant_message(
    server: RecordedLLM, shape: str
) -> None:
    spec = server.spec(shape)
    server.script(shape)
    model = make_llm(server, spec.model)
    try:
        _, history = await session_run(model, spec.user)
    finally:
        await model.aclose()
    (assistant,) = [i for i in history if isinstance(i, llm.ChatMessage) and i.role == "assistant"]
    assert words(assistant.text_content or "") == words(spec.answer)
    assert "alicia_reasoning" not in assistant.extra
    canary = spec.steps[0][:60]
    assert canary in spec.reasoning  # the phrase is really in what the model reasoned
    assert canary not in (assistant.text_content or "")
    assert canary not in json.dumps(assistant.extra)


async def test_responses_reasoning_goes_back_on_later_turns_by_reference_not_by_text(
    server: RecordedLLM,
) -> None:
    """Each answer's reasoning items go back before that answer, found by the opaque
    reference on its message (never by its text: two identical answers each get their
    own), and nothing of the reasoning is on the history."""
    spec = server.spec("responses_raw_reasoning")
    server.script(spec.name, spec.name, spec.name)
    model = make_llm(server, spec.model, provider="openai", api="responses")
    try:
        async with AgentSession(llm=model) as session:
            await session.start(Agent(instructions="Be brief."), record=False)
            for _ in range(3):
                await session.run(user_input=spec.user)
            history = list(session.history.items)
    finally:
        await model.aclose()
    answers = [i for i in history if isinstance(i, llm.ChatMessage) and i.role == "assistant"]
    refs = [a.extra.get(PASSBACK_EXTRA) for a in answers]
    assert len(answers) == 3 and len(set(refs)) == 3 and all(isinstance(r, str) for r in refs)
    assert len({a.text_content for a in answers}) == 1  # identical answers
    third = server.requests[-1]["input"]
    kinds = [i.get("type") or i.get("role") for i in third]
    assert kinds == ["user", "reasoning", "assistant", "user", "reasoning", "assistant", "user"]
    items = [i for i in third if i.get("type") == "reasoning"]
    assert items[0] == items[1] and (items[0].get("encrypted_content") or items[0].get("content"))
    assert "extra_content" not in json.dumps(third)  # the reference is never sent
    said = json.dumps([i.model_dump(mode="json") for i in history])
    assert spec.steps[0][:60] not in said and "encrypted_content" not in said


def test_an_answer_with_list_content_keeps_its_passback_and_raises_nothing() -> None:
    """The transcript finds an answer's pass-back by its reference, whatever the shape of
    its content; another answer with the same words gets none of it."""
    from alicia.agent.engine.keeper import Kept

    model = AliciaLLM(
        model="m", base_url="http://127.0.0.1:9/v1", provider="openai", api="responses"
    )
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"}
    model._passbacks.put("rnd_1", Kept(plain={"reasoning_items": [item]}))
    ctx = llm.ChatContext()
    ctx.add_message(role="user", content="Hi")
    ctx.add_message(
        role="assistant", content=["OK.", "Anything else?"], extra={PASSBACK_EXTRA: "rnd_1"}
    )
    ctx.add_message(role="assistant", content="OK.")  # the same words, another answer
    ctx.add_message(role="user", content="No.")
    transcript = model._transcript(ctx)
    carried = [m.get("passback") for m in transcript if m["role"] == "assistant"]
    assert carried == [{"reasoning_items": [item]}, None]
    assert "extra_content" not in str(transcript)
