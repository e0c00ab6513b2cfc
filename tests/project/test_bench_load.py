"""The rooms benchmark with tiny parameters, on real servers: it ends with its RESULT line
(the soak and the AG-UI benchmark: ``test_bench_soak.py``, a module of their own so two
workers run them side by side). Its figures are not checked: speed is measured, never
tested."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.project.bench_runs import last_line, result

# each starts its own servers; a smoke run, chosen with -m bench (tests/support/scheduling.py)
pytestmark = [pytest.mark.integration, pytest.mark.bench]

ROOMS_KEYS = (
    "rooms",
    "tokens_per_s",
    "lost",
    "reordered",
    "p99_ms",
    "cpu_ms_per_room_s",
    "floor_cpu_ms_per_room_s",
    "rss_mb_per_room",
    "telemetry_cpu_overhead_pct",
)


def test_the_rooms_benchmark_ends_with_its_result_line(tmp_path: Path) -> None:
    """Two rooms, a 3 s window: the worker, the worker with telemetry on, then the floor,
    under token-level streams."""
    args = ["--rooms", "2", "--seconds", "3", "--warmup", "1", "--paragraphs", "1"]
    last = last_line("bench/rooms.py", args, tmp_path, 280)
    assert re.fullmatch(result(ROOMS_KEYS), last), last
    assert " lost=0 reordered=0 " in last, last  # delivery is correctness, not speed


def test_the_rooms_benchmark_keeps_its_per_packet_trial(tmp_path: Path) -> None:
    last = last_line(
        "bench/rooms.py", ["--packets", "--rooms", "2", "--seconds", "2"], tmp_path, 200
    )
    keys = ("rooms", "steps_per_s", "lost", "reordered", "p99_ms")
    assert re.fullmatch(result(keys), last), last
