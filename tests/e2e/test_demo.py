"""``python -m alicia.demo`` end to end: livekit-server, worker, demo model, CLI, SQLite, stats."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from alicia.harness.recorded_llm import DEFAULT_STREAM, RecordedLLM, load_manifest
from tests.paths import ROOT

pytestmark = pytest.mark.integration


def check_steps(out: str, recorded: Sequence[str]) -> None:
    """The demo printed the recorded steps, in order and whole, numbered from 1. With the
    defaults a step also ends when the stream pauses for ``ALICIA_STEP_MAX_DELAY`` (1 s):
    on a loaded machine a pause cut one in two at a sentence (fresh82), so the text is
    compared, not where each step ends."""
    steps = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("▸ step")]
    numbered = [ln.split(": ", 1) for ln in steps]
    assert [n for n, _ in numbered] == [f"▸ step {i}" for i in range(1, len(steps) + 1)]
    assert len(steps) >= len(recorded), steps
    assert " ".join(t for _, t in numbered).split() == " ".join(recorded).split(), steps


def test_demo_streams_reasoning_answers_and_prints_analytics(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("LLM_BASE_URL", "DATABASE_URL")}
    env.update({"NO_COLOR": "1", "COLUMNS": "200", "XDG_DATA_HOME": str(tmp_path / "xdg")})
    proc = subprocess.run(
        [sys.executable, "-m", "alicia.demo", "--data-dir", str(tmp_path / "data")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = proc.stdout
    log = tmp_path / "data" / "worker.log"
    worker_log = log.read_text()[-3000:] if log.exists() else ""
    assert proc.returncode == 0, f"{out}\n{proc.stderr}\n{worker_log}"
    spec = load_manifest()[DEFAULT_STREAM]
    assert "demo model" in out and "LLM_BASE_URL is not set" in out
    check_steps(out, spec.steps)
    assert f"alicia > {spec.answer}" in out
    i_steps = out.index("▸ step 1:")
    i_answer = out.index("alicia > ")
    i_stats = out.index("Analytics from storage")
    assert i_steps < i_answer < i_stats
    stats = out[i_stats:]
    assert "alicia-demo-recorded" in stats and "completed" in stats
    assert "Demo finished" in out
    assert (tmp_path / "data" / "alicia-demo.db").stat().st_size > 0


def test_demo_refuses_an_llm_url_without_a_model(tmp_path: Path) -> None:
    env = {**os.environ, "LLM_BASE_URL": "http://127.0.0.1:9/v1", "LLM_MODEL": ""}
    proc = subprocess.run(
        [sys.executable, "-m", "alicia.demo", "--data-dir", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "LLM_MODEL is not" in proc.stderr


async def test_demo_uses_the_endpoint_named_by_llm_base_url(tmp_path: Path) -> None:
    # Any OpenAI-compatible endpoint will do; this one replays recordings over real HTTP.
    async with RecordedLLM() as llm:
        spec = llm.spec("vllm_reasoning_both_fields")
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
        env.update(
            {"LLM_BASE_URL": llm.base_url, "LLM_MODEL": "qwen3:8b", "NO_COLOR": "1"},
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "alicia.demo",
            "--data-dir",
            str(tmp_path),
            "--question",
            spec.user,
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        raw_out, raw_err = await asyncio.wait_for(proc.communicate(), 240)
        requests = list(llm.requests)
        base_url = llm.base_url
    out = raw_out.decode()
    assert proc.returncode == 0, f"{out}\n{raw_err.decode()}"
    assert "demo model" not in out
    assert f"qwen3:8b at {base_url} (from LLM_BASE_URL)" in out
    check_steps(out, spec.steps)
    assert f"alicia > {spec.answer}" in out
    assert requests and all(r["model"] == "qwen3:8b" for r in requests)
    assert "qwen3:8b" in out[out.index("Analytics from storage") :]
