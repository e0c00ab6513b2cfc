"""The benchmarks run as the README says (a script, from any directory) and end with their
RESULT line; the load benchmarks (rooms, soak) with tiny parameters. Their figures are not
checked here: speed is measured, never tested."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

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


@pytest.mark.parametrize(
    ("script", "keys"),
    [
        ("bench/llm_parse.py", ("us_per_token", "floor_us_per_token", "ratio")),
        (
            "bench/crypto.py",
            ("encode_us", "encrypt_encode_us", "added_us", "floor_us", "ratio"),
        ),
    ],
)
def test_benchmark_ends_with_its_result_line(
    script: str, keys: tuple[str, ...], tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / script), "--repeat", "1"],
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


TINY: Final = [
    (
        "bench/codec.py",
        ["--n", "50", "--repeat", "1"],
        ("encode_vs_raw", "decode_vs_raw", "encode_vs_json", "decode_vs_json"),
    ),
    (
        "bench/latency.py",
        ["--steps", "20", "--rate", "50"],
        ("raw_p50_ms", "raw_p99_ms", "added_p50_ms", "added_p99_ms"),
    ),
    (
        "bench/storage.py",
        ["--n", "2000", "--naive-n", "200", "--repeat", "1", "--rounds", "2", "--per-round", "20"],
        (
            "writer_steps_per_s",
            "naive_steps_per_s",
            "copy_steps_per_s",
            "writer_vs_copy",
            "p99_on_vs_off",
        ),
    ),
    (
        "bench/failover.py",
        ["--rooms", "2"],
        ("rooms", "takeover_p50_s", "takeover_max_s", "gaps", "duplicates"),
    ),
    (
        "bench/failover.py",
        ["--rooms", "2", "--stall", "--stall-s", "4"],
        (
            "rooms",
            "takeover_p50_s",
            "takeover_max_s",
            "gaps",
            "duplicates",
            "stale_envelopes",
            "stale_rows",
        ),
    ),
    (
        "bench/progress.py",
        ["--trials", "1", "--reasoning-s", "4"],
        (
            "silence_max_ms_off",
            "silence_max_ms_cue",
            "silence_max_ms_summary",
            "answer_delay_ms",
            "canary_heard",
        ),
    ),
]
"""Benchmarks against the real servers with tiny parameters (a migration or an API change
that breaks one fails here, not silently)."""


@pytest.mark.integration  # starts its own servers
@pytest.mark.parametrize(
    ("script", "args", "keys"), TINY, ids=[" ".join([s, *a]) for s, a, _ in TINY]
)
def test_the_server_benchmarks_run_with_tiny_parameters(
    script: str, args: list[str], keys: tuple[str, ...], tmp_path: Path
) -> None:
    last = _last_line(script, args, tmp_path, 400)
    assert re.fullmatch(_result(keys), last), last


def test_every_benchmark_script_is_run_by_this_module() -> None:
    """A new script in bench/ gets a smoke run here, or this fails."""
    here = Path(__file__).read_text()
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
    assert re.fullmatch(_result(("decode_vs_plain", "encode_vs_plain")), last), last


@pytest.mark.integration  # starts its own servers
def test_the_voice_benchmark_ends_with_its_result_line(tmp_path: Path) -> None:
    """One trial each of both pipelines, real offline speech through livekit-server."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "voice.py"), "--trials", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    keys = (
        "first_step_ms",
        "first_audio_ms",
        "stock_first_audio_ms",
        "added_first_audio_ms",
        "llm_to_audio_ms",
        "stock_llm_to_audio_ms",
        "added_llm_to_audio_ms",
    )
    assert re.fullmatch("RESULT " + " ".join(rf"{k}=-?[0-9.]+" for k in keys), last), last


@pytest.mark.integration  # starts its own servers
def test_the_agui_benchmark_ends_with_its_result_line(tmp_path: Path) -> None:
    """Two short runs per path: the endpoint and the bare pass-through, as processes."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "agui.py"), "--runs", "2", "--tokens", "20"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    keys = ("added_p50_ms", "added_p99_ms")
    assert re.fullmatch("RESULT " + " ".join(rf"{k}=-?[0-9.]+" for k in keys), last), last


def _last_line(script: str, args: list[str], cwd: Path, timeout: float) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def _result(keys: tuple[str, ...]) -> str:
    return "RESULT " + " ".join(rf"{k}=(-?[0-9.]+|nan)" for k in keys)


ROOMS_KEYS = (
    "rooms",
    "tokens_per_s",
    "lost",
    "reordered",
    "p99_ms",
    "cpu_ms_per_room_s",
    "floor_cpu_ms_per_room_s",
    "rss_mb_per_room",
)


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


@pytest.mark.integration  # starts its own servers
def test_the_rooms_benchmark_ends_with_its_result_line(tmp_path: Path) -> None:
    """Two rooms, a 3 s window: the worker, then the floor, under token-level streams."""
    last = _last_line(
        "bench/rooms.py", ["--rooms", "2", "--seconds", "3", "--warmup", "1"], tmp_path, 280
    )
    assert re.fullmatch(_result(ROOMS_KEYS), last), last
    assert " lost=0 reordered=0 " in last, last  # delivery is correctness, not speed


@pytest.mark.integration  # starts its own servers
def test_the_rooms_benchmark_keeps_its_per_packet_trial(tmp_path: Path) -> None:
    last = _last_line(
        "bench/rooms.py", ["--packets", "--rooms", "2", "--seconds", "2"], tmp_path, 200
    )
    keys = ("rooms", "steps_per_s", "lost", "reordered", "p99_ms")
    assert re.fullmatch(_result(keys), last), last


@pytest.mark.integration  # starts its own servers
def test_the_soak_ends_with_its_result_line(tmp_path: Path) -> None:
    """A warm-up of five turns, then twelve seconds of the rooms load on two rooms, sampled
    every two seconds."""
    args = ["--minutes", "0.2", "--rooms", "2", "--warmup-turns", "5"]
    last = _last_line("bench/soak.py", args, tmp_path, 200)
    keys = ("rss_slope_mb_per_h", "fd_slope_per_h", "p99_ms_first", "p99_ms_last")
    assert re.fullmatch(_result(keys), last), last


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
