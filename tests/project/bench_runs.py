"""Running a benchmark script as the README shows, for the smoke tests of ``bench/``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.paths import ROOT

__all__ = ["last_line", "result"]


def last_line(script: str, args: list[str], cwd: Path, timeout: float) -> str:
    """Run ``script`` with ``args`` in ``cwd``; its last line of output (it must succeed)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-12000:]
    return done.stdout.strip().splitlines()[-1]


def result(keys: tuple[str, ...]) -> str:
    """The RESULT line with ``keys``, as a regular expression."""
    return "RESULT " + " ".join(rf"{k}=(-?[0-9.]+|nan)" for k in keys)
