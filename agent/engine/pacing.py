"""A token stream turned into batches of items, with deadline cuts while it is silent.

A turn reads one chunk per token, and most tokens make no event: they extend the open
step or sentence. The segmenter's time rule must also cut an open step at a deadline even
when the LLM stream is silent, and cancelling a pending HTTP read at the deadline would
break the stream. So once a deadline exists, one reader task per stream reads each chunk
and runs ``process`` on it at once (synchronously: every item a chunk makes is decided by
the time the next chunk is read), a loop timer moved only when ``due()`` changes runs
``cut``, and the consumer wakes only for a batch of items. Per token that is one task
resumption, as in a bare script reading the same socket (``bench/rooms.py``'s floor), not
a task, a wait and a timer, nor a second task waking for a token that makes nothing.
Until a deadline first appears the consumer reads and processes the stream itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Generic, TypeVar

__all__ = ["pump"]

T = TypeVar("T")
U = TypeVar("U")

_BUFFER = 64
"""Batches the reader may hold ahead of the consumer before it waits for room."""

_SPIN_PAUSE_S = 0.001
"""Timer delay after a cut that did not move the deadline (a clock that did not advance)."""


async def pump(
    stream: AsyncIterator[T],
    process: Callable[[T], list[U]],
    cut: Callable[[], list[U]],
    due: Callable[[], float | None],
    clock: Callable[[], float],
) -> AsyncGenerator[list[U], None]:
    """The non-empty lists that ``process`` makes of the stream's chunks, in order, and
    that ``cut`` makes once ``due()`` (a ``clock()`` time) has passed.

    ``process`` and ``cut`` are synchronous and never run at the same time. The stream is
    read ahead by at most a small buffer of batches; its pending read is cancelled only
    when the consumer stops iterating, and an error it raises arrives after the batches
    made before it.
    """
    while True:  # the consumer reads until a deadline exists
        if due() is not None:
            break
        try:
            chunk = await anext(stream)
        except StopAsyncIteration:
            return
        items = process(chunk)
        if items:
            yield items
    reader = _Reader(stream, process, cut, due, clock)
    try:
        while True:
            if reader.batches:
                yield reader.take()
            elif reader.ended:
                reader.finish()
                return
            else:
                await reader.wait()
    finally:
        await reader.close()


class _Reader(Generic[T, U]):
    """Reads and processes ``stream`` in its own task, cuts on a timer; wakes one waiter."""

    def __init__(
        self,
        stream: AsyncIterator[T],
        process: Callable[[T], list[U]],
        cut: Callable[[], list[U]],
        due: Callable[[], float | None],
        clock: Callable[[], float],
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._process = process
        self._cut = cut
        self._due = due
        self._clock = clock
        self.batches: deque[list[U]] = deque()
        self.ended = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._room: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._armed: float | None = None
        self._arm()
        self._task = self._loop.create_task(self._read(stream))

    def take(self) -> list[U]:
        """The oldest batch (there is one); lets a full reader go on."""
        batch = self.batches.popleft()
        room = self._room
        if room is not None and not room.done():
            room.set_result(None)
        return batch

    def finish(self) -> None:
        """Raise what ended the stream, if it was not its normal end."""
        if self._error is not None:
            raise self._error

    async def wait(self) -> None:
        """Until a batch or the end arrives."""
        waiter = self._waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    async def close(self) -> None:
        """Stop: cancel the pending read and the timer."""
        self._disarm()
        if not self._task.done():
            self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task

    def _add(self, items: list[U]) -> None:
        if items:
            self.batches.append(items)
            waiter = self._waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    def _arm(self) -> None:
        """Move the timer to ``due()`` if that changed."""
        deadline = self._due()
        if deadline == self._armed:
            return
        self._disarm()
        self._armed = deadline
        if deadline is not None:
            self._timer = self._loop.call_later(max(0.0, deadline - self._clock()), self._fire)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        if self.ended:
            return
        deadline = self._armed
        try:
            self._add(self._cut())
        except Exception as exc:  # the consumer gets it, as it would a stream error
            self._end(exc)
            self._task.cancel()
            return
        if self._due() == deadline:  # no progress: try again shortly, do not spin
            self._timer = self._loop.call_later(_SPIN_PAUSE_S, self._fire)
        else:
            self._arm()

    def _end(self, error: BaseException | None) -> None:
        if not self.ended:
            self.ended, self._error = True, error
        self._disarm()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _read(self, stream: AsyncIterator[T]) -> None:
        error: BaseException | None = None
        try:
            while True:
                try:
                    chunk = await anext(stream)
                except StopAsyncIteration:
                    return
                self._add(self._process(chunk))
                self._arm()
                if len(self.batches) >= _BUFFER:
                    self._room = self._loop.create_future()
                    await self._room
        except BaseException as exc:  # delivered to the consumer after the batches before it
            error = exc
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._end(error)
