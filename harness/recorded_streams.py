"""The recorded streams the recorded LLM serves: the manifest, the files, and the streams
generated for load (``endless``, ``token_turn``). See :mod:`.recorded_llm`."""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = [
    "DEFAULT_STREAM",
    "ENDLESS",
    "GENERATED",
    "ROTATE",
    "STREAMS_DIR",
    "TOKEN_TURN",
    "TURN_ANSWER",
    "TURN_PARAGRAPHS",
    "StreamSpec",
    "encrypted_contents",
    "endless_events",
    "event_data",
    "load_manifest",
    "read_events",
    "turn_events",
    "without_encrypted",
    "without_usage",
]

STREAMS_DIR: Final = Path(__file__).resolve().parents[1] / "tests" / "streams"
"""The recorded streams shipped with the repository."""

ENDLESS: Final = "endless"
"""Stream name for endless reasoning (until the client disconnects)."""

TOKEN_TURN: Final = "token_turn"
"""Stream name for one token-level vLLM-shaped turn: reasoning paragraphs, then an answer."""

ROTATE: Final = "rotate"
"""Default that answers unmarked requests with each recorded stream in turn."""

DEFAULT_STREAM: Final = "deepseek_reasoning_content"

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

GENERATED: Final = frozenset({ENDLESS, TOKEN_TURN})
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


def encrypted_contents(value: Any) -> Iterator[str]:
    """Every reasoning item's ``encrypted_content`` inside a parsed event."""
    if isinstance(value, dict):
        encrypted = value.get("encrypted_content")
        if value.get("type") == "reasoning" and isinstance(encrypted, str):
            yield encrypted
        for child in value.values():
            yield from encrypted_contents(child)
    elif isinstance(value, list):
        for child in value:
            yield from encrypted_contents(child)


def drop_encrypted(value: Any) -> bool:
    """Set every reasoning item's ``encrypted_content`` to None; True if any changed."""
    changed = False
    if isinstance(value, dict):
        if value.get("type") == "reasoning" and value.get("encrypted_content") is not None:
            value["encrypted_content"] = None
            changed = True
        for child in value.values():
            changed = drop_encrypted(child) or changed
    elif isinstance(value, list):
        for child in value:
            changed = drop_encrypted(child) or changed
    return changed


def event_data(event: str) -> Any:
    """The parsed ``data:`` of one SSE event (None if it has none)."""
    for line in event.split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            return json.loads(line.removeprefix("data: "))
    return None


def without_encrypted(event: str) -> str:
    """The event with reasoning items' ``encrypted_content`` nulled (unchanged otherwise)."""
    lines = event.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("data: ") and line != "data: [DONE]":
            data = json.loads(line.removeprefix("data: "))
            if drop_encrypted(data):
                lines[i] = "data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return "\n".join(lines)


def without_usage(event: str) -> str | None:
    """A chat-completions event as served to a request that did not ask for usage
    (``stream_options.include_usage``): its ``usage`` field gone, and None for the chunk
    that carried only usage (``choices: []``). Real servers send no usage unasked."""
    lines = event.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("data: ") and line != "data: [DONE]":
            data = json.loads(line.removeprefix("data: "))
            if not isinstance(data, dict) or "usage" not in data:
                continue
            if data.get("choices") == []:
                return None
            del data["usage"]
            lines[i] = "data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return "\n".join(lines)


_TOKEN: Final = re.compile(r"\n+|[ ]?[^\s]+")


def endless_events(tokens_per_event: int) -> Iterator[str]:
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


def turn_events(paragraphs: int) -> list[str]:
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
