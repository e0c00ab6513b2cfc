"""The suite's CPU measure (``tests/support/cpu_usage.py``): it counts a child's CPU, and
sums a run's lines by module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.cpu_usage import by_module, tree_cpu


def test_a_childs_cpu_counts_in_its_parents_tree() -> None:
    before = tree_cpu(os.getpid())
    busy = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass"
    child = subprocess.Popen([sys.executable, "-c", busy])
    child.wait()  # reaped: its CPU is this process's cutime now
    assert tree_cpu(os.getpid()) - before >= 0.5


def test_a_runs_lines_are_summed_by_module_most_cpu_first(tmp_path: Path) -> None:
    lines = [
        {"test": "tests/a/test_x.py::test_one", "wall_s": 2.0, "cpu_s": 1.0},
        {"test": "tests/b/test_y.py::test_two[p]", "wall_s": 1.0, "cpu_s": 3.0},
    ]
    (tmp_path / "gw0.jsonl").write_text(json.dumps(lines[0]) + "\n")
    (tmp_path / "gw1.jsonl").write_text(json.dumps(lines[1]) + "\n" + json.dumps(lines[0]) + "\n")
    assert by_module(tmp_path) == [
        ("tests/b/test_y.py", 3.0, 1.0),
        ("tests/a/test_x.py", 2.0, 4.0),
    ]
