"""One event loop for every room of a thread-executor worker.

livekit-agents' thread job executor runs each job (room) in its own thread with its own
event loop. With tens of rooms in one process that is tens of Python threads taking turns
on the GIL, plus the native threads that call into Python for every FFI event: measured
with ``bench/rooms.py`` at 40 rooms, ~1,500 futex calls per second per job thread and
half a core spent switching. :class:`RoomLoop` runs the rooms' own work on one shared
loop in one thread; each job thread only waits for its room's coroutine to finish.
Under load, that one loop also handles many rooms' events per wake-up.

The loop thread starts with the first room and stops when the last room is done (every
coroutine it ran has finished), so it never outlives its work.

When the process's room loop (:func:`shared_room_loop`) first starts, the process's
objects so far (its modules, the worker's set-up:
about 300,000) are collected once and frozen (``gc.freeze``), as livekit-agents freezes
its forkserver's: a full collection of the cyclic garbage collector otherwise walks them
all, holding the GIL for about 0.4 s on the 2-core development VM, every room's loop
stopped meanwhile (``bench/rooms.py`` saw one per trial, in its step delivery p99). What
the rooms arriving at that moment hold is frozen with it: their garbage is then freed by
reference counting only, once, a bounded amount.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["RoomLoop", "shared_room_loop"]

logger = logging.getLogger("alicia.room_loop")

T = TypeVar("T")


class RoomLoop:
    """A reference-counted event loop thread that runs coroutines for other loops."""

    def __init__(self, name: str = "alicia-rooms", *, freeze: bool = False) -> None:
        """A room loop whose thread is called ``name``; nothing starts until :meth:`run`.
        ``freeze``: its first start freezes the process's objects (the module docstring)."""
        self._name = name
        self._freeze = freeze
        self._lock = threading.Lock()
        self._users = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """Whether the loop thread is running (some coroutine is using it)."""
        with self._lock:
            return self._thread is not None and self._thread.is_alive()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the shared loop and return its result here.

        Cancelling the caller cancels ``coro`` and waits until it has finished unwinding.
        """
        try:
            loop = self._acquire()
        except BaseException:
            coro.close()  # never started: no "never awaited" warning
            raise
        try:
            return await _run_elsewhere(loop, coro)
        finally:
            await self._release()

    def _acquire(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                if self._freeze:
                    _freeze_once()
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=_serve_forever, args=(loop,), name=self._name, daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
                logger.info("room loop started", extra={"loop_thread": self._name})
            self._users += 1
            return self._loop

    async def _release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users or self._loop is None:
                return
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            await asyncio.to_thread(thread.join)
        logger.info("room loop stopped", extra={"loop_thread": self._name})


_frozen = False


def _freeze_once() -> None:
    """Collect, then freeze what the process holds, the first time (see the docstring)."""
    global _frozen
    if _frozen:
        return
    _frozen = True
    gc.collect()  # no garbage cycle is frozen for the process's lifetime
    gc.freeze()


def _serve_forever(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
        leftovers = asyncio.all_tasks(loop)
        for task in leftovers:  # none normally: every run() waits for its coroutine
            task.cancel()
        if leftovers:
            loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()


async def _run_elsewhere(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    here = asyncio.get_running_loop()
    done: asyncio.Future[T] = here.create_future()
    tasks: list[asyncio.Task[T]] = []

    def report(task: asyncio.Task[T]) -> None:
        with contextlib.suppress(RuntimeError):  # the caller's loop is gone
            here.call_soon_threadsafe(_copy_outcome, task, done)

    def start() -> None:
        task = loop.create_task(coro)
        task.add_done_callback(report)
        tasks.append(task)

    def cancel() -> None:  # runs after start(): same loop, FIFO
        for task in tasks:
            task.cancel()

    loop.call_soon_threadsafe(start)
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        loop.call_soon_threadsafe(cancel)
        while not done.done():  # wait for the unwind, even through repeated cancels
            with contextlib.suppress(BaseException):
                await asyncio.shield(done)
        if not done.cancelled() and done.exception() is not None:
            logger.warning("room coroutine failed while cancelled", exc_info=done.exception())
        raise


def _copy_outcome(task: asyncio.Task[T], done: asyncio.Future[T]) -> None:
    if done.done():
        return
    if task.cancelled():
        done.cancel()
    elif (exc := task.exception()) is not None:
        done.set_exception(exc)
    else:
        done.set_result(task.result())


_shared = RoomLoop(freeze=True)


def shared_room_loop() -> RoomLoop:
    """The process's room loop (one per process)."""
    return _shared
