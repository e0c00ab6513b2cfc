"""A failover worker's storage warm-up (Alembic to ``head`` as it starts) keeps off the
worker's loop: Alembic's imports and migrations are synchronous, and on the loop they held
up the first job request past livekit-server's assignment timeout on a loaded machine (a
room left without an agent: ``AssignmentTimeoutError`` in the worker's log)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from alicia.agent.rooms import failover
from alicia.agent.storage import migrate


async def test_the_storage_warm_up_runs_off_the_worker_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran_on: list[int] = []

    async def recorded(engine: AsyncEngine) -> None:
        ran_on.append(threading.get_ident())

    monkeypatch.setattr(migrate, "migrate_once", recorded)
    failover.warm_storage("postgresql+asyncpg://alicia@127.0.0.1:9/never_connected")
    async with asyncio.timeout(30):
        while failover._TASKS:
            await asyncio.gather(*failover._TASKS)
    assert len(ran_on) == 1
    assert ran_on[0] != threading.get_ident()  # not on this (the worker's) loop's thread
