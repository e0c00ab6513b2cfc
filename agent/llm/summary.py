"""Summaries of one reasoning step: by a summarizer model, or extractive (the fallback).

:func:`model_summary` asks a model on the same OpenAI-compatible endpoint for a
one-sentence summary of the step (its own reasoning, if it writes any, is dropped).
:func:`extractive_summary` keeps the step's first sentence (cut at a word to at most
``max_chars``, with an ellipsis when anything was left out). Both read only the step
they are given, so a summary never carries another step's (or another user's) text.
"""

from __future__ import annotations

import contextlib
from typing import Any, Final, cast

import openai
from openai.types.chat import ChatCompletionMessageParam

from .reasoning import Answer, ReasoningExtractor
from .sentences import sentence_ends
from .stream import stream_deltas

__all__ = ["SUMMARY_PROMPT", "extractive_summary", "model_summary"]

SUMMARY_PROMPT: Final = (
    "Summarise the following reasoning step of an assistant in one short, neutral sentence "
    "for the person it is talking to. Do not add facts; write only the sentence."
)


async def model_summary(
    llm: openai.AsyncOpenAI, model: str, text: str, *, max_chars: int = 300
) -> str:
    """The summarizer model's one-sentence summary of ``text`` (its answer text only)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SUMMARY_PROMPT},
        {"role": "user", "content": text},
    ]
    extractor = ReasoningExtractor()
    parts: list[str] = []
    deltas = stream_deltas(
        llm, model=model, messages=cast("list[ChatCompletionMessageParam]", messages)
    )
    async with contextlib.aclosing(deltas) as stream:
        async for delta in stream:
            parts.extend(p.text for p in extractor.feed(delta) if isinstance(p, Answer))
            if sum(map(len, parts)) > 4 * max_chars:
                break  # enough: a summary is short
    parts.extend(p.text for p in extractor.flush() if isinstance(p, Answer))
    summary = " ".join("".join(parts).split())
    if not summary:
        raise ValueError("the summarizer model returned no text")
    return (
        summary if len(summary) <= max_chars else extractive_summary(summary, max_chars=max_chars)
    )


_ELLIPSIS: Final = "…"


def extractive_summary(text: str, *, max_chars: int = 160) -> str:
    """The first sentence of ``text``, at most ``max_chars`` characters."""
    text = " ".join(text.split())
    if not text:
        return ""
    ends = sentence_ends(text + " .")  # a sentence followed by more text ends there
    first = text[: ends[0]].strip() if ends else text
    if len(first) > max_chars:
        cut = first[: max_chars - 1].rsplit(" ", 1)[0] or first[: max_chars - 1]
        return cut.rstrip(" ,;:") + _ELLIPSIS
    return first if len(first) == len(text) else first + " " + _ELLIPSIS
