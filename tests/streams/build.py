"""Regenerate the recorded streams (``*.sse``) and ``manifest.json``.

Each stream reproduces one provider's wire shape for a streamed completion (field names
and order, id formats, null fields, role in the first delta, usage chunk, finish reasons,
SSE comments), as documented by the providers and seen in public bug reports; the texts
are ours. Chat-completions streams are ``data: <json>`` events ending in ``data: [DONE]``;
Responses API streams are ``event: <type>`` + ``data: <json>`` pairs without ``[DONE]``.
Streams are deterministic (a stream's random seed is its position in :data:`STREAMS`, so
new streams are appended): run ``.venv/bin/python -m tests.streams.build`` after editing a
scenario and commit the output.

The manifest is the expectation table for tests. For every stream:

* ``reasoning``: the exact concatenation of the model's reasoning a correct extractor
  yields (inline markers: the text between them, plus ``reasoning_suffix``); provider
  summaries are not reasoning (``""`` for summary-only streams);
* ``summaries``: the provider-written summary texts, one per paragraph (OpenRouter
  ``reasoning.summary`` details, Responses ``reasoning_summary_text``), joined with a
  blank line by a correct reader; ``[]`` if none;
* ``answer``, ``steps`` (paragraphs of the reasoning or of the summaries, written here by
  hand, not computed by the segmenter), ``tool_calls`` (``{"id", "name", "arguments"}``;
  Responses calls add the ``item_id``, and ``id`` is the ``call_id``), ``finish_reason``
  (Responses: ``tool_calls`` or ``stop``);
* ``api``: ``chat`` or ``responses`` (the endpoint that serves it);
* ``profile``: the ``LLM_PROVIDER`` profile that reads and answers it correctly;
* ``rules``: the provider request rules ``alicia.harness.recorded_llm`` enforces on requests this
  stream answers (``RULES`` there);
* ``passback`` (tool-call streams whose continuation has rules): what a correct client
  sends back, e.g. ``{"reasoning_content": ...}`` (on the assistant message),
  ``{"reasoning_details": [...]}`` (same), ``{"thought_signature": ...}`` (on each tool
  call, under ``extra_content.google``), ``{"reasoning_item": {...}}`` (an input item
  before the ``function_call`` item).
"""

from __future__ import annotations

import base64
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

YEN = Scenario(
    user="How many yen would I get for 250 euros at 162.4 yen per euro?",
    steps=[
        "The user wants to convert 250 euros into Japanese yen at 162.4 yen per euro, so the "
        "answer is 250 times 162.4.",
        "There is a calculator tool. I'll use it for the multiplication instead of doing it in "
        "my head, so the number is exact.",
    ],
    answer="",
    tool=ToolCall(
        name="calculator",
        arguments='{"expression": "250 * 162.4"}',
        result='{"expression": "250 * 162.4", "value": 40600}',
    ),
    followup_steps=[
        "The calculator gives 40600 for 250 times 162.4. That checks out: 250 times 160 is "
        "40,000 and 250 times 2.4 is 600.",
        "Banks and exchange counters add a margin, so the user will likely get a bit less. I'll "
        "mention that briefly.",
    ],
    followup_answer=(
        "At 162.4 yen per euro, 250 euros is 40,600 yen. Expect a little less in practice, "
        "because banks and exchange counters add their own margin."
    ),
)

ONIONS = Scenario(
    user="Why do onions make you cry?",
    steps=[
        "Cutting an onion breaks its cells, and that mixes enzymes with sulfur compounds that "
        "were kept apart. The reaction releases a gas called syn-propanethial-S-oxide.",
        "That gas drifts up to the eyes and reacts with the moisture there. The nerves in the "
        "cornea sense the irritation, and the tear glands respond by flushing it away.",
        "Useful tips: a sharp knife crushes fewer cells, and chilling the onion slows the "
        "reaction. I'll keep the chemical name out of the answer.",
    ],
    answer=(
        "Cutting an onion breaks its cells and releases a sulfur gas that irritates your eyes. "
        "Your tear glands react by washing it away. A sharp knife and a chilled onion make it "
        "much milder."
    ),
)

AFFECT = Scenario(
    user="What's an easy way to remember affect versus effect?",
    steps=[
        "Affect is usually a verb: to influence something. Effect is usually a noun: the result "
        "of something.",
        "A common memory trick is RAVEN: Remember, Affect is a Verb, Effect is a Noun. That is "
        "short and easy to say.",
        "There are rare exceptions, like effect as a verb meaning to bring about, but mentioning "
        "them would only blur the tip.",
    ],
    answer=(
        "Use the word RAVEN: Remember, Affect is a Verb, Effect is a Noun. The weather affects "
        "your mood, and the effect can last all day."
    ),
)

BAKING = Scenario(
    user="Can I use baking soda instead of baking powder?",
    steps=[
        "Baking powder is baking soda plus a dry acid, so it rises on its own. Baking soda alone "
        "needs an acid in the recipe, like buttermilk, yogurt or lemon juice.",
        "Baking soda is also about three times stronger. So a teaspoon of baking powder "
        "corresponds to roughly a third of a teaspoon of soda, plus some acid.",
        "Without an acid the result tastes soapy and bitter, so that warning belongs in the "
        "answer.",
    ],
    answer=(
        "Yes, but only together with an acid. Use about a third as much baking soda as the "
        "baking powder called for, and add something acidic like lemon juice, yogurt or "
        "buttermilk. Without the acid, the bake will taste soapy."
    ),
)

FEATHERS = Scenario(
    user="Which is heavier, a kilogram of feathers or a kilogram of steel?",
    steps=[
        "This is a trick question. A kilogram is a kilogram, whatever the material, so both "
        "weigh the same.",
        "The intuition that steel is heavier comes from density: steel packs much more mass "
        "into the same volume. A kilogram of feathers just takes up far more space.",
    ],
    answer=(
        "They weigh exactly the same: one kilogram each. Steel only feels heavier because it is "
        "much denser, so the same mass fits into a far smaller volume."
    ),
)

PERCENT = Scenario(
    user="What is 15 percent of 80?",
    steps=[
        "Fifteen percent of 80. Ten percent of 80 is 8, and five percent is half of that, 4.",
        "So fifteen percent is 8 plus 4, which is 12. Quick check: 0.15 times 80 is also 12.",
    ],
    answer=(
        "15 percent of 80 is 12. Ten percent is 8 and five percent is 4, so together they make 12."
    ),
)

PURR = Scenario(
    user="Why do cats purr?",
    steps=[
        "Cats purr by rapidly twitching the muscles of the larynx, which makes the vocal folds "
        "vibrate as the cat breathes in and out.",
        "Purring usually signals contentment, but cats also purr when they are stressed, injured "
        "or giving birth. So it is better described as a self-soothing signal.",
        "Some studies suggest the low frequencies may even help heal bones and tissue, though "
        "that is still debated. I'll mention it as a maybe.",
    ],
    answer=(
        "Cats purr by vibrating the muscles in their voice box as they breathe. It often means "
        "they are content, but they also purr to calm themselves when stressed or hurt. Some "
        "researchers think the vibrations may even help healing."
    ),
)

MINUTES = Scenario(
    user="How many minutes are in a week?",
    steps=[
        "A week has 7 days, each day has 24 hours, and each hour has 60 minutes.",
        "24 times 60 is 1440 minutes per day. Then 1440 times 7: 1400 times 7 is 9800, and 40 "
        "times 7 is 280, so 10,080.",
        "Double check another way: 7 times 24 is 168 hours, and 168 times 60 is 10,080. Both "
        "routes agree.",
    ],
    answer=(
        "There are 10,080 minutes in a week. That is 7 days of 24 hours, with 60 minutes in "
        "each hour."
    ),
)

CLIMATE = Scenario(
    user="What's the difference between weather and climate?",
    steps=[
        "Weather is the state of the atmosphere at a given place and time: today's rain, wind "
        "or heat. It changes from hour to hour.",
        "Climate is the long-term pattern of weather in a region, usually averaged over thirty "
        "years or more.",
        "A handy line: climate is what you expect, weather is what you get. That makes the "
        "difference easy to remember.",
    ],
    answer=(
        "Weather is what the atmosphere is doing right now, like today's rain or sunshine. "
        "Climate is the average pattern over decades in a place. In short, climate is what you "
        "expect, and weather is what you get."
    ),
)

TRIP = Scenario(
    user=(
        "My train takes 2 hours 47 minutes, then I wait 35 minutes and take a bus for 1 hour "
        "18 minutes. How long is the whole trip?"
    ),
    steps=[
        "The trip has three legs: a train of 2 hours 47 minutes, a 35 minute wait, and a bus "
        "ride of 1 hour 18 minutes. Mixing hours and minutes by hand is easy to get wrong, so "
        "I'll work in minutes.",
        "I'll call the calculator with each leg converted to minutes and summed, then turn the "
        "total back into hours and minutes.",
    ],
    answer="",
    tool=ToolCall(
        name="calculator",
        arguments='{"expression": "(2 * 60 + 47) + 35 + (1 * 60 + 18)"}',
        result='{"expression": "(2 * 60 + 47) + 35 + (1 * 60 + 18)", "value": 280}',
    ),
    followup_steps=[
        "The calculator says 280 minutes in total. Four hours are 240 minutes, so that is 4 "
        "hours and 40 minutes.",
        "I'll give the total in hours and minutes and show the three legs, so the user sees the "
        "wait is included.",
    ],
    followup_answer=(
        "The whole trip takes 4 hours and 40 minutes: 2 hours 47 minutes on the train, 35 "
        "minutes of waiting, and 1 hour 18 minutes on the bus."
    ),
)

SLEEP = Scenario(
    user="How much sleep does an adult need?",
    steps=[
        "I'm recalling the common guidance for adults, which is about seven to nine hours of "
        "sleep per night, with some individual variation.",
        "I'm also considering that quality matters as much as quantity, so I'll add a brief "
        "note about keeping a regular schedule.",
    ],
    answer=(
        "Most adults need about seven to nine hours of sleep a night. Some people do well with "
        "a little more or less, but regularly getting under seven hours tends to affect mood "
        "and focus. A consistent bedtime helps as much as the total hours."
    ),
)

TIP = Scenario(
    user="What is an 18 percent tip on a restaurant bill of 67.50 dollars?",
    steps=[],
    answer="",
    tool=ToolCall(
        name="calculator",
        arguments='{"expression": "67.50 * 0.18"}',
        result='{"expression": "67.50 * 0.18", "value": 12.15}',
    ),
    followup_answer=(
        "An 18 percent tip on 67.50 dollars is 12.15 dollars, which brings the total to 79.65 "
        "dollars."
    ),
)

SPLIT = Scenario(
    user=(
        "Four of us rented a holiday house for 1,840 euros and spent 326 on groceries and 95 "
        "on fuel. How much does each of us owe?"
    ),
    steps=[
        "I'm adding up the shared costs: 1,840 euros for the house, 326 for groceries and 95 "
        "for fuel, and splitting the total between four people.",
        "I'll call the calculator with the sum divided by 4, so the share is exact to the cent.",
    ],
    answer="",
    tool=ToolCall(
        name="calculator",
        arguments='{"expression": "(1840 + 326 + 95) / 4"}',
        result='{"expression": "(1840 + 326 + 95) / 4", "value": 565.25}',
    ),
    followup_steps=[
        "I'm reading the calculator's result: 565.25 euros per person. The costs add up to 2,261 "
        "euros, and four times 565.25 gives that back.",
        "I'll state each person's share and the total it comes from, and keep the answer short.",
    ],
    followup_answer=(
        "Each of you owes 565.25 euros. The house, groceries and fuel come to 2,261 euros in "
        "total, split four ways."
    ),
)

OCEAN = Scenario(
    user="Why is the ocean salty?",
    steps=[
        "Rain is slightly acidic, so it slowly dissolves minerals from rocks on land. Rivers "
        "carry those dissolved salts, mostly sodium and chloride ions, into the sea.",
        "Water leaves the ocean by evaporation, but the salt stays behind. Over millions of "
        "years that concentrates the salt to about 3.5 percent.",
        "Hydrothermal vents on the sea floor add minerals too. I'll mention rivers first, since "
        "that is the main answer.",
    ],
    answer=(
        "Rain slowly dissolves minerals from rocks, and rivers carry those salts into the sea. "
        "When seawater evaporates, the water leaves but the salt stays behind. Over millions of "
        "years that built up to the saltiness we have today."
    ),
)

PROGRESS = Scenario(
    user="How long should I boil an egg?",
    steps=[
        "Checking the boiling times for eggs. A yellow submarine has nothing to do with "
        "cooking, so I will set that aside. The yolk is what changes most with time. A runny "
        "yolk needs less time in the water than a firm one.",
        "Comparing soft and hard yolks. A soft yolk is still runny in the middle after about "
        "six minutes in boiling water. A hard yolk needs about ten minutes, until it is firm "
        "all the way through.",
        "Thinking about altitude and egg size. A large egg needs a little more time than a "
        "small one. I could heat the water in a silver kettle first, since that makes the start "
        "faster. High in the mountains water boils at a lower heat, so eggs take a bit longer "
        "there.",
        "Putting the answer together. I will give one time for a soft yolk and one time for a "
        "hard yolk. Then I will add a short tip about cooling the egg in cold water, so that it "
        "is easy to peel.",
    ],
    answer=(
        "For a soft yolk, boil the egg for about six minutes. For a hard yolk, boil it for "
        "about ten minutes. Then cool the egg in cold water before you peel it."
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


# -- 2026 shapes -------------------------------------------------------------------------


def b64(rng: random.Random, n: int, *, first: bytes = b"") -> str:
    """Base64 of ``n`` random bytes (signatures: opaque to every client)."""
    return base64.b64encode(first + rng.randbytes(n)).decode()


def fernet(rng: random.Random, n: int) -> str:
    """An OpenAI ``encrypted_content`` look-alike: a Fernet token (``gAAAAAB…``)."""
    return base64.urlsafe_b64encode(
        b"\x80" + CREATED.to_bytes(8, "big") + rng.randbytes(n)
    ).decode()


def pieces_of(*parts: str | list[str]) -> list[str]:
    """Flatten marker pieces (str) and token lists (list) into one piece list."""
    out: list[str] = []
    for part in parts:
        out += [part] if isinstance(part, str) else part
    return out


def deltas(events: list[Json | str]) -> Iterator[Json]:
    """The choice deltas of chat-completion chunk events."""
    for event in events:
        if isinstance(event, dict):
            for choice in event.get("choices") or []:
                yield choice["delta"]


class DeepSeekV4:
    """api.deepseek.com, deepseek-v4-flash in thinking mode: ``reasoning_content`` like
    deepseek-reasoner, plus tool calls (``call_00_`` ids, name first with empty arguments,
    then argument pieces) that require the reasoning back in the next request."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.head = {
            "id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": "deepseek-v4-flash",
            "system_fingerprint": f"fp_{hexid(rng, 10)}_prod0424",
        }

    def chunk(self, delta: Json, finish: str | None = None, **extra: Any) -> Json:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**self.head, "choices": [choice], **extra}

    def usage(self, prompt: int, completion: int, reasoning: int) -> Json:
        return usage(
            prompt,
            completion,
            prompt_tokens_details={"cached_tokens": 128},
            completion_tokens_details={"reasoning_tokens": reasoning},
            prompt_cache_hit_tokens=128,
            prompt_cache_miss_tokens=prompt - 128,
        )

    def reasoning(self, text: str) -> list[Json]:
        return [self.chunk({"content": None, "reasoning_content": t}) for t in cut(text, self.rng)]


def deepseek_v4_tool_call(s: Scenario, rng: random.Random) -> list[Json | str]:
    assert s.tool is not None
    d = DeepSeekV4(rng)
    events: list[Json | str] = ["keep-alive"]
    events.append(d.chunk({"role": "assistant", "content": None, "reasoning_content": ""}))
    r = d.reasoning(s.reasoning)
    events += r
    call = {
        "index": 0,
        "id": "call_00_" + alnum(rng, 24),
        "type": "function",
        "function": {"name": s.tool.name, "arguments": ""},
    }
    events.append(d.chunk({"content": None, "reasoning_content": None, "tool_calls": [call]}))
    args = cut(s.tool.arguments, rng)
    for piece in args:
        call = {"index": 0, "function": {"arguments": piece}}
        events.append(d.chunk({"content": None, "reasoning_content": None, "tool_calls": [call]}))
    completion = len(r) + len(args) + 4
    events.append(
        d.chunk(
            {"content": "", "reasoning_content": None},
            "tool_calls",
            usage=d.usage(402, completion, len(r)),
        )
    )
    return events


def deepseek_v4_followup(s: Scenario, rng: random.Random) -> list[Json | str]:
    d = DeepSeekV4(rng)
    events: list[Json | str] = [
        d.chunk({"role": "assistant", "content": None, "reasoning_content": ""})
    ]
    r = d.reasoning("\n\n".join(s.followup_steps))
    events += r
    a = cut(s.followup_answer, rng)
    events += [d.chunk({"content": t, "reasoning_content": None}) for t in a]
    events.append(
        d.chunk(
            {"content": "", "reasoning_content": None},
            "stop",
            usage=d.usage(497, len(r) + len(a), len(r)),
        )
    )
    return events


def deepseek_v4_passback(events: list[Json | str]) -> Json:
    """What the next request must carry on the assistant message: the whole reasoning."""
    text = "".join(d["reasoning_content"] or "" for d in deltas(events) if "reasoning_content" in d)
    return {"reasoning_content": text}


def vllm_boundary(s: Scenario, rng: random.Random) -> list[Json | str]:
    """vLLM (``delta.reasoning`` only) where the parser emits the token that ends reasoning
    and the first answer token in one delta: ``{"reasoning": last, "content": first}``."""
    v = Vllm("Qwen/Qwen3-32B", rng)
    r = v.reasoning(s.reasoning)
    a = v.content(s.answer, finish="stop")
    r[-1]["choices"][0]["delta"]["content"] = a[0]["choices"][0]["delta"]["content"]
    v.count -= 1
    return [v.first(), *r, *a[1:], v.usage(25)]


def llamacpp_legacy(s: Scenario, rng: random.Random) -> list[Json | str]:
    """llama.cpp ``llama-server --jinja --reasoning-format deepseek-legacy``: every
    reasoning piece in ``reasoning_content`` and again in ``content``, where it sits
    between ``<think>`` and ``</think>``; ``chatcmpl-`` + 32 alphanumerics, build
    fingerprint, keys in llama.cpp's order, ``usage`` and ``timings`` on the last chunk."""
    cid = "chatcmpl-" + alnum(rng, 32)
    model = "DeepSeek-R1-0528-Qwen3-8B-Q4_K_M.gguf"

    def chunk(delta: Json, finish: str | None = None, **extra: Any) -> Json:
        return {
            "choices": [{"finish_reason": finish, "index": 0, "delta": delta}],
            "created": CREATED,
            "id": cid,
            "model": model,
            "system_fingerprint": "b7410-4b3d2f1ea",
            "object": "chat.completion.chunk",
            **extra,
        }

    events: list[Json | str] = [chunk({"role": "assistant", "content": None})]
    events += [chunk({"content": t}) for t in ("<thi", "nk>\n")]
    r = cut(s.reasoning, rng)
    events += [chunk({"reasoning_content": t, "content": t}) for t in r]
    events += [chunk({"content": t}) for t in ("\n</th", "ink>", "\n\n")]
    a = cut(s.answer, rng)
    events += [chunk({"content": t}) for t in a]
    predicted = len(r) + len(a) + 5
    events.append(
        chunk(
            {},
            "stop",
            usage=usage(29, predicted),
            timings={
                "cache_n": 0,
                "prompt_n": 29,
                "prompt_ms": 41.2,
                "prompt_per_token_ms": 1.4206896551724137,
                "prompt_per_second": 703.8834951456311,
                "predicted_n": predicted,
                "predicted_ms": round(predicted * 17.25, 3),
                "predicted_per_token_ms": 17.25,
                "predicted_per_second": 57.971014492753625,
            },
        )
    )
    return events


def anthropic_tags(s: Scenario, rng: random.Random) -> list[Json | str]:
    """Anthropic's OpenAI-compatible endpoint, claude-sonnet-4-5 without extended thinking:
    the model writes its reasoning in ``<thinking>`` tags in the content (tags cut across
    chunks here); ``msg_01`` ids, role in every delta, usage on the finishing chunk."""
    head = {
        "id": "msg_01" + alnum(rng, 22),
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "claude-sonnet-4-5-20250929",
    }

    def chunk(delta: Json, finish: str | None = None, **extra: Any) -> Json:
        return {**head, "choices": [{"delta": delta, "finish_reason": finish, "index": 0}], **extra}

    pieces = pieces_of(
        "<thin", "king>\n", cut(s.reasoning, rng), "\n</thi", "nking>", "\n\n", cut(s.answer, rng)
    )
    events: list[Json | str] = [chunk({"content": t, "role": "assistant"}) for t in pieces]
    events.append(chunk({"role": "assistant"}, "stop", usage=usage(31, len(pieces))))
    return events


def vllm_content(
    model: str, pieces: list[str], prompt: int, rng: random.Random
) -> list[Json | str]:
    """A vLLM stream without a reasoning parser: every piece is content."""
    v = Vllm(model, rng)
    v.count = len(pieces)
    events: list[Json | str] = [v.first()]
    for i, t in enumerate(pieces):
        events.append(v.chunk({"content": t}, "stop" if i == len(pieces) - 1 else None))
    events.append(v.usage(prompt))
    return events


def kimi_markers(s: Scenario, rng: random.Random) -> list[Json | str]:
    """Kimi-VL-A3B-Thinking on vLLM without a reasoning parser: ``◁think▷…◁/think▷``."""
    pieces = pieces_of("◁thi", "nk▷", cut(s.reasoning, rng), "◁/th", "ink▷", cut(s.answer, rng))
    return vllm_content("moonshotai/Kimi-VL-A3B-Thinking-2506", pieces, 27, rng)


def harmony_inline(s: Scenario, rng: random.Random) -> list[Json | str]:
    """gpt-oss-20b served without a harmony parser (special tokens kept): the analysis
    channel, then the final channel, every special token cut across chunks."""
    pieces = pieces_of(
        "<|chan",
        "nel|>analysis<|mes",
        "sage|>",
        cut(s.reasoning, rng),
        "<|end",
        "|><|start|>assis",
        "tant<|channel|>final<|",
        "message|>",
        cut(s.answer, rng),
        "<|ret",
        "urn|>",
    )
    return vllm_content("openai/gpt-oss-20b", pieces, 68, rng)


def gemma_channel(s: Scenario, rng: random.Random) -> list[Json | str]:
    """Gemma 4 thinking format without a reasoning parser: ``<|channel>thought\\n…<channel|>``."""
    pieces = pieces_of(
        "<|chan", "nel>thou", "ght\n", cut(s.reasoning, rng), "<chan", "nel|>", cut(s.answer, rng)
    )
    return vllm_content("google/gemma-4-31B-it", pieces, 19, rng)


def r1_distill_no_open(s: Scenario, rng: random.Random) -> list[Json | str]:
    """DeepSeek-R1-Distill-Qwen on vLLM without a reasoning parser: the template already
    wrote ``<think>\\n``, so the content starts inside reasoning; only the close appears."""
    pieces = pieces_of(cut(s.reasoning, rng), "\n", "</th", "ink>\n\n", cut(s.answer, rng))
    return vllm_content("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", pieces, 15, rng)


def thinking_field(s: Scenario, rng: random.Random) -> list[Json | str]:
    """Ollama's native ``thinking`` field relayed as is by an OpenAI-compatible proxy:
    ``delta.thinking`` next to an empty ``content``, then the answer."""
    o = Ollama("qwen3:14b", rng)
    r = cut(s.reasoning, rng)
    a = cut(s.answer, rng)
    events: list[Json | str] = [
        o.chunk({"role": "assistant", "content": "", "thinking": t}) for t in r
    ]
    events += [o.chunk({"role": "assistant", "content": t}) for t in a]
    events.append(o.chunk({"role": "assistant", "content": ""}, "stop"))
    events.append(o.usage(20, len(r) + len(a)))
    return events


class OpenRouter:
    """OpenRouter's chunk shape: ``gen-`` ids, ``provider``, role in every delta,
    ``native_finish_reason``, processing comments, usage with cost in a trailing chunk."""

    def __init__(self, provider: str, model: str, rng: random.Random) -> None:
        self.rng = rng
        self.head = {
            "id": f"gen-{CREATED}-{alnum(rng, 20)}",
            "provider": provider,
            "model": model,
            "object": "chat.completion.chunk",
            "created": CREATED,
        }

    def chunk(self, delta: Json, finish: str | None = None, native: str | None = None) -> Json:
        choice = {
            "index": 0,
            "delta": {"role": "assistant", "content": "", **delta},
            "finish_reason": finish,
            "native_finish_reason": native,
            "logprobs": None,
        }
        return {**self.head, "choices": [choice]}

    def usage(self, prompt: int, completion: int, reasoning: int, cost: float) -> Json:
        return {
            **self.head,
            "choices": [],
            "usage": usage(
                prompt,
                completion,
                cost=cost,
                is_byok=False,
                prompt_tokens_details={"cached_tokens": 0},
                cost_details={"upstream_inference_cost": None},
                completion_tokens_details={"reasoning_tokens": reasoning},
            ),
        }

    def claude_reasoning(self, text: str) -> list[Json | str]:
        """``reasoning`` plus ``reasoning.text`` details, then the signature alone."""
        out: list[Json | str] = []
        for t in cut(text, self.rng):
            detail = {
                "type": "reasoning.text",
                "text": t,
                "format": "anthropic-claude-v1",
                "index": 0,
            }
            out.append(self.chunk({"reasoning": t, "reasoning_details": [detail]}))
        signature = {
            "type": "reasoning.text",
            "signature": b64(self.rng, 330, first=b"\x12"),
            "format": "anthropic-claude-v1",
            "index": 0,
        }
        out.append(self.chunk({"reasoning": None, "reasoning_details": [signature]}))
        return out

    def answer(self, text: str) -> list[Json | str]:
        return [
            self.chunk({"content": t, "reasoning": None, "reasoning_details": []})
            for t in cut(text, self.rng)
        ]


def openrouter_claude_tool_call(s: Scenario, rng: random.Random) -> list[Json | str]:
    """OpenRouter, anthropic/claude-sonnet-4.5 with reasoning: ``reasoning.text`` details in
    format ``anthropic-claude-v1``, the signature in a last detail without text, then a
    tool call (``toolu_`` id). The next request must send the signed details back."""
    assert s.tool is not None
    o = OpenRouter("Anthropic", "anthropic/claude-sonnet-4.5", rng)
    events: list[Json | str] = ["OPENROUTER PROCESSING"]
    r = o.claude_reasoning(s.reasoning)
    events += r
    call = {
        "index": 0,
        "id": "toolu_01" + alnum(rng, 22),
        "type": "function",
        "function": {"name": s.tool.name, "arguments": ""},
    }
    events.append(o.chunk({"tool_calls": [call]}))
    args = cut(s.tool.arguments, rng)
    for piece in args:
        part = {"index": 0, "type": "function", "function": {"arguments": piece}}
        events.append(o.chunk({"tool_calls": [part]}))
    events.append(o.chunk({}, "tool_calls", "tool_use"))
    events.append(o.usage(684, len(r) + len(args) + 12, len(r), 0.0048285))
    return events


def openrouter_claude_followup(s: Scenario, rng: random.Random) -> list[Json | str]:
    o = OpenRouter("Anthropic", "anthropic/claude-sonnet-4.5", rng)
    events: list[Json | str] = ["OPENROUTER PROCESSING"]
    r = o.claude_reasoning("\n\n".join(s.followup_steps))
    a = o.answer(s.followup_answer)
    events += [*r, *a, o.chunk({}, "stop", "end_turn")]
    events.append(o.usage(902, len(r) + len(a), len(r), 0.0052815))
    return events


def openrouter_details_passback(events: list[Json | str]) -> Json:
    """The signed ``reasoning.text`` detail, pieces joined: what goes back on the message."""
    text, signature = "", None
    for delta in deltas(events):
        for detail in delta.get("reasoning_details") or []:
            if detail["type"] == "reasoning.text":
                text += detail.get("text") or ""
                signature = detail.get("signature") or signature
    merged = {
        "type": "reasoning.text",
        "text": text,
        "signature": signature,
        "format": "anthropic-claude-v1",
        "index": 0,
    }
    return {"reasoning_details": [merged]}


def openrouter_gpt5_summary(s: Scenario, rng: random.Random) -> list[Json | str]:
    """OpenRouter, openai/gpt-5-mini: the provider's reasoning *summary* in ``reasoning``
    and ``reasoning.summary`` details, then one ``reasoning.encrypted`` item (no text,
    ``reasoning: null``), then the answer."""
    o = OpenRouter("OpenAI", "openai/gpt-5-mini", rng)
    events: list[Json | str] = ["OPENROUTER PROCESSING"]
    r = cut(s.reasoning, rng)
    for t in r:
        detail = {
            "type": "reasoning.summary",
            "summary": t,
            "format": "openai-responses-v1",
            "index": 0,
        }
        events.append(o.chunk({"reasoning": t, "reasoning_details": [detail]}))
    encrypted = {
        "type": "reasoning.encrypted",
        "data": fernet(rng, 560),
        "id": "rs_" + hexid(rng, 50),
        "format": "openai-responses-v1",
        "index": 0,
    }
    events.append(o.chunk({"reasoning": None, "reasoning_details": [encrypted]}))
    a = o.answer(s.answer)
    events += [*a, o.chunk({}, "stop", "completed")]
    events.append(o.usage(18, 192 + len(a), 192, 0.0004285))
    return events


class Gemini:
    """Gemini's OpenAI-compatible endpoint: short base64url ids, role in every delta, no
    ``logprobs``, usage on the last chunk; a tool call arrives whole in one delta, without
    ``index``, carrying ``extra_content.google.thought_signature``; a tool-call turn
    finishes with ``stop`` (not ``tool_calls``) when streamed."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.head = {
            "object": "chat.completion.chunk",
            "created": CREATED,
            "id": base64.urlsafe_b64encode(rng.randbytes(17)).decode().rstrip("="),
            "model": "gemini-2.5-flash",
        }

    def chunk(self, delta: Json, finish: str | None = None, **extra: Any) -> Json:
        choice = {"delta": {"role": "assistant", **delta}, "finish_reason": finish, "index": 0}
        return {**self.head, "choices": [choice], **extra}


def gemini_tool_call(s: Scenario, rng: random.Random) -> list[Json | str]:
    assert s.tool is not None
    g = Gemini(rng)
    call = {
        "extra_content": {"google": {"thought_signature": b64(rng, 180, first=b"\n$")}},
        "function": {"arguments": s.tool.arguments, "name": s.tool.name},
        "id": alnum(rng, 8).lower(),
        "type": "function",
    }
    return [g.chunk({"tool_calls": [call]}, "stop", usage=usage(71, 19))]


def gemini_tool_followup(s: Scenario, rng: random.Random) -> list[Json | str]:
    g = Gemini(rng)
    a = cut(s.followup_answer, rng)
    events: list[Json | str] = [g.chunk({"content": t}) for t in a[:-1]]
    events.append(g.chunk({"content": a[-1]}, "stop", usage=usage(142, len(a))))
    return events


def gemini_passback(events: list[Json | str]) -> Json:
    """The tool call's thought signature: it goes back on the same tool call, under
    ``extra_content.google.thought_signature``."""
    signature = next(
        tc["extra_content"]["google"]["thought_signature"]
        for d in deltas(events)
        for tc in d.get("tool_calls") or []
    )
    return {"thought_signature": signature}


# -- Responses API ------------------------------------------------------------------------


def sse_responses(events: list[Json | str]) -> str:
    """Responses API SSE body: ``event: <type>`` and ``data: <json>`` per event, no [DONE]."""
    out = []
    for event in events:
        assert isinstance(event, dict)
        data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
        out.append(f"event: {event['type']}\ndata: {data}\n\n")
    return "".join(out)


CALCULATOR_TOOL: Json = {
    "type": "function",
    "name": "calculator",
    "description": "Evaluate an arithmetic expression exactly, e.g. '17 * 23 + 4' or 'sqrt(2)'.",
    "parameters": {
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "The expression."}},
        "required": ["expression"],
        "additionalProperties": False,
    },
    "strict": True,
}


class OpenAIResponses:
    """api.openai.com ``/v1/responses`` (gpt-5-mini, ``store: false``, summary ``auto``):
    ``sequence_number`` on every event, ``obfuscation`` padding on deltas, item ids
    sharing the response's prefix, the reasoning item's ``encrypted_content`` only on
    ``output_item.done`` and in ``response.completed`` (the server removes it when the
    request did not ``include`` ``reasoning.encrypted_content``)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.seq = 0
        self.base = hexid(rng, 18)
        self.response_id = self.new_id("resp")
        self.output: list[Json] = []
        self.index = 0

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{self.base}{hexid(self.rng, 32)}"

    def event(self, kind: str, **fields: Any) -> Json:
        event = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return event

    def obfuscation(self) -> str:
        return alnum(self.rng, self.rng.randrange(2, 16))

    def response(self, status: str, output: list[Json], usage_: Json | None) -> Json:
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": CREATED,
            "status": status,
            "background": False,
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "max_output_tokens": None,
            "max_tool_calls": None,
            "model": "gpt-5-mini-2025-08-07",
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "prompt_cache_key": None,
            "reasoning": {"effort": "medium", "summary": "auto"},
            "safety_identifier": None,
            "service_tier": "default" if status == "completed" else "auto",
            "store": False,
            "temperature": 1.0,
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": "auto",
            "tools": [CALCULATOR_TOOL],
            "top_logprobs": 0,
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": usage_,
            "user": None,
            "metadata": {},
        }

    def start(self) -> list[Json | str]:
        initial = self.response("in_progress", [], None)
        return [
            self.event("response.created", response=initial),
            self.event("response.in_progress", response=initial),
        ]

    def reasoning(self, paragraphs: list[str]) -> list[Json | str]:
        """A reasoning item whose summary has one part per paragraph."""
        rs, index = self.new_id("rs"), self.index
        events: list[Json | str] = [
            self.event(
                "response.output_item.added",
                output_index=index,
                item={"id": rs, "type": "reasoning", "summary": []},
            )
        ]
        for k, text in enumerate(paragraphs):
            where = {"item_id": rs, "output_index": index, "summary_index": k}
            empty = {"type": "summary_text", "text": ""}
            events.append(self.event("response.reasoning_summary_part.added", **where, part=empty))
            for t in cut(text, self.rng):
                events.append(
                    self.event(
                        "response.reasoning_summary_text.delta",
                        **where,
                        delta=t,
                        obfuscation=self.obfuscation(),
                    )
                )
            events.append(self.event("response.reasoning_summary_text.done", **where, text=text))
            part = {"type": "summary_text", "text": text}
            events.append(self.event("response.reasoning_summary_part.done", **where, part=part))
        item = {
            "id": rs,
            "type": "reasoning",
            "encrypted_content": fernet(self.rng, 1180),
            "summary": [{"type": "summary_text", "text": p} for p in paragraphs],
        }
        events.append(self.event("response.output_item.done", output_index=index, item=item))
        self.output.append(item)
        self.index += 1
        return events

    def function_call(self, name: str, arguments: str) -> list[Json | str]:
        fc, index = self.new_id("fc"), self.index
        call_id = "call_" + alnum(self.rng, 24)
        item = {
            "id": fc,
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": call_id,
            "name": name,
        }
        events: list[Json | str] = [
            self.event("response.output_item.added", output_index=index, item=item)
        ]
        for t in cut(arguments, self.rng):
            events.append(
                self.event(
                    "response.function_call_arguments.delta",
                    item_id=fc,
                    output_index=index,
                    delta=t,
                    obfuscation=self.obfuscation(),
                )
            )
        events.append(
            self.event(
                "response.function_call_arguments.done",
                item_id=fc,
                output_index=index,
                arguments=arguments,
            )
        )
        done = {**item, "status": "completed", "arguments": arguments}
        events.append(self.event("response.output_item.done", output_index=index, item=done))
        self.output.append(done)
        self.index += 1
        return events

    def message(self, text: str) -> list[Json | str]:
        msg, index = self.new_id("msg"), self.index
        item: Json = {
            "id": msg,
            "type": "message",
            "status": "in_progress",
            "content": [],
            "role": "assistant",
        }
        where = {"item_id": msg, "output_index": index, "content_index": 0}
        empty = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
        events: list[Json | str] = [
            self.event("response.output_item.added", output_index=index, item=item),
            self.event("response.content_part.added", **where, part=empty),
        ]
        for t in cut(text, self.rng):
            events.append(
                self.event(
                    "response.output_text.delta",
                    **where,
                    delta=t,
                    logprobs=[],
                    obfuscation=self.obfuscation(),
                )
            )
        events.append(self.event("response.output_text.done", **where, text=text, logprobs=[]))
        part = {**empty, "text": text}
        events.append(self.event("response.content_part.done", **where, part=part))
        done = {**item, "status": "completed", "content": [part]}
        events.append(self.event("response.output_item.done", output_index=index, item=done))
        self.output.append(done)
        self.index += 1
        return events

    def completed(self, prompt: int, completion: int, reasoning: int) -> list[Json | str]:
        usage_ = {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": prompt + completion,
        }
        final = self.response("completed", self.output, usage_)
        return [self.event("response.completed", response=final)]


def responses_tool_call(s: Scenario, rng: random.Random) -> list[Json | str]:
    assert s.tool is not None
    w = OpenAIResponses(rng)
    return [
        *w.start(),
        *w.reasoning(s.steps),
        *w.function_call(s.tool.name, s.tool.arguments),
        *w.completed(96, 283, 256),
    ]


def responses_tool_followup(s: Scenario, rng: random.Random) -> list[Json | str]:
    w = OpenAIResponses(rng)
    return [
        *w.start(),
        *w.reasoning(s.followup_steps),
        *w.message(s.followup_answer),
        *w.completed(1528, 219, 192),
    ]


def responses_passback(events: list[Json | str]) -> Json:
    """The reasoning item as ``response.output_item.done`` has it (``encrypted_content``
    included): it goes back before the function call in the next request's input."""
    item = next(
        e["item"]
        for e in events
        if isinstance(e, dict)
        and e["type"] == "response.output_item.done"
        and e["item"]["type"] == "reasoning"
    )
    return {"reasoning_item": item}


def _sorted(value: Any) -> Any:
    """Keys in alphabetical order, as vLLM's pydantic models dump the openai types."""
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def vllm_responses_raw(s: Scenario, rng: random.Random) -> list[Json | str]:
    """vLLM ``/v1/responses`` serving openai/gpt-oss-120b: the raw analysis channel as
    ``response.reasoning_text.delta`` events inside vLLM's own
    ``response.reasoning_part.added/done``, then the final channel as output text; uuid
    hex ids, sequence numbers from 0, keys in alphabetical order, no obfuscation."""
    seq = itertools.count()
    rs, msg = "rs_" + hexid(rng, 32), "msg_" + hexid(rng, 32)
    resp_id = "resp_" + hexid(rng, 32)

    def event(kind: str, **fields: Any) -> Json:
        return dict(_sorted({"type": kind, "sequence_number": next(seq), **fields}))

    def response(status: str, output: list[Json], usage_: Json | None) -> Json:
        return {
            "id": resp_id,
            "created_at": CREATED,
            "incomplete_details": None,
            "instructions": None,
            "metadata": None,
            "model": "openai/gpt-oss-120b",
            "object": "response",
            "output": output,
            "parallel_tool_calls": True,
            "temperature": 1.0,
            "tool_choice": "auto",
            "tools": [],
            "top_p": 1.0,
            "background": False,
            "max_output_tokens": 130922,
            "max_tool_calls": None,
            "previous_response_id": None,
            "prompt": None,
            "reasoning": None,
            "service_tier": "auto",
            "status": status,
            "text": None,
            "top_logprobs": None,
            "truncation": "disabled",
            "usage": usage_,
            "user": None,
        }

    reasoning, answer = s.reasoning, s.answer
    r, a = cut(reasoning, rng), cut(answer, rng)
    initial = response("in_progress", [], None)
    rs_item: Json = {
        "content": None,
        "encrypted_content": None,
        "id": rs,
        "status": "in_progress",
        "summary": [],
        "type": "reasoning",
    }
    rs_text = {"text": reasoning, "type": "reasoning_text"}
    rs_done = {**rs_item, "content": [rs_text], "status": "completed"}
    at_rs = {"item_id": rs, "output_index": 0, "content_index": 0}
    msg_item = {
        "content": [],
        "id": msg,
        "role": "assistant",
        "status": "in_progress",
        "type": "message",
    }
    at_msg = {"item_id": msg, "output_index": 1, "content_index": 0}
    text_part: Json = {"annotations": [], "logprobs": None, "text": answer, "type": "output_text"}
    msg_done = {**msg_item, "content": [text_part], "status": "completed"}
    usage_ = {
        "input_tokens": 81,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": len(r) + len(a) + 9,
        "output_tokens_details": {"reasoning_tokens": len(r), "tool_output_tokens": 0},
        "total_tokens": 81 + len(r) + len(a) + 9,
    }
    events: list[Json | str] = [
        event("response.created", response=initial),
        event("response.in_progress", response=initial),
        event("response.output_item.added", output_index=0, item=rs_item),
        event(
            "response.reasoning_part.added", **at_rs, part={"text": "", "type": "reasoning_text"}
        ),
        *[event("response.reasoning_text.delta", **at_rs, delta=t) for t in r],
        event("response.reasoning_text.done", **at_rs, text=reasoning),
        event("response.reasoning_part.done", **at_rs, part=rs_text),
        event("response.output_item.done", output_index=0, item=rs_done),
        event("response.output_item.added", output_index=1, item=msg_item),
        event(
            "response.content_part.added",
            **at_msg,
            part={"annotations": [], "logprobs": [], "text": "", "type": "output_text"},
        ),
        *[event("response.output_text.delta", **at_msg, delta=t, logprobs=[]) for t in a],
        event("response.output_text.done", **at_msg, text=answer, logprobs=[]),
        event("response.content_part.done", **at_msg, part=text_part),
        event("response.output_item.done", output_index=1, item=msg_done),
        event("response.completed", response=response("completed", [rs_done, msg_done], usage_)),
    ]
    return events


# -- the table ---------------------------------------------------------------------------


Passback = Callable[[list[Json | str]], Json]


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
    profile: str = "generic"  # the LLM_PROVIDER profile that reads and answers it correctly
    api: str = "chat"  # "chat" (/v1/chat/completions) or "responses" (/v1/responses)
    rules: tuple[str, ...] = ()  # request rules the server enforces (harness.recorded_llm)
    summary: bool = False  # the steps are provider summaries, not the model's reasoning
    passback: Passback | None = None  # what the next request must carry (tool-call streams)


STREAMS = [
    Stream(
        "deepseek_reasoning_content",
        "DeepSeek API, deepseek-reasoner",
        DECIMALS,
        deepseek,
        profile="deepseek-reasoner",
        rules=("deepseek_reasoner_no_reasoning_input",),
    ),
    Stream(
        "vllm_reasoning",
        "vLLM >= 0.19.1 --reasoning-parser qwen3",
        EGGS,
        vllm_reasoning,
        profile="vllm",
    ),
    Stream(
        "vllm_reasoning_both_fields",
        "vLLM 0.11-0.19.0 (reasoning and reasoning_content)",
        PRIMES,
        vllm_both_fields,
        profile="vllm",
    ),
    Stream(
        "openrouter_reasoning",
        "OpenRouter, deepseek/deepseek-r1",
        STRAWBERRY,
        openrouter,
        profile="openrouter",
    ),
    Stream(
        "ollama_qwen3_think_inline",
        "Ollama /v1 (no thinking support), qwen3:8b",
        CANBERRA,
        ollama_inline,
        reasoning_suffix="\n",
        profile="ollama",
    ),
    Stream(
        "ollama_qwen3_reasoning",
        "Ollama /v1 with thinking, qwen3:8b",
        RAINBOW,
        ollama_reasoning,
        profile="ollama",
    ),
    Stream(
        "qwen3_thinking_2507_close_only",
        "vLLM without reasoning parser, Qwen3-30B-A3B-Thinking-2507",
        GREEN_TEA,
        qwen_2507,
        reasoning_suffix="\n",
        open_at_start=True,
        profile="vllm",
    ),
    Stream(
        "content_blocks_thinking",
        "Mistral API, magistral-medium-2509",
        MAGISTRAL,
        mistral_blocks,
        profile="mistral",
    ),
    Stream(
        "vllm_tool_call",
        "vLLM --reasoning-parser qwen3 --tool-call-parser hermes",
        WEATHER,
        vllm_tool_call,
        followup_name="vllm_tool_followup",
        profile="vllm",
    ),
    Stream(
        "vllm_tool_followup",
        "vLLM, after the tool result",
        WEATHER,
        vllm_tool_followup,
        followup=True,
        profile="vllm",
    ),
    Stream(
        "plain_no_reasoning",
        "OpenAI API, gpt-4o-mini",
        PLAIN,
        openai_plain,
        profile="openai",
    ),
    # -- 2026 shapes (append only: a stream's random seed is its position) --------------
    Stream(
        "deepseek_v4_tool_call",
        "DeepSeek API, deepseek-v4-flash thinking mode, tool call",
        YEN,
        deepseek_v4_tool_call,
        followup_name="deepseek_v4_tool_followup",
        profile="deepseek",
        rules=("deepseek_v4_passback",),
        passback=deepseek_v4_passback,
    ),
    Stream(
        "deepseek_v4_tool_followup",
        "DeepSeek API, deepseek-v4-flash, after the tool result",
        YEN,
        deepseek_v4_followup,
        followup=True,
        profile="deepseek",
        rules=("deepseek_v4_passback",),
    ),
    Stream(
        "vllm_reasoning_boundary",
        "vLLM --reasoning-parser qwen3, reasoning end and answer start in one delta",
        ONIONS,
        vllm_boundary,
        profile="vllm",
    ),
    Stream(
        "llamacpp_deepseek_legacy",
        "llama.cpp server --reasoning-format deepseek-legacy, DeepSeek-R1-0528-Qwen3-8B",
        AFFECT,
        llamacpp_legacy,
        profile="llamacpp",
    ),
    Stream(
        "claude_thinking_tags",
        "Anthropic OpenAI-compatible endpoint, claude-sonnet-4-5 (no extended thinking)",
        BAKING,
        anthropic_tags,
        reasoning_suffix="\n",
        profile="anthropic",
    ),
    Stream(
        "kimi_think_markers",
        "vLLM without reasoning parser, Kimi-VL-A3B-Thinking-2506",
        FEATHERS,
        kimi_markers,
        profile="generic",
    ),
    Stream(
        "gptoss_harmony_inline",
        "gpt-oss-20b without a harmony parser (special tokens kept)",
        PERCENT,
        harmony_inline,
        profile="generic",
    ),
    Stream(
        "gemma_channel_thought",
        "vLLM without reasoning parser, gemma-4-31B-it thinking",
        PURR,
        gemma_channel,
        profile="generic",
    ),
    Stream(
        "deepseek_r1_distill_no_open",
        "vLLM without reasoning parser, DeepSeek-R1-Distill-Qwen-7B",
        MINUTES,
        r1_distill_no_open,
        reasoning_suffix="\n",
        open_at_start=True,
        profile="vllm",
    ),
    Stream(
        "thinking_field",
        "OpenAI-compatible proxy relaying Ollama's native thinking field, qwen3:14b",
        CLIMATE,
        thinking_field,
        profile="ollama",
    ),
    Stream(
        "openrouter_claude_tool_call",
        "OpenRouter, anthropic/claude-sonnet-4.5 with reasoning, tool call",
        TRIP,
        openrouter_claude_tool_call,
        followup_name="openrouter_claude_tool_followup",
        profile="openrouter",
        passback=openrouter_details_passback,
    ),
    Stream(
        "openrouter_claude_tool_followup",
        "OpenRouter, anthropic/claude-sonnet-4.5, after the tool result",
        TRIP,
        openrouter_claude_followup,
        followup=True,
        profile="openrouter",
        rules=("openrouter_reasoning_details",),
    ),
    Stream(
        "openrouter_gpt5_summary",
        "OpenRouter, openai/gpt-5-mini (reasoning summary and encrypted reasoning)",
        SLEEP,
        openrouter_gpt5_summary,
        profile="openrouter",
        summary=True,
    ),
    Stream(
        "gemini_tool_call",
        "Gemini OpenAI-compatible endpoint, gemini-2.5-flash, tool call with thought signature",
        TIP,
        gemini_tool_call,
        followup_name="gemini_tool_followup",
        profile="gemini",
        passback=gemini_passback,
    ),
    Stream(
        "gemini_tool_followup",
        "Gemini OpenAI-compatible endpoint, gemini-2.5-flash, after the tool result",
        TIP,
        gemini_tool_followup,
        followup=True,
        profile="gemini",
        rules=("gemini_thought_signature",),
    ),
    Stream(
        "responses_summary_tool_call",
        "OpenAI Responses API, gpt-5-mini, store=false: reasoning summary, function call",
        SPLIT,
        responses_tool_call,
        followup_name="responses_summary_tool_followup",
        profile="openai",
        api="responses",
        rules=("responses_reasoning_items",),
        summary=True,
        passback=responses_passback,
    ),
    Stream(
        "responses_summary_tool_followup",
        "OpenAI Responses API, gpt-5-mini, after the function call output",
        SPLIT,
        responses_tool_followup,
        followup=True,
        profile="openai",
        api="responses",
        rules=("responses_reasoning_items",),
        summary=True,
    ),
    Stream(
        "responses_raw_reasoning",
        "vLLM /v1/responses, openai/gpt-oss-120b (raw reasoning text)",
        OCEAN,
        vllm_responses_raw,
        profile="vllm",
        api="responses",
    ),
    Stream(
        "vllm_progress",
        "vLLM >= 0.19.1 --reasoning-parser qwen3, long reasoning for spoken progress",
        PROGRESS,
        vllm_reasoning,
        profile="vllm",
    ),
]


def _chat_facts(events: list[Json | str]) -> tuple[str, list[Json], str]:
    """Model, tool calls ({"id", "name", "arguments"}) and finish reason of a chat stream."""
    calls: dict[int, Json] = {}
    for delta in deltas(events):
        for i, tc in enumerate(delta.get("tool_calls") or []):
            index = tc.get("index")  # Gemini sends none
            call = calls.setdefault(
                i if index is None else index, {"id": "", "name": "", "arguments": ""}
            )
            call["id"] += tc.get("id") or ""
            call["name"] += tc.get("function", {}).get("name") or ""
            call["arguments"] += tc.get("function", {}).get("arguments") or ""
    finish = next(
        c["finish_reason"]
        for e in reversed(events)
        if isinstance(e, dict)
        for c in e["choices"]
        if c["finish_reason"]
    )
    model = next(e["model"] for e in events if isinstance(e, dict))
    return model, [calls[i] for i in sorted(calls)], finish


def _responses_facts(events: list[Json | str]) -> tuple[str, list[Json], str]:
    """Model, function calls ({"id": call_id, "name", "arguments", "item_id"}) and a
    finish reason ("tool_calls" or "stop"; the Responses API has none) of a stream."""
    model = next(e["response"]["model"] for e in events if isinstance(e, dict))
    calls = [
        {
            "id": e["item"]["call_id"],
            "name": e["item"]["name"],
            "arguments": e["item"]["arguments"],
            "item_id": e["item"]["id"],
        }
        for e in events
        if isinstance(e, dict)
        and e["type"] == "response.output_item.done"
        and e["item"]["type"] == "function_call"
    ]
    return model, calls, "tool_calls" if calls else "stop"


def entries() -> Iterator[tuple[str, str, Json]]:
    for i, st in enumerate(STREAMS):
        rng = random.Random(1000 + i)
        s = st.scenario
        steps = s.followup_steps if st.followup else s.steps
        answer = s.followup_answer if st.followup else s.answer
        reasoning = "\n\n".join(steps) + (st.reasoning_suffix if steps else "")
        events = st.build(s, rng)
        if st.api == "responses":
            body = sse_responses(events)
            model, tool_calls, finish = _responses_facts(events)
        else:
            body = sse(events)
            model, tool_calls, finish = _chat_facts(events)
        expected = [] if s.tool is None or st.followup else [(s.tool.name, s.tool.arguments)]
        assert [(c["name"], c["arguments"]) for c in tool_calls] == expected, st.name
        entry: Json = {
            "file": f"{st.name}.sse",
            "provider": st.provider,
            "model": model,
            "open_at_start": st.open_at_start,
            "user": s.user,
            "reasoning": "" if st.summary else reasoning,
            "answer": answer,
            "steps": steps,
            "tool_calls": tool_calls,
            "finish_reason": finish,
            "api": st.api,
            "profile": st.profile,
            "rules": list(st.rules),
            "summaries": steps if st.summary else [],
        }
        if st.followup_name:
            entry["followup"] = st.followup_name
        if s.tool is not None:
            entry["tool_result"] = s.tool.result
        if st.passback is not None:
            entry["passback"] = st.passback(events)
        yield st.name, body, entry


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
