"""What the worker spends per streamed token: SSE decode + extractor + segmenter.

Run: ``.venv/bin/python bench/llm_parse.py`` (about 15 s). Three recorded provider
shapes from ``tests/streams`` (one SSE event per token-sized piece, as providers send
them) are parsed in this one process, each pass over the whole body:

* ``worker``  what a turn does with every event: :class:`alicia.agent.llm.stream.ChatDecoder`
  (SSE framing + msgspec decode of the chunk to its first choice's delta and usage),
  the tool-call check,
  :class:`~alicia.agent.llm.reasoning.ReasoningExtractor`, and the reasoning through
  :class:`~alicia.agent.llm.segmenter.StepSegmenter` / the answer through
  :class:`~alicia.agent.llm.sentences.SentenceStream`;
* ``floor``   a bare ``msgspec.json.decode`` of each event's bytes (the ``data: `` prefix
  and the blank line sliced off, into dicts): the least any reader of the same SSE bytes
  can do.

Shapes: ``vllm_reasoning`` (``delta.reasoning``), ``ollama_qwen3_think_inline``
(``<think>`` markers in content, cut across chunks) and ``openrouter_reasoning``
(``reasoning`` + ``reasoning_details``). Each figure is the best of several ``timeit``
repeats (GC collected before, disabled while timing), divided by the events with a delta.
Caveat: a shared 2-core machine; absolute microseconds move by some percent.

Last line: ``RESULT us_per_token=<x> floor_us_per_token=<x> ratio=<x>`` over the three
shapes together (target: ratio <= 3).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from importlib.metadata import version
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from alicia.agent.llm.reasoning import Answer, Reasoning, ReasoningExtractor
from alicia.agent.llm.segmenter import StepSegmenter
from alicia.agent.llm.sentences import SentenceStream
from alicia.agent.llm.stream import ChatDecoder, chat_delta
from alicia.harness.recorded_llm import STREAMS_DIR, read_events
from bench._stats import best_per_item

SHAPES = ("vllm_reasoning", "ollama_qwen3_think_inline", "openrouter_reasoning")


def worker_pass(chunks: list[bytes]) -> int:
    """One turn's parsing of ``chunks`` (one SSE event each); returns the steps made."""
    usage: list[dict[str, object]] = []
    decoder = ChatDecoder(usage.append)
    extractor = ReasoningExtractor()
    segmenter = StepSegmenter(max_delay=60.0)
    sentences = SentenceStream()
    steps = 0
    for chunk in chunks:
        for delta in decoder.feed(chunk):
            if delta.get("tool_calls"):
                pass  # the turn merges tool calls here
            for part in extractor.feed(delta):
                if type(part) is Reasoning:
                    steps += len(segmenter.push(part.text))
                elif type(part) is Answer:
                    sentences.push(part.text)
    for part in extractor.flush():
        if type(part) is Reasoning:
            steps += len(segmenter.push(part.text))
    return steps + len(segmenter.close())


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the RESULT line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="timeit repeats (best is kept)")
    args = parser.parse_args(argv)
    print(
        f"Python {sys.version.split()[0]} ({platform.python_implementation()}) on "
        f"{platform.machine()}, {os.cpu_count()} CPUs; msgspec {version('msgspec')}; "
        f"best of {args.repeat}"
    )
    decode = msgspec.json.decode
    total_worker = total_floor = 0.0
    total_tokens = 0
    for name in SHAPES:
        events = read_events(STREAMS_DIR / f"{name}.sse")
        chunks = [(event + "\n\n").encode() for event in events]
        tokens = sum(
            1
            for e in events
            if e.startswith("data: {") and (delta := chat_delta(decode(e[6:]))) and delta != {}
        )

        def floor(chunks: list[bytes] = chunks) -> None:
            for chunk in chunks:
                if chunk[:7] == b"data: {":
                    decode(chunk[6:-2])

        def worker(chunks: list[bytes] = chunks) -> None:
            worker_pass(chunks)

        assert worker_pass(chunks) > 0, name
        w = best_per_item(worker, tokens, args.repeat) * 1e6
        f = best_per_item(floor, tokens, args.repeat) * 1e6
        print(f"{name:28s} {tokens:4d} tokens  worker {w:6.2f} us  floor {f:5.2f} us  x{w / f:.2f}")
        total_worker += w * tokens
        total_floor += f * tokens
        total_tokens += tokens
    us = total_worker / total_tokens
    floor_us = total_floor / total_tokens
    ratio = us / floor_us
    print(f"RESULT us_per_token={us:.2f} floor_us_per_token={floor_us:.2f} ratio={ratio:.2f}")


if __name__ == "__main__":
    main()
