"""A local OpenAI-compatible server that replays recorded SSE streams.

Real HTTP on 127.0.0.1 (aiohttp), reached by the real ``openai`` client with
``base_url=server.base_url``. It serves ``POST /v1/chat/completions`` and
``POST /v1/responses`` (both ``stream=true`` only) and ``GET /v1/models`` from the
recorded streams in ``tests/streams/`` (one ``.sse`` file per provider shape, described by
``manifest.json``; see ``tests/streams/build.py``). Each stream belongs to one API
(``api``: ``chat`` or ``responses``) and is only served at that API's endpoint. Used by
the tests, the benchmarks and the demo (the "demo model" when no ``LLM_BASE_URL`` is set).

Which stream answers a request, first match wins:

1. the model's route (:meth:`RecordedLLM.route_model`), else the next entry of the
   script queue (:meth:`RecordedLLM.script`);
2. a stream name (or ``endless``, chat only) written in the last user message (chat) or
   user input item (responses), longest name first, or that text equal to a stream's
   recorded question;
3. the server's default: for chat the ``default`` stream (``default="rotate"``: every
   non-follow-up chat stream in turn, for a demo where people type their own questions,
   except the tool calls whose provider needs its reasoning back with the result);
   for responses the first recorded Responses stream (by name), unless ``default`` is one.

When the last message is a tool result (chat: ``role: "tool"``; responses: a
``function_call_output`` item), the chosen stream's ``followup`` (the recorded
continuation after the tool result) is served instead. A stream of the other API is
refused with a plain 400.

Provider rules: a stream's manifest ``rules`` (:data:`RULES`) are checked against the
request body before anything is streamed; a request that breaks one gets the provider's
own status and JSON error body (DeepSeek, OpenRouter wrapping Anthropic, Gemini's JSON
list, OpenAI Responses), so the ``openai`` client raises the same exception with the same
text as against the real provider. Refused requests are listed in
:attr:`RecordedLLM.rejections`. Responses streams carry the reasoning item's
``encrypted_content`` only when the request's ``include`` lists
``reasoning.encrypted_content`` (else it is ``null``, as with the real API). Chat streams
carry usage only when the request asks (``stream_options.include_usage``), as real
servers do: else no ``usage`` field and no usage chunk.

``endless`` streams vLLM-shaped reasoning until the client disconnects (or the server
closes): for ControlStop tests and load benchmarks. ``token_turn`` (:data:`TOKEN_TURN`,
chosen by script or model route only) is one whole vLLM-shaped turn at token level for
load benchmarks: one SSE chunk per token, ``Play.paragraphs`` reasoning paragraphs of about
60 tokens (``delta.reasoning``, each ending with a ``"\n\n"`` token), then a three-sentence
answer (``delta.content``), ``finish_reason: "stop"`` and ``[DONE]``, paced on an absolute
schedule (event *i* at start + *i* x ``chunk_delay``, so a busy server catches up instead
of drifting to a lower rate). ``on_stream`` (optional) is told about every stream served
and may return a callback that gets each event and ``time.monotonic_ns()`` just before
the event is written to the socket. Every request body is recorded
(:attr:`RecordedLLM.requests`, refused ones too), so a test can assert what was sent back
to the LLM; :attr:`RecordedLLM.disconnects` counts streams the client abandoned.

Run standalone: ``python -m alicia.harness.recorded_llm --port 8089 --chunk-delay 0.03``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from aiohttp import web

from .provider_rules import RULES, Refusal, Rejection, RuleContext
from .recorded_streams import (
    DEFAULT_STREAM,
    ENDLESS,
    GENERATED,
    ROTATE,
    STREAMS_DIR,
    TOKEN_TURN,
    TURN_ANSWER,
    TURN_PARAGRAPHS,
    StreamSpec,
    encrypted_contents,
    endless_events,
    event_data,
    load_manifest,
    read_events,
    turn_events,
    without_encrypted,
    without_usage,
)

__all__ = [
    "DEFAULT_STREAM",
    "ENDLESS",
    "ROTATE",
    "RULES",
    "STREAMS_DIR",
    "TOKEN_TURN",
    "TURN_ANSWER",
    "TURN_PARAGRAPHS",
    "Play",
    "RecordedLLM",
    "Refusal",
    "Rejection",
    "RuleContext",
    "StreamSpec",
    "load_manifest",
    "read_events",
]

logger = logging.getLogger(__name__)

_SSE_CONTENT_TYPE: Final = "text/event-stream; charset=utf-8"
_PATHS: Final = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}

EventHook = Callable[[str, int], None]
"""Told each event's text and ``time.monotonic_ns()`` just before it is written."""
StreamHook = Callable[[Mapping[str, Any], str], EventHook | None]
"""Told each served stream's request body and stream name; may return an EventHook."""


@dataclass(frozen=True, slots=True)
class Play:
    """One scripted response: which stream, and how fast."""

    stream: str
    chunk_delay: float | None = None
    """Seconds between SSE events; None = the server's default."""
    tokens_per_event: int = 1
    """``endless`` only: tokens per SSE event (a paragraph is about 25 tokens)."""
    paragraphs: int = 4
    """``token_turn`` only: reasoning paragraphs before the answer (about 60 tokens each)."""


@dataclass(slots=True)
class _Stats:
    served: deque[str] = field(default_factory=lambda: deque(maxlen=1000))
    disconnects: int = 0


class RecordedLLM:
    """The recorded-stream server; an async context manager (``async with RecordedLLM()``)."""

    def __init__(
        self,
        *,
        streams_dir: Path = STREAMS_DIR,
        default: str = DEFAULT_STREAM,
        chunk_delay: float = 0.0,
        endless_delay: float = 0.01,
        host: str = "127.0.0.1",
        port: int = 0,
        max_recorded: int = 1000,
        on_stream: StreamHook | None = None,
    ) -> None:
        """``chunk_delay`` paces recorded streams; ``endless_delay`` paces ``endless``;
        ``on_stream`` sees every stream served (see the module docstring)."""
        self.streams_dir = streams_dir
        self.manifest = load_manifest(streams_dir)
        unknown = {rule for s in self.manifest.values() for rule in s.rules} - set(RULES)
        if unknown:
            raise ValueError(f"unknown request rules in the manifest: {sorted(unknown)}")
        if default != ROTATE:
            self._check_name(default)
        self.default = default
        firsts = sorted(n for n in self.manifest if not _is_followup(n, self.manifest))
        self._firsts = {api: [n for n in firsts if self.manifest[n].api == api] for api in _PATHS}
        # The demo's rotation: the streams a worker answers whatever its provider profile
        # (not the tool calls whose provider needs its reasoning back with the result).
        self._rotation = [n for n in self._firsts["chat"] if not self._needs_passback(n)]
        self._turn = 0
        self.chunk_delay = chunk_delay
        self.endless_delay = endless_delay
        self.on_stream = on_stream
        self._host = host
        self._port = port
        self._events = {
            name: read_events(streams_dir / s.file) for name, s in self.manifest.items()
        }
        # Responses streams as served without include=["reasoning.encrypted_content"].
        self._events_plain = {
            name: [without_encrypted(e) for e in self._events[name]]
            for name, s in self.manifest.items()
            if s.api == "responses"
        }
        # Chat streams as served to a request that did not ask for usage.
        self._events_unasked = {
            name: [e for e in map(without_usage, self._events[name]) if e is not None]
            for name, s in self.manifest.items()
            if s.api == "chat"
        }
        self._encrypted = frozenset(
            encrypted
            for name in self._events_plain
            for event in self._events[name]
            for encrypted in encrypted_contents(event_data(event))
        )
        self._origin = {
            name: next((s for s in self.manifest.values() if s.followup == name), spec)
            for name, spec in self.manifest.items()
        }
        names = {api: [n for n in self.manifest if self.manifest[n].api == api] for api in _PATHS}
        names["chat"].append(ENDLESS)
        self._names = {api: sorted(n, key=len, reverse=True) for api, n in names.items()}
        self._queue: deque[Play] = deque()
        self._by_model: dict[str, Play] = {}
        self.requests: deque[dict[str, Any]] = deque(maxlen=max_recorded)
        self.received_at: deque[float] = deque(maxlen=max_recorded)
        """``time.monotonic()`` when each request arrived (same order as ``requests``)."""
        """Bodies of the requests received (parsed JSON), oldest first; refused ones too."""
        self.rejections: deque[Rejection] = deque(maxlen=max_recorded)
        """Requests refused by a provider rule: ``(stream, rule, message)``, oldest first."""
        self._stats = _Stats()
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()
        self._state = "new"

    # -- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        """Bind the port and start serving."""
        if self._state != "new":
            raise RuntimeError(f"RecordedLLM cannot start when {self._state}")
        self._state = "starting"
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_get("/v1/models", self._models)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port)
        await site.start()
        self._port = int(runner.addresses[0][1])
        self._runner = runner
        self._state = "running"

    async def aclose(self) -> None:
        """Stop serving; open streams (endless ones too) end promptly."""
        if self._state == "closed":
            return
        self._state = "closed"
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> RecordedLLM:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- public state ---------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound TCP port (after start)."""
        return self._port

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``: the ``base_url`` for the openai client."""
        if self._state != "running":
            raise RuntimeError("RecordedLLM is not running")
        return f"http://{self._host}:{self._port}/v1"

    @property
    def served(self) -> list[str]:
        """Names of the streams served, in order (the last 1000)."""
        return list(self._stats.served)

    @property
    def disconnects(self) -> int:
        """Streams the client closed before their end."""
        return self._stats.disconnects

    def script(self, *plays: str | Play) -> None:
        """Queue the streams that answer the next requests, in order."""
        for play in plays:
            item = Play(play) if isinstance(play, str) else play
            self._check_name(item.stream)
            self._queue.append(item)

    def route_model(self, model: str, play: str | Play) -> None:
        """Answer every request for ``model`` with ``play`` (e.g. a summarizer model that
        shares the endpoint), whatever the script queue holds."""
        item = Play(play) if isinstance(play, str) else play
        self._check_name(item.stream)
        self._by_model[model] = item

    def reset(self) -> None:
        """Forget the script queue, recorded requests, rejections and counters."""
        self._queue.clear()
        self.requests.clear()
        self.received_at.clear()
        self.rejections.clear()
        self._stats = _Stats()

    def spec(self, name: str) -> StreamSpec:
        """The manifest entry of stream ``name``."""
        return self.manifest[name]

    # -- HTTP -----------------------------------------------------------------------

    def _check_name(self, name: str) -> None:
        if name not in GENERATED and name not in self.manifest:
            raise ValueError(f"unknown recorded stream {name!r}")

    async def _models(self, request: web.Request) -> web.Response:
        data = [
            {"id": spec.model, "object": "model", "created": 0, "owned_by": spec.provider}
            for spec in self.manifest.values()
        ]
        return web.json_response({"object": "list", "data": data})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "chat")

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "responses")

    async def _serve(self, request: web.Request, api: str) -> web.StreamResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "request body is not valid JSON")
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object")
        self.requests.append(body)
        self.received_at.append(time.monotonic())
        if not body.get("stream"):
            return _error(400, "this server only replays streams: set stream=true")
        if api == "chat":
            items = body.get("messages")
            if not isinstance(items, list) or not items:
                return _error(400, "messages must be a non-empty list")
        else:
            items = body.get("input")
            if isinstance(items, str):
                items = [{"role": "user", "content": items}]
            if not isinstance(items, list) or not items:
                return _error(400, "input must be a string or a non-empty list of items")
        routed = self._by_model.get(str(body.get("model")))
        play = routed if routed is not None else self._choose(api, items)
        if play is None:
            return _error(400, f"no recorded {api} stream to answer with")
        stream_api = "chat" if play.stream in GENERATED else self.manifest[play.stream].api
        if stream_api != api:
            return _error(
                400,
                f"recorded stream {play.stream!r} is a {stream_api} stream: "
                f"request it at {_PATHS[stream_api]}",
            )
        refusal = self._check_rules(play.stream, body)
        if refusal is not None:
            return web.json_response(refusal.body, status=refusal.status)
        self._stats.served.append(play.stream)
        response = web.StreamResponse(
            headers={"Content-Type": _SSE_CONTENT_TYPE, "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        hook = self.on_stream(body, play.stream) if self.on_stream is not None else None
        if play.stream == TOKEN_TURN:
            delay = self.chunk_delay if play.chunk_delay is None else play.chunk_delay
            await self._paced(response, turn_events(play.paragraphs), delay, hook)
            return response
        if play.stream == ENDLESS:
            events: Iterator[str] = endless_events(play.tokens_per_event)
            delay = self.endless_delay if play.chunk_delay is None else play.chunk_delay
        else:
            recorded = self._events[play.stream]
            if api == "responses" and not _wants_encrypted(body):
                recorded = self._events_plain[play.stream]
            elif api == "chat" and not _wants_usage(body):
                recorded = self._events_unasked[play.stream]
            events = iter(recorded)
            delay = self.chunk_delay if play.chunk_delay is None else play.chunk_delay
        try:
            for event in events:
                if self._closing.is_set():
                    break
                if hook is not None:
                    hook(event, time.monotonic_ns())
                await response.write(event.encode() + b"\n\n")
                if delay > 0:
                    await asyncio.sleep(delay)
                elif play.stream == ENDLESS:
                    await asyncio.sleep(0)
            else:
                await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            self._stats.disconnects += 1
            logger.debug("recorded LLM client disconnected", extra={"stream": play.stream})
        return response

    async def _paced(
        self,
        response: web.StreamResponse,
        events: list[str],
        delay: float,
        hook: EventHook | None,
    ) -> None:
        """Write ``events``, event *i* at start + *i* x ``delay`` (late ones at once)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        try:
            for i, event in enumerate(events):
                if self._closing.is_set():
                    break
                wait = start + i * delay - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                else:
                    await asyncio.sleep(0)
                if self._closing.is_set():
                    break
                if hook is not None:
                    hook(event, time.monotonic_ns())
                await response.write(event.encode() + b"\n\n")
            else:
                await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            self._stats.disconnects += 1
            logger.debug("recorded LLM client disconnected", extra={"stream": TOKEN_TURN})

    def _check_rules(self, name: str, body: Mapping[str, Any]) -> Refusal | None:
        """The first provider rule of stream ``name`` that ``body`` breaks, recorded."""
        if name in GENERATED:
            return None
        spec = self.manifest[name]
        context = RuleContext(spec=spec, origin=self._origin[name], encrypted=self._encrypted)
        for rule in spec.rules:
            refusal = RULES[rule](body, context)
            if refusal is not None:
                self.rejections.append(Rejection(name, rule, refusal.message))
                logger.debug("recorded LLM refused a request", extra={"rule": rule})
                return refusal
        return None

    def _choose(self, api: str, items: list[Any]) -> Play | None:
        if self._queue:
            play = self._queue.popleft()
        else:
            name = self._by_marker(api, items) or self._default_stream(api, items)
            if name is None:
                return None
            play = Play(name)
        if _is_tool_result(api, items[-1]) and play.stream not in GENERATED:
            followup = self.manifest[play.stream].followup
            if followup is not None:
                play = Play(followup, play.chunk_delay, play.tokens_per_event)
        return play

    def _default_stream(self, api: str, items: list[Any]) -> str | None:
        default_api = "chat" if self.default == ROTATE or self.default in GENERATED else None
        if self.default in self.manifest:
            default_api = self.manifest[self.default].api
        if self.default != ROTATE and default_api == api:
            return self.default
        if _is_tool_result(api, items[-1]) and self._stats.served:
            # The continuation of the tool-call stream served last, not the next in turn.
            previous = self._stats.served[-1]
            spec = self.manifest.get(previous)
            if spec is not None and spec.followup is not None and spec.api == api:
                return previous
        firsts = self._firsts[api]
        if not firsts:
            return None
        if api == "responses":
            return firsts[0]
        self._turn += 1
        return self._rotation[(self._turn - 1) % len(self._rotation)]

    def _needs_passback(self, name: str) -> bool:
        followup = self.manifest[name].followup
        return followup is not None and bool(self.manifest[followup].rules)

    def _by_marker(self, api: str, items: list[Any]) -> str | None:
        text = ""
        for item in reversed(items):
            if isinstance(item, Mapping) and item.get("role") == "user":
                text = _text_of(item.get("content"))
                break
        for name in self._names[api]:
            if re.search(rf"\b{re.escape(name)}\b", text):
                return name
        question = text.strip().casefold()
        for name, spec in self.manifest.items():
            if (
                spec.api == api
                and spec.user.casefold() == question
                and not _is_followup(name, self.manifest)
            ):
                return name
        return None


def _is_followup(name: str, manifest: Mapping[str, StreamSpec]) -> bool:
    return any(spec.followup == name for spec in manifest.values())


def _is_tool_result(api: str, item: Any) -> bool:
    """Whether the last message (chat) or input item (responses) is a tool result."""
    if not isinstance(item, Mapping):
        return False
    if api == "chat":
        return item.get("role") == "tool"
    return item.get("type") == "function_call_output"


def _wants_encrypted(body: Mapping[str, Any]) -> bool:
    include = body.get("include")
    return isinstance(include, list) and "reasoning.encrypted_content" in include


def _wants_usage(body: Mapping[str, Any]) -> bool:
    """The chat request asks for the usage chunk (``stream_options.include_usage``)."""
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def _error(status: int, message: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": status}}
    return web.json_response(body, status=status)


@contextlib.asynccontextmanager
async def recorded_llm(**options: Any) -> AsyncIterator[RecordedLLM]:
    """``async with recorded_llm(chunk_delay=0.01) as llm:`` — a started server."""
    async with RecordedLLM(**options) as server:
        yield server


async def _serve(args: argparse.Namespace) -> None:
    async with RecordedLLM(
        default=args.default, chunk_delay=args.chunk_delay, host=args.host, port=args.port
    ) as server:
        print(f"LLM_BASE_URL={server.base_url}", flush=True)
        print(f"streams: {', '.join(sorted(server.manifest))}, {ENDLESS}", flush=True)
        await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    """Command line: serve the recorded streams until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument(
        "--default", default=DEFAULT_STREAM, help=f"stream for unmarked requests, or {ROTATE!r}"
    )
    parser.add_argument("--chunk-delay", type=float, default=0.03, help="seconds between chunks")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
