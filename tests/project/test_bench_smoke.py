"""The benchmarks that need no server run as the README says (a script, from any
directory) and end with their RESULT line, and every benchmark has a smoke test (on real
servers: ``test_bench_servers``, ``test_bench_speech``, ``test_bench_load``,
``test_bench_soak``). Their
figures are not checked: speed is measured, never tested."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI

from alicia.agent.llm.reasoning import Answer, Reasoning, ReasoningExtractor
from alicia.agent.llm.segmenter import segment
from alicia.agent.llm.stream import stream_deltas
from alicia.harness.recorded_llm import (
    TOKEN_TURN,
    TURN_ANSWER,
    TURN_PARAGRAPHS,
    Play,
    RecordedLLM,
)
from tests.paths import ROOT
from tests.project.bench_runs import result


@pytest.mark.parametrize(
    ("script", "args", "keys"),
    [
        ("bench/llm_parse.py", ["--repeat", "1"], ("us_per_token", "floor_us_per_token", "ratio")),
        (
            "bench/crypto.py",
            ["--repeat", "1"],
            ("encode_us", "encrypt_encode_us", "added_us", "floor_us", "ratio"),
        ),
        (
            "bench/token_path.py",
            ["--rooms", "3", "--rate", "200", "--trials", "1", "--warmup", "1", "--seconds", "3"],
            ("us_per_token", "floor_us_per_token", "ratio"),
        ),
        (
            "bench/telemetry.py",
            ["--trials", "1", "--turns", "1"],
            ("token_overhead_pct", "step_overhead_us"),
        ),
    ],
)
def test_benchmark_ends_with_its_result_line(
    script: str, args: list[str], keys: tuple[str, ...], tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / script), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    pattern = "RESULT " + " ".join(rf"{k}=-?[0-9.]+" for k in keys)
    assert re.fullmatch(pattern, last), last


def test_every_benchmark_script_is_run_by_a_smoke_test() -> None:
    """A new script in bench/ gets a smoke run in one of the test_bench_* modules."""
    here = "".join(p.read_text() for p in Path(__file__).parent.glob("test_bench_*.py"))
    names = sorted(p.name for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_"))
    missing = [n for n in names if f'"bench/{n}"' not in here and f'"{n}"' not in here]
    assert names and missing == []


def test_the_js_codec_benchmark_ends_with_its_result_line(tmp_path: Path) -> None:
    """bench/js_codec.mjs (Node, the npm package's codec vs plain @msgpack/msgpack), tiny."""
    node = shutil.which(
        "node", path=os.pathsep.join([os.environ.get("PATH", ""), str(Path(sys.executable).parent)])
    )
    assert node is not None, "node not found: run ./scripts/setup"
    done = subprocess.run(
        [node, str(ROOT / "bench" / "js_codec.mjs"), "--n", "50", "--rounds", "2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(result(("decode_vs_plain", "encode_vs_plain")), last), last


@pytest.mark.parametrize("script", ["bench/rooms.py", "bench/soak.py"])
def test_the_load_benchmarks_explain_themselves(script: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / script), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "RESULT" in done.stdout or "--rooms" in done.stdout


async def test_the_token_turn_stream_is_token_level_vllm_reasoning_then_an_answer() -> None:
    """What the load benchmarks stream: one chunk per token, paragraphs then an answer,
    each event shown to the hook (with its write time) before it is written."""
    seen: list[tuple[str, int]] = []
    bodies: list[str] = []

    def on_stream(body: Mapping[str, Any], stream: str) -> Callable[[str, int], None]:
        bodies.append(stream)
        return lambda event, ns: seen.append((event, ns))

    async with RecordedLLM(on_stream=on_stream) as llm:
        llm.route_model("m", Play(TOKEN_TURN, chunk_delay=0.002, paragraphs=2))
        extractor = ReasoningExtractor()
        parts = []
        async with AsyncOpenAI(base_url=llm.base_url, api_key="x", max_retries=0) as client:
            deltas = stream_deltas(client, model="m", messages=[{"role": "user", "content": "q"}])
            async with contextlib.aclosing(deltas) as stream:
                async for delta in stream:
                    assert len(delta) <= 1 or "role" in delta  # one field: one token
                    parts.extend(extractor.feed(delta))
        parts.extend(extractor.flush())
    reasoning = "".join(p.text for p in parts if isinstance(p, Reasoning))
    answer = "".join(p.text for p in parts if isinstance(p, Answer))
    assert segment(reasoning) == list(TURN_PARAGRAPHS[:2])
    assert reasoning.endswith("\n\n")
    assert answer == TURN_ANSWER
    assert bodies == [TOKEN_TURN]
    assert seen[-1][0] == "data: [DONE]"
    stamps = [ns for _, ns in seen]
    assert stamps == sorted(stamps)
    tokens = sum('"delta":{"reasoning":' in e or '"delta":{"content":' in e for e, _ in seen)
    assert tokens == len(seen) - 3  # the role chunk, the finish chunk, [DONE]
    assert (stamps[-1] - stamps[0]) / 1e9 >= 0.002 * (len(seen) - 1) * 0.9  # paced
