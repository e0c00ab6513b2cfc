"""Streamed chat completions from an OpenAI-compatible endpoint, decoded fast.

The request goes through the real ``openai`` client (base URL, API key, timeouts, retries,
HTTP status errors). The streamed body, Server-Sent Events with one JSON chunk each, is
decoded here with msgspec into plain dicts, the shape the reasoning extractor reads: the
SDK's own stream builds a pydantic model per chunk and dumps it back to a dict, which
``bench/rooms.py`` measured at ~40% of the worker's Python time with one chunk per step;
real providers send a chunk per token.

The request's body fields (``model``, ``messages``, ``input``, ``tools``, every other but
``stream``) go to the SDK through ``extra_body``, which it sends as it is: the SDK
otherwise walks every typed request field with typing introspection
(``async_maybe_transform``), an identity on plain JSON values (the chat and Responses
parameter types have no aliases or formats) that cost about 6 ms for a history of 41
messages on the development VM (the worker's largest Python cost per turn in
``bench/rooms.py``'s profile) and still 100 to 180 µs for ``model`` (a union with a
literal of every model name) and a few scalars. The body sent is the same JSON.

SSE follows the WHATWG event-stream rules the SDK follows (``data:`` lines joined by
newlines, blank line ends an event, ``:`` comments, ``[DONE]`` ends the stream). Errors
are the SDK's: a chunk with an ``error`` object, an ``error`` event or undecodable JSON
raises ``openai.APIError``; a broken or timed-out connection ``openai.APIConnectionError``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from typing import Any, Final, TypeVar

import aiohttp
import msgspec
import openai

__all__ = [
    "ChatDecoder",
    "PayloadDecoder",
    "ResponsesReader",
    "SSEDecoder",
    "StreamError",
    "chat_delta",
    "stream_deltas",
    "stream_response_deltas",
]

_json = msgspec.json.Decoder()

_SDK_OPTIONS: Final = frozenset({"stream", "timeout", "extra_headers", "extra_query", "extra_body"})
"""Arguments the SDK reads itself; every other one is a body field sent through
``extra_body`` (see the module docstring)."""


def _sent_as_is(llm: openai.AsyncOpenAI, params: dict[str, Any], *required: str) -> dict[str, Any]:
    """``params`` with every body field moved into ``extra_body`` (keys already in
    ``extra_body`` win, as they would in the SDK; a field ``NOT_GIVEN`` or ``omit`` is left
    out, as the SDK leaves it); the SDK's ``required`` arguments are passed as
    ``openai.omit``, which its transform skips (the body has them from ``extra_body``).
    Azure's client builds its URL from the body's ``model``: there it stays an argument."""
    kept = _SDK_OPTIONS | {"model"} if isinstance(llm, openai.AsyncAzureOpenAI) else _SDK_OPTIONS
    out = {key: value for key, value in params.items() if key in kept}
    moved = {
        key: value
        for key, value in params.items()
        if key not in kept and not isinstance(value, openai.NotGiven | openai.Omit)
    }
    out["extra_body"] = {**moved, **(params.get("extra_body") or {})}
    out.update({name: openai.omit for name in required if name not in out})
    return out


class SSEDecoder:
    """Incremental Server-Sent Events decoder: bytes in, ``(event, data)`` pairs out."""

    __slots__ = ("_buffer", "_data", "_event")

    def __init__(self) -> None:
        """An empty decoder."""
        self._buffer = b""
        self._data: list[str] = []
        self._event = ""

    @property
    def idle(self) -> bool:
        """Between events: nothing buffered, no event half read."""
        return not self._buffer and not self._data and not self._event

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


class StreamError(Exception):
    """A streamed body carried an error object, or a chunk that is not a JSON object."""

    def __init__(self, message: str, body: object) -> None:
        """``message`` for people, ``body`` as received."""
        super().__init__(message)
        self.body = body


class _Choice(msgspec.Struct):
    delta: dict[str, Any] | None = None


class _ChatChunk(msgspec.Struct):
    """The parts of a chat-completion chunk the worker reads (the rest is skipped)."""

    choices: list[_Choice] | None = None
    usage: dict[str, Any] | None = None
    error: Any = None
    type: Any = None


_chat = msgspec.json.Decoder(_ChatChunk)


class PayloadDecoder:
    """SSE bytes in, ``(event name, JSON object)`` out; ``done`` once ``[DONE]`` arrived."""

    __slots__ = ("_sse", "done", "error")

    def __init__(self) -> None:
        """An empty decoder."""
        self._sse = SSEDecoder()
        self.done = False
        self.error: StreamError | None = None
        """The error event that ended the stream (after the events before it)."""

    def feed(self, chunk: bytes) -> list[tuple[str, dict[str, Any]]]:
        """The events ``chunk`` completes, up to an error event (then :attr:`error`)."""
        out: list[tuple[str, dict[str, Any]]] = []
        try:
            for event, data in self._sse.feed(chunk):
                if data.startswith("[DONE]"):
                    self.done = True
                    break
                out.append((event, _payload(event, data)))
        except StreamError as exc:
            self.error, self.done = exc, True
        return out


class ChatDecoder:
    """SSE bytes of a streamed chat completion in, first-choice deltas out.

    The common chunk (one whole ``data: {...}`` event, as providers send one per token)
    is decoded straight from its bytes into only the fields the worker reads; any other
    framing goes through :class:`SSEDecoder`. ``usage`` objects go to ``on_usage``.
    """

    __slots__ = ("_on_usage", "_plain", "_sse", "done", "error")

    def __init__(self, on_usage: Callable[[dict[str, Any]], None] | None = None) -> None:
        """An empty decoder."""
        self._sse = SSEDecoder()
        self._plain = True
        """Between events (the SSE decoder holds nothing): the fast path may run."""
        self._on_usage = on_usage
        self.done = False
        self.error: StreamError | None = None
        """The error event that ended the stream (after the deltas before it)."""

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        """The deltas ``chunk`` completes, up to an error event (then :attr:`error`)."""
        if self._plain and chunk[-2:] == b"\n\n" and chunk[:7] == b"data: {":
            # One whole event (or JSON that is not one object: then the general path
            # frames and reports it).
            try:
                parsed = _chat.decode(chunk[6:-2])
            except msgspec.MsgspecError:
                pass
            else:
                if parsed.error is None and parsed.type is None:
                    if parsed.usage is not None and self._on_usage is not None:
                        self._on_usage(parsed.usage)
                    choices = parsed.choices
                    if choices and (delta := choices[0].delta) is not None:
                        return [delta]
                    return []
        out: list[dict[str, Any]] = []
        try:
            for event, data in self._sse.feed(chunk):
                out += self._data(event, data)
                if self.done:
                    break
        except StreamError as exc:
            self.error, self.done = exc, True
        self._plain = self._sse.idle
        return out

    def _data(self, event: str, data: str | bytes) -> list[dict[str, Any]]:
        if data[:6] in (b"[DONE]", "[DONE]"):
            self.done = True
            return []
        try:
            chunk = _chat.decode(data)
        except msgspec.ValidationError:  # valid JSON of another shape: read it as a dict
            return _delta_list(_payload(event, data))
        except msgspec.DecodeError as exc:
            raise StreamError(f"malformed stream chunk: {exc}", data) from None
        if chunk.error or event == "error" or chunk.type == "error":
            _payload(event, data)  # raises the StreamError with the provider's message
        if chunk.usage is not None and self._on_usage is not None:
            self._on_usage(chunk.usage)
        choices = chunk.choices
        if choices:
            delta = choices[0].delta
            if delta is not None:
                return [delta]
        return []


def _payload(event: str, data: str | bytes) -> dict[str, Any]:
    """One event's JSON object; :class:`StreamError` if it is not one or reports an error."""
    try:
        payload = _json.decode(data)
    except msgspec.DecodeError as exc:
        raise StreamError(f"malformed stream chunk: {exc}", data) from None
    if type(payload) is not dict:
        raise StreamError("stream chunk is not an object", payload)
    error = payload.get("error")
    if error or event == "error" or payload.get("type") == "error":
        if not isinstance(error, dict):
            error = payload
        message = error.get("message")
        raise StreamError(
            message if isinstance(message, str) and message else "stream error", error
        )
    return payload


def _delta_list(payload: dict[str, Any]) -> list[dict[str, Any]]:
    delta = chat_delta(payload)
    return [delta] if delta is not None else []


T = TypeVar("T")


class _ReadTimer:
    """The client's read timeout, kept by one loop timer that moves only when it fires.

    A socket read timeout (aiohttp's ``sock_read``) re-arms a timer on every packet, and a
    token-level stream is a packet per token: 8% of a busy worker's loop time in
    ``bench/rooms.py``'s profile. Here each read notes when it started; the timer checks
    when it fires, and cancels the reading task only if a read has waited ``seconds``.
    """

    __slots__ = ("_handle", "_loop", "_seconds", "_since", "_task", "expired")

    def __init__(self, seconds: float) -> None:
        """A timer for reads of at most ``seconds``."""
        self._loop = asyncio.get_running_loop()
        self._seconds = seconds
        self._since: float | None = None
        self._task: asyncio.Task[Any] | None = None
        self.expired = False
        self._handle = self._loop.call_later(seconds, self._check)

    def reading(self) -> None:
        """A read starts (in the current task)."""
        self._since = self._loop.time()
        self._task = asyncio.current_task(self._loop)

    def done(self) -> None:
        """The read returned."""
        self._since = None

    def timed_out(self) -> bool:
        """After a ``CancelledError``: it was this timer's (then the task is uncancelled)."""
        if not self.expired or self._task is None:
            return False
        self._task.uncancel()
        return True

    def close(self) -> None:
        """Stop the timer."""
        self._handle.cancel()

    def _check(self) -> None:
        now = self._loop.time()
        since = self._since
        if since is None or now < since + self._seconds or self._task is None:
            when = now + self._seconds if since is None else since + self._seconds
            self._handle = self._loop.call_at(max(when, now + 0.001), self._check)
            return
        self.expired = True
        self._task.cancel()


def _timeouts(llm: openai.AsyncOpenAI, params: dict[str, Any]) -> tuple[float | None, Any]:
    """The read timeout (the request's ``timeout``, popped from ``params``, else the
    client's), and the request's timeout without it (``_body`` keeps the read timeout);
    ``(None, timeout as given)`` when there is no read timeout to take over."""
    timeout = params.pop("timeout", llm.timeout)
    if isinstance(timeout, int | float):
        return float(timeout), openai.Timeout(timeout, read=None)
    if isinstance(timeout, openai.Timeout) and timeout.read is not None:
        rest = openai.Timeout(
            connect=timeout.connect, read=None, write=timeout.write, pool=timeout.pool
        )
        return timeout.read, rest
    return None, timeout


async def _body(
    opened: contextlib.AbstractAsyncContextManager[Any],
    decoder: PayloadDecoder | ChatDecoder,
    feed: Callable[[bytes], list[T]],
    read_timeout: float | None,
) -> AsyncGenerator[T, None]:
    """What ``feed`` makes of the streamed body of the response ``opened`` gives, until
    ``[DONE]`` or its end.

    One generator from the request to the items (each layer of async generators costs
    every token a resumption; see :func:`_reader` for the bytes). ``read_timeout`` covers
    the wait for the response and every read (:class:`_ReadTimer`). Errors are the SDK's
    (see the module docstring).
    """
    timer = _ReadTimer(read_timeout) if read_timeout is not None else None
    request: Any = None
    try:
        if timer is not None:
            timer.reading()
        async with opened as response:
            request = response.http_request
            http = response.http_response
            encoding = http.headers.get("content-encoding", "identity").strip().lower()
            read = _reader(http, encoding)
            while True:
                if timer is not None:
                    timer.reading()
                try:
                    chunk = await read()
                except openai.APIError:
                    raise
                except Exception as exc:  # the HTTP library's read / timeout errors
                    raise openai.APIConnectionError(message=str(exc), request=request) from exc
                if timer is not None:
                    timer.done()
                if not chunk:
                    return
                try:
                    items = feed(chunk)
                except StreamError as exc:
                    raise openai.APIError(str(exc), request, body=exc.body) from None
                for item in items:
                    yield item
                if decoder.error is not None:
                    raise openai.APIError(str(decoder.error), request, body=decoder.error.body)
                if decoder.done:
                    await _drain(read, timer)
                    return
    except asyncio.CancelledError:
        if timer is not None and timer.timed_out():
            raise openai.APITimeoutError(request=request) from None
        raise
    finally:
        if timer is not None:
            timer.close()


async def _drain(read: Callable[[], Awaitable[bytes]], timer: _ReadTimer | None) -> None:
    """Read the rest of a body after its ``[DONE]`` (normally nothing) so that its
    connection can serve the next request. The answer is complete by then: a read error,
    or a wait past the read timeout (a server holding the body open), only costs the
    connection, which is closed instead of kept."""
    try:
        while True:
            if timer is not None:
                timer.reading()
            if not await read():
                return
    except asyncio.CancelledError:
        if timer is None or not timer.timed_out():
            raise
    except Exception:
        return


def _reader(http: Any, encoding: str) -> Callable[[], Awaitable[bytes]]:
    """A function reading the next bytes of the HTTP response ``http`` (``b""`` at its end).

    Its raw bytes when it has no content encoding, else its decoded ``aiter_bytes`` (what
    the SDK's ``iter_bytes`` passes on). Over the SDK's aiohttp transport
    (``openai.DefaultAioHttpClient``, the worker's) the raw bytes are read from aiohttp's
    own stream reader, which httpx's ``aiter_raw`` reaches through three more async
    generators (httpx's response, its bound stream, the transport's ``iter_chunked``):
    resumed twice per token each, they cost ``bench/rooms.py``'s worker about 11 µs a
    token, a quarter of its Python time per token. The reader is found by the attributes
    the transport keeps (``tests/llm/test_llm_stream.py`` checks that they are there); any
    other transport reads through ``aiter_raw``.
    """
    if encoding == "identity":
        transport_stream = getattr(getattr(http, "stream", None), "_stream", None)
        response = getattr(transport_stream, "_aiohttp_response", None)
        content = getattr(response, "content", None)
        if isinstance(content, aiohttp.StreamReader):
            return content.readany
        body = http.aiter_raw()
    else:
        body = http.aiter_bytes()
    return lambda: anext(body, b"")


def chat_delta(payload: dict[str, Any]) -> dict[str, Any] | None:
    """The first choice's delta of a chat-completion chunk, if it has one."""
    choices = payload.get("choices")
    if choices and isinstance(choices, list) and isinstance(choices[0], dict):
        delta = choices[0].get("delta")
        if isinstance(delta, dict):
            return delta
    return None


def stream_deltas(
    llm: openai.AsyncOpenAI,
    *,
    on_usage: Callable[[dict[str, Any]], None] | None = None,
    **params: Any,
) -> AsyncGenerator[dict[str, Any], None]:
    """``chat.completions.create(stream=True, **params)``: each chunk's first choice delta.

    Chunks without choices (usage-only chunks) yield nothing; a chunk's ``usage`` object,
    when there is one, is handed to ``on_usage``.
    """
    decoder = ChatDecoder(on_usage)
    sent = _sent_as_is(llm, params, "messages", "model")
    read_timeout, timeout = _timeouts(llm, sent)
    opened = llm.chat.completions.with_streaming_response.create(
        stream=True, timeout=timeout, **sent
    )
    return _body(opened, decoder, decoder.feed, read_timeout)


class ResponsesReader:
    """Responses API stream events in, the chat-shaped deltas the turn reads out.

    ``reasoning`` (raw reasoning text), ``reasoning_summary`` (the provider's summary),
    ``content`` (answer text), ``tool_calls`` (function calls: call id, name, argument
    pieces) and ``reasoning_item`` (a finished reasoning output item, with its
    ``encrypted_content``, for pass-back). A new reasoning item or summary part starts
    with a paragraph break. Usage (``input_tokens``/``output_tokens``) goes to
    ``on_usage`` in chat-completions names; ``response.failed``/``.incomplete`` raise
    :class:`StreamError`.
    """

    __slots__ = ("_on_usage", "_raw", "_summary")

    def __init__(self, on_usage: Callable[[dict[str, Any]], None] | None = None) -> None:
        """A reader for one response."""
        self._on_usage = on_usage
        self._raw = False
        self._summary = False

    def read(self, event: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
        """The deltas of one event (most events have none)."""
        kind = payload.get("type") or event
        if kind == "response.reasoning_text.delta":
            self._raw = True
            return [{"reasoning": payload.get("delta") or ""}]
        if kind == "response.reasoning_summary_text.delta":
            self._summary = True
            return [{"reasoning_summary": payload.get("delta") or ""}]
        if kind == "response.output_text.delta":
            return [{"content": payload.get("delta") or ""}]
        if kind == "response.function_call_arguments.delta":
            call = {
                "index": payload.get("output_index"),
                "function": {"arguments": payload.get("delta") or ""},
            }
            return [{"tool_calls": [call]}]
        if kind == "response.reasoning_summary_part.added":
            return [{"reasoning_summary": "\n\n"}] if payload.get("summary_index") else []
        if kind in ("response.output_item.added", "response.output_item.done"):
            return self._item(payload, done=kind.endswith(".done"))
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            body = payload.get("response")
            body = body if isinstance(body, dict) else {}
            usage = body.get("usage")
            if self._on_usage is not None and isinstance(usage, dict):
                self._on_usage(_chat_usage(usage))
            if kind != "response.completed":
                reason = body.get("error") or body.get("incomplete_details") or {}
                message = reason.get("message") or reason.get("reason") or kind
                raise StreamError(str(message), body)
        return []

    def _item(self, payload: dict[str, Any], *, done: bool) -> list[dict[str, Any]]:
        item = payload.get("item")
        if not isinstance(item, dict):
            return []
        kind = item.get("type")
        if kind == "reasoning":
            if done:
                return [{"reasoning_item": item}]
            # A new reasoning item: a new paragraph of each kind seen so far.
            return [
                {
                    "reasoning": "\n\n" if self._raw else None,
                    "reasoning_summary": "\n\n" if self._summary else None,
                }
            ]
        if kind == "function_call" and not done:
            call = {
                "index": payload.get("output_index"),
                "id": item.get("call_id") or "",
                "function": {
                    "name": item.get("name") or "",
                    "arguments": item.get("arguments") or "",
                },
            }
            return [{"tool_calls": [call]}]
        return []


def stream_response_deltas(
    llm: openai.AsyncOpenAI,
    *,
    on_usage: Callable[[dict[str, Any]], None] | None = None,
    **params: Any,
) -> AsyncGenerator[dict[str, Any], None]:
    """``responses.create(stream=True, **params)`` as chat-shaped deltas
    (:class:`ResponsesReader`)."""
    decoder = PayloadDecoder()
    reader = ResponsesReader(on_usage)
    sent = _sent_as_is(llm, params)

    def feed(chunk: bytes) -> list[dict[str, Any]]:
        return [delta for event in decoder.feed(chunk) for delta in reader.read(*event)]

    read_timeout, timeout = _timeouts(llm, sent)
    opened = llm.responses.with_streaming_response.create(stream=True, timeout=timeout, **sent)
    return _body(opened, decoder, feed, read_timeout)


def _chat_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """Responses API usage in chat-completions names."""
    details = usage.get("output_tokens_details")
    reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return {
        "prompt_tokens": usage.get("input_tokens"),
        "completion_tokens": usage.get("output_tokens"),
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }
