"""A fenced agent leaves its room at once, however long the SDK's disconnect takes.

livekit's SDK answers a disconnect only once a reconnection under way has ended. After
a stall that is one: in a stress run, three fenced agents waited 14 s in ``disconnect()``
while the SDK rejoined their rooms, until the drain cancelled them (the stall test's
"an old agent stayed"). :func:`leave` is bounded, and the agent goes on to keep itself
out through the server."""

from __future__ import annotations

import asyncio
import logging
from typing import cast

import pytest
from livekit import rtc

from alicia.agent.rooms import failover
from alicia.agent.rooms.failover import leave


class _Room:
    """The part of ``rtc.Room`` :func:`leave` uses."""

    name = "room-l"

    def __init__(self, hangs: bool) -> None:
        self.hangs = hangs
        self.asked = 0

    async def disconnect(self) -> None:
        self.asked += 1
        if self.hangs:
            await asyncio.Event().wait()  # a reconnection that does not end


async def test_a_disconnect_that_hangs_is_given_up_on_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    room = _Room(hangs=True)
    loop = asyncio.get_running_loop()
    began = loop.time()
    with caplog.at_level(logging.WARNING, "alicia.worker"):
        assert await leave(cast(rtc.Room, room), within=0.2) is False
    assert loop.time() - began < 5.0  # not the 14 s of the stress run
    assert room.asked == 1
    mine = [r.getMessage() for r in caplog.records if r.name == "alicia.worker"]
    assert mine == ["the SDK is slow to leave the room"]
    # Not cut short (the SDK's room would stay "connected"): a second leave waits on it.
    assert await leave(cast(rtc.Room, room), within=0.1) is False
    assert room.asked == 1
    failover._LEAVING[cast(rtc.Room, room)].cancel()  # the test's end, not the agent's


async def test_a_disconnect_that_ends_is_waited_for() -> None:
    room = _Room(hangs=False)
    assert await leave(cast(rtc.Room, room), within=0.2) is True
    assert room.asked == 1
