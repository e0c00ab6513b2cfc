"""The paced stream: chunks in order, deadline marks while silent, errors in order, bounded."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator

import pytest

from alicia.agent.engine import pacing
from alicia.agent.engine.pacing import paced


async def _stream(
    items: list[str], gaps: dict[int, float] | None = None, fail: Exception | None = None
) -> AsyncGenerator[str, None]:
    for i, item in enumerate(items):
        await asyncio.sleep((gaps or {}).get(i, 0.0))
        yield item
    if fail is not None:
        raise fail


async def test_without_a_deadline_the_chunks_come_as_they_are() -> None:
    got = [c async for c in paced(_stream(["a", "b", "c"]), lambda: None, time.monotonic)]
    assert got == ["a", "b", "c"]


async def test_a_silent_stream_yields_a_mark_at_the_deadline_then_goes_on() -> None:
    deadline: list[float | None] = [None]
    got: list[str | None] = []
    marks_at: list[float] = []
    async for chunk in paced(
        _stream(["a", "b", "c"], gaps={1: 0.3}), lambda: deadline[0], time.monotonic
    ):
        got.append(chunk)
        if chunk == "a":
            deadline[0] = time.monotonic() + 0.1  # a step opened: due in 0.1 s
        elif chunk is None:
            marks_at.append(time.monotonic())
            deadline[0] = None  # the consumer cut the step
    assert got == ["a", None, "b", "c"]
    assert len(marks_at) == 1


async def test_a_mark_that_changes_nothing_does_not_spin() -> None:
    deadline = time.monotonic()  # already passed, and the consumer never moves it
    marks = 0
    async for chunk in paced(_stream(["a", "b"], gaps={1: 0.05}), lambda: deadline, time.monotonic):
        if chunk is None:
            marks += 1
    assert 0 < marks <= 60  # about one per millisecond of silence, not thousands


async def test_an_error_after_chunks_arrives_after_them() -> None:
    got: list[str | None] = []
    with pytest.raises(RuntimeError, match="stream broke"):
        async for chunk in paced(
            _stream(["a", "b"], fail=RuntimeError("stream broke")),
            lambda: time.monotonic() + 10,
            time.monotonic,
        ):
            got.append(chunk)
    assert got == ["a", "b"]


async def test_stopping_early_cancels_the_pending_read() -> None:
    closed = asyncio.Event()

    async def endless() -> AsyncGenerator[str, None]:
        try:
            yield "a"
            await asyncio.sleep(3600)
            yield "never"
        finally:
            closed.set()

    it = paced(endless(), lambda: time.monotonic() + 10, time.monotonic)
    async with contextlib.aclosing(it):
        assert await anext(it) == "a"
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await anext(it)
    await asyncio.wait_for(closed.wait(), 1)


async def test_the_reader_stays_a_bounded_buffer_ahead() -> None:
    pulled = 0

    async def counting() -> AsyncGenerator[int, None]:
        nonlocal pulled
        for i in range(1000):
            pulled += 1
            yield i

    it = paced(counting(), lambda: time.monotonic() + 10, time.monotonic)
    async with contextlib.aclosing(it):
        assert await anext(it) == 0
        await asyncio.sleep(0.05)
        assert pulled <= pacing._BUFFER + 2
        rest = [c async for c in it]
    assert rest == list(range(1, 1000))
