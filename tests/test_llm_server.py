"""The recorded-stream LLM server over real HTTP, read by the real openai client: every
recorded stream (chat completions and Responses API), and each provider request rule
answered with the provider's own HTTP error."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
import pytest_asyncio
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

from alicia.agent.llm.reasoning import Part, ReasoningExtractor, Summary
from alicia.agent.llm.segmenter import segment
from alicia.harness.recorded_llm import ROTATE, RULES, Rejection, recorded_llm
from tests.llm_server import (
    ENDLESS,
    MANIFEST,
    STREAMS_DIR,
    Play,
    RecordedLLM,
    answer_of,
    llm_server,  # noqa: F401  (fixture)
    reasoning_of,
)

pytestmark = pytest.mark.filterwarnings("error")


@pytest_asyncio.fixture
async def client(llm_server: RecordedLLM) -> AsyncIterator[AsyncOpenAI]:  # noqa: F811
    async with AsyncOpenAI(base_url=llm_server.base_url, api_key="test", max_retries=0) as c:
        yield c


CHAT = sorted(n for n, s in MANIFEST.items() if s.api == "chat")
RESPONSES = sorted(n for n, s in MANIFEST.items() if s.api == "responses")
FOLLOWUPS = {s.followup for s in MANIFEST.values() if s.followup}


def user(text: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": text}]


def summary_of(parts: list[Part]) -> str:
    return "".join(p.text for p in parts if isinstance(p, Summary))


async def read(
    client: AsyncOpenAI, messages: list[Any], *, open_at_start: bool = False
) -> tuple[list[Part], list[dict[str, str]], str | None, str]:
    """Stream one completion: (parts, tool calls, finish reason, model)."""
    parts, calls, finish, model, _ = await read_raw(client, messages, open_at_start=open_at_start)
    return parts, calls, finish, model


async def read_raw(
    client: AsyncOpenAI, messages: list[Any], *, open_at_start: bool = False
) -> tuple[list[Part], list[dict[str, str]], str | None, str, list[dict[str, Any]]]:
    """Stream one completion: (parts, tool calls, finish reason, model, raw deltas)."""
    stream = await client.chat.completions.create(
        model="any", messages=messages, stream=True, stream_options={"include_usage": True}
    )
    extractor = ReasoningExtractor(open_at_start=open_at_start)
    parts: list[Part] = []
    deltas: list[dict[str, Any]] = []
    calls: dict[int, dict[str, str]] = {}
    finish: str | None = None
    model = ""
    async with stream:
        async for chunk in stream:
            model = chunk.model
            for choice in chunk.choices:
                delta = choice.delta.model_dump(warnings=False)
                deltas.append(delta)
                parts += extractor.feed(delta)
                for i, call in enumerate(choice.delta.tool_calls or []):
                    index = i if call.index is None else call.index  # Gemini sends no index
                    entry = calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
                    entry["id"] += call.id or ""
                    if call.function is not None:
                        entry["name"] += call.function.name or ""
                        entry["arguments"] += call.function.arguments or ""
                finish = choice.finish_reason or finish
    parts += extractor.flush()
    return parts, [calls[i] for i in sorted(calls)], finish, model, deltas


@pytest.mark.parametrize("name", CHAT)
async def test_every_recorded_chat_stream_through_the_openai_client(
    llm_server: RecordedLLM,  # noqa: F811
    client: AsyncOpenAI,
    name: str,
) -> None:
    spec = MANIFEST[name]
    llm_server.script(name)
    parts, calls, finish, model = await read(client, user("hi"), open_at_start=spec.open_at_start)
    assert reasoning_of(parts) == spec.reasoning
    assert summary_of(parts) == "\n\n".join(spec.summaries)
    assert answer_of(parts) == spec.answer
    assert segment(reasoning_of(parts) or summary_of(parts)) == list(spec.steps)
    assert calls == [dict(c) for c in spec.tool_calls]
    assert finish == spec.finish_reason
    assert model == spec.model
    assert llm_server.served == [name]
    assert not llm_server.rejections


async def test_script_queue_is_served_in_order_then_the_default(
    llm_server: RecordedLLM,  # noqa: F811
    client: AsyncOpenAI,
) -> None:
    llm_server.script("vllm_reasoning", Play("plain_no_reasoning"))
    for _ in range(3):
        await read(client, user("anything"))
    assert llm_server.served == ["vllm_reasoning", "plain_no_reasoning", llm_server.default]


async def test_stream_named_in_the_last_user_message(
    llm_server: RecordedLLM,  # noqa: F811
    client: AsyncOpenAI,
) -> None:
    await read(client, user("scenario vllm_reasoning_both_fields please"))
    await read(client, user("now vllm_reasoning"))
    messages: list[ChatCompletionMessageParam] = [
        *user("openrouter_reasoning"),
        {"role": "assistant", "content": "ok"},
    ]
    messages.append(
        {"role": "user", "content": [{"type": "text", "text": "ollama_qwen3_reasoning"}]}
    )
    await read(client, messages)
    await read(client, user(MANIFEST["content_blocks_thinking"].user))
    assert llm_server.served == [
        "vllm_reasoning_both_fields",
        "vllm_reasoning",
        "ollama_qwen3_reasoning",
        "content_blocks_thinking",
    ]


def needs_passback(name: str) -> bool:
    followup = MANIFEST[name].followup
    return followup is not None and bool(MANIFEST[followup].rules)


async def test_rotate_answers_with_each_stream_in_turn() -> None:
    async with recorded_llm(default=ROTATE) as llm:
        c = AsyncOpenAI(base_url=llm.base_url, api_key="t", max_retries=0)
        async with c:
            # Every chat stream a worker of any profile can answer (not the tool calls
            # whose provider needs its reasoning back), in turn.
            firsts = [n for n in CHAT if n not in FOLLOWUPS and not needs_passback(n)]
            assert "deepseek_v4_tool_call" not in firsts and "vllm_tool_call" in firsts
            for _ in firsts:
                await read(c, user("a question of my own"))
            assert llm.served == firsts
            # A tool result continues the tool-call stream served last.
            llm.script("vllm_tool_call")
            messages = user("weather?")
            await read(c, messages)
            messages.append({"role": "tool", "tool_call_id": "x", "content": "{}"})
            await read(c, messages)
            assert llm.served[-2:] == ["vllm_tool_call", "vllm_tool_followup"]


async def test_tool_result_gets_the_recorded_followup(
    llm_server: RecordedLLM,  # noqa: F811
    client: AsyncOpenAI,
) -> None:
    spec = MANIFEST["vllm_tool_call"]
    messages = user("vllm_tool_call")
    parts, calls, finish, _ = await read(client, messages)
    assert finish == "tool_calls" and answer_of(parts) == ""
    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": calls[0]["id"],
                    "type": "function",
                    "function": {"name": calls[0]["name"], "arguments": calls[0]["arguments"]},
                }
            ],
        }
    )
    assert spec.tool_result is not None
    messages.append({"role": "tool", "tool_call_id": calls[0]["id"], "content": spec.tool_result})
    parts, calls, finish, _ = await read(client, messages)
    followup = MANIFEST["vllm_tool_followup"]
    assert spec.followup == "vllm_tool_followup"
    assert (reasoning_of(parts), answer_of(parts)) == (followup.reasoning, followup.answer)
    assert calls == [] and finish == "stop"
    assert llm_server.served == ["vllm_tool_call", "vllm_tool_followup"]
    # The request bodies are recorded as sent: the second one carries the tool result.
    assert len(llm_server.requests) == 2
    second = llm_server.requests[1]
    assert second["stream"] is True
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    assert second["messages"][-1]["content"] == spec.tool_result


async def test_endless_stream_runs_until_the_client_leaves(
    llm_server: RecordedLLM,  # noqa: F811
    client: AsyncOpenAI,
) -> None:
    llm_server.script(Play(ENDLESS, chunk_delay=0.0, tokens_per_event=5))
    stream = await client.chat.completions.create(model="any", messages=user("x"), stream=True)
    extractor = ReasoningExtractor()
    parts: list[Part] = []
    async with stream:
        async for chunk in stream:
            parts += extractor.feed(chunk.choices[0].delta.model_dump(warnings=False))
            if len(segment(reasoning_of(parts))) > 8:
                break
    assert answer_of(parts) == ""
    for _ in range(200):
        if llm_server.disconnects:
            break
        await asyncio.sleep(0.01)
    assert llm_server.disconnects == 1
    assert llm_server.served == [ENDLESS]


async def test_closing_the_server_ends_an_endless_stream() -> None:
    async with recorded_llm(endless_delay=0.001) as llm:
        llm.script(ENDLESS)
        async with AsyncOpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as c:
            stream = await c.chat.completions.create(model="any", messages=user("x"), stream=True)
            received = 0
            enough = asyncio.Event()

            async def consume() -> None:
                nonlocal received
                try:
                    async for _ in stream:
                        received += 1
                        if received == 20:
                            enough.set()
                except openai.APIError:
                    pass

            task = asyncio.create_task(consume())
            await asyncio.wait_for(enough.wait(), timeout=10)
            await asyncio.wait_for(llm.aclose(), timeout=5)
            await asyncio.wait_for(task, timeout=5)
            await stream.close()
    assert received >= 20


async def test_bad_requests_get_openai_style_errors(
    llm_server: RecordedLLM,  # noqa: F811
    client: AsyncOpenAI,
) -> None:
    with pytest.raises(openai.BadRequestError, match="stream=true"):
        await client.chat.completions.create(model="any", messages=user("x"))
    url = llm_server.base_url + "/chat/completions"
    async with aiohttp.ClientSession() as http:
        for body in (
            b"{not json",
            b"[1, 2]",
            json.dumps({"stream": True, "messages": []}).encode(),
        ):
            async with http.post(url, data=body) as resp:
                assert resp.status == 400
                payload = await resp.json()
                assert payload["error"]["type"] == "invalid_request_error"
    with pytest.raises(ValueError, match="unknown recorded stream"):
        llm_server.script("no_such_stream")


async def test_models_lists_the_recorded_models(
    client: AsyncOpenAI,
) -> None:
    models = [m.id async for m in client.models.list()]
    assert set(models) == {spec.model for spec in MANIFEST.values()}


async def test_pacing_spreads_chunks_over_time() -> None:
    async with recorded_llm(chunk_delay=0.002) as llm:
        llm.script("plain_no_reasoning")
        async with AsyncOpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as c:
            stream = await c.chat.completions.create(model="any", messages=user("x"), stream=True)
            loop = asyncio.get_running_loop()
            stamps = [loop.time() async for _ in stream]
    # Not a timing assertion on speed: the chunks did not all arrive in one burst.
    assert len(stamps) >= 20
    assert stamps[-1] - stamps[0] >= 0.9 * 0.002 * (len(stamps) - 2)


async def test_lifecycle_errors() -> None:
    llm = RecordedLLM()
    with pytest.raises(RuntimeError):
        _ = llm.base_url
    await llm.start()
    with pytest.raises(RuntimeError):
        await llm.start()
    await llm.aclose()
    await llm.aclose()
    with pytest.raises(RuntimeError):
        await llm.start()


# -- every stream is valid SSE of its API -------------------------------------------------


@pytest.mark.parametrize("name", sorted(MANIFEST))
async def test_every_stream_is_valid_sse_of_its_api(
    llm_server: RecordedLLM,  # noqa: F811
    name: str,
) -> None:
    spec = MANIFEST[name]
    llm_server.script(name)
    if spec.api == "chat":
        url = llm_server.base_url + "/chat/completions"
        body: dict[str, Any] = {"model": "m", "stream": True, "messages": user("hi")}
    else:
        url = llm_server.base_url + "/responses"
        body = {"model": "m", "stream": True, "store": False, "input": "hi"}
    async with aiohttp.ClientSession() as http, http.post(url, json=body) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        text = await resp.text()
    assert text.endswith("\n\n")
    events = text.split("\n\n")[:-1]
    if spec.api == "chat":
        assert events[-1] == "data: [DONE]"
        for event in events[:-1]:
            if event.startswith(": "):
                continue  # an SSE comment (keep-alive, OpenRouter's processing notes)
            assert event.startswith("data: ") and "\n" not in event
            chunk = json.loads(event.removeprefix("data: "))
            assert chunk["object"] == "chat.completion.chunk"
            assert chunk["model"] == spec.model and isinstance(chunk["choices"], list)
    else:
        sequence = []
        for event in events:
            head, data = event.split("\n")
            payload = json.loads(data.removeprefix("data: "))
            assert head == f"event: {payload['type']}" and data.startswith("data: ")
            sequence.append(payload["sequence_number"])
        assert sequence == list(range(len(events)))
        assert events[0].startswith("event: response.created\n")
        assert events[-1].startswith("event: response.completed\n")
    assert llm_server.served == [name]


# -- the Responses API --------------------------------------------------------------------


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
    llm_server: RecordedLLM,  # noqa: F811
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
    llm_server: RecordedLLM,  # noqa: F811
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
    llm_server: RecordedLLM,  # noqa: F811
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
    llm_server: RecordedLLM,  # noqa: F811
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
    llm_server: RecordedLLM,  # noqa: F811
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


# -- provider rules on chat completions ---------------------------------------------------


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
    llm_server: RecordedLLM,  # noqa: F811
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
    llm_server: RecordedLLM,  # noqa: F811
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
    llm_server: RecordedLLM,  # noqa: F811
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
    llm_server: RecordedLLM,  # noqa: F811
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
