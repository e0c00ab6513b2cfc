"""The pump: batches in order, cuts at deadlines while silent, errors in order, bounded."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable

import pytest

from alicia.agent.engine import pacing
from alicia.agent.engine.pacing import pump


async def _stream(
    items: list[str], gaps: dict[int, float] | None = None, fail: Exception | None = None
) -> AsyncGenerator[str, None]:
    for i, item in enumerate(items):
        await asyncio.sleep((gaps or {}).get(i, 0.0))
        yield item
    if fail is not None:
        raise fail


def _never() -> list[str]:
    raise AssertionError("no deadline, no cut")


async def _all(it: AsyncGenerator[list[str], None]) -> list[list[str]]:
    return [batch async for batch in it]


async def test_without_a_deadline_each_chunk_that_makes_items_is_a_batch() -> None:
    def process(chunk: str) -> list[str]:
        return [chunk.upper()] if chunk != "skip" else []

    it = pump(_stream(["a", "skip", "b"]), process, _never, lambda: None, time.monotonic)
    assert await _all(it) == [["A"], ["B"]]


class _Steps:
    """A tiny segmenter: text opens a step due ``delay`` later; ``cut`` closes it."""

    def __init__(self, delay: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.open: list[str] = []
        self.since: float | None = None
        self.delay = delay
        self.clock = clock
        self.cuts = 0

    def process(self, chunk: str) -> list[str]:
        if chunk == "|":  # a paragraph end closes the step
            done, self.open, self.since = " ".join(self.open), [], None
            return [done]
        if self.since is None:
            self.since = self.clock()
        self.open.append(chunk)
        return []

    def cut(self) -> list[str]:
        self.cuts += 1
        if self.since is None or self.clock() < self.since + self.delay:
            return []
        done, self.open, self.since = " ".join(self.open), [], None
        return [f"cut:{done}"]

    def due(self) -> float | None:
        return None if self.since is None else self.since + self.delay


async def test_a_silent_stream_is_cut_at_the_deadline_and_order_is_kept() -> None:
    steps = _Steps(0.1)
    chunks = ["a", "b", "c", "|", "d", "e"]
    it = pump(_stream(chunks, gaps={2: 0.3}), steps.process, steps.cut, steps.due, time.monotonic)
    # a b: then silence past the deadline: cut; c, then the paragraph end closes "c".
    # d e: the stream ends with the step open (the caller closes it after the pump).
    assert await _all(it) == [["cut:a b"], ["c"]]
    assert steps.open == ["d", "e"]


async def test_tokens_that_make_nothing_never_wake_the_consumer() -> None:
    steps = _Steps(10.0)
    chunks = [f"t{i}" for i in range(200)] + ["|"]
    woken = 0
    async for batch in pump(_stream(chunks), steps.process, steps.cut, steps.due, time.monotonic):
        woken += 1
        assert batch == [" ".join(chunks[:-1])]
    assert woken == 1


async def test_a_cut_that_moves_nothing_does_not_spin() -> None:
    frozen = time.monotonic()
    steps = _Steps(0.0, clock=lambda: frozen)  # due now, forever: cut never closes it

    def stuck_cut() -> list[str]:
        steps.cuts += 1
        return []

    it = pump(_stream(["a", "b"], gaps={1: 0.05}), steps.process, stuck_cut, steps.due, steps.clock)
    assert await _all(it) == []
    assert 0 < steps.cuts <= 60  # about one per millisecond of silence, not thousands


async def test_an_error_after_chunks_arrives_after_their_batches() -> None:
    steps = _Steps(10.0)
    got: list[list[str]] = []
    chunks = ["a", "|", "b", "|"]
    with pytest.raises(RuntimeError, match="stream broke"):
        async for batch in pump(
            _stream(chunks, fail=RuntimeError("stream broke")),
            steps.process,
            steps.cut,
            steps.due,
            time.monotonic,
        ):
            got.append(batch)
    assert got == [["a"], ["b"]]


async def test_an_error_in_cut_reaches_the_consumer() -> None:
    steps = _Steps(0.05)

    def broken_cut() -> list[str]:
        raise ValueError("cut broke")

    with pytest.raises(ValueError, match="cut broke"):
        await _all(
            pump(
                _stream(["a", "b"], gaps={1: 1.0}),
                steps.process,
                broken_cut,
                steps.due,
                time.monotonic,
            )
        )


async def test_stopping_early_cancels_the_pending_read() -> None:
    closed = asyncio.Event()

    async def endless() -> AsyncGenerator[str, None]:
        try:
            yield "a"
            yield "|"
            await asyncio.sleep(3600)
            yield "never"
        finally:
            closed.set()

    steps = _Steps(10.0)
    it = pump(endless(), steps.process, steps.cut, steps.due, time.monotonic)
    async with contextlib.aclosing(it):
        assert await anext(it) == ["a"]
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await anext(it)
    await asyncio.wait_for(closed.wait(), 1)


async def test_the_reader_stays_a_bounded_buffer_ahead() -> None:
    pulled = 0

    async def counting() -> AsyncGenerator[str, None]:
        nonlocal pulled
        yield "open"  # a step opens: from here the reader task reads
        for i in range(1000):
            pulled += 1
            yield "|"
            yield f"t{i}"

    steps = _Steps(10.0)
    it = pump(counting(), steps.process, steps.cut, steps.due, time.monotonic)
    async with contextlib.aclosing(it):
        assert await anext(it) == ["open"]
        await asyncio.sleep(0.05)
        assert pulled <= pacing._BUFFER + 2
        rest = [batch async for batch in it]
    assert rest == [[f"t{i}"] for i in range(999)]
