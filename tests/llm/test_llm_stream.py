"""alicia.agent.llm.stream: the SSE decoder over any byte split, stream errors over real HTTP."""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
from typing import Any

import aiohttp
import openai
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st
from openai import DefaultAioHttpClient

from alicia.agent.llm.providers import PROFILES
from alicia.agent.llm.request import stream_round
from alicia.agent.llm.stream import SSEDecoder, _reader, stream_deltas, stream_response_deltas
from alicia.harness.loopback import serve_app
from tests.support.chat_server import Handler, body_handler, chunk, sse

BODY = (
    b": keep-alive comment\n\n"
    b'data: {"choices":[{"delta":{"reasoning_content":"a"}}]}\n\n'
    b"event: message\r\n"
    b'data: {"choices":[{"delta":\r\n'
    b'data: {"content":"b"}}]}\r\n\r\n'
    b"id: 7\nretry: 10\n\n"
    b'data:{"choices":[]}\r\r'
    b"data: [DONE]\n\n"
)
EVENTS = [
    ("", '{"choices":[{"delta":{"reasoning_content":"a"}}]}'),
    ("message", '{"choices":[{"delta":\n{"content":"b"}}]}'),
    ("", '{"choices":[]}'),
    ("", "[DONE]"),
]


def decode_all(parts: list[bytes]) -> list[tuple[str, str]]:
    decoder = SSEDecoder()
    return [event for part in parts for event in decoder.feed(part)]


def test_events_comments_multiline_data_and_every_line_ending() -> None:
    assert decode_all([BODY]) == EVENTS


@given(st.lists(st.integers(min_value=0, max_value=len(BODY)), max_size=12))
def test_any_split_of_the_body_gives_the_same_events(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    parts = [BODY[a:b] for a, b in zip([0, *points], [*points, len(BODY)], strict=True)]
    assert decode_all(parts) == EVENTS


# -- over real HTTP, through the real openai client ---------------------------------------
# (``serve``: tests/conftest.py, once per HTTP transport)


async def collect(llm: openai.AsyncOpenAI) -> list[dict[str, Any]]:
    return [d async for d in stream_deltas(llm, model="m", messages=[])]


async def test_deltas_in_order_usage_chunks_skipped_nothing_after_done(serve: Any) -> None:
    usage = {"object": "chat.completion.chunk", "choices": [], "usage": {"total_tokens": 3}}
    body = sse(chunk(reasoning="r"), usage, chunk(content="x")) + sse(chunk(content="late"))
    llm = await serve(body_handler(body))
    assert await collect(llm) == [{"reasoning": "r"}, {"content": "x"}]


async def test_an_error_object_mid_stream_is_an_api_error(serve: Any) -> None:
    body = sse(chunk(content="x"), {"error": {"message": "overloaded", "code": 529}})
    llm = await serve(body_handler(body))
    seen: list[dict[str, Any]] = []
    with pytest.raises(openai.APIError, match="overloaded") as caught:
        async for delta in stream_deltas(llm, model="m", messages=[]):
            seen.append(delta)
    assert seen == [{"content": "x"}]
    assert caught.value.body == {"message": "overloaded", "code": 529}


async def test_malformed_json_is_an_api_error(serve: Any) -> None:
    llm = await serve(body_handler(b"data: {not json\n\n"))
    with pytest.raises(openai.APIError, match="malformed stream chunk"):
        await collect(llm)


async def test_an_http_error_status_is_the_sdks_status_error(serve: Any) -> None:
    async def handle(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "no such model"}}, status=404)

    llm = await serve(handle)
    with pytest.raises(openai.NotFoundError):
        await collect(llm)


async def test_a_connection_cut_mid_stream_is_a_connection_error(serve: Any) -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        response.content_length = 10_000  # promise more than is sent, then drop the socket
        await response.prepare(request)
        await response.write(sse(chunk(content="x"), done=False))
        assert request.transport is not None
        request.transport.close()
        return response

    llm = await serve(handle)
    with pytest.raises(openai.APIConnectionError):
        await collect(llm)


def paced_handler(pieces: list[bytes], gaps: list[float], head_delay: float = 0.0) -> Handler:
    """Waits ``head_delay``, then writes each piece after its gap."""

    async def handle(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(head_delay)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for piece, gap in zip(pieces, gaps, strict=True):
            await asyncio.sleep(gap)
            await response.write(piece)
        await response.write_eof()
        return response

    return handle


TOKENS = [sse(chunk(content=f"t{i} "), done=False) for i in range(8)] + [b"data: [DONE]\n\n"]


async def test_a_stream_silent_longer_than_the_read_timeout_times_out(serve: Any) -> None:
    gaps = [0.0, 4.0] + [0.0] * (len(TOKENS) - 2)
    llm = (await serve(paced_handler(TOKENS, gaps))).with_options(timeout=0.3)
    seen: list[dict[str, Any]] = []
    started = asyncio.get_running_loop().time()
    with pytest.raises(openai.APITimeoutError):
        async for delta in stream_deltas(llm, model="m", messages=[]):
            seen.append(delta)
    assert seen == [{"content": "t0 "}]
    assert asyncio.get_running_loop().time() - started < 3.0  # not the 4 s silence


async def test_no_response_within_the_read_timeout_times_out(serve: Any) -> None:
    llm = await serve(paced_handler(TOKENS, [0.0] * len(TOKENS), head_delay=2.0))
    with pytest.raises(openai.APITimeoutError):  # the request's own timeout, too
        await collect_with(llm, timeout=0.3)


async def test_the_read_timeout_is_per_read_not_for_the_whole_stream(serve: Any) -> None:
    # 2.7 s in all against a 1.5 s timeout; each read waits 0.3 s (a loaded machine's
    # pauses of a second fit in the margin)
    llm = (await serve(paced_handler(TOKENS, [0.3] * len(TOKENS)))).with_options(timeout=1.5)
    deltas = await collect(llm)
    assert "".join(d["content"] for d in deltas) == "".join(f"t{i} " for i in range(8))


async def test_a_slow_reader_is_not_a_silent_stream(serve: Any) -> None:
    llm = (await serve(body_handler(b"".join(TOKENS)))).with_options(timeout=2.0)
    seen = []
    async for delta in stream_deltas(llm, model="m", messages=[]):
        seen.append(delta)
        await asyncio.sleep(0.4)  # 3.2 s spent here, not waiting for the server
    assert len(seen) == 8


async def test_a_compressed_body_is_decoded(serve: Any) -> None:
    body = sse(chunk(reasoning="r"), chunk(content="x"))

    async def handle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Content-Encoding": "gzip"}
        )
        await response.prepare(request)
        await response.write(gzip.compress(body))
        await response.write_eof()
        return response

    llm = await serve(handle)
    assert await collect(llm) == [{"reasoning": "r"}, {"content": "x"}]


async def collect_with(llm: openai.AsyncOpenAI, **params: Any) -> list[dict[str, Any]]:
    return [d async for d in stream_deltas(llm, model="m", messages=[], **params)]


async def test_the_request_body_is_the_json_the_sdk_would_send(serve: Any) -> None:
    """Every body field goes through extra_body (the SDK's request transform walks them
    slowly and changes nothing): the body received is the same JSON as the SDK's."""
    bodies: list[Any] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        bodies.append(await request.json())
        return await body_handler(sse(chunk(content="x")))(request)

    llm = await serve(handle)
    messages: list[Any] = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "text", "text": "q"}]},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "kept",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "f", "arguments": "{}"},
                    "extra_content": {"google": {"thought_signature": "sig"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "1"},
    ]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    params: dict[str, Any] = {
        "model": "m",
        "messages": messages,
        "tools": tools,
        "tool_choice": "auto",
        "stream_options": {"include_usage": True},
        "max_completion_tokens": 50,
        "reasoning_effort": "low",
        "temperature": 0.2,
        "extra_body": {"chat_template_kwargs": {"enable_thinking": False}},
    }
    assert [d async for d in stream_deltas(llm, **params)] == [{"content": "x"}]
    async with llm.chat.completions.with_streaming_response.create(stream=True, **params) as r:
        await r.read()
    ours, sdks = bodies
    assert ours == sdks
    assert ours["messages"] == messages
    assert ours["model"] == "m" and ours["stream"] is True and ours["temperature"] == 0.2


async def test_a_field_not_given_is_left_out_as_the_sdk_leaves_it(serve: Any) -> None:
    """``NOT_GIVEN`` and ``omit`` values leave their field out of the body, as the SDK's own
    transform does."""
    bodies: list[Any] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        bodies.append(await request.json())
        return await body_handler(sse(chunk(content="x")))(request)

    llm = await serve(handle)
    given = {"temperature": openai.NOT_GIVEN, "top_p": openai.omit, "seed": 7}
    assert await collect_with(llm, **given) == [{"content": "x"}]
    assert bodies[0]["seed"] == 7 and "temperature" not in bodies[0] and "top_p" not in bodies[0]


async def test_an_azure_client_still_posts_to_its_deployment() -> None:
    """Azure's client builds its URL from the body's ``model`` (``/deployments/{model}``):
    with it, ``model`` stays an argument of the SDK."""
    seen: list[tuple[str, str]] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        seen.append((request.path, (await request.json())["model"]))
        return await body_handler(sse(chunk(content="x")))(request)

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    runner, port = await serve_app(app)
    llm = openai.AsyncAzureOpenAI(
        azure_endpoint=f"http://127.0.0.1:{port}",
        api_key="test",
        api_version="2024-10-21",
        max_retries=0,
    )
    try:
        assert [d async for d in stream_deltas(llm, model="m", messages=[])] == [{"content": "x"}]
    finally:
        await llm.close()
        await runner.cleanup()
    assert seen == [("/openai/deployments/m/chat/completions", "m")]


async def test_a_responses_request_body_is_the_json_the_sdk_would_send(serve: Any) -> None:
    """The Responses request's fields go through extra_body too: the same JSON as the SDK's."""
    bodies: list[Any] = []
    done = {"type": "response.completed", "response": {"usage": {"input_tokens": 1}}}

    async def handle(request: web.Request) -> web.StreamResponse:
        bodies.append(await request.json())
        return await body_handler(sse(done))(request)

    llm = await serve(handle)
    params: dict[str, Any] = {
        "model": "m",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "q"}]}],
        "instructions": "s",
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "reasoning": {"effort": "low", "summary": "auto"},
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
    }
    assert [d async for d in stream_response_deltas(llm, **params)] == []
    async with llm.responses.with_streaming_response.create(stream=True, **params) as r:
        await r.read()
    ours, sdks = bodies
    assert ours == sdks
    assert ours["input"] == params["input"] and ours["model"] == "m"


async def test_the_worker_s_transport_is_read_from_aiohttp_s_reader_and_keeps_its_connection(
    serve: Any,
) -> None:
    """Over the worker's transport (``openai.DefaultAioHttpClient``) the body is read from
    aiohttp's own stream reader, past httpx's generators (``_reader``): this fails when an
    upgrade of the SDK moves what it is found by. Either way, a stream read to its end
    leaves its connection to the next request."""
    peers: list[Any] = []
    body = sse(chunk(reasoning="r"), chunk(content="x"))

    async def handle(request: web.Request) -> web.StreamResponse:
        peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        return await body_handler(body)(request)

    llm = await serve(handle)
    streaming = llm.chat.completions.with_streaming_response
    async with streaming.create(model="m", messages=[], stream=True) as response:
        read = _reader(response.http_response, "identity")
        fast = isinstance(getattr(read, "__self__", None), aiohttp.StreamReader)
        assert fast == isinstance(llm._client, DefaultAioHttpClient)
        assert b"[DONE]" in b"".join([part async for part in _until_empty(read)])
    for _ in range(2):
        assert await collect(llm) == [{"reasoning": "r"}, {"content": "x"}]
    assert len(peers) == 3 and peers[0] == peers[1] == peers[2], peers


async def _until_empty(read: Any) -> Any:
    while part := await read():
        yield part


async def test_a_body_held_open_after_done_ends_the_stream_at_the_read_timeout(
    serve: Any,
) -> None:
    """The answer is complete at ``[DONE]``; what follows is read only to keep the
    connection. A server that holds the body open after it (a reviewer's finding: the
    read waited for ever) costs the connection, never the answer nor an error."""
    release = asyncio.Event()

    async def handle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(sse(chunk(content="x")))
        await release.wait()  # never ends the body by itself
        return response

    llm = (await serve(handle)).with_options(timeout=0.5)
    try:
        async with asyncio.timeout(10):
            assert await collect(llm) == [{"content": "x"}]
    finally:
        release.set()


async def test_a_connection_dropped_after_done_loses_nothing(serve: Any) -> None:
    async def handle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        response.content_length = 10_000  # promise more, send the whole answer, drop
        await response.prepare(request)
        await response.write(sse(chunk(reasoning="r"), chunk(content="x")))
        assert request.transport is not None
        request.transport.close()
        return response

    llm = await serve(handle)
    assert await collect(llm) == [{"reasoning": "r"}, {"content": "x"}]


@pytest.mark.parametrize("refuses", [False, True])
async def test_chat_rounds_ask_for_usage_unless_the_profile_says_the_provider_refuses(
    serve: Any, refuses: bool
) -> None:
    """Chat completions stream usage (reasoning tokens too) only when asked: every round
    asks (``stream_options.include_usage``), except for a family whose profile says its
    server refuses the option; that round still runs."""
    bodies: list[Any] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        bodies.append(await request.json())
        return await body_handler(sse(chunk(content="x")))(request)

    llm = await serve(handle)
    profile = PROFILES["generic"]
    if refuses:
        profile = dataclasses.replace(profile, stream_usage=False)
    transcript = [{"role": "user", "content": "q"}]
    rounds = stream_round(llm, transcript, model="m", profile=profile, api="chat")
    assert [d async for d in rounds] == [{"content": "x"}]
    expected = None if refuses else {"include_usage": True}
    assert bodies[0].get("stream_options") == expected
