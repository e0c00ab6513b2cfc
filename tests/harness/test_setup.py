"""scripts/setup's step helper: one line per step, the installer's output in a log file,
and on failure the log's path and its last 20 lines."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.paths import ROOT


def run_steps(log: Path, script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in bash with scripts/setup's ``step`` helper and ``LOG`` set."""
    prelude = f'set -euo pipefail\nLOG="{log}"\n. scripts/setup-step.sh\n'
    return subprocess.run(
        ["bash", "-c", prelude + script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_step_that_succeeds_prints_one_line_and_logs_the_output(tmp_path: Path) -> None:
    log = tmp_path / "setup.log"
    done = run_steps(
        log,
        "step 'installing hello' sh -c 'echo hello-out; echo hello-err >&2'\n"
        "step 'installing world' echo world-out\n",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "setup: installing hello ... ok",
        "setup: installing world ... ok",
    ]
    text = log.read_text()
    assert text.index("hello-out") < text.index("world-out")
    assert "hello-err" in text
    assert "installing hello: sh -c" in text  # each step is headed in the log


def test_a_step_that_fails_names_the_log_prints_its_end_and_stops(tmp_path: Path) -> None:
    log = tmp_path / "setup.log"
    done = run_steps(
        log,
        "step 'building' sh -c 'for i in $(seq 1 30); do echo line-$i; done; exit 3'\n"
        "step 'never run' touch " + str(tmp_path / "reached") + "\n",
    )
    assert done.returncode == 3
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0] == "setup: building ... failed (exit 3)"
    assert lines[1] == f"setup: the last lines of {log}:"
    assert lines[2:] == [f"  line-{i}" for i in range(11, 31)]  # the last 20, in order
    assert (tmp_path / "reached").exists() is False
    assert "line-1\n" in log.read_text()  # the full output stays in the log
