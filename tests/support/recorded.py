"""The recorded LLM streams for tests: the ``RecordedLLM`` a test module asks for, and
the streams read without HTTP (their manifest, their deltas, the text of extractor parts).

The ``llm`` fixtures (``tests/conftest.py`` for a module, ``tests/engine/conftest.py`` for
a test) start :func:`recorded_llm_for` the requesting module; the harness tests' fixture
is ``llm_server`` (``tests/harness/conftest.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from alicia.agent.llm.reasoning import Answer, Part, Reasoning, Summary
from alicia.agent.llm.stream import ResponsesReader
from alicia.harness.recorded_llm import (
    STREAMS_DIR,
    RecordedLLM,
    StreamSpec,
    load_manifest,
    read_events,
)
from tests.worker_streams import combined_streams

__all__ = [
    "MANIFEST",
    "answer_of",
    "deltas_of",
    "reasoning_of",
    "recorded_llm_for",
    "summary_of",
]

MANIFEST: dict[str, StreamSpec] = load_manifest()
"""Every recorded stream's expectations, by name."""


def recorded_llm_for(module: ModuleType, scratch: Callable[[], Path]) -> RecordedLLM:
    """The (unstarted) recorded-stream server ``module`` asks for with two constants:

    * ``LLM_STREAMS``: ``"combined"`` (the default): the shared streams of ``tests/streams``
      plus the calculator ones of ``tests/worker_streams``, in a manifest written to the
      folder ``scratch()`` makes; ``"shared"``: ``tests/streams`` only;
    * ``LLM_OPTIONS``: more keyword arguments of :class:`RecordedLLM` (``chunk_delay``,
      ``endless_delay``).
    """
    options: dict[str, Any] = dict(getattr(module, "LLM_OPTIONS", {}))
    streams = getattr(module, "LLM_STREAMS", "combined")
    if streams == "combined":
        options["streams_dir"] = combined_streams(scratch())
    elif streams != "shared":
        raise ValueError(f"{module.__name__}: LLM_STREAMS must be 'combined' or 'shared'")
    return RecordedLLM(**options)


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
