"""The lease keeper's thread, against a lease table that answers when the test says: a
room cancelled while it claims leaves no lease renewed for nobody, and a heartbeat keeps
renewing while the rooms' loop is blocked."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from alicia.agent.rooms.lease_keeper import LeaseKeeper


class _Table:
    """A lease table whose claims wait for :attr:`answer` (set from the test)."""

    def __init__(self) -> None:
        self.claiming = threading.Event()
        self.answer = threading.Event()
        self.beats = 0
        self.released: list[tuple[str, str]] = []

    async def claim(self, room: str, identity: str, worker: str, timeout_s: float) -> int:
        self.claiming.set()
        await asyncio.to_thread(self.answer.wait, 10)
        return 1

    async def beat(self, worker: str, claimed: dict[str, int]) -> set[str]:
        self.beats += 1
        return set(claimed)

    async def release(self, room: str, identity: str) -> None:
        self.released.append((room, identity))

    async def aclose(self) -> None:
        """Nothing to close."""


def _keeper(table: _Table) -> LeaseKeeper:
    keeper = LeaseKeeper(
        "postgresql+asyncpg://nobody@127.0.0.1:1/none", interval_s=0.05, timeout_s=0.5
    )
    keeper.leases = table  # type: ignore[assignment]
    return keeper


async def test_a_room_cancelled_while_it_claims_releases_what_the_claim_got() -> None:
    table = _Table()
    keeper = _keeper(table)
    try:
        claiming = asyncio.ensure_future(keeper.hold("room-c", "agent-c"))
        assert await asyncio.to_thread(table.claiming.wait, 5)
        claiming.cancel()  # the job is shut down while its claim is under way
        with pytest.raises(asyncio.CancelledError):
            await claiming
        table.answer.set()  # the claim completes on the keeper's thread all the same
        async with asyncio.timeout(5):
            while table.released != [("room-c", "agent-c")]:
                await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)
        beats = table.beats
        await asyncio.sleep(0.3)  # nothing is renewed for a room nobody serves
        assert table.beats == beats
    finally:
        await keeper.aclose()


async def test_renewals_go_on_while_the_rooms_loop_is_blocked() -> None:
    table = _Table()
    table.answer.set()
    keeper = _keeper(table)
    try:
        hold = await keeper.hold("room-b", "agent-b")
        assert hold is not None
        beats = table.beats
        time.sleep(1.0)  # noqa: ASYNC251 - this loop (the rooms') blocked: 2 lease timeouts
        assert table.beats - beats >= 5  # every 0.05 s, on the keeper's own thread
        assert await hold.held()
    finally:
        await keeper.aclose()
