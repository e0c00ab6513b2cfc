"""The recorded-stream LLM server over real HTTP, read by the real openai client: every
recorded chat completions stream, the script queue, streams named in the question,
rotation, tool follow-ups, endless streams, errors, pacing and lifecycle; and every
recorded stream (chat completions and Responses API) is valid SSE of its API.

The Responses API: ``test_llm_server_responses.py``; the provider request rules:
``test_llm_server_rules.py``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import openai
import pytest
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

from alicia.agent.llm.reasoning import Part, ReasoningExtractor
from alicia.agent.llm.segmenter import segment
from alicia.harness.recorded_llm import ENDLESS, ROTATE, Play, RecordedLLM, recorded_llm
from tests.harness.reads import read, user
from tests.support.recorded import MANIFEST, answer_of, reasoning_of, summary_of

pytestmark = pytest.mark.filterwarnings("error")


CHAT = sorted(n for n, s in MANIFEST.items() if s.api == "chat")
FOLLOWUPS = {s.followup for s in MANIFEST.values() if s.followup}


@pytest.mark.parametrize("name", CHAT)
async def test_every_recorded_chat_stream_through_the_openai_client(
    llm_server: RecordedLLM,
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


@pytest.mark.parametrize("asked", [True, False])
async def test_usage_is_streamed_only_when_the_request_asks_for_it(
    llm_server: RecordedLLM, client: AsyncOpenAI, asked: bool
) -> None:
    """As OpenAI, vLLM, Ollama and DeepSeek do: ``stream_options.include_usage`` gets the
    usage (DeepSeek's on its last choice chunk; others' in a ``choices: []`` chunk);
    without it no chunk has usage, and the rest is unchanged."""
    llm_server.script("deepseek_reasoning_content")
    extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if asked else {}
    stream = await client.chat.completions.create(
        model="any", messages=user("hi"), stream=True, **extra
    )
    chunks = [chunk async for chunk in stream]
    usages = [c.usage for c in chunks if c.usage is not None]
    if asked:
        assert len(usages) == 1
        details = usages[0].completion_tokens_details
        assert details is not None and details.reasoning_tokens == 130
    else:
        assert usages == []
        assert all("usage" not in c.model_dump(exclude_unset=True) for c in chunks)
    answer = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert answer == MANIFEST["deepseek_reasoning_content"].answer


async def test_an_unasked_request_drops_the_usage_only_chunk(
    llm_server: RecordedLLM, client: AsyncOpenAI
) -> None:
    """OpenAI's shape: usage in a trailing ``choices: []`` chunk, sent only when asked."""
    for asked in (True, False):
        llm_server.script("plain_no_reasoning")
        extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if asked else {}
        stream = await client.chat.completions.create(
            model="any", messages=user("hi"), stream=True, **extra
        )
        chunks = [chunk async for chunk in stream]
        emptied = [c for c in chunks if not c.choices]
        assert [c.usage is not None for c in emptied] == ([True] if asked else [])


async def test_script_queue_is_served_in_order_then_the_default(
    llm_server: RecordedLLM,
    client: AsyncOpenAI,
) -> None:
    llm_server.script("vllm_reasoning", Play("plain_no_reasoning"))
    for _ in range(3):
        await read(client, user("anything"))
    assert llm_server.served == ["vllm_reasoning", "plain_no_reasoning", llm_server.default]


async def test_stream_named_in_the_last_user_message(
    llm_server: RecordedLLM,
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
    llm_server: RecordedLLM,
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
    llm_server: RecordedLLM,
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
    llm_server: RecordedLLM,
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
    llm_server: RecordedLLM,
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
