"""The logs of the processes a test ran beside it, shown when the test fails.

A failure in an end-to-end test is often explained only by a worker's or a watcher's
log ("no agent came": was there a dispatch? a refusal? a bind error?). The harnesses
that start such a process register it here (:func:`started`, :func:`stopped`); this
pytest plugin (``tests/conftest.py`` loads it) appends to a failed test's report the end
of every registered log that was alive at some moment of the test, and keeps each whole
log in a file (under ``ALICIA_TEST_LOGS``, by default the system's temp directory) whose
path the report names: a cause is often long scrolled out of the end.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["LoggedProcess", "started", "stopped"]

TAIL = 6000
"""Characters of each log's end put in a failed test's report."""


@dataclass
class LoggedProcess:
    """A process whose log a failed test shows."""

    name: str
    read: Callable[[], str]
    since: float
    until: float | None = None


_processes: list[LoggedProcess] = []
_test_began = 0.0


def started(name: str, read: Callable[[], str]) -> LoggedProcess:
    """Register a process called ``name`` whose whole log ``read`` returns."""
    entry = LoggedProcess(name, read, time.monotonic())
    _processes.append(entry)
    return entry


def stopped(entry: LoggedProcess, read: Callable[[], str]) -> None:
    """Note that ``entry``'s process stopped; ``read`` returns its log from now on."""
    entry.until = time.monotonic()
    entry.read = read


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Forget the processes that stopped before this test."""
    global _test_began
    _test_began = time.monotonic()
    _processes[:] = [p for p in _processes if p.until is None]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test's report gets the end of each log alive during the test."""
    report = yield
    if report.failed:
        for entry in _processes:
            if entry.until is None or entry.until >= _test_began:
                try:
                    text = entry.read()
                except OSError as exc:
                    text = f"(log unreadable: {exc})"
                kept = _keep(item.nodeid, entry.name, text)
                report.sections.append((f"log of {entry.name}", f"{text[-TAIL:]}\n{kept}"))
    return report


def _keep(nodeid: str, name: str, text: str) -> str:
    """Write a failed test's whole log to a file; a line naming it (or why not)."""
    base = Path(os.environ.get("ALICIA_TEST_LOGS") or tempfile.gettempdir())
    folder = base / "alicia-failed-logs" / re.sub(r"[^\w.-]+", "_", nodeid)[-150:]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / (re.sub(r"[^\w.-]+", "_", name) + ".log")
        path.write_text(text, encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"(whole log not kept: {exc})"
    return f"(whole log: {path})"
