"""The speech benchmarks (spoken progress, voice latency) with tiny parameters, on real
servers and real offline speech: each ends with its RESULT line. Their figures are not
checked: speed is measured, never tested."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.project.bench_runs import last_line, result

# each starts its own servers; a smoke run, chosen with -m bench (tests/support/scheduling.py)
pytestmark = [pytest.mark.integration, pytest.mark.bench]


def test_the_progress_benchmark_runs_with_tiny_parameters(tmp_path: Path) -> None:
    """One trial of a 4 s reasoning, heard through offline speech, with remarks off and
    with summaries (not cues: each policy is a voice worker and room of its own, and cues
    are heard in ``tests/e2e/voice/test_progress.py``; the RESULT line has ``nan`` for
    them)."""
    args = ["--trials", "1", "--reasoning-s", "4", "--policies", "off,summary"]
    last = last_line("bench/progress.py", args, tmp_path, 400)
    keys = (
        "silence_max_ms_off",
        "silence_max_ms_cue",
        "silence_max_ms_summary",
        "answer_delay_ms",
        "canary_heard",
    )
    assert re.fullmatch(result(keys), last), last


def test_the_voice_benchmark_ends_with_its_result_line(tmp_path: Path) -> None:
    """One trial each of both pipelines, real offline speech through livekit-server."""
    last = last_line("bench/voice.py", ["--trials", "1"], tmp_path, 400)
    keys = (
        "first_step_ms",
        "first_audio_ms",
        "stock_first_audio_ms",
        "added_first_audio_ms",
        "llm_to_audio_ms",
        "stock_llm_to_audio_ms",
        "added_llm_to_audio_ms",
    )
    assert re.fullmatch(result(keys), last), last


def test_the_turn_taking_benchmark_ends_with_its_result_line(tmp_path: Path) -> None:
    """One question with a 0.8 s pause, heard by the worker's default turn detection."""
    args = ["--modes", "model", "--pauses", "0.8", "--trials", "1"]
    last = last_line("bench/turns.py", args, tmp_path, 400)
    n = "(-?[0-9.]+|nan)"
    pattern = (
        rf"RESULT pauses=0\.8 model_turns={n} model_first_sound_ms={n} "
        rf"model_longest_silence_ms={n}"
    )
    assert re.fullmatch(pattern, last), last


def test_the_voice_cost_benchmark_ends_with_its_result_line(tmp_path: Path) -> None:
    """One room per variant, one short question each."""
    args = ["--rooms", "1", "--questions", "1", "--reasoning", "1"]
    last = last_line("bench/voice_cost.py", args, tmp_path, 400)
    keys = ("voice_cpu_ratio", "ours_cpu_ms_per_room_s", "stock_cpu_ms_per_room_s")
    assert re.fullmatch(result(keys), last), last
