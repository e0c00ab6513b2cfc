"""RoomLoop: coroutines of other loops run on one reference-counted loop thread."""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine
from typing import Any

import pytest

from alicia.agent.rooms.room_loop import RoomLoop, shared_room_loop
from tests.paths import ROOT


class Boom(RuntimeError):
    """A distinctive error raised inside a room coroutine."""


def _alive(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


async def _where() -> tuple[int, asyncio.AbstractEventLoop, threading.Thread]:
    return threading.get_ident(), asyncio.get_running_loop(), threading.current_thread()


async def test_the_result_comes_back_to_the_caller() -> None:
    async def answer(x: int) -> dict[str, int]:
        await asyncio.sleep(0)
        return {"x": x, "double": 2 * x}

    assert await RoomLoop("rl-result").run(answer(21)) == {"x": 21, "double": 42}


async def test_an_exception_propagates_with_its_type_and_the_loop_still_stops() -> None:
    rl = RoomLoop("rl-error")

    async def fail() -> None:
        await asyncio.sleep(0)
        raise Boom("broken in room")

    with pytest.raises(Boom, match="broken in room") as caught:
        await rl.run(fail())
    assert type(caught.value) is Boom
    assert not rl.running and _alive("rl-error") == []
    assert await rl.run(asyncio.sleep(0, result="again")) == "again"


async def test_concurrent_runs_share_one_other_thread_and_loop() -> None:
    rl = RoomLoop("rl-one-thread")
    events: list[str] = []

    async def room(name: str) -> tuple[int, asyncio.AbstractEventLoop, threading.Thread]:
        events.append(f"start {name}")
        where = await _where()
        await asyncio.sleep(0.05)
        events.append(f"end {name}")
        return where

    (id_a, loop_a, thread_a), (id_b, loop_b, thread_b) = await asyncio.gather(
        rl.run(room("a")), rl.run(room("b"))
    )
    # Both were in flight at once (neither ended before the other started).
    assert events[:2] == ["start a", "start b"] and sorted(events[2:]) == ["end a", "end b"]
    assert id_a == id_b != threading.get_ident()
    assert loop_a is loop_b and loop_a is not asyncio.get_running_loop()
    assert thread_a is thread_b and thread_a.name == "rl-one-thread"


async def test_callers_on_two_loops_in_two_threads_both_get_their_results() -> None:
    rl = RoomLoop("rl-two-callers")
    inside = 0
    most_inside = 0

    async def room(name: str) -> tuple[str, int]:
        nonlocal inside, most_inside
        inside += 1  # only the room loop's thread touches these
        most_inside = max(most_inside, inside)
        async with asyncio.timeout(5):
            while most_inside < 2:  # wait until the other caller's room is in too
                await asyncio.sleep(0.005)
        inside -= 1
        return name, threading.get_ident()

    results: dict[str, tuple[tuple[str, int], int]] = {}
    errors: list[BaseException] = []

    def caller(name: str) -> None:
        async def main() -> tuple[str, int]:
            return await rl.run(room(name))

        try:
            results[name] = (asyncio.run(main()), threading.get_ident())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(n,)) for n in ("left", "right")]
    for t in threads:
        t.start()
    for t in threads:
        await asyncio.to_thread(t.join, 10)
    assert errors == []
    assert sorted(results) == ["left", "right"]
    (left, left_caller), (right, right_caller) = results["left"], results["right"]
    assert (left[0], right[0]) == ("left", "right")
    assert left[1] == right[1]  # one room thread for both
    assert len({left[1], left_caller, right_caller, threading.get_ident()}) == 4
    assert most_inside == 2 and not rl.running and _alive("rl-two-callers") == []


async def test_cancelling_the_caller_cancels_the_room_coroutine_and_waits_for_its_unwind() -> None:
    rl = RoomLoop("rl-cancel")
    started = threading.Event()
    log: list[str] = []

    async def room() -> str:
        started.set()
        try:
            await asyncio.sleep(30)
            return "not cancelled"
        except asyncio.CancelledError:
            log.append("cancelled")
            raise
        finally:
            await asyncio.sleep(0.1)  # a slow unwind: the caller must wait for it
            log.append("finally done")

    # Another run keeps the loop up, so stopping the loop cannot be what waits for the unwind.
    keep_open = threading.Event()
    holder = asyncio.create_task(rl.run(asyncio.to_thread(keep_open.wait, 10)))
    try:
        task = asyncio.create_task(rl.run(room()))
        assert await asyncio.to_thread(started.wait, 5)
        t0 = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert log == ["cancelled", "finally done"]
        assert time.monotonic() - t0 >= 0.09  # it did wait for the unwind
        assert task.cancelled() and rl.running
    finally:
        keep_open.set()
    assert await holder is True
    assert not rl.running and _alive("rl-cancel") == []


async def test_cancelling_one_caller_leaves_the_other_room_running() -> None:
    rl = RoomLoop("rl-cancel-one")
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await asyncio.sleep(30)

    async def slow() -> str:
        await asyncio.sleep(0.2)
        return "slow done"

    doomed = asyncio.create_task(rl.run(forever()))
    survivor = asyncio.create_task(rl.run(slow()))
    assert await asyncio.to_thread(started.wait, 5)
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert rl.running  # the other run still holds the loop
    assert await survivor == "slow done"
    assert not rl.running


async def test_the_thread_stops_after_the_last_run_and_restarts_on_the_next() -> None:
    rl = RoomLoop("rl-lifecycle")
    assert not rl.running and _alive("rl-lifecycle") == []

    release_first, release_second = threading.Event(), threading.Event()

    async def held(release: threading.Event) -> threading.Thread:
        while not release.is_set():
            await asyncio.sleep(0.005)
        return threading.current_thread()

    first = asyncio.create_task(rl.run(held(release_first)))
    second = asyncio.create_task(rl.run(held(release_second)))
    await asyncio.sleep(0.05)
    assert rl.running and len(_alive("rl-lifecycle")) == 1

    release_first.set()
    thread_1 = await first
    assert rl.running and thread_1.is_alive()  # the second run still uses it
    release_second.set()
    assert await second is thread_1
    assert not rl.running and not thread_1.is_alive() and _alive("rl-lifecycle") == []

    _, loop_2, thread_2 = await rl.run(_where())
    assert thread_2 is not thread_1 and thread_2.name == "rl-lifecycle"
    assert not thread_2.is_alive() and loop_2.is_closed()
    assert not rl.running and _alive("rl-lifecycle") == []


async def test_many_sequential_runs_leave_no_thread_behind() -> None:
    rl = RoomLoop("rl-many")
    seen: set[int] = set()
    for i in range(20):
        ident, _, _ = await rl.run(_where())
        seen.add(ident)
        assert await rl.run(asyncio.sleep(0, result=i)) == i
    assert threading.get_ident() not in seen
    assert not rl.running and _alive("rl-many") == []


def test_shared_room_loop_is_one_per_process() -> None:
    assert shared_room_loop() is shared_room_loop()
    assert isinstance(shared_room_loop(), RoomLoop)


async def test_every_coroutine_handed_over_runs_to_completion() -> None:
    rl = RoomLoop("rl-awaited")
    coros: list[Coroutine[Any, Any, int]] = []

    async def value(i: int) -> int:
        await asyncio.sleep(0)
        return i

    for i in range(5):
        coros.append(value(i))
    assert await asyncio.gather(*(rl.run(c) for c in coros)) == [0, 1, 2, 3, 4]
    assert [inspect.getcoroutinestate(c) for c in coros] == [inspect.CORO_CLOSED] * 5


async def test_a_caller_cancelled_at_once_leaves_nothing_running() -> None:
    rl = RoomLoop("rl-cancel-at-once")
    reached: list[str] = []

    async def room() -> None:
        reached.append("started")
        await asyncio.sleep(30)
        reached.append("slept")  # never: cancelled while sleeping

    coro = room()
    task = asyncio.create_task(rl.run(coro))
    await asyncio.sleep(0)  # run() has handed the coroutine over; it may not have started
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert "slept" not in reached
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED
    assert not rl.running and _alive("rl-cancel-at-once") == []


_FREEZE_SCRIPT = """
import asyncio, gc, weakref
from alicia.agent.rooms.room_loop import RoomLoop, shared_room_loop

class Node:
    pass

gc.disable()  # only the room loop's own collection may take the cycle below
cycle = Node()
cycle.me = cycle
alive = weakref.ref(cycle)
del cycle
assert gc.get_freeze_count() == 0 and alive() is not None

async def nothing():
    return 1

async def main():
    await RoomLoop("rl-own").run(nothing())  # a loop of its own freezes nothing
    assert gc.get_freeze_count() == 0
    await shared_room_loop().run(nothing())
    first = gc.get_freeze_count()
    await shared_room_loop().run(nothing())  # stopped and started again
    print(first, gc.get_freeze_count(), alive() is None)

asyncio.run(main())
"""


def test_the_first_start_collects_then_freezes_what_the_process_holds() -> None:
    """A full collection must not walk the worker's modules and set-up while rooms wait:
    the process's room loop freezes them at its first start, once, after collecting the
    garbage there was (a garbage cycle frozen would never be freed)."""
    done = subprocess.run(
        [sys.executable, "-c", _FREEZE_SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    first, later, collected = done.stdout.split()
    assert int(first) > 10_000  # the interpreter's and the imports' objects
    assert later == first  # once per process
    assert collected == "True"
