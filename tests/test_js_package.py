"""The npm package ``@alicia/reasoning`` (``clients/js/``): its Node unit tests pass, it
stays within its size budget, and the web debug page is built on it (no second copy of
the codec, trust rules or turn assembly in ``web/frontend/``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SIZE_LIMIT = 15_000
"""Bytes, minified and gzipped (level 9), without livekit-client and React (issue 27)."""


def _tool(name: str) -> str:
    """``node``/``npm`` from PATH, else the one scripts/setup may have put in .venv."""
    path = os.pathsep.join([os.environ.get("PATH", ""), str(Path(sys.executable).parent)])
    found = shutil.which(name, path=path)
    if found is None:
        pytest.fail(f"{name} not found: run ./scripts/setup")
    return found


def test_the_package_unit_tests_pass() -> None:
    """``npm run test:js``: codec, trust and turn assembly under ``node --test``."""
    done = subprocess.run(
        [_tool("npm"), "run", "--silent", "test:js"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, (done.stdout[-4000:], done.stderr[-2000:])
    assert re.search(r"^# fail 0$", done.stdout, re.M), done.stdout[-2000:]


def test_the_package_is_at_most_15_kB_minified_and_gzipped() -> None:
    done = subprocess.run(
        [_tool("node"), str(ROOT / "clients" / "js" / "size.mjs")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    found = re.search(r"^SIZE core_gzip=(\d+) all_gzip=(\d+)", done.stdout, re.M)
    assert found, done.stdout + done.stderr
    core, everything = int(found.group(1)), int(found.group(2))
    print(f"@alicia/reasoning gzip: core {core} B, with the React layer {everything} B")
    assert core <= everything <= SIZE_LIMIT


def test_the_debug_page_is_built_on_the_package() -> None:
    frontend = ROOT / "web" / "frontend"
    assert sorted(p.name for p in frontend.glob("*.ts")) == ["main.ts"]
    main = (frontend / "main.ts").read_text()
    assert 'from "@alicia/reasoning"' in main
    assert "decodeEnvelope" not in main and "class AgentTrust" not in main
