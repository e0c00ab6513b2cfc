"""Each provider request rule of the recorded-stream LLM server, on chat completions over
real HTTP: the provider's own HTTP error when its reasoning does not come back as it
requires (deepseek-reasoner, DeepSeek V4, OpenRouter's Claude, Gemini), and every rule
of the manifest is known and enforced."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI

from alicia.harness.recorded_llm import RULES, STREAMS_DIR, RecordedLLM
from tests.harness.reads import read, read_raw, user
from tests.support.recorded import MANIFEST, answer_of, reasoning_of

pytestmark = pytest.mark.filterwarnings("error")


def assistant_with_calls(calls: list[dict[str, str]], **extra: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in calls
        ],
        **extra,
    }


def tool_result(name: str, calls: list[dict[str, str]]) -> dict[str, Any]:
    result = MANIFEST[name].tool_result
    assert result is not None
    return {"role": "tool", "tool_call_id": calls[0]["id"], "content": result}


async def first_round(
    client: AsyncOpenAI, name: str
) -> tuple[list[Any], list[dict[str, str]], list[dict[str, Any]]]:
    """The tool-call round of stream ``name``: (messages so far, calls, raw deltas)."""
    messages: list[Any] = user(name)
    parts, calls, _, _, deltas = await read_raw(client, messages)
    assert calls == [dict(c) for c in MANIFEST[name].tool_calls] and answer_of(parts) == ""
    return messages, calls, deltas


async def assert_followup(client: AsyncOpenAI, name: str, messages: list[Any]) -> None:
    followup = MANIFEST[MANIFEST[name].followup or ""]
    parts, calls, _, _ = await read(client, messages)
    assert (reasoning_of(parts), answer_of(parts)) == (followup.reasoning, followup.answer)
    assert calls == []


async def test_deepseek_reasoner_refuses_reasoning_content_in_the_input(
    llm_server: RecordedLLM,
    client: AsyncOpenAI,
) -> None:
    spec = MANIFEST["deepseek_reasoning_content"]
    assert spec.rules == ("deepseek_reasoner_no_reasoning_input",)
    history: list[Any] = [
        *user(spec.user),
        {"role": "assistant", "content": spec.answer, "reasoning_content": spec.reasoning},
        {"role": "user", "content": "deepseek_reasoning_content again, please"},
    ]
    with pytest.raises(openai.BadRequestError, match="reasoning_content") as caught:
        await read(client, history)
    assert caught.value.status_code == 400
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["type"] == "invalid_request_error"
    assert caught.value.body["code"] == "invalid_request_error"
    assert "message index 2" in caught.value.body["message"]
    del history[2]["reasoning_content"]
    parts, _, _, _ = await read(client, history)
    assert answer_of(parts) == spec.answer
    assert llm_server.served == ["deepseek_reasoning_content"]
    assert [r.rule for r in llm_server.rejections] == ["deepseek_reasoner_no_reasoning_input"]


async def test_deepseek_v4_needs_reasoning_content_back(
    llm_server: RecordedLLM,
    client: AsyncOpenAI,
) -> None:
    name = "deepseek_v4_tool_call"
    spec = MANIFEST[name]
    assert spec.passback == {"reasoning_content": spec.reasoning}
    messages, calls, _ = await first_round(client, name)
    text = "The `reasoning_content` in the thinking mode must be passed back to the API."
    without = [*messages, assistant_with_calls(calls), tool_result(name, calls)]
    with pytest.raises(openai.BadRequestError, match=re.escape(text)) as caught:
        await read(client, without)
    assert caught.value.body == {
        "message": text,
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_request_error",
    }
    wrong_type = [*messages, assistant_with_calls(calls, reasoning_content=None)]
    with pytest.raises(openai.BadRequestError, match=re.escape(text)):
        await read(client, [*wrong_type, tool_result(name, calls)])
    passed = [*messages, assistant_with_calls(calls, **spec.passback), tool_result(name, calls)]
    await assert_followup(client, name, passed)
    # The rule holds in later turns too: the tool round stays in the history.
    later = [*passed, {"role": "assistant", "content": "ok"}, {"role": "user", "content": name}]
    await read(client, later)
    later[2] = assistant_with_calls(calls)
    with pytest.raises(openai.BadRequestError, match=re.escape(text)):
        await read(client, later)
    assert llm_server.served == [name, "deepseek_v4_tool_followup", name]
    assert [(r.stream, r.rule, r.message) for r in llm_server.rejections] == [
        ("deepseek_v4_tool_followup", "deepseek_v4_passback", text),
        ("deepseek_v4_tool_followup", "deepseek_v4_passback", text),
        (name, "deepseek_v4_passback", text),
    ]


async def test_openrouter_claude_needs_the_signed_reasoning_details_back(
    llm_server: RecordedLLM,
    client: AsyncOpenAI,
) -> None:
    name = "openrouter_claude_tool_call"
    spec = MANIFEST[name]
    assert spec.passback is not None
    [detail] = spec.passback["reasoning_details"]
    assert detail["text"] == spec.reasoning and detail["format"] == "anthropic-claude-v1"
    messages, calls, deltas = await first_round(client, name)
    result = tool_result(name, calls)

    async def refused(details: Any, expected: str) -> None:
        extra = {} if details is None else {"reasoning_details": details}
        with pytest.raises(openai.BadRequestError, match="Provider returned error") as caught:
            await read(client, [*messages, assistant_with_calls(calls, **extra), result])
        body = caught.value.body
        assert isinstance(body, dict)
        assert body["code"] == 400 and body["metadata"]["provider_name"] == "Anthropic"
        raw = json.loads(body["metadata"]["raw"])
        assert raw["type"] == "error"
        assert raw["error"] == {"type": "invalid_request_error", "message": expected}
        # The SDK's text is OpenRouter's message; Anthropic's is in body.metadata.raw.
        assert str(caught.value) == "Error code: 400 - Provider returned error"

    await refused(
        None,
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
        "`tool_use`. When `thinking` is enabled, a final `assistant` message must start with "
        "a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` "
        "blocks). We recommend you include thinking blocks from previous turns. To avoid this "
        "requirement, disable `thinking`. Please consult our documentation at "
        "https://docs.claude.com/en/docs/build-with-claude/extended-thinking",
    )
    unsigned = [{k: v for k, v in detail.items() if k != "signature"}]
    await refused(unsigned, "messages.1.content.0.thinking.signature: Field required")
    edited = [{**detail, "text": detail["text"] + " Also, trains are great."}]
    await refused(edited, "messages.1.content.0: Invalid `signature` in `thinking` block")

    # The merged detail (manifest) and the details as streamed (pieces, then the signature).
    streamed = [d for delta in deltas for d in delta.get("reasoning_details") or []]
    assert len(streamed) > 2 and "".join(d.get("text", "") for d in streamed) == spec.reasoning
    for details in (spec.passback["reasoning_details"], streamed):
        await assert_followup(
            client,
            name,
            [*messages, assistant_with_calls(calls, reasoning_details=details), result],
        )
    assert llm_server.served == [name, *["openrouter_claude_tool_followup"] * 2]
    assert [r.rule for r in llm_server.rejections] == ["openrouter_reasoning_details"] * 3


async def test_gemini_needs_the_thought_signature_on_each_tool_call(
    llm_server: RecordedLLM,
    client: AsyncOpenAI,
) -> None:
    name = "gemini_tool_call"
    spec = MANIFEST[name]
    assert spec.passback is not None and spec.finish_reason == "stop"  # Gemini streams "stop"
    messages, calls, deltas = await first_round(client, name)
    [streamed_call] = deltas[0]["tool_calls"]
    assert streamed_call["index"] is None  # whole call, one delta, no index
    signature = spec.passback["thought_signature"]
    assert streamed_call["extra_content"] == {"google": {"thought_signature": signature}}
    result = tool_result(name, calls)

    def with_signature(value: str | None) -> dict[str, Any]:
        message = assistant_with_calls(calls)
        if value is not None:
            message["tool_calls"][0]["extra_content"] = {"google": {"thought_signature": value}}
        return message

    missing = (
        "Function call is missing a thought_signature in functionCall parts. This is required "
        "for tools to work correctly, and missing thought_signature may lead to degraded model "
        "performance. Additional data, function call `default_api:calculator` , "
        "position 2. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures "
        "for more details."
    )
    with pytest.raises(openai.BadRequestError) as caught:
        await read(client, [*messages, with_signature(None), result])
    # Gemini's body is a JSON list: the SDK keeps it as the body, its text has no message.
    assert caught.value.status_code == 400 and str(caught.value) == "Error code: 400"
    assert caught.value.body == [
        {"error": {"code": 400, "message": missing, "status": "INVALID_ARGUMENT"}}
    ]
    with pytest.raises(openai.BadRequestError) as caught:
        await read(client, [*messages, with_signature(signature[::-1]), result])
    assert caught.value.body == [
        {
            "error": {
                "code": 400,
                "message": "Corrupted thought signature.",
                "status": "INVALID_ARGUMENT",
            }
        }
    ]
    await assert_followup(client, name, [*messages, with_signature(signature), result])
    assert llm_server.served == [name, "gemini_tool_followup"]
    assert [r.message for r in llm_server.rejections] == [missing, "Corrupted thought signature."]


async def test_every_rule_in_the_manifest_is_enforced_and_known() -> None:
    used = {rule for spec in MANIFEST.values() for rule in spec.rules}
    assert used == set(RULES)
    for spec in MANIFEST.values():
        if spec.followup and MANIFEST[spec.followup].rules:  # the continuation checks it
            assert spec.passback is not None, spec.name


async def test_a_manifest_with_an_unknown_rule_is_refused(tmp_path: Path) -> None:
    entry = json.loads((STREAMS_DIR / "manifest.json").read_text())["vllm_reasoning"]
    entry = {**entry, "file": str(STREAMS_DIR / entry["file"]), "rules": ["no_such_rule"]}
    (tmp_path / "manifest.json").write_text(json.dumps({"vllm_reasoning": entry}))
    with pytest.raises(ValueError, match="no_such_rule"):
        RecordedLLM(streams_dir=tmp_path, default="vllm_reasoning")
