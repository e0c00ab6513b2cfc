"""The logs of the processes a test ran beside it, shown when the test fails.

A failure in an end-to-end test is often explained only by a worker's or a watcher's
log ("no agent came": was there a dispatch? a refusal? a bind error?). The harnesses
that start such a process register it here (:func:`started`, :func:`stopped`); this
pytest plugin (``tests/conftest.py`` loads it) appends to a failed test's report the end
of every registered log that was alive at some moment of the test.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass

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
                report.sections.append((f"log of {entry.name}", text[-TAIL:]))
    return report
