"""Streamed chat completions from an OpenAI-compatible endpoint, decoded fast.

The request goes through the real ``openai`` client (base URL, API key, timeouts, retries,
HTTP status errors). The streamed body, Server-Sent Events with one JSON chunk each, is
decoded here with msgspec into plain dicts, the shape the reasoning extractor reads: the
SDK's own stream builds a pydantic model per chunk and dumps it back to a dict, which
``bench/rooms.py`` measured at ~40% of the worker's Python time with one chunk per step;
real providers send a chunk per token.

SSE follows the WHATWG event-stream rules the SDK follows (``data:`` lines joined by
newlines, blank line ends an event, ``:`` comments, ``[DONE]`` ends the stream). Errors
are the SDK's: a chunk with an ``error`` object, an ``error`` event or undecodable JSON
raises ``openai.APIError``; a broken or timed-out connection ``openai.APIConnectionError``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import Any

import msgspec
import openai

__all__ = ["SSEDecoder", "stream_deltas", "stream_response_deltas"]

_json = msgspec.json.Decoder()


class SSEDecoder:
    """Incremental Server-Sent Events decoder: bytes in, ``(event, data)`` pairs out."""

    __slots__ = ("_buffer", "_data", "_event")

    def __init__(self) -> None:
        """An empty decoder."""
        self._buffer = b""
        self._data: list[str] = []
        self._event = ""

    def feed(self, chunk: bytes) -> Iterator[tuple[str, str]]:
        """Decode ``chunk`` (any split of the body); yield each event it completes."""
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" in buffer:
            if buffer.endswith(b"\r"):  # may be the first half of a CRLF
                buffer, self._buffer = buffer[:-1], b"\r"
            else:
                self._buffer = b""
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            lines = buffer.split(b"\n")
            self._buffer = lines.pop() + self._buffer
        else:
            lines = buffer.split(b"\n")
            self._buffer = lines.pop()
        for line in lines:
            event = self._line(line)
            if event is not None:
                yield event

    def _line(self, raw: bytes) -> tuple[str, str] | None:
        if not raw:
            if not self._data:
                self._event = ""
                return None
            event = (self._event, "\n".join(self._data))
            self._data, self._event = [], ""
            return event
        line = raw.decode("utf-8", "replace")
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None  # id / retry / unknown fields: nothing to do for completions


async def _payloads(
    response: Any, request: Any
) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
    """The streamed body's events as ``(event name, JSON object)``, until ``[DONE]``/EOF.

    Errors are the SDK's (see the module docstring).
    """
    decoder = SSEDecoder()
    body = response.iter_bytes()
    while True:
        try:
            chunk = await anext(body)
        except StopAsyncIteration:
            return
        except openai.APIError:
            raise
        except Exception as exc:  # the HTTP library's read / timeout errors
            raise openai.APIConnectionError(message=str(exc), request=request) from exc
        for event, data in decoder.feed(chunk):
            if data.startswith("[DONE]"):
                async for _ in body:  # the rest (normally nothing): keeps the connection
                    pass
                return
            try:
                payload = _json.decode(data)
            except msgspec.DecodeError as exc:
                raise openai.APIError(
                    f"malformed stream chunk: {exc}", request=request, body=data
                ) from None
            if not isinstance(payload, dict):
                raise openai.APIError("stream chunk is not an object", request, body=payload)
            error = payload.get("error")
            if error or event == "error" or payload.get("type") == "error":
                if not isinstance(error, dict):
                    error = payload
                message = error.get("message")
                raise openai.APIError(
                    message if isinstance(message, str) and message else "stream error",
                    request,
                    body=error,
                )
            yield event, payload


async def stream_deltas(
    llm: openai.AsyncOpenAI,
    *,
    on_usage: Callable[[dict[str, Any]], None] | None = None,
    **params: Any,
) -> AsyncGenerator[dict[str, Any], None]:
    """``chat.completions.create(stream=True, **params)``: each chunk's first choice delta.

    Chunks without choices (usage-only chunks) yield nothing; a chunk's ``usage`` object,
    when there is one, is handed to ``on_usage``.
    """
    async with (
        llm.chat.completions.with_streaming_response.create(stream=True, **params) as response,
        contextlib.aclosing(_payloads(response, response.http_request)) as events,
    ):
        async for _, payload in events:
            usage = payload.get("usage")
            if on_usage is not None and isinstance(usage, dict):
                on_usage(usage)
            choices = payload.get("choices")
            if choices and isinstance(choices, list) and isinstance(choices[0], dict):
                delta = choices[0].get("delta")
                if isinstance(delta, dict):
                    yield delta


async def stream_response_deltas(
    llm: openai.AsyncOpenAI,
    *,
    on_usage: Callable[[dict[str, Any]], None] | None = None,
    **params: Any,
) -> AsyncGenerator[dict[str, Any], None]:
    """``responses.create(stream=True, **params)`` as chat-shaped deltas.

    The Responses API's events become the deltas the extractor and the turn read:
    ``reasoning`` (raw reasoning text), ``reasoning_summary`` (the provider's summary),
    ``content`` (answer text), ``tool_calls`` (function calls: call id, name, argument
    pieces), and ``reasoning_item`` (a finished reasoning output item, with its
    ``encrypted_content``, for pass-back). A new reasoning item or summary part starts
    with a paragraph break. Usage (``input_tokens``/``output_tokens``) is handed to
    ``on_usage`` in chat-completions names. ``response.failed``/``incomplete`` raise
    ``openai.APIError``.
    """
    async with llm.responses.with_streaming_response.create(stream=True, **params) as response:
        request = response.http_request
        raw = summary = False
        async with contextlib.aclosing(_payloads(response, request)) as events:
            async for event, payload in events:
                kind = payload.get("type") or event
                if kind == "response.reasoning_text.delta":
                    raw = True
                    yield {"reasoning": payload.get("delta") or ""}
                elif kind == "response.reasoning_summary_text.delta":
                    summary = True
                    yield {"reasoning_summary": payload.get("delta") or ""}
                elif kind == "response.output_text.delta":
                    yield {"content": payload.get("delta") or ""}
                elif kind == "response.function_call_arguments.delta":
                    yield {
                        "tool_calls": [
                            {
                                "index": payload.get("output_index"),
                                "function": {"arguments": payload.get("delta") or ""},
                            }
                        ]
                    }
                elif kind == "response.reasoning_summary_part.added":
                    if payload.get("summary_index"):
                        yield {"reasoning_summary": "\n\n"}
                elif kind in ("response.output_item.added", "response.output_item.done"):
                    item = payload.get("item")
                    if not isinstance(item, dict):
                        continue
                    done = kind.endswith(".done")
                    if item.get("type") == "reasoning":
                        if done:
                            yield {"reasoning_item": item}
                        else:  # a new reasoning item: a new paragraph of each kind seen
                            yield {
                                "reasoning": "\n\n" if raw else None,
                                "reasoning_summary": "\n\n" if summary else None,
                            }
                    elif item.get("type") == "function_call" and not done:
                        yield {
                            "tool_calls": [
                                {
                                    "index": payload.get("output_index"),
                                    "id": item.get("call_id") or "",
                                    "function": {
                                        "name": item.get("name") or "",
                                        "arguments": item.get("arguments") or "",
                                    },
                                }
                            ]
                        }
                elif kind in ("response.completed", "response.incomplete", "response.failed"):
                    body = payload.get("response")
                    body = body if isinstance(body, dict) else {}
                    usage = body.get("usage")
                    if on_usage is not None and isinstance(usage, dict):
                        on_usage(_chat_usage(usage))
                    if kind != "response.completed":
                        reason = body.get("error") or body.get("incomplete_details") or {}
                        message = reason.get("message") or reason.get("reason") or kind
                        raise openai.APIError(str(message), request, body=body)


def _chat_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """Responses API usage in chat-completions names."""
    details = usage.get("output_tokens_details")
    reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return {
        "prompt_tokens": usage.get("input_tokens"),
        "completion_tokens": usage.get("output_tokens"),
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }
