"""The suite's lanes hold: what the tests start shares the suite's session.

With Linux's autogroup scheduling (on by default, and on the CI machine), ``nice`` only
ranks processes of one session; every new session is a group of its own with a full
share of the CPU. The lanes (:mod:`tests.support.scheduling`) run the tests past the
realtime lanes at ``nice`` 10 so that speech and takeovers keep their CPU; a worker, an
AG-UI endpoint or a watcher started in a new session (``start_new_session=True``) took a
full share whatever its test's niceness, and the realtime tests missed their time on a
loaded 2-core machine. They start in a process group of their own instead
(``process_group=0``: ``killpg`` still stops the whole tree).

Two kinds of process still leave it, as their own code decides: Postgres (``pg_ctl`` and
each backend call ``setsid``) and Chromium (playwright-core launches it detached). Both
weigh as a session each; the browser modules run only once no speech module is left
(:data:`tests.support.scheduling.HEAVY`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.paths import ROOT
from tests.support.scheduling import chosen

FOLDERS = ("tests", "demo", "bench", "alicia", "agent", "scripts")


def test_no_python_code_here_starts_a_process_in_a_new_session() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in FOLDERS
        if (ROOT / folder).is_dir()
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path.resolve() != Path(__file__).resolve()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "start_new_session=True" in line or "os.setsid(" in line
    ]
    assert not found, found


def test_a_process_group_of_its_own_keeps_the_session_and_the_niceness() -> None:
    code = "import os; print(os.getsid(0), os.getpgid(0), os.getpid(), os.nice(0))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        process_group=0,
        preexec_fn=lambda: os.nice(3),
        capture_output=True,
        text=True,
        check=True,
    )
    sid, pgid, pid, nice = map(int, done.stdout.split())
    assert sid == os.getsid(0)  # the same autogroup: niceness ranks it against the others
    assert pgid == pid  # killpg(pid) reaches it and its children
    assert nice == os.nice(0) + 3


def _item(path: str, bench: bool) -> Any:
    marker = pytest.mark.bench.mark if bench else None
    return SimpleNamespace(path=ROOT / path, get_closest_marker=lambda name: marker)


def _config(markexpr: str, *args: str) -> Any:
    params = SimpleNamespace(dir=ROOT)
    return SimpleNamespace(
        option=SimpleNamespace(markexpr=markexpr), args=list(args), invocation_params=params
    )


def test_the_benchmarks_smoke_runs_run_only_when_chosen() -> None:
    """The full tier leaves the ``bench`` smoke runs out; ``-m`` (the marks decide) or the
    file named runs them; the overload benchmark's run (a promise on counts) stays in."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--collect-only",
            "-q",
            "tests/project",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    default = [line for line in done.stdout.splitlines() if "::" in line]
    assert not [t for t in default if "test_bench_speech" in t or "bench/capacity.py" in t]
    assert any("bench/overload.py" in t for t in default)
    speech = _item("tests/project/test_bench_speech.py", bench=True)
    assert not chosen(_config("", "tests"), speech)
    assert chosen(_config("bench", "tests"), speech)
    assert chosen(_config("", "tests/project/test_bench_speech.py::test_x"), speech)
    assert chosen(_config("", "tests"), _item("tests/project/test_layers.py", bench=False))
