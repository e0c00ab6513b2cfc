"""The refusal log: one line per door, sender and reason a minute, and the count it stands for."""

from __future__ import annotations

from alicia.agent.gate.refusals import REMEMBERED, RefusalLog


def test_a_line_per_door_sender_and_reason_per_interval_with_the_count_since() -> None:
    now = [0.0]
    log = RefusalLog(60.0, clock=lambda: now[0])
    assert log.due("host", "mallory", "too many open") == 1
    assert [log.due("host", "mallory", "too many open") for _ in range(5)] == [0] * 5
    # another reason is not hidden by the first one's line, nor another sender or door
    assert log.due("host", "mallory", "too fast") == 1
    assert log.due("host", "eve", "too many open") == 1
    assert log.due("chat", "mallory", "too many open") == 1
    now[0] = 59.9
    assert log.due("host", "mallory", "too many open") == 0
    now[0] = 60.1
    assert log.due("host", "mallory", "too many open") == 7  # this one and the 6 unlogged


def test_what_it_remembers_is_bounded() -> None:
    log = RefusalLog(60.0, clock=lambda: 0.0)
    for i in range(REMEMBERED + 10):
        assert log.due("host", f"s{i}", "too fast") == 1
    assert len(log._last) == REMEMBERED
    assert log.due("host", "s0", "too fast") == 1  # the oldest was forgotten
