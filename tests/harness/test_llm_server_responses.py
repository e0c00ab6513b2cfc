"""The recorded-stream LLM server's Responses API over real HTTP, read by the real openai
client: every Responses stream, encrypted reasoning items only when included, a tool
round with its reasoning items, the rule violations' OpenAI errors, and each API serving
only its own streams."""

from __future__ import annotations

import re
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI

from alicia.harness.recorded_llm import ENDLESS, RecordedLLM, Rejection
from tests.harness.reads import read, user
from tests.support.recorded import MANIFEST

pytestmark = pytest.mark.filterwarnings("error")

RESPONSES = sorted(n for n, s in MANIFEST.items() if s.api == "responses")


async def responses(
    client: AsyncOpenAI, input_: str | list[Any], **options: Any
) -> list[dict[str, Any]]:
    """Stream one Responses API request; the events as plain dicts."""
    options.setdefault("store", False)
    stream = await client.responses.create(model="any", input=input_, stream=True, **options)
    async with stream:
        return [event.model_dump(warnings=False, exclude_unset=True) async for event in stream]


def deltas_text(events: list[dict[str, Any]], kind: str) -> str:
    return "".join(e["delta"] for e in events if e["type"] == kind)


def done_items(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [
        e["item"]
        for e in events
        if e["type"] == "response.output_item.done" and e["item"]["type"] == kind
    ]


def summaries_of(events: list[dict[str, Any]]) -> list[str]:
    texts: dict[int, str] = {}
    for e in events:
        if e["type"] == "response.reasoning_summary_text.delta":
            texts[e["summary_index"]] = texts.get(e["summary_index"], "") + e["delta"]
    return [texts[i] for i in sorted(texts)]


@pytest.mark.parametrize("name", RESPONSES)
async def test_every_responses_stream_through_the_openai_client(
    llm_server: RecordedLLM,
    client: AsyncOpenAI,
    name: str,
) -> None:
    spec = MANIFEST[name]
    llm_server.script(name)
    events = await responses(client, "hi", include=["reasoning.encrypted_content"])
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["response"]["model"] == spec.model
    assert summaries_of(events) == list(spec.summaries)
    assert deltas_text(events, "response.reasoning_text.delta") == spec.reasoning
    assert deltas_text(events, "response.output_text.delta") == spec.answer
    calls = [
        {"id": c["call_id"], "name": c["name"], "arguments": c["arguments"], "item_id": c["id"]}
        for c in done_items(events, "function_call")
    ]
    assert calls == [dict(c) for c in spec.tool_calls]
    assert llm_server.served == [name]


async def test_responses_encrypted_content_only_when_included(
    llm_server: RecordedLLM,
    client: AsyncOpenAI,
) -> None:
    spec = MANIFEST["responses_summary_tool_call"]
    assert spec.passback is not None
    recorded = spec.passback["reasoning_item"]
    assert recorded["encrypted_content"].startswith("gAAAAAB")
    events = await responses(
        client, "responses_summary_tool_call", include=["reasoning.encrypted_content"]
    )
    assert done_items(events, "reasoning") == [recorded]
    final = events[-1]["response"]["output"]
    assert final[0]["encrypted_content"] == recorded["encrypted_content"]

    events = await responses(client, "responses_summary_tool_call")
    [item] = done_items(events, "reasoning")
    assert item["encrypted_content"] is None
    assert item["summary"] == recorded["summary"]
    assert events[-1]["response"]["output"][0]["encrypted_content"] is None
    assert llm_server.served == ["responses_summary_tool_call"] * 2


def function_call_item(call: dict[str, Any], *, with_id: bool = True) -> dict[str, Any]:
    item = {
        "type": "function_call",
        "call_id": call["id"],
        "name": call["name"],
        "arguments": call["arguments"],
    }
    return {**item, "id": call["item_id"]} if with_id else item


async def test_responses_tool_round_with_reasoning_items_gets_the_followup(
    llm_server: RecordedLLM,
    client: AsyncOpenAI,
) -> None:
    spec = MANIFEST["responses_summary_tool_call"]
    assert spec.passback is not None and spec.tool_result is not None
    question = {"role": "user", "content": [{"type": "input_text", "text": spec.user}]}
    events = await responses(client, [question], include=["reasoning.encrypted_content"])
    [reasoning] = done_items(events, "reasoning")
    assert reasoning == spec.passback["reasoning_item"]
    [call] = spec.tool_calls
    output = {"type": "function_call_output", "call_id": call["id"], "output": spec.tool_result}
    for with_id in (True, False):
        items = [question, reasoning, function_call_item(dict(call), with_id=with_id), output]
        events = await responses(client, items, include=["reasoning.encrypted_content"])
        followup = MANIFEST["responses_summary_tool_followup"]
        assert summaries_of(events) == list(followup.summaries)
        assert deltas_text(events, "response.output_text.delta") == followup.answer
    assert llm_server.served == [
        "responses_summary_tool_call",
        "responses_summary_tool_followup",
        "responses_summary_tool_followup",
    ]
    assert not llm_server.rejections


async def test_responses_rule_violations_get_openai_errors(
    llm_server: RecordedLLM,
    client: AsyncOpenAI,
) -> None:
    spec = MANIFEST["responses_summary_tool_call"]
    assert spec.passback is not None and spec.tool_result is not None
    reasoning = dict(spec.passback["reasoning_item"])
    [call] = spec.tool_calls
    question = {"role": "user", "content": "responses_summary_tool_call"}
    output = {"type": "function_call_output", "call_id": call["id"], "output": spec.tool_result}
    fc = function_call_item(dict(call))

    # The function call without the reasoning item that produced it.
    missing = (
        f"Item '{call['item_id']}' of type 'function_call' was provided without its "
        f"required 'reasoning' item: '{reasoning['id']}'."
    )
    with pytest.raises(openai.BadRequestError, match=re.escape(missing)) as caught:
        await responses(client, [question, fc, output])
    assert caught.value.status_code == 400
    assert caught.value.body == {
        "message": missing,
        "type": "invalid_request_error",
        "param": "input",
        "code": None,
    }

    # The reasoning item by id only (store=false keeps nothing): 404.
    by_id = {**reasoning, "encrypted_content": None}
    not_found = (
        f"Item with id '{reasoning['id']}' not found. Items are not persisted when `store` is "
        "set to false. Try again with `store` set to true, or remove this item from your input."
    )
    with pytest.raises(openai.NotFoundError, match=re.escape(not_found)):
        await responses(client, [question, by_id, fc, output])

    # Tampered encrypted content.
    tampered = {**reasoning, "encrypted_content": reasoning["encrypted_content"][:-8] + "AAAAAAA="}
    with pytest.raises(openai.BadRequestError, match="could not be verified") as caught:
        await responses(client, [question, tampered, fc, output])
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "invalid_encrypted_content"

    # Stored responses and previous_response_id: not for a zero-data-retention client.
    with pytest.raises(openai.BadRequestError, match="set `store` to false"):
        await responses(client, "responses_summary_tool_call", store=True)
    with pytest.raises(openai.BadRequestError, match="Zero Data Retention"):
        await responses(client, "responses_summary_tool_call", previous_response_id="resp_1")

    rule = "responses_reasoning_items"
    assert [(r.stream, r.rule) for r in llm_server.rejections] == [
        ("responses_summary_tool_followup", rule),
        ("responses_summary_tool_followup", rule),
        ("responses_summary_tool_followup", rule),
        ("responses_summary_tool_call", rule),
        ("responses_summary_tool_call", rule),
    ]
    assert llm_server.rejections[0] == Rejection("responses_summary_tool_followup", rule, missing)
    assert llm_server.served == []
    assert len(llm_server.requests) == 5  # refused requests are recorded too


async def test_each_api_serves_only_its_own_streams(
    llm_server: RecordedLLM,
    client: AsyncOpenAI,
) -> None:
    llm_server.script("responses_raw_reasoning")
    with pytest.raises(openai.BadRequestError, match="is a responses stream"):
        await read(client, user("hi"))
    llm_server.script("vllm_reasoning")
    with pytest.raises(openai.BadRequestError, match="is a chat stream"):
        await responses(client, "hi")
    llm_server.script(ENDLESS)
    with pytest.raises(openai.BadRequestError, match="is a chat stream"):
        await responses(client, "hi")
    # Names and questions only pick streams of the request's API; unmarked Responses
    # requests get the first Responses stream.
    await read(client, user("responses_raw_reasoning"))
    await responses(client, "vllm_reasoning")
    await responses(client, MANIFEST["responses_summary_tool_call"].user)
    await responses(client, [{"role": "user", "content": "responses_summary_tool_call"}])
    assert llm_server.served == [
        llm_server.default,
        "responses_raw_reasoning",
        "responses_summary_tool_call",
        "responses_summary_tool_call",
    ]
