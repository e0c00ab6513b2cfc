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

from collections.abc import AsyncGenerator, Callable, Iterator
from typing import Any

import msgspec
import openai

__all__ = ["SSEDecoder", "stream_deltas"]

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
    async with llm.chat.completions.with_streaming_response.create(
        stream=True, **params
    ) as response:
        request = response.http_request
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
                if error or event == "error":
                    message = error.get("message") if isinstance(error, dict) else None
                    raise openai.APIError(
                        message if isinstance(message, str) and message else "stream error",
                        request,
                        body=error if error else payload,
                    )
                usage = payload.get("usage")
                if on_usage is not None and isinstance(usage, dict):
                    on_usage(usage)
                choices = payload.get("choices")
                if isinstance(choices, list) and choices and isinstance(choices[0], dict):
                    delta = choices[0].get("delta")
                    if isinstance(delta, dict):
                        yield delta
