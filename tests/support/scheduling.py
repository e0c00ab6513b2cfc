"""How the suite runs: the quick tier, parallel workers, and the order of the work.

A pytest plugin (``tests/conftest.py`` loads it):

* **The quick tier.** A test that needs a real server (it asks for ``livekit_server``,
  ``postgres_server`` or ``livekit``, or its module says ``pytest.mark.integration``) is
  marked ``integration``; ``./scripts/test --quick`` runs the rest (``-m "not integration"``,
  on 3 workers, ``--dist worksteal``: an idle worker takes tests queued on a busy one).
* **The benchmarks' smoke runs** (``pytest.mark.bench``: a benchmark run with tiny
  parameters on servers of its own, tens of CPU-seconds each) are left out unless chosen:
  ``-m bench`` (any ``-m``: the marks then decide) or their file named
  (``./scripts/test tests/project/test_bench_speech.py``). They check that a script still
  runs to its RESULT line; what they run is tested end to end elsewhere, and a suite within
  15 minutes on 2 cores had no room for them (:func:`chosen`).
* **Parallel workers** (pytest-xdist, ``./scripts/test`` runs ``-n``
  :data:`DEFAULT_WORKERS` ``--dist loadscope``). Each worker has its own livekit-server and
  Postgres (the session fixtures) and picks its loopback ports from a band of its own
  (``ALICIA_PORT_RANGE``, :mod:`alicia.harness.ports`). A module's tests run on one
  worker, in order, so a module-scoped fixture (a worker process, a recorded LLM, a
  livekit-server of the module's own) starts once. (``--dist loadgroup`` would spread the
  other modules' tests one by one, but xdist 3.8 groups by rewriting ``Item._nodeid``,
  which pytest 9.2 no longer reads: the groups were silently spread, and every worker
  started the same module's worker processes at once.)
* **Lanes.** Some tests hold a promise on time while real time passes: real speech
  (``tests/e2e/voice``, the speech benchmarks), takeovers on heartbeats
  (``tests/e2e/failover``), the browser, limits that drain idle connections. On a 2-core
  machine shared by five workers they missed it when the others took the CPU (a remark
  9 s late, a question misheard, a second takeover of a room whose new agent's
  heartbeat starved). So the first workers are :data:`LANES`: two take the speech
  modules first, at normal priority; the next the timing modules, at normal priority too; each
  then takes the later lanes' modules and the rest. The other workers take only the
  rest, at ``nice`` :data:`NICE`, and use what the lanes leave (what a test starts
  stays in the suite's session, ``process_group=0``: with Linux's autogroups a new
  session takes a full share of the CPU whatever its niceness,
  ``tests/project/test_scheduling.py``); the modules that load the CPU most
  (:data:`HEAVY`) start only once no speech module is left (:class:`LaneScheduling`,
  the ``pytest_xdist_make_scheduler`` hook, on ``--dist loadscope``).
* **The order.** Most of the suite waits on real time, so the longest work starts first:
  modules (and groups) in decreasing order of the seconds :data:`DURATIONS` recorded for
  their tests in a full run, a module's tests in their own order (``--no-loadscope-reorder``
  keeps this order; xdist's own puts the modules with most tests first). A test not in the file
  counts :data:`UNKNOWN_S` (integration) or nothing. Refresh the file after adding slow
  tests: ``python -m tests.support.scheduling timeline.jsonl`` on the timeline of a full
  run (``ALICIA_TEST_TIMELINE=timeline.jsonl ./scripts/test``: each test's seconds as
  it ran among the others, setup and teardown included), or on its JUnit report.
* **The timeline.** With ``ALICIA_TEST_TIMELINE=<file>``, each worker appends a JSON line
  per test (worker, test id, start and end, epoch seconds): where a run's time went, which
  worker waited at the end (:func:`pytest_runtest_protocol`).
"""

from __future__ import annotations

import json
import os
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
from xdist.scheduler import LoadScopeScheduling

from tests.paths import ROOT

__all__ = [
    "DEFAULT_WORKERS",
    "DURATIONS",
    "HEAVY",
    "LANES",
    "NICE",
    "SERVER_FIXTURES",
    "UNKNOWN_S",
    "Lane",
    "LaneScheduling",
    "chosen",
    "write_durations",
]

DEFAULT_WORKERS: Final = 5
"""Parallel workers ``./scripts/test`` starts (``ALICIA_TEST_WORKERS`` overrides). On 4 the
machine was idle 17 % of the run (fE1: 43 % at times, every worker waiting on real time;
30-44 % in the last minutes); on 5, 6 %, and the run 902 -> 820 s of pytest, 15 min 50 s
-> 14 min 24 s in all (fF5, the same commit, all passed). Earlier 5 bought nothing (fX5,
887 against 895 s, with the protocol's fuzzing held back to the end and a hand-tuned
order; before the lanes' nice held, fV and fU, the timing tests failed on 5)."""
SERVER_FIXTURES: Final = frozenset({"livekit_server", "postgres_server", "livekit", "cluster"})
"""Fixtures that start a real server: a test that uses one is an integration test."""
DURATIONS: Final = ROOT / "tests" / "durations.json"
"""Seconds per test id from a full run (the tests over :data:`_KEPT_S`)."""
UNKNOWN_S: Final = 3.0
"""What an integration test missing from :data:`DURATIONS` is expected to take."""


@dataclass(frozen=True, slots=True)
class Lane:
    """Modules (path prefixes) that hold a promise on time, the workers that take them
    first, and those workers' niceness."""

    name: str
    prefixes: tuple[str, ...]
    workers: int
    nice: int


LANES: Final = (
    Lane("speech", ("tests/e2e/voice/", "tests/project/test_bench_speech.py"), 2, 0),
    Lane(
        "timing",
        (
            "tests/e2e/failover/",
            "tests/e2e/cluster/",  # takeovers and a node's death on two nodes
            "tests/e2e/test_client_trust_worker.py",  # takeovers too
            "tests/e2e/observability/test_failover_traces.py",  # a takeover's spans
            "tests/e2e/test_zdr_renditions.py",  # a takeover under ZDR
            "tests/e2e/browser/",
            "tests/agui/test_agui_limits.py",
        ),
        1,
        0,  # at 4 (once nice applied to its workers: process_group, above) the lease
        # heartbeats of its workers (a 1.5 s timeout) starved beside the speech lanes
    ),
)
"""The realtime lanes, first workers first (``gw0``, ``gw1`` speech, ``gw2`` timing)."""
HEAVY: Final = (
    "tests/e2e/doors/test_room_doors.py",
    "tests/project/test_bench_load.py",
    "tests/project/test_bench_soak.py",
    "tests/project/test_bench_servers.py",
    "tests/e2e/browser/",
    "tests/e2e/test_many_workers.py",
)
"""Modules that load the CPU most (the room doors' attacks, load benchmarks, Chromium, three
workers). Beside speech, niced, the room doors' grant scenario starved (a Configuration
unanswered for 15 s): they start once no speech module is left, so they never run beside
real speech. (The protocol's fuzzing, CPU alone with nothing on time, runs beside speech
at ``nice`` 10: held back, it was the run's last minute, one worker busy and the others
done, while the speech minutes left a fifth of the CPU idle.)"""
NICE: Final = 10
"""The niceness of the workers past the lanes (and of their servers and subprocesses)."""
_KEPT_S: Final = 0.5
_PORTS_LOW: Final = 10000
_PORTS_HIGH: Final = 32000
"""The band the workers' bands are cut from: below Linux's ephemeral range."""


def pytest_configure(config: pytest.Config) -> None:
    """A parallel worker picks its ports from a band of its own; past the realtime lanes
    it runs at :data:`NICE`."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if not (worker.startswith("gw") and count > 0):
        return
    index = int(worker[2:])
    if "ALICIA_PORT_RANGE" not in os.environ:
        width = (_PORTS_HIGH - _PORTS_LOW) // count
        low = _PORTS_LOW + index * width
        os.environ["ALICIA_PORT_RANGE"] = f"{low}-{low + width - 1}"
    lane = _lane_index(index)
    os.nice(LANES[lane].nice if lane < len(LANES) else NICE)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With ``ALICIA_TEST_TIMELINE``, one JSON line per test to that file (see the module)."""
    start = time.time()
    try:
        return (yield)
    finally:
        path = os.environ.get("ALICIA_TEST_TIMELINE")
        if path:
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            line = {"worker": worker, "test": item.nodeid, "start": start, "end": time.time()}
            with open(path, "a") as out:  # one short line: appended whole
                out.write(json.dumps(line) + "\n")


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> LaneScheduling | None:
    """The lanes, under ``--dist loadscope``; xdist's own scheduler otherwise."""
    if config.getoption("dist") != "loadscope":
        return None
    return LaneScheduling(config, log)


def _lane_index(worker: int) -> int:
    """The lane of worker number ``worker`` (``len(LANES)``: past the lanes)."""
    first = 0
    for i, lane in enumerate(LANES):
        if worker < first + lane.workers:
            return i
        first += lane.workers
    return len(LANES)


def _lane_of_scope(scope: str) -> int:
    """The lane a module belongs to (``len(LANES)``: the rest)."""
    return next((i for i, lane in enumerate(LANES) if scope.startswith(lane.prefixes)), len(LANES))


class LaneScheduling(LoadScopeScheduling):
    """``loadscope`` (a module's tests on one worker, modules in collection order), where
    a worker of lane *i* (:data:`LANES`) takes the modules of lane *i* first, then of the
    later lanes, then the rest; a worker past the lanes only the rest. The modules that
    load the CPU most (:data:`HEAVY`) wait until no speech module is left to run."""

    def _lane_of_node(self, node: Any) -> int:
        name = str(getattr(getattr(node, "gateway", None), "id", "gw0"))
        return _lane_index(int(name[2:])) if name.startswith("gw") and name[2:] else 0

    def _speaking(self) -> bool:
        """Whether speech modules are still queued or have more than their last test to
        run (a worker runs its last test only once it gets more work or is told to stop:
        xdist needs the next item; holding the heavy modules until then would stall)."""
        if any(_lane_of_scope(scope) == 0 for scope in self.workqueue):
            return True
        return any(
            sum(
                list(unit.values()).count(False)
                for scope, unit in work.items()
                if _lane_of_scope(scope) == 0
            )
            > 1
            for work in self.assigned_work.values()
        )

    def _pick(self, node: Any) -> tuple[str | None, bool]:
        """The next module for ``node`` (None: nothing for it now), and whether a module
        for it is only held back (it will have work once the speech modules are done)."""
        own = self._lane_of_node(node)
        hold = self._speaking()
        best: tuple[int, str] | None = None
        held = False
        for scope in self.workqueue:
            lane = _lane_of_scope(scope)
            if lane < own:
                continue
            if hold and scope.startswith(HEAVY):
                held = True
                continue
            if best is None or lane < best[0]:
                best = (lane, scope)
                if lane == own:
                    break
        return (None if best is None else best[1]), held

    def _assign_work_unit(self, node: Any) -> None:
        scope, _ = self._pick(node)
        if scope is None:
            return
        work_unit = self.workqueue.pop(scope)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some(
            [collection.index(nodeid) for nodeid, done in work_unit.items() if not done]
        )

    def _reschedule(self, node: Any) -> None:
        self._feed(node)
        if not self._speaking():  # held modules are free now: wake idle workers too
            for other in self.nodes:
                # Idle: nothing pending, or only the last test it holds (xdist runs that
                # one only once it gets more work); fresh53 ran every heavy module on
                # one worker for 7 minutes while four such workers waited.
                if other is not node and self._pending_of(self.assigned_work[other]) <= 1:
                    self._feed(other)

    def _feed(self, node: Any) -> None:
        if node.shutting_down:
            return
        scope, held = self._pick(node)
        if scope is None:
            if not held:
                node.shutdown()  # after what it holds: nothing left is for this worker
            return
        if self._pending_of(self.assigned_work[node]) > 2:
            return
        self._assign_work_unit(node)


def _durations() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()}


def chosen(config: pytest.Config, item: pytest.Item) -> bool:
    """Whether ``item`` runs: a benchmark's smoke run only when ``-m`` or its file says so."""
    if item.get_closest_marker("bench") is None or config.option.markexpr:
        return True
    named = {(Path(config.invocation_params.dir) / a.split("::")[0]).resolve() for a in config.args}
    return item.path.resolve() in named


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the benchmarks' smoke runs not chosen; mark integration tests; put the
    longest modules first."""
    kept: list[pytest.Item] = []
    left_out: list[pytest.Item] = []
    for item in items:
        (kept if chosen(config, item) else left_out).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
    seconds = _durations()
    cost: dict[str, float] = defaultdict(float)
    module_of: dict[str, str] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        module_of[item.nodeid] = module
        if SERVER_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.integration)
        integration = item.get_closest_marker("integration") is not None
        default = UNKNOWN_S if integration else 0.0
        cost[module] += seconds.get(item.nodeid, default)
    position = {module: i for i, module in enumerate(dict.fromkeys(module_of.values()))}
    items.sort(key=lambda item: (-cost[module_of[item.nodeid]], position[module_of[item.nodeid]]))


def write_durations(report: Path, out: Path = DURATIONS) -> int:
    """Write :data:`DURATIONS` from a full run's JUnit report or timeline (the module
    docstring); the tests kept. The tests the run left out (the benchmarks' smoke runs)
    keep their seconds."""
    found = _timeline_seconds(report) if report.suffix != ".xml" else _junit_seconds(report)
    old = _durations()
    kept = {k: v for k, v in old.items() if k not in found and "test_bench_" in k}
    found = {k: round(v, 1) for k, v in found.items() if v >= _KEPT_S} | kept
    out.write_text(json.dumps(dict(sorted(found.items())), indent=0) + "\n")
    return len(found)


def _timeline_seconds(timeline: Path) -> dict[str, float]:
    """Seconds per test (setup and teardown included) from ``ALICIA_TEST_TIMELINE``."""
    found: dict[str, float] = {}
    for line in timeline.read_text().splitlines():
        entry = json.loads(line)
        found[entry["test"]] = float(entry["end"]) - float(entry["start"])
    return found


def _junit_seconds(junit: Path) -> dict[str, float]:
    """Seconds per test (its call) from a JUnit report."""
    found: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = (case.get("classname") or "").split(".")
        name = case.get("name") or ""
        # classname: tests.engine.test_turn[.Class]; the file is up to the test_ module
        parts = [p for p in module]
        cut = next((i for i, p in enumerate(parts) if p.startswith("test_")), len(parts) - 1)
        path = "/".join(parts[: cut + 1]) + ".py"
        node = "::".join([path, *parts[cut + 1 :], name])
        found[node] = float(case.get("time") or 0)
    return found


if __name__ == "__main__":
    print(f"{write_durations(Path(sys.argv[1]))} tests over {_KEPT_S} s kept in {DURATIONS}")
