"""Which agent serves which room, kept alive by its worker: the rows the watcher reads.

One row per room (conversation) in ``alicia_agents``:

* an agent joining a room **claims** it (:meth:`Leases.claim`): it becomes the room's
  agent unless another agent holds a lease renewed within the timeout, in which case the
  newcomer must leave (so a late second dispatch never makes two agents serve a room);
* its worker **renews** every lease it holds at once, every heartbeat interval
  (:meth:`Leases.beat`, one statement per worker process);
* a clean leave **releases** the row (:meth:`Leases.release`);
* the watcher finds the leases nobody renews (:meth:`Leases.stale`) and, for a room that
  still has clients, takes the **dispatch decision** in the database
  (:meth:`Leases.begin_dispatch`): under a per-room lock (PostgreSQL advisory lock; SQLite
  serialises writers anyway) it marks the room as being dispatched unless a live lease or
  a recent mark says another watcher (or agent) already has it.

Times are epoch seconds written by the processes (``time.time()``), so the watcher and the
workers must share a clock (NTP; one host in the tests).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select, text, update
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.ext.asyncio import AsyncEngine

from .engine import create_engine, is_postgres
from .errors import _mapped
from .migrate import migrate_once
from .tables import agent_leases as LEASES

__all__ = ["Lease", "Leases"]


@dataclass(frozen=True, slots=True)
class Lease:
    """One room's lease row."""

    conversation_id: str
    agent_identity: str | None
    worker_id: str | None
    heartbeat_at: float
    """Epoch seconds of the last renewal (0: never)."""
    dispatched_at: float | None
    """Epoch seconds when a watcher last dispatched an agent to the room."""


def _lease(row: Any) -> Lease:
    return Lease(
        row.conversation_id,
        row.agent_identity,
        row.worker_id,
        float(row.heartbeat_at or 0.0),
        None if row.dispatched_at is None else float(row.dispatched_at),
    )


class Leases:
    """The lease table on one database (see the module docstring)."""

    def __init__(self, url: str) -> None:
        """``url``: the storage database (``DATABASE_URL``)."""
        self.url = url
        self._postgres = is_postgres(url)
        self._engine: AsyncEngine | None = None
        self._migrated = False

    async def _ready(self) -> AsyncEngine:
        if self._engine is None:
            self._engine = create_engine(self.url, pool_size=2, pre_ping=True)
        if not self._migrated:
            await migrate_once(self._engine)
            self._migrated = True
        return self._engine

    async def aclose(self) -> None:
        """Release the connections."""
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    def _insert(self) -> Any:
        return (pg_dialect.insert if self._postgres else sqlite_dialect.insert)(LEASES)

    async def get(self, room: str) -> Lease | None:
        """The lease of ``room``, if it has one."""
        engine = await self._ready()
        async with _mapped(), engine.connect() as conn:
            row = (
                await conn.execute(select(LEASES).where(LEASES.c.conversation_id == room))
            ).first()
        return None if row is None else _lease(row)

    async def stale(self, timeout_s: float) -> list[Lease]:
        """Leases held by an agent but not renewed within ``timeout_s``."""
        engine = await self._ready()
        before = time.time() - timeout_s
        query = select(LEASES).where(
            LEASES.c.agent_identity.is_not(None), LEASES.c.heartbeat_at < before
        )
        async with _mapped(), engine.connect() as conn:
            return [_lease(row) for row in await conn.execute(query)]

    async def claim(self, room: str, identity: str, worker_id: str, timeout_s: float) -> bool:
        """Make ``identity`` the agent of ``room``; False if another live agent holds it."""
        engine = await self._ready()
        now = time.time()
        c = LEASES.c
        insert = self._insert().values(
            conversation_id=room,
            agent_identity=identity,
            worker_id=worker_id,
            heartbeat_at=now,
            dispatched_at=None,
        )
        taken = insert.excluded
        upsert = insert.on_conflict_do_update(
            index_elements=["conversation_id"],
            set_={
                "agent_identity": taken.agent_identity,
                "worker_id": taken.worker_id,
                "heartbeat_at": taken.heartbeat_at,
                "dispatched_at": None,
            },
            where=(c.agent_identity.is_(None))
            | (c.agent_identity == taken.agent_identity)
            | (c.heartbeat_at < now - timeout_s),
        )
        async with _mapped(), engine.begin() as conn:
            await conn.execute(upsert)
            holder = await conn.scalar(select(c.agent_identity).where(c.conversation_id == room))
        return holder == identity

    async def beat(self, worker_id: str) -> set[str]:
        """Renew every lease ``worker_id`` holds; the rooms it still holds."""
        engine = await self._ready()
        statement = (
            update(LEASES)
            .where(LEASES.c.worker_id == worker_id)
            .values(heartbeat_at=time.time())
            .returning(LEASES.c.conversation_id)
        )
        async with _mapped(), engine.begin() as conn:
            return {row[0] for row in await conn.execute(statement)}

    async def release(self, room: str, identity: str) -> None:
        """``identity`` no longer serves ``room`` (a clean leave)."""
        engine = await self._ready()
        c = LEASES.c
        statement = delete(LEASES).where(c.conversation_id == room, c.agent_identity == identity)
        async with _mapped(), engine.begin() as conn:
            await conn.execute(statement)

    async def begin_dispatch(self, room: str, timeout_s: float, grace_s: float) -> bool:
        """Decide, once for every watcher, to dispatch an agent to ``room``.

        True (and the room marked) unless a live lease or a dispatch within ``grace_s``
        already covers it.
        """
        engine = await self._ready()
        now = time.time()
        c = LEASES.c
        async with _mapped(), engine.begin() as conn:
            if self._postgres:
                await conn.execute(
                    text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": f"alicia:{room}"}
                )
            query = select(LEASES).where(c.conversation_id == room)
            if self._postgres:
                query = query.with_for_update()
            row = (await conn.execute(query)).first()
            if row is not None:
                lease = _lease(row)
                if lease.agent_identity and now - lease.heartbeat_at <= timeout_s:
                    return False
                if lease.dispatched_at is not None and now - lease.dispatched_at < grace_s:
                    return False
            insert = self._insert().values(
                conversation_id=room,
                agent_identity=None,
                worker_id=None,
                heartbeat_at=0.0,
                dispatched_at=now,
            )
            await conn.execute(
                insert.on_conflict_do_update(
                    index_elements=["conversation_id"], set_={"dispatched_at": now}
                )
            )
        return True
