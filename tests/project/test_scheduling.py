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

from tests.paths import ROOT

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
