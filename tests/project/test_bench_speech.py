"""The speech benchmarks (spoken progress, voice latency) with tiny parameters, on real
servers and real offline speech: each ends with its RESULT line. Their figures are not
checked: speed is measured, never tested."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.project.bench_runs import last_line, result

pytestmark = pytest.mark.integration  # each starts its own servers


def test_the_progress_benchmark_runs_with_tiny_parameters(tmp_path: Path) -> None:
    """One trial per policy of a 4 s reasoning, heard through offline speech."""
    last = last_line("bench/progress.py", ["--trials", "1", "--reasoning-s", "4"], tmp_path, 400)
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
