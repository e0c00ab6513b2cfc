"""The benchmarks that start their own servers, with tiny parameters: each runs as the
README says and ends with its RESULT line (a migration or an API change that breaks one
fails here, not silently). Their figures are not checked: speed is measured, never tested.
The codec, storage and overload runs are in the suite (the overload's counts are a promise:
no room moves off a live worker); the others are smoke runs chosen with ``-m bench``
(``tests/support/scheduling.py``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

import pytest

from tests.project.bench_runs import last_line, result

pytestmark = pytest.mark.integration  # each starts its own servers

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
    (  # voice rooms and a stalled worker in one run (48 CPU-s as two runs); the kill -9
        # branch (two lines) is no longer smoke-run
        "bench/failover.py",
        ["--rooms", "1", "--voice", "--stall", "--stall-s", "4"],
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
        # The lease timeout of the failover tests (LEASE): in the suite, niced beside the
        # rest, a worker's renewal on the default 1.5 s went 1.8 s unrenewed for want of CPU,
        # not from overload (fK: moved=1). What the smoke promises holds on it: refused at
        # the limit, nothing moved off a live worker; the default's figures are the
        # benchmark's own run.
        "bench/overload.py",
        ["--max-rooms", "1", "--extra", "2", "--seconds", "4", "--lease-timeout", "8"],
        (
            "offered",
            "served",
            "refused",
            "moved",
            "dispatches",
            "renewal_lag_max_s",
            "step_p99_ms_served",
            "step_p99_ms_overload",
        ),
    ),
    (
        "bench/node_death.py",
        ["--trials", "1"],
        ("default_p50_s", "default_max_s", "tuned_p50_s", "tuned_max_s"),
    ),
    (
        "bench/capacity.py",
        ["--rooms", "1", "--seconds", "2"],
        (
            "rooms",
            "storage_rows_per_room_s",
            "storage_bytes_per_room_s",
            "failover_rows_per_room_s",
            "failover_bytes_per_room_s",
            "renewals_per_room_s",
            "storage_commits_per_room_s",
            "failover_commits_per_room_s",
            "storage_connections",
            "failover_connections",
            "worker_cpu_ms_per_room_s",
            "livekit_cpu_ms_per_room_s",
            "storage_postgres_cpu_ms_per_room_s",
            "failover_postgres_cpu_ms_per_room_s",
        ),
    ),
]
"""Benchmarks against the real servers with tiny parameters (a migration or an API change
that breaks one fails here, not silently)."""
SMOKE_ONLY: Final = frozenset(
    {"bench/latency.py", "bench/failover.py", "bench/node_death.py", "bench/capacity.py"}
)
"""The runs left out of the suite (``pytest.mark.bench``): what they run is tested end to end
(the worker's delivery, takeovers, a cluster, storage), each is tens of CPU-seconds."""


@pytest.mark.parametrize(
    ("script", "args", "keys"),
    [
        pytest.param(
            s, a, k, id=" ".join([s, *a]), marks=[pytest.mark.bench] if s in SMOKE_ONLY else []
        )
        for s, a, k in TINY
    ],
)
def test_the_server_benchmarks_run_with_tiny_parameters(
    script: str, args: list[str], keys: tuple[str, ...], tmp_path: Path
) -> None:
    last = last_line(script, args, tmp_path, 400)
    assert re.fullmatch(result(keys), last), last
    if script == "bench/overload.py":  # no room moves off a live worker: correctness
        assert " served=2 refused=2 moved=0 " in last, last
