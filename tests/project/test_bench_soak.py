"""The soak and the AG-UI benchmark with tiny parameters, on real servers: each ends with
its RESULT line. Their figures are not checked: speed is measured, never tested."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.project.bench_runs import last_line, result

# each starts its own servers; a smoke run, chosen with -m bench (tests/support/scheduling.py)
pytestmark = [pytest.mark.integration, pytest.mark.bench]


def test_the_soak_ends_with_its_result_line(tmp_path: Path) -> None:
    """A warm-up of five turns, then twelve seconds of the rooms load on two rooms, sampled
    every two seconds."""
    args = ["--minutes", "0.2", "--rooms", "2", "--warmup-turns", "5"]
    last = last_line("bench/soak.py", args, tmp_path, 200)
    keys = ("rss_slope_mb_per_h", "fd_slope_per_h", "p99_ms_first", "p99_ms_last")
    assert re.fullmatch(result(keys), last), last


def test_the_agui_benchmark_ends_with_its_result_line(tmp_path: Path) -> None:
    """Two short runs per path: the endpoint and the bare pass-through, as processes."""
    last = last_line("bench/agui.py", ["--runs", "2", "--tokens", "20"], tmp_path, 180)
    assert re.fullmatch(result(("added_p50_ms", "added_p99_ms")), last), last
