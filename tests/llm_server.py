"""Pytest fixtures and helpers for the recorded-stream LLM server (``alicia.harness.recorded_llm``).

Use in a test module::

    from tests.llm_server import llm_server  # noqa: F401  (fixture)

    async def test_x(llm_server: RecordedLLM) -> None:
        llm_server.script("vllm_tool_call", "vllm_tool_followup")
        client = AsyncOpenAI(base_url=llm_server.base_url, api_key="test")

or without pytest: ``async with recorded_llm(chunk_delay=0.01) as llm: ...``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import pytest_asyncio

from alicia.agent.llm.reasoning import Answer, Part, Reasoning, Summary
from alicia.agent.llm.stream import ResponsesReader
from alicia.harness.recorded_llm import (
    ENDLESS,
    STREAMS_DIR,
    Play,
    RecordedLLM,
    StreamSpec,
    load_manifest,
    read_events,
    recorded_llm,
)

__all__ = [
    "ENDLESS",
    "MANIFEST",
    "STREAMS_DIR",
    "Play",
    "RecordedLLM",
    "StreamSpec",
    "answer_of",
    "deltas_of",
    "llm_server",
    "reasoning_of",
    "recorded_llm",
    "summary_of",
]

MANIFEST: dict[str, StreamSpec] = load_manifest()
"""Every recorded stream's expectations, by name."""


@pytest_asyncio.fixture
async def llm_server() -> AsyncIterator[RecordedLLM]:
    """A fresh recorded-stream server on 127.0.0.1 (no pacing; script it per test)."""
    async with RecordedLLM() as server:
        yield server


def deltas_of(name: str) -> Iterator[Mapping[str, Any]]:
    """The choice deltas of a recorded stream, read straight from its file (no HTTP).

    Responses API streams go through the worker's :class:`ResponsesReader`, which turns
    their events into the same chat-shaped deltas.
    """
    spec = MANIFEST[name]
    reader = ResponsesReader() if spec.api == "responses" else None
    for event in read_events(STREAMS_DIR / spec.file):
        name_line, data = "", ""
        for line in event.split("\n"):
            if line.startswith("event: "):
                name_line = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data = line.removeprefix("data: ")
        if not data or data == "[DONE]":
            continue
        chunk = json.loads(data)
        if reader is not None:
            yield from reader.read(name_line, chunk)
            continue
        for choice in chunk["choices"]:
            yield choice["delta"]


def summary_of(parts: list[Part]) -> str:
    """Concatenated provider summary text of extractor parts."""
    return "".join(p.text for p in parts if isinstance(p, Summary))


def reasoning_of(parts: list[Part]) -> str:
    """Concatenated reasoning text of extractor parts."""
    return "".join(p.text for p in parts if isinstance(p, Reasoning))


def answer_of(parts: list[Part]) -> str:
    """Concatenated answer text of extractor parts."""
    return "".join(p.text for p in parts if isinstance(p, Answer))
