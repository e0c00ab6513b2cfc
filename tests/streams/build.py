"""Regenerate the recorded chat-completion streams (``*.sse``) and ``manifest.json``.

Each stream reproduces one provider's wire shape for a streamed chat completion
(field names and order, id formats, null fields, role in the first delta, usage chunk,
finish reasons, SSE comments), as documented by the providers and seen in public bug
reports; the texts are ours. Streams are deterministic: run
``.venv/bin/python -m tests.streams.build`` after editing a scenario and commit the output.

The manifest is the expectation table for tests: for every stream it states the exact
reasoning and answer text a correct extractor yields, the steps (paragraphs, written
here by hand, not computed by the segmenter), and the tool calls.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CREATED = 1767225600  # 2026-01-01T00:00:00Z, fixed so files are reproducible

Json = dict[str, Any]

# -- scenario texts ----------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str
    result: str


@dataclass(frozen=True)
class Scenario:
    user: str
    steps: list[str]
    answer: str
    tool: ToolCall | None = None
    followup_steps: list[str] = field(default_factory=list)
    followup_answer: str = ""

    @property
    def reasoning(self) -> str:
        return "\n\n".join(self.steps)


DECIMALS = Scenario(
    user="9.11 and 9.8, which is greater?",
    steps=[
        "Okay, the user wants to know whether 9.11 or 9.8 is the larger number. "
        "This looks trivial, but it is a classic trap, so I should compare carefully.",
        "Both numbers have the same whole part, 9. So the comparison comes down to the "
        "decimal parts: 0.11 against 0.8.",
        "To compare them fairly I can write both with two decimal places: 0.11 stays 0.11, "
        "and 0.8 becomes 0.80. Now 80 hundredths is clearly more than 11 hundredths.",
        "The trap is reading 9.11 like a version number, where 11 comes after 8. "
        "As decimals that reading is wrong, and I should say so briefly.",
    ],
    answer=(
        "9.8 is greater than 9.11. Both share the whole number 9, and 0.80 is larger than "
        "0.11. It only looks the other way round if you read them like software versions."
    ),
)

EGGS = Scenario(
    user="How long should I boil an egg for a jammy yolk?",
    steps=[
        "The user wants a jammy yolk: set white, yolk thick but still soft in the middle. "
        "That sits between soft-boiled and hard-boiled.",
        "Timing depends on starting the egg in boiling water versus cold water. The "
        "boiling-water start is more repeatable, so I'll assume that.\n"
        "- large egg, straight from the fridge\n"
        "- water already at a rolling boil",
        "For a large fridge-cold egg dropped into boiling water, about 6.5 to 7 minutes "
        "gives a jammy yolk. Six minutes is runnier; eight minutes starts to firm up.",
        "An ice bath right after stops the cooking and makes peeling easier. Worth "
        "mentioning, since carry-over heat would otherwise push it past jammy.",
    ],
    answer=(
        "Boil a large egg for about 6 and a half to 7 minutes, starting it in water that is "
        "already at a rolling boil. Then move it straight into an ice bath for a few minutes. "
        "That gives a fully set white and a thick, jammy yolk."
    ),
)

STRAWBERRY = Scenario(
    user="How many r's are in the word strawberry?",
    steps=[
        "I need to count the letter r in strawberry. Let me spell it out letter by letter "
        "instead of guessing from memory.",
        "S, t, r, a, w, b, e, r, r, y. The r's are at positions 3, 8 and 9.",
        "So there is one r in straw and two in berry. That makes three in total.",
    ],
    answer=(
        "There are three r's in strawberry. One is in straw, and two are in berry. "
        "Spelled out: s-t-r-a-w-b-e-r-r-y."
    ),
)

CANBERRA = Scenario(
    user="What is the capital of Australia?",
    steps=[
        "The user asks for the capital of Australia. Many people assume Sydney, since it "
        "is the largest and best known city.",
        "But the capital is Canberra. It was chosen as a compromise between Sydney and "
        "Melbourne, and Parliament has sat there since 1927.",
        "I'll answer directly and add the Sydney note, since that is the usual confusion.",
    ],
    answer=(
        "The capital of Australia is Canberra. It was purpose-built as a compromise between "
        "Sydney and Melbourne. Sydney is the largest city, but not the capital."
    ),
)

PRIMES = Scenario(
    user="Is 221 a prime number?",
    steps=[
        "To check whether 221 is prime I only need to try divisors up to its square root. "
        "The square root of 221 is a bit under 15, so primes up to 13 are enough.",
        "It is odd, so not divisible by 2. Digit sum is 5, so not by 3. It does not end in "
        "0 or 5, so not by 5. 7 times 31 is 217 and 7 times 32 is 224, so not by 7.",
        "11 times 20 is 220, so 221 leaves remainder 1. Then 13: 13 times 17 is 221 exactly.",
        "So 221 = 13 \u00d7 17, which means it is not prime.",
    ],
    answer=(
        "No, 221 is not prime. It factors as 13 times 17. "
        "It is a good example of a number that looks prime at first glance."
    ),
)

RAINBOW = Scenario(
    user="Why is the sky blue but sunsets red?",
    steps=[
        "This is about Rayleigh scattering. Air molecules scatter short wavelengths much "
        "more strongly than long ones, roughly with the inverse fourth power of wavelength.",
        "During the day, blue light is scattered all over the sky, so wherever you look "
        "away from the sun you see scattered blue. Violet scatters even more, but the sun "
        "emits less of it and our eyes are less sensitive to it.",
        "At sunset the light crosses far more atmosphere. Most of the blue is scattered out "
        "of the direct beam before it reaches you, leaving the reds and oranges.",
    ],
    answer=(
        "Air scatters blue light much more than red, so during the day scattered blue light "
        "fills the sky. At sunset sunlight travels through much more air, and most of the blue "
        "is scattered away before it reaches you. What is left is the red and orange light."
    ),
)

GREEN_TEA = Scenario(
    user="How hot should the water be for green tea?",
    steps=[
        "Green tea is delicate. Boiling water scorches the leaves and pulls out bitter "
        "tannins, which is why so many people think they dislike green tea.",
        "Typical guidance is 70 to 80 °C. Japanese teas like gyokuro go even lower, around "
        "60 °C, while sturdier Chinese green teas tolerate about 80 °C.",
        "Without a thermometer, letting boiled water rest for two or three minutes gets it "
        "close enough. Steep time matters too: one to three minutes.",
    ],
    answer=(
        "Use water at about 70 to 80 °C, not boiling. If you have no thermometer, let boiled "
        "water cool for two or three minutes first. Steep for one to three minutes to keep it "
        "from turning bitter."
    ),
)

MAGISTRAL = Scenario(
    user="Give me a quick tip for remembering the planets in order.",
    steps=[
        "The user wants a memory aid for the planet order: Mercury, Venus, Earth, Mars, "
        "Jupiter, Saturn, Uranus, Neptune. Eight planets since Pluto was reclassified.",
        "A mnemonic sentence works best, one word per planet with matching first letters. "
        "The common modern one is: My Very Educated Mother Just Served Us Nachos.",
        "I should keep it short and maybe show how the letters map, so it is easy to check.",
    ],
    answer=(
        'Try the sentence "My Very Educated Mother Just Served Us Nachos." Each first letter '
        "gives a planet in order: Mercury, Venus, Earth, Mars, Jupiter, Saturn, Uranus and "
        "Neptune. Say it a few times and the order sticks."
    ),
)

WEATHER = Scenario(
    user="Should I take an umbrella in Paris today?",
    steps=[
        "The user is in Paris and wants to know whether to bring an umbrella today. I have "
        "no idea what the weather is right now, so I should not guess.",
        "There is a get_weather tool. I'll call it for Paris in celsius and base the advice "
        "on the actual forecast.",
    ],
    answer="",
    tool=ToolCall(
        name="get_weather",
        arguments='{"city": "Paris", "unit": "celsius"}',
        result='{"city": "Paris", "temperature": 14, "unit": "celsius", '
        '"condition": "light rain", "precipitation_probability": 0.8}',
    ),
    followup_steps=[
        "The tool says light rain, 14 degrees, and an 80 percent chance of precipitation. "
        "That is a clear yes for the umbrella.",
        "At 14 degrees a light jacket also makes sense. I'll keep the answer short and practical.",
    ],
    followup_answer=(
        "Yes, take an umbrella. Paris has light rain today with an 80 percent chance of "
        "showers. It is around 14 degrees, so a light jacket is a good idea too."
    ),
)

PLAIN = Scenario(
    user="Say hello and tell me one fun fact.",
    steps=[],
    answer=(
        "Hello! Here is a fun fact: octopuses have three hearts. Two pump blood through the "
        "gills, and one pumps it through the rest of the body."
    ),
)

# -- tokenisation ------------------------------------------------------------------------

_TOKEN = re.compile(r"\n+|[ ]?[A-Za-z']+|[ ]?\d|[ ]?[^\sA-Za-z\d]|[ ]+")


def tokens(text: str) -> list[str]:
    """Cut text into token-like pieces (" word", ",", "\\n\\n", single digits)."""
    pieces = _TOKEN.findall(text)
    assert "".join(pieces) == text, text
    return pieces


def cut(text: str, rng: random.Random) -> list[str]:
    """Tokens, occasionally merged in pairs as servers batch them under load."""
    out: list[str] = []
    for piece in tokens(text):
        if out and rng.random() < 0.15 and not out[-1].endswith("\n"):
            out[-1] += piece
        else:
            out.append(piece)
    return out


# -- SSE writing -------------------------------------------------------------------------


def sse(events: list[Json | str]) -> str:
    """SSE body: dict events as ``data: <json>``, str events as ``: comment`` lines."""
    lines = []
    for event in events:
        if isinstance(event, str):
            lines.append(f": {event}\n\n")
        else:
            lines.append("data: " + json.dumps(event, ensure_ascii=False, separators=(",", ":")))
            lines.append("\n\n")
    lines.append("data: [DONE]\n\n")
    return "".join(lines)


def hexid(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def alnum(rng: random.Random, n: int) -> str:
    chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(rng.choice(chars) for _ in range(n))


def usage(prompt: int, completion: int, **extra: Any) -> Json:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        **extra,
    }


# -- provider shapes ---------------------------------------------------------------------


def deepseek(s: Scenario, rng: random.Random) -> list[Json | str]:
    """api.deepseek.com, model deepseek-reasoner: reasoning_content, UUID ids, usage in
    the last chunk, keep-alive comment while queued."""
    head = {
        "id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "deepseek-reasoner",
        "system_fingerprint": "fp_ffc7281d48_prod0820",
    }

    def chunk(delta: Json, finish: str | None = None, **extra: Any) -> Json:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**head, "choices": [choice], **extra}

    events: list[Json | str] = ["keep-alive"]
    events.append(chunk({"role": "assistant", "content": None, "reasoning_content": ""}))
    r = cut(s.reasoning, rng)
    events += [chunk({"content": None, "reasoning_content": t}) for t in r]
    a = cut(s.answer, rng)
    events += [chunk({"content": t, "reasoning_content": None}) for t in a]
    events.append(
        chunk(
            {"content": "", "reasoning_content": None},
            "stop",
            usage=usage(
                19,
                len(r) + len(a),
                prompt_tokens_details={"cached_tokens": 0},
                completion_tokens_details={"reasoning_tokens": len(r)},
                prompt_cache_hit_tokens=0,
                prompt_cache_miss_tokens=19,
            ),
        )
    )
    return events


class Vllm:
    """vLLM OpenAI server (``vllm serve ... --reasoning-parser qwen3``): ``chatcmpl-`` ids,
    ``logprobs: null``, ``stop_reason`` on the finishing chunk, which also carries the last
    token; usage in a trailing ``choices: []`` chunk (stream_options.include_usage)."""

    def __init__(self, model: str, rng: random.Random, *, both_fields: bool = False) -> None:
        self.rng = rng
        self.both = both_fields
        self.head = {
            "id": "chatcmpl-" + hexid(rng, 16),
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
        }
        self.count = 0

    def chunk(self, delta: Json, finish: str | None = None) -> Json:
        choice: Json = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        if finish is not None:
            choice["stop_reason"] = None
        return {**self.head, "choices": [choice]}

    def first(self) -> Json:
        delta: Json = {"role": "assistant", "content": ""}
        if self.both:
            delta["reasoning_content"] = None
        return self.chunk(delta)

    def reasoning(self, text: str) -> list[Json]:
        out = []
        for t in cut(text, self.rng):
            self.count += 1
            out.append(
                self.chunk(
                    {"reasoning": t, "reasoning_content": t} if self.both else {"reasoning": t}
                )
            )
        return out

    def content(self, text: str, *, finish: str | None = None) -> list[Json]:
        pieces = cut(text, self.rng)
        self.count += len(pieces)
        out = []
        for i, t in enumerate(pieces):
            delta: Json = {"content": t}
            if self.both:
                delta["reasoning_content"] = None
            out.append(self.chunk(delta, finish if i == len(pieces) - 1 else None))
        return out

    def usage(self, prompt: int) -> Json:
        return {
            **self.head,
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "total_tokens": prompt + self.count,
                "completion_tokens": self.count,
            },
        }


def vllm_reasoning(s: Scenario, rng: random.Random) -> list[Json | str]:
    v = Vllm("Qwen/Qwen3-8B", rng)
    return [v.first(), *v.reasoning(s.reasoning), *v.content(s.answer, finish="stop"), v.usage(23)]


def vllm_both_fields(s: Scenario, rng: random.Random) -> list[Json | str]:
    """vLLM 0.11-0.19.0: ``reasoning`` copied into the deprecated ``reasoning_content``
    (so every reasoning delta carries the text twice) and ``reasoning_content: null``
    on the other deltas."""
    v = Vllm("Qwen/Qwen3-14B", rng, both_fields=True)
    return [v.first(), *v.reasoning(s.reasoning), *v.content(s.answer, finish="stop"), v.usage(18)]


def vllm_tool_call(s: Scenario, rng: random.Random) -> list[Json | str]:
    """Qwen3 on vLLM with ``--tool-call-parser hermes``: reasoning, the "\\n\\n" Qwen writes
    before ``<tool_call>`` as content, then the call: id/type/name first, arguments in
    pieces, the last piece on the chunk with finish_reason "tool_calls"."""
    assert s.tool is not None
    v = Vllm("Qwen/Qwen3-8B", rng)
    events: list[Json | str] = [v.first(), *v.reasoning(s.reasoning), *v.content("\n\n")]
    call_id = "chatcmpl-tool-" + hexid(rng, 32)
    events.append(
        v.chunk(
            {
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "index": 0,
                        "function": {"name": s.tool.name},
                    }
                ]
            }
        )
    )
    args = s.tool.arguments
    cuts = [0, 1, 10, 12, 19, 28, 30, len(args) - 2, len(args)]
    pieces = [args[a:b] for a, b in itertools.pairwise(cuts) if args[a:b]]
    assert "".join(pieces) == args
    for i, piece in enumerate(pieces):
        finish = "tool_calls" if i == len(pieces) - 1 else None
        events.append(
            v.chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}, finish)
        )
    v.count += len(pieces) + 4
    events.append(v.usage(212))
    return events


def vllm_tool_followup(s: Scenario, rng: random.Random) -> list[Json | str]:
    v = Vllm("Qwen/Qwen3-8B", rng)
    return [
        v.first(),
        *v.reasoning("\n\n".join(s.followup_steps)),
        *v.content(s.followup_answer, finish="stop"),
        v.usage(305),
    ]


def qwen_2507(s: Scenario, rng: random.Random) -> list[Json | str]:
    """Qwen3-*-Thinking-2507 on vLLM without a reasoning parser: the chat template already
    opened ``<think>``, so content starts inside reasoning and only ``</think>`` appears."""
    v = Vllm("Qwen/Qwen3-30B-A3B-Thinking-2507", rng)
    text = s.reasoning + "\n</think>\n\n" + s.answer
    pieces: list[str] = []
    for part in re.split(r"(</think>)", text):
        pieces += [part] if part == "</think>" else cut(part, rng)
    v.count = len(pieces)
    events: list[Json | str] = [v.first()]
    for i, t in enumerate(pieces):
        events.append(v.chunk({"content": t}, "stop" if i == len(pieces) - 1 else None))
    events.append(v.usage(16))
    return events


class Ollama:
    """Ollama's OpenAI-compatible endpoint: ``chatcmpl-<n>`` ids, ``fp_ollama``, role and
    content in every delta, no logprobs key, usage in a trailing ``choices: []`` chunk."""

    def __init__(self, model: str, rng: random.Random) -> None:
        self.head = {
            "id": f"chatcmpl-{rng.randrange(1000)}",
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "system_fingerprint": "fp_ollama",
        }

    def chunk(self, delta: Json, finish: str | None = None) -> Json:
        return {**self.head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def usage(self, prompt: int, completion: int) -> Json:
        return {**self.head, "choices": [], "usage": usage(prompt, completion)}


def ollama_inline(s: Scenario, rng: random.Random) -> list[Json | str]:
    """Ollama before native thinking support (qwen3:8b): the raw ``<think>`` text in content;
    here the tags arrive cut across chunks, as happens behind re-chunking proxies."""
    o = Ollama("qwen3:8b", rng)
    pieces = [
        "<thi",
        "nk>\n",
        *cut(s.reasoning, rng),
        "\n</th",
        "ink>",
        "\n\n",
        *cut(s.answer, rng),
    ]
    events: list[Json | str] = [o.chunk({"role": "assistant", "content": t}) for t in pieces]
    events.append(o.chunk({"role": "assistant", "content": ""}, "stop"))
    events.append(o.usage(21, len(pieces)))
    return events


def ollama_reasoning(s: Scenario, rng: random.Random) -> list[Json | str]:
    """Ollama with native thinking: ``reasoning`` next to an empty ``content``."""
    o = Ollama("qwen3:8b", rng)
    r = cut(s.reasoning, rng)
    a = cut(s.answer, rng)
    events: list[Json | str] = [
        o.chunk({"role": "assistant", "content": "", "reasoning": t}) for t in r
    ]
    events += [o.chunk({"role": "assistant", "content": t}) for t in a]
    events.append(o.chunk({"role": "assistant", "content": ""}, "stop"))
    events.append(o.usage(14, len(r) + len(a)))
    return events


def openrouter(s: Scenario, rng: random.Random) -> list[Json | str]:
    """OpenRouter (deepseek/deepseek-r1): ``gen-`` ids, ``provider``, role in every delta,
    ``reasoning`` plus ``reasoning_details`` (same text), ``native_finish_reason``,
    processing comments first, usage with cost in a trailing chunk."""
    head = {
        "id": f"gen-{CREATED}-{alnum(rng, 20)}",
        "provider": "DeepInfra",
        "model": "deepseek/deepseek-r1",
        "object": "chat.completion.chunk",
        "created": CREATED,
    }

    def chunk(delta: Json, finish: str | None = None) -> Json:
        choice = {
            "index": 0,
            "delta": delta,
            "finish_reason": finish,
            "native_finish_reason": finish,
            "logprobs": None,
        }
        return {**head, "choices": [choice]}

    events: list[Json | str] = ["OPENROUTER PROCESSING", "OPENROUTER PROCESSING"]
    r = cut(s.reasoning, rng)
    for t in r:
        detail = {"type": "reasoning.text", "text": t, "format": "unknown", "index": 0}
        events.append(
            chunk(
                {"role": "assistant", "content": "", "reasoning": t, "reasoning_details": [detail]}
            )
        )
    a = cut(s.answer, rng)
    events += [
        chunk({"role": "assistant", "content": t, "reasoning": None, "reasoning_details": []})
        for t in a
    ]
    events.append(
        chunk(
            {"role": "assistant", "content": "", "reasoning": None, "reasoning_details": []}, "stop"
        )
    )
    events.append(
        {
            **head,
            "choices": [],
            "usage": usage(
                17,
                len(r) + len(a),
                cost=0.00061425,
                is_byok=False,
                prompt_tokens_details={"cached_tokens": 0},
                cost_details={"upstream_inference_cost": None},
                completion_tokens_details={"reasoning_tokens": len(r)},
            ),
        }
    )
    return events


def mistral_blocks(s: Scenario, rng: random.Random) -> list[Json | str]:
    """Mistral magistral-medium-2509: content as a list of blocks, reasoning in
    ``{"type": "thinking", "thinking": [{"type": "text", "text": ...}]}``; the answer as
    plain string content (the first pieces as ``text`` blocks); usage in the last chunk."""
    head = {
        "id": hexid(rng, 32),
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "magistral-medium-2509",
    }

    def chunk(delta: Json, finish: str | None = None, **extra: Any) -> Json:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}

    events: list[Json | str] = [chunk({"role": "assistant", "content": ""}), chunk({"content": ""})]
    r = cut(s.reasoning, rng)
    events += [
        chunk({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": t}]}]})
        for t in r
    ]
    a = cut(s.answer, rng)
    for i, t in enumerate(a):
        events.append(chunk({"content": [{"type": "text", "text": t}] if i < 2 else t}))
    events.append(
        chunk(
            {"content": ""},
            "stop",
            usage={
                "prompt_tokens": 15,
                "total_tokens": 15 + len(r) + len(a),
                "completion_tokens": len(r) + len(a),
            },
        )
    )
    return events


def openai_plain(s: Scenario, rng: random.Random) -> list[Json | str]:
    """OpenAI gpt-4o-mini, no reasoning: ``refusal: null`` in the first delta,
    ``service_tier``, ``obfuscation`` padding, ``usage: null`` until the usage chunk."""
    head = {
        "id": "chatcmpl-" + alnum(rng, 29),
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "gpt-4o-mini-2024-07-18",
        "service_tier": "default",
        "system_fingerprint": "fp_560af6e559",
    }

    def chunk(delta: Json, finish: str | None = None) -> Json:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {
            **head,
            "choices": [choice],
            "usage": None,
            "obfuscation": alnum(rng, rng.randrange(1, 12)),
        }

    a = cut(s.answer, rng)
    events: list[Json | str] = [chunk({"role": "assistant", "content": "", "refusal": None})]
    events += [chunk({"content": t}) for t in a]
    events.append(chunk({}, "stop"))
    events.append(
        {
            **head,
            "choices": [],
            "usage": usage(
                14,
                len(a),
                prompt_tokens_details={"cached_tokens": 0, "audio_tokens": 0},
                completion_tokens_details={
                    "reasoning_tokens": 0,
                    "audio_tokens": 0,
                    "accepted_prediction_tokens": 0,
                    "rejected_prediction_tokens": 0,
                },
            ),
            "obfuscation": alnum(rng, 6),
        }
    )
    return events


# -- the table ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Stream:
    name: str
    provider: str
    scenario: Scenario
    build: Callable[[Scenario, random.Random], list[Json | str]]
    reasoning_suffix: str = ""  # what the extractor keeps after the last step (inline tags)
    open_at_start: bool = False
    followup: bool = False  # the stream after the tool result
    followup_name: str | None = None


STREAMS = [
    Stream("deepseek_reasoning_content", "DeepSeek API, deepseek-reasoner", DECIMALS, deepseek),
    Stream("vllm_reasoning", "vLLM >= 0.19.1 --reasoning-parser qwen3", EGGS, vllm_reasoning),
    Stream(
        "vllm_reasoning_both_fields",
        "vLLM 0.11-0.19.0 (reasoning and reasoning_content)",
        PRIMES,
        vllm_both_fields,
    ),
    Stream("openrouter_reasoning", "OpenRouter, deepseek/deepseek-r1", STRAWBERRY, openrouter),
    Stream(
        "ollama_qwen3_think_inline",
        "Ollama /v1 (no thinking support), qwen3:8b",
        CANBERRA,
        ollama_inline,
        reasoning_suffix="\n",
    ),
    Stream(
        "ollama_qwen3_reasoning", "Ollama /v1 with thinking, qwen3:8b", RAINBOW, ollama_reasoning
    ),
    Stream(
        "qwen3_thinking_2507_close_only",
        "vLLM without reasoning parser, Qwen3-30B-A3B-Thinking-2507",
        GREEN_TEA,
        qwen_2507,
        reasoning_suffix="\n",
        open_at_start=True,
    ),
    Stream(
        "content_blocks_thinking", "Mistral API, magistral-medium-2509", MAGISTRAL, mistral_blocks
    ),
    Stream(
        "vllm_tool_call",
        "vLLM --reasoning-parser qwen3 --tool-call-parser hermes",
        WEATHER,
        vllm_tool_call,
        followup_name="vllm_tool_followup",
    ),
    Stream(
        "vllm_tool_followup",
        "vLLM, after the tool result",
        WEATHER,
        vllm_tool_followup,
        followup=True,
    ),
    Stream("plain_no_reasoning", "OpenAI API, gpt-4o-mini", PLAIN, openai_plain),
]


def entries() -> Iterator[tuple[str, str, Json]]:
    for i, st in enumerate(STREAMS):
        rng = random.Random(1000 + i)
        s = st.scenario
        steps = s.followup_steps if st.followup else s.steps
        answer = s.followup_answer if st.followup else s.answer
        reasoning = "\n\n".join(steps) + (st.reasoning_suffix if steps else "")
        tool_calls = []
        events = st.build(s, rng)
        if s.tool is not None and not st.followup:
            call_id = next(
                tc["id"]
                for e in events
                if isinstance(e, dict)
                for c in e["choices"]
                for tc in c["delta"].get("tool_calls") or []
                if "id" in tc
            )
            tool_calls.append({"id": call_id, "name": s.tool.name, "arguments": s.tool.arguments})
        finish = next(
            c["finish_reason"]
            for e in reversed(events)
            if isinstance(e, dict)
            for c in e["choices"]
            if c["finish_reason"]
        )
        entry: Json = {
            "file": f"{st.name}.sse",
            "provider": st.provider,
            "model": next(e["model"] for e in events if isinstance(e, dict)),
            "open_at_start": st.open_at_start,
            "user": s.user,
            "reasoning": reasoning,
            "answer": answer,
            "steps": steps,
            "tool_calls": tool_calls,
            "finish_reason": finish,
        }
        if st.followup_name:
            entry["followup"] = st.followup_name
        if s.tool is not None:
            entry["tool_result"] = s.tool.result
        yield st.name, sse(events), entry


def main() -> None:
    manifest: Json = {}
    for name, body, entry in entries():
        (HERE / entry["file"]).write_text(body, encoding="utf-8")
        manifest[name] = entry
    (HERE / "manifest.json").write_text(
        json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    print(f"wrote {len(manifest)} streams to {HERE}")


if __name__ == "__main__":
    main()
