"""A stream's chunks, interleaved with "a deadline passed" marks while it is silent.

The segmenter's time rule cuts an open step when no token came for a while, so the turn
must wake at a deadline even though the LLM stream has nothing to give. Cancelling a
pending read at the deadline would break the HTTP stream, so once a deadline exists one
reader task per stream pulls chunks into a small bounded buffer and the consumer waits on
a single future, with one timer that is moved only when the deadline changes. Per chunk
that costs a future and a wake-up, not a task, a wait and a timer (the per-token cost of
a busy worker, see ``bench/rooms.py``). Until a deadline first appears the consumer reads
the stream itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Generic, TypeVar

__all__ = ["paced"]

T = TypeVar("T")

_BUFFER = 64
"""Chunks the reader may hold ahead of the consumer before it waits for room."""

_SPIN_PAUSE_S = 0.001
"""Pause after a deadline mark that made no progress (the consumer did not move the deadline)."""


async def paced(
    stream: AsyncIterator[T],
    due: Callable[[], float | None],
    clock: Callable[[], float],
) -> AsyncGenerator[T | None, None]:
    """The stream's chunks, with ``None`` whenever ``due()`` (a ``clock()`` time) passes
    while no chunk is waiting.

    The stream is read ahead by at most a small buffer, and its pending read is cancelled
    only when the consumer stops iterating.
    """
    reader: _Reader[T] | None = None
    try:
        while True:
            deadline = due()
            if reader is None:
                if deadline is None:
                    try:
                        yield await anext(stream)
                    except StopAsyncIteration:
                        return
                    continue
                reader = _Reader(stream)
            if reader.chunks:
                yield reader.take()
                continue
            if reader.ended:
                reader.finish()
                return
            if deadline is not None and deadline <= clock():
                yield None
                if due() == deadline and deadline <= clock():
                    await asyncio.sleep(_SPIN_PAUSE_S)
                continue
            await reader.wait(deadline, clock)
    finally:
        if reader is not None:
            await reader.close()


class _Reader(Generic[T]):
    """Reads ``stream`` in its own task into a bounded buffer; wakes one waiter."""

    def __init__(self, stream: AsyncIterator[T]) -> None:
        self._loop = asyncio.get_running_loop()
        self.chunks: deque[T] = deque()
        self.ended = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._room: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._armed: float | None = None
        self._task = self._loop.create_task(self._read(stream))

    def take(self) -> T:
        """The oldest buffered chunk (there is one); lets a full reader go on."""
        chunk = self.chunks.popleft()
        room = self._room
        if room is not None and not room.done():
            room.set_result(None)
        return chunk

    def finish(self) -> None:
        """Raise what ended the stream, if it was not its normal end."""
        if self._error is not None:
            raise self._error

    async def wait(self, deadline: float | None, clock: Callable[[], float]) -> None:
        """Until a chunk or the end arrives, or ``deadline`` passes."""
        if deadline != self._armed:
            if self._timer is not None:
                self._timer.cancel()
            self._armed = deadline
            self._timer = (
                None
                if deadline is None
                else self._loop.call_later(max(0.0, deadline - clock()), self._wake)
            )
        waiter = self._waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    async def close(self) -> None:
        """Stop reading: cancel the pending read and the timer."""
        if self._timer is not None:
            self._timer.cancel()
        if not self._task.done():
            self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _read(self, stream: AsyncIterator[T]) -> None:
        try:
            while True:
                try:
                    chunk = await anext(stream)
                except StopAsyncIteration:
                    return
                self.chunks.append(chunk)
                self._wake()
                if len(self.chunks) >= _BUFFER:
                    self._room = self._loop.create_future()
                    await self._room
        except BaseException as exc:  # delivered to the consumer after the chunks before it
            self._error = exc
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self.ended = True
            self._wake()
