"""A local OpenAI-compatible chat-completions server that replays recorded SSE streams.

Real HTTP on 127.0.0.1 (aiohttp), reached by the real ``openai`` client with
``base_url=server.base_url``. It serves ``POST /v1/chat/completions`` (``stream=true``)
and ``GET /v1/models`` from the recorded streams in ``tests/streams/`` (one ``.sse``
file per provider shape, described by ``manifest.json``; see
``tests/streams/build.py``). Used by the tests, the benchmarks and the demo (the "demo
model" when no ``LLM_BASE_URL`` is set).

Which stream answers a request, first match wins:

1. the next entry of the script queue (:meth:`RecordedLLM.script`);
2. a stream name (or ``endless``) written in the last user message, longest name first,
   or the last user message equal to a stream's recorded question;
3. the server's default stream (``default="rotate"``: every non-follow-up stream in
   turn, for a demo where people type their own questions).

When the last message is a tool result (``role: "tool"``), the chosen stream's
``followup`` (the recorded continuation after the tool result) is served instead.

``endless`` streams vLLM-shaped reasoning until the client disconnects (or the server
closes): for ControlStop tests and load benchmarks. Every request body is recorded
(:attr:`RecordedLLM.requests`), so a test can assert that reasoning was not sent back
to the LLM; :attr:`RecordedLLM.disconnects` counts streams the client abandoned.

Run standalone: ``python -m harness.recorded_llm --port 8089 --chunk-delay 0.03``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from aiohttp import web

__all__ = [
    "ENDLESS",
    "ROTATE",
    "STREAMS_DIR",
    "Play",
    "RecordedLLM",
    "StreamSpec",
    "load_manifest",
    "read_events",
]

logger = logging.getLogger(__name__)

STREAMS_DIR: Final = Path(__file__).resolve().parents[1] / "tests" / "streams"
"""The recorded streams shipped with the repository."""

ENDLESS: Final = "endless"
"""Stream name for endless reasoning (until the client disconnects)."""

ROTATE: Final = "rotate"
"""Default that answers unmarked requests with each recorded stream in turn."""

DEFAULT_STREAM: Final = "deepseek_reasoning_content"
_SSE_CONTENT_TYPE: Final = "text/event-stream; charset=utf-8"

_ENDLESS_PARAGRAPHS: Final = (
    "Let me think about this step by step. The question has several parts, and I want "
    "to make sure each one is handled before I answer.",
    "First, the facts. I should separate what is given from what I am assuming, because "
    "mixing them up is the usual source of mistakes.",
    "Second, the edge cases. What happens at zero, at the limits, and when the input is "
    "empty? Each of these deserves a quick check.",
    "Third, the wording of the answer. It should be short enough to say aloud, but it "
    "must still be correct and complete.",
)


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """One recorded stream and what a correct reader gets from it (a manifest entry)."""

    name: str
    file: str
    provider: str
    model: str
    open_at_start: bool
    user: str
    reasoning: str
    """Exact concatenation of the Reasoning parts the extractor yields."""
    answer: str
    """Exact concatenation of the Answer parts."""
    steps: tuple[str, ...]
    """Expected step texts (paragraphs of the reasoning)."""
    tool_calls: tuple[Mapping[str, str], ...]
    """``{"id", "name", "arguments"}`` per call (arguments as the JSON text streamed)."""
    finish_reason: str
    followup: str | None = None
    """Stream that continues this one after the tool result."""
    tool_result: str | None = None
    """The tool result the follow-up was recorded with (JSON text)."""


def load_manifest(directory: Path = STREAMS_DIR) -> dict[str, StreamSpec]:
    """Read ``manifest.json`` from ``directory``: stream name -> :class:`StreamSpec`."""
    raw = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    specs: dict[str, StreamSpec] = {}
    for name, entry in raw.items():
        specs[name] = StreamSpec(
            name=name,
            file=entry["file"],
            provider=entry["provider"],
            model=entry["model"],
            open_at_start=bool(entry["open_at_start"]),
            user=entry["user"],
            reasoning=entry["reasoning"],
            answer=entry["answer"],
            steps=tuple(entry["steps"]),
            tool_calls=tuple(entry["tool_calls"]),
            finish_reason=entry["finish_reason"],
            followup=entry.get("followup"),
            tool_result=entry.get("tool_result"),
        )
    return specs


def read_events(path: Path) -> list[str]:
    """The SSE events of a recorded file, each without its terminating blank line."""
    text = path.read_text(encoding="utf-8")
    return [event for event in text.split("\n\n") if event.strip()]


@dataclass(frozen=True, slots=True)
class Play:
    """One scripted response: which stream, and how fast."""

    stream: str
    chunk_delay: float | None = None
    """Seconds between SSE events; None = the server's default."""
    tokens_per_event: int = 1
    """``endless`` only: tokens per SSE event (a paragraph is about 25 tokens)."""


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
    ) -> None:
        """``chunk_delay`` paces recorded streams; ``endless_delay`` paces ``endless``."""
        self.streams_dir = streams_dir
        self.manifest = load_manifest(streams_dir)
        if default != ROTATE:
            self._check_name(default)
        self.default = default
        self._rotation = itertools.cycle(
            sorted(n for n in self.manifest if not _is_followup(n, self.manifest))
        )
        self.chunk_delay = chunk_delay
        self.endless_delay = endless_delay
        self._host = host
        self._port = port
        self._events = {
            name: read_events(streams_dir / s.file) for name, s in self.manifest.items()
        }
        self._names = sorted([*self.manifest, ENDLESS], key=len, reverse=True)
        self._queue: deque[Play] = deque()
        self._by_model: dict[str, Play] = {}
        self.requests: deque[dict[str, Any]] = deque(maxlen=max_recorded)
        """Bodies of the requests received (parsed JSON), oldest first."""
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
        """Forget the script queue, recorded requests and counters."""
        self._queue.clear()
        self.requests.clear()
        self._stats = _Stats()

    def spec(self, name: str) -> StreamSpec:
        """The manifest entry of stream ``name``."""
        return self.manifest[name]

    # -- HTTP -----------------------------------------------------------------------

    def _check_name(self, name: str) -> None:
        if name != ENDLESS and name not in self.manifest:
            raise ValueError(f"unknown recorded stream {name!r}")

    async def _models(self, request: web.Request) -> web.Response:
        data = [
            {"id": spec.model, "object": "model", "created": 0, "owned_by": spec.provider}
            for spec in self.manifest.values()
        ]
        return web.json_response({"object": "list", "data": data})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "request body is not valid JSON")
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object")
        self.requests.append(body)
        if not body.get("stream"):
            return _error(400, "this server only replays streams: set stream=true")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "messages must be a non-empty list")
        routed = self._by_model.get(str(body.get("model")))
        play = routed if routed is not None else self._choose(messages)
        self._stats.served.append(play.stream)
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
            }
        )
        await response.prepare(request)
        if play.stream == ENDLESS:
            events: Iterator[str] = _endless_events(play.tokens_per_event)
            delay = self.endless_delay if play.chunk_delay is None else play.chunk_delay
        else:
            events = iter(self._events[play.stream])
            delay = self.chunk_delay if play.chunk_delay is None else play.chunk_delay
        try:
            for event in events:
                if self._closing.is_set():
                    break
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

    def _choose(self, messages: list[Any]) -> Play:
        if self._queue:
            play = self._queue.popleft()
        else:
            play = Play(self._by_marker(messages) or self._default_stream(messages))
        last = messages[-1]
        if isinstance(last, Mapping) and last.get("role") == "tool" and play.stream != ENDLESS:
            followup = self.manifest[play.stream].followup
            if followup is not None:
                play = Play(followup, play.chunk_delay, play.tokens_per_event)
        return play

    def _default_stream(self, messages: list[Any]) -> str:
        if self.default != ROTATE:
            return self.default
        last = messages[-1]
        if isinstance(last, Mapping) and last.get("role") == "tool" and self._stats.served:
            # The continuation of the tool-call stream served last, not the next in turn.
            previous = self._stats.served[-1]
            if previous in self.manifest and self.manifest[previous].followup is not None:
                return previous
        return next(self._rotation)

    def _by_marker(self, messages: list[Any]) -> str | None:
        text = ""
        for message in reversed(messages):
            if isinstance(message, Mapping) and message.get("role") == "user":
                text = _text_of(message.get("content"))
                break
        for name in self._names:
            if re.search(rf"\b{re.escape(name)}\b", text):
                return name
        question = text.strip().casefold()
        for name, spec in self.manifest.items():
            if spec.user.casefold() == question and not _is_followup(name, self.manifest):
                return name
        return None


def _is_followup(name: str, manifest: Mapping[str, StreamSpec]) -> bool:
    return any(spec.followup == name for spec in manifest.values())


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def _error(status: int, message: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": status}}
    return web.json_response(body, status=status)


_TOKEN: Final = re.compile(r"\n+|[ ]?[^\s]+")


def _endless_events(tokens_per_event: int) -> Iterator[str]:
    """vLLM-shaped reasoning events, paragraph after paragraph, forever."""
    head = {
        "id": f"chatcmpl-endless{int(time.time() * 1000) % 10**8:08d}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": "endless-reasoner",
    }

    def event(delta: dict[str, Any]) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        return "data: " + json.dumps({**head, "choices": [choice]}, separators=(",", ":"))

    yield event({"role": "assistant", "content": ""})
    batch: list[str] = []
    for paragraph in itertools.cycle(_ENDLESS_PARAGRAPHS):
        for token in [*_TOKEN.findall(paragraph), "\n\n"]:
            batch.append(token)
            if len(batch) >= tokens_per_event:
                yield event({"reasoning": "".join(batch)})
                batch = []


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
