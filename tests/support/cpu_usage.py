"""The CPU each test costs, for finding what makes the suite long on 2 cores.

An opt-in pytest plugin: ``./scripts/test -p tests.support.cpu_usage``. For each test it
writes, to ``test-artifacts/cpu/<xdist worker>.jsonl``, the wall seconds of its setup, call
and teardown and the CPU seconds its xdist worker's process tree spent meanwhile (the
worker itself, the servers and worker processes it started, and what they have reaped).
The xdist worker is made a child subreaper, so a process whose parent exits first (a
livekit-agents forkserver and its job processes, when their worker is killed) stays in
the tree, a zombie once it ends, and is counted; only a process that leaves on purpose
(Postgres's daemonized postmaster) is not.
``python -m tests.support.cpu_usage`` sums them by module, most CPU first.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path

import pytest

from bench._stats import tree_cpu_seconds
from tests.paths import ARTIFACTS

OUT = ARTIFACTS / "cpu"
"""Where each xdist worker writes its lines."""
_PR_SET_CHILD_SUBREAPER = 36


def pytest_configure(config: pytest.Config) -> None:
    """Keep orphaned descendants in this process's tree (see the module)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def tree_cpu(root: int) -> float:
    """CPU seconds of ``root`` and its descendants, with the children they have reaped."""
    return tree_cpu_seconds(root)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None]:
    """Record the test's wall and CPU seconds."""
    started, wall, cpu = time.time(), time.monotonic(), tree_cpu(os.getpid())
    yield
    line = {
        "test": item.nodeid,
        "started": round(started, 2),
        "wall_s": round(time.monotonic() - wall, 2),
        "cpu_s": round(tree_cpu(os.getpid()) - cpu, 2),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with (OUT / f"{worker}.jsonl").open("a") as f:
        f.write(json.dumps(line) + "\n")


def by_module(folder: Path = OUT) -> list[tuple[str, float, float]]:
    """(module, CPU s, wall s) summed over the lines in ``folder``, most CPU first."""
    cpu: dict[str, float] = defaultdict(float)
    wall: dict[str, float] = defaultdict(float)
    for path in folder.glob("*.jsonl"):
        for raw in path.read_text().splitlines():
            line = json.loads(raw)
            module = str(line["test"]).split("::", 1)[0]
            cpu[module] += float(line["cpu_s"])
            wall[module] += float(line["wall_s"])
    return sorted(((m, cpu[m], wall[m]) for m in cpu), key=lambda r: -r[1])


if __name__ == "__main__":
    rows = by_module(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
    print(f"total CPU {sum(r[1] for r in rows):.0f} s, wall {sum(r[2] for r in rows):.0f} s")
    for module, cpu_s, wall_s in rows:
        print(f"{cpu_s:8.1f} {wall_s:8.1f}  {module}")
