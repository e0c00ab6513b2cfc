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
``reasoning.encrypted_content`` (else it is ``null``, as with the real API).

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
import itertools
import json
import logging
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NamedTuple

from aiohttp import web

__all__ = [
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

STREAMS_DIR: Final = Path(__file__).resolve().parents[1] / "tests" / "streams"
"""The recorded streams shipped with the repository."""

ENDLESS: Final = "endless"
"""Stream name for endless reasoning (until the client disconnects)."""

TOKEN_TURN: Final = "token_turn"
"""Stream name for one token-level vLLM-shaped turn: reasoning paragraphs, then an answer."""

ROTATE: Final = "rotate"
"""Default that answers unmarked requests with each recorded stream in turn."""

DEFAULT_STREAM: Final = "deepseek_reasoning_content"
_SSE_CONTENT_TYPE: Final = "text/event-stream; charset=utf-8"
_PATHS: Final = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}

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

_GENERATED: Final = frozenset({ENDLESS, TOKEN_TURN})
"""Streams made by the server itself (chat only, no manifest entry, no rules)."""

TURN_PARAGRAPHS: Final = (
    "Okay, the user wants to know how long a pot of rice should rest after cooking. I "
    "remember that resting lets the steam finish the grains evenly, so the bottom does "
    "not stay wet while the top dries out. The usual advice is about ten minutes with the "
    "lid on, but it depends on the kind of rice and the pot being used.",
    "Let me check the common cases one by one. White long grain rice is fine after about "
    "ten minutes, while brown rice has a tougher bran layer and benefits from a little "
    "longer, maybe fifteen minutes. Sushi rice is usually rested briefly and then seasoned "
    "while still warm, so the timing there is a bit different from plain rice.",
    "There is also the question of the heat. The pot should come off the burner, or the "
    "burner should be turned off, so the rice does not scorch at the bottom. Keeping the "
    "lid closed matters more than the exact number of minutes, because opening it lets "
    "out the steam that is doing the remaining work on the grains.",
    "So the answer should be short and practical. I will say ten minutes off the heat "
    "with the lid on for white rice, a bit longer for brown rice, and mention that the "
    "lid should stay closed the whole time. Then a quick fluff with a fork before serving "
    "keeps the grains separate, which is worth adding as a final tip.",
)
"""The reasoning paragraphs of :data:`TOKEN_TURN` (about 60 tokens each), in turn order."""

TURN_ANSWER: Final = (
    "Let white rice rest for about ten minutes off the heat with the lid on. "
    "Brown rice is better after about fifteen minutes. "
    "Keep the lid closed the whole time, then fluff the grains with a fork before serving."
)
"""The answer of :data:`TOKEN_TURN` (three sentences)."""

EventHook = Callable[[str, int], None]
"""Told each event's text and ``time.monotonic_ns()`` just before it is written."""
StreamHook = Callable[[Mapping[str, Any], str], EventHook | None]
"""Told each served stream's request body and stream name; may return an EventHook."""


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
    api: str = "chat"
    """``chat`` (served at ``/v1/chat/completions``) or ``responses`` (``/v1/responses``)."""
    profile: str = "generic"
    """The ``LLM_PROVIDER`` profile a worker needs to read and answer it correctly."""
    rules: tuple[str, ...] = ()
    """Request rules the server enforces before serving it (:data:`RULES`)."""
    summaries: tuple[str, ...] = ()
    """Provider-written reasoning summaries in the stream, one per paragraph."""
    passback: Mapping[str, Any] | None = None
    """Tool-call streams: what a correct client sends back with the next request."""


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
            api=entry.get("api", "chat"),
            profile=entry.get("profile", "generic"),
            rules=tuple(entry.get("rules", ())),
            summaries=tuple(entry.get("summaries", ())),
            passback=entry.get("passback"),
        )
    return specs


def read_events(path: Path) -> list[str]:
    """The SSE events of a recorded file, each without its terminating blank line."""
    text = path.read_text(encoding="utf-8")
    return [event for event in text.split("\n\n") if event.strip()]


# -- provider request rules -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Refusal:
    """A provider's answer to a request that breaks one of its rules."""

    status: int
    body: Any
    """The JSON body exactly as the provider sends it (an object, or Gemini's list)."""
    message: str
    """The provider's error text (also inside ``body``)."""


class Rejection(NamedTuple):
    """One refused request: the stream that would have answered, the rule, the text."""

    stream: str
    rule: str
    message: str


@dataclass(frozen=True, slots=True)
class RuleContext:
    """What a rule compares the request with."""

    spec: StreamSpec
    """The stream that would answer the request."""
    origin: StreamSpec
    """The tool-call stream it continues (``spec`` itself when it is not a follow-up)."""
    encrypted: frozenset[str]
    """Every ``encrypted_content`` the recorded Responses streams hand out."""


Rule = Callable[[Mapping[str, Any], RuleContext], Refusal | None]

DEEPSEEK_V4_PASSBACK: Final = (
    "The `reasoning_content` in the thinking mode must be passed back to the API."
)
ANTHROPIC_THINKING_FIRST: Final = (
    "messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`tool_use`. When `thinking` is enabled, a final `assistant` message must start with a "
    "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We "
    "recommend you include thinking blocks from previous turns. To avoid this requirement, "
    "disable `thinking`. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)
GEMINI_MISSING_SIGNATURE: Final = (
    "Function call is missing a thought_signature in functionCall parts. This is required "
    "for tools to work correctly, and missing thought_signature may lead to degraded model "
    "performance. Additional data, function call `default_api:{name}` , position {index}. "
    "Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more "
    "details."
)
RESPONSES_ITEM_NOT_FOUND: Final = (
    "Item with id '{id}' not found. Items are not persisted when `store` is set to false. "
    "Try again with `store` set to true, or remove this item from your input."
)
RESPONSES_MISSING_REASONING: Final = (
    "Item '{fc}' of type 'function_call' was provided without its required 'reasoning' "
    "item: '{rs}'."
)


def _messages(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    value = body.get("messages")
    return [m for m in value if isinstance(m, Mapping)] if isinstance(value, list) else []


def _tool_calls(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if message.get("role") != "assistant":
        return []
    calls = message.get("tool_calls")
    return [c for c in calls if isinstance(c, Mapping)] if isinstance(calls, list) else []


def _dig(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _deepseek_error(message: str) -> Refusal:
    body = {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_request_error",
        }
    }
    return Refusal(400, body, message)


def _openai_error(
    status: int, message: str, *, param: str | None = "input", code: str | None = None
) -> Refusal:
    body = {
        "error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    }
    return Refusal(status, body, message)


def deepseek_reasoner_no_reasoning_input(
    body: Mapping[str, Any], context: RuleContext
) -> Refusal | None:
    """deepseek-reasoner answers 400 when an input message carries ``reasoning_content``
    (DeepSeek's reasoning-model guide; the wording of the message here is ours)."""
    for index, message in enumerate(_messages(body)):
        if "reasoning_content" in message:
            return _deepseek_error(
                "The `reasoning_content` field is not supported in the input messages of "
                f"deepseek-reasoner (message index {index}). Remove it from previous "
                "assistant messages before sending them back."
            )
    return None


def deepseek_v4_passback(body: Mapping[str, Any], context: RuleContext) -> Refusal | None:
    """DeepSeek V4 thinking mode: an assistant message with tool calls must carry its
    ``reasoning_content`` (a string) in every later request."""
    for message in _messages(body):
        if _tool_calls(message) and not isinstance(message.get("reasoning_content"), str):
            return _deepseek_error(DEEPSEEK_V4_PASSBACK)
    return None


def _anthropic_index(messages: list[Mapping[str, Any]], target: int) -> int:
    """The index Anthropic gives ``messages[target]``: no system messages, and tool
    results merged with the user turn around them."""
    index, previous = -1, None
    for message in messages[: target + 1]:
        role = message.get("role")
        if role in ("system", "developer"):
            continue
        kind = "user" if role in ("user", "tool") else role
        if kind != previous:
            index += 1
        previous = kind
    return index


def openrouter_reasoning_details(body: Mapping[str, Any], context: RuleContext) -> Refusal | None:
    """OpenRouter to Anthropic with reasoning: the last assistant message with tool calls
    must start with its signed thinking block, i.e. carry ``reasoning_details`` with the
    recorded ``reasoning.text`` (joined text and signature as streamed). OpenRouter wraps
    Anthropic's error: ``Provider returned error`` with the raw body in ``metadata``. The
    missing-thinking text is Anthropic's as publicly reported; the two signature texts
    (missing, changed) follow Anthropic's validation-error form but are not confirmed."""
    messages = _messages(body)
    targets = [i for i, m in enumerate(messages) if _tool_calls(m)]
    if not targets:
        return None
    index = _anthropic_index(messages, targets[-1])
    recorded = next(
        (
            d
            for d in (context.origin.passback or {}).get("reasoning_details", ())
            if isinstance(d, Mapping) and d.get("type") == "reasoning.text"
        ),
        {},
    )
    details = messages[targets[-1]].get("reasoning_details")
    texts = [
        d
        for d in (details if isinstance(details, list) else [])
        if isinstance(d, Mapping) and d.get("type") == "reasoning.text"
    ]
    signatures = {d.get("signature") for d in texts} - {None, ""}
    joined = "".join(str(d.get("text") or "") for d in texts)
    if not texts:
        message = ANTHROPIC_THINKING_FIRST.format(index=index)
    elif not signatures:
        message = f"messages.{index}.content.0.thinking.signature: Field required"
    elif recorded.get("signature") not in signatures or joined != recorded.get("text"):
        message = f"messages.{index}.content.0: Invalid `signature` in `thinking` block"
    else:
        return None
    raw = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": message},
        "request_id": "req_011CXRecordedLLM4gT7wYqN2b",
    }
    wrapped = {
        "error": {
            "message": "Provider returned error",
            "code": 400,
            "metadata": {
                "raw": json.dumps(raw, separators=(",", ":")),
                "provider_name": "Anthropic",
            },
        },
        "user_id": "user_2zRecordedLLMReplayServer",
    }
    return Refusal(400, wrapped, message)


def gemini_thought_signature(body: Mapping[str, Any], context: RuleContext) -> Refusal | None:
    """Gemini's OpenAI-compatible endpoint: every assistant tool call must carry the
    recorded ``extra_content.google.thought_signature``. Gemini's errors there are a JSON
    list of error objects. The missing-signature text is Gemini's as publicly reported;
    the changed-signature text ("Corrupted thought signature.") is not confirmed."""
    expected = (context.origin.passback or {}).get("thought_signature")
    for index, message in enumerate(_messages(body)):
        for call in _tool_calls(message):
            signature = _dig(call, "extra_content", "google", "thought_signature")
            if not isinstance(signature, str) or not signature:
                name = _dig(call, "function", "name")
                text = GEMINI_MISSING_SIGNATURE.format(name=name, index=index)
            elif signature != expected:
                text = "Corrupted thought signature."
            else:
                continue
            error = {"error": {"code": 400, "message": text, "status": "INVALID_ARGUMENT"}}
            return Refusal(400, [error], text)
    return None


def responses_reasoning_items(body: Mapping[str, Any], context: RuleContext) -> Refusal | None:
    """OpenAI Responses API for a zero-data-retention client: ``store`` must be false and
    ``previous_response_id`` unused; reasoning items come back whole (their
    ``encrypted_content``, as recorded), never by id alone; a ``function_call`` item must
    follow the reasoning item that produced it."""
    if body.get("previous_response_id"):
        return _openai_error(
            400,
            "Previous response cannot be used for this organization due to Zero Data Retention.",
            param="previous_response_id",
        )
    if body.get("store") is not False:
        # The recordings are for a zero-data-retention organization; the text is ours.
        return _openai_error(
            400,
            "Stored responses are not available for this organization (zero data "
            "retention): set `store` to false.",
            param="store",
        )
    raw = body.get("input")
    items = [i for i in raw if isinstance(i, Mapping)] if isinstance(raw, list) else []
    for item in items:
        kind, item_id = item.get("type"), item.get("id")
        encrypted = item.get("encrypted_content")
        if kind == "item_reference" or (kind == "reasoning" and not encrypted):
            return _openai_error(404, RESPONSES_ITEM_NOT_FOUND.format(id=item_id))
        if kind == "reasoning" and encrypted not in context.encrypted:
            return _openai_error(
                400,
                f"The encrypted content for item {item_id} could not be verified. "
                "Reason: Encrypted content could not be decrypted or parsed.",
                param=None,
                code="invalid_encrypted_content",
            )
    recorded = _dig(context.origin.passback, "reasoning_item", "id") or "rs_"
    item_ids = {c.get("id"): c.get("item_id") for c in context.origin.tool_calls}
    for position, item in enumerate(items):
        if item.get("type") != "function_call":
            continue
        before = position - 1
        while before >= 0 and items[before].get("type") == "function_call":
            before -= 1  # parallel calls share the reasoning item before the first one
        previous = items[before] if before >= 0 else {}
        if previous.get("type") == "reasoning" and previous.get("encrypted_content"):
            continue
        fc = item.get("id") or item_ids.get(item.get("call_id")) or "fc_"
        return _openai_error(400, RESPONSES_MISSING_REASONING.format(fc=fc, rs=recorded))
    return None


RULES: Final[Mapping[str, Rule]] = {
    "deepseek_reasoner_no_reasoning_input": deepseek_reasoner_no_reasoning_input,
    "deepseek_v4_passback": deepseek_v4_passback,
    "openrouter_reasoning_details": openrouter_reasoning_details,
    "gemini_thought_signature": gemini_thought_signature,
    "responses_reasoning_items": responses_reasoning_items,
}
"""Request rules by name (a manifest entry's ``rules``)."""


def _encrypted_contents(value: Any) -> Iterator[str]:
    """Every reasoning item's ``encrypted_content`` inside a parsed event."""
    if isinstance(value, dict):
        encrypted = value.get("encrypted_content")
        if value.get("type") == "reasoning" and isinstance(encrypted, str):
            yield encrypted
        for child in value.values():
            yield from _encrypted_contents(child)
    elif isinstance(value, list):
        for child in value:
            yield from _encrypted_contents(child)


def _drop_encrypted(value: Any) -> bool:
    """Set every reasoning item's ``encrypted_content`` to None; True if any changed."""
    changed = False
    if isinstance(value, dict):
        if value.get("type") == "reasoning" and value.get("encrypted_content") is not None:
            value["encrypted_content"] = None
            changed = True
        for child in value.values():
            changed = _drop_encrypted(child) or changed
    elif isinstance(value, list):
        for child in value:
            changed = _drop_encrypted(child) or changed
    return changed


def _event_data(event: str) -> Any:
    """The parsed ``data:`` of one SSE event (None if it has none)."""
    for line in event.split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            return json.loads(line.removeprefix("data: "))
    return None


def _without_encrypted(event: str) -> str:
    """The event with reasoning items' ``encrypted_content`` nulled (unchanged otherwise)."""
    lines = event.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("data: ") and line != "data: [DONE]":
            data = json.loads(line.removeprefix("data: "))
            if _drop_encrypted(data):
                lines[i] = "data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return "\n".join(lines)


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
            name: [_without_encrypted(e) for e in self._events[name]]
            for name, s in self.manifest.items()
            if s.api == "responses"
        }
        self._encrypted = frozenset(
            encrypted
            for name in self._events_plain
            for event in self._events[name]
            for encrypted in _encrypted_contents(_event_data(event))
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
        if name not in _GENERATED and name not in self.manifest:
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
        stream_api = "chat" if play.stream in _GENERATED else self.manifest[play.stream].api
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
            await self._paced(response, _turn_events(play.paragraphs), delay, hook)
            return response
        if play.stream == ENDLESS:
            events: Iterator[str] = _endless_events(play.tokens_per_event)
            delay = self.endless_delay if play.chunk_delay is None else play.chunk_delay
        else:
            recorded = self._events[play.stream]
            if api == "responses" and not _wants_encrypted(body):
                recorded = self._events_plain[play.stream]
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
        if name in _GENERATED:
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
        if _is_tool_result(api, items[-1]) and play.stream not in _GENERATED:
            followup = self.manifest[play.stream].followup
            if followup is not None:
                play = Play(followup, play.chunk_delay, play.tokens_per_event)
        return play

    def _default_stream(self, api: str, items: list[Any]) -> str | None:
        default_api = "chat" if self.default == ROTATE or self.default in _GENERATED else None
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


def _turn_events(paragraphs: int) -> list[str]:
    """The SSE events of one :data:`TOKEN_TURN`: one per token, as vLLM sends them."""
    head = {
        "id": f"chatcmpl-turn{time.monotonic_ns() % 10**12:012d}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": "token-turn-reasoner",
    }

    def event(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return "data: " + json.dumps({**head, "choices": [choice]}, separators=(",", ":"))

    events = [event({"role": "assistant", "content": ""})]
    for k in range(paragraphs):
        tokens = [*_TOKEN.findall(TURN_PARAGRAPHS[k % len(TURN_PARAGRAPHS)]), "\n\n"]
        events.extend(event({"reasoning": token}) for token in tokens)
    events.extend(event({"content": token}) for token in _TOKEN.findall(TURN_ANSWER))
    events.append(event({}, "stop"))
    events.append("data: [DONE]")
    return events


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
