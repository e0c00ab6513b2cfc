"""The CPU benchmarks run as the README says (a script, from any directory) and end with
their RESULT line. Their figures are not checked here: speed is measured, never tested."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


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
