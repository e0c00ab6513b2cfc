"""Which agent serves which room, kept alive by its worker: the rows the watcher reads.

One row per room (conversation) in ``alicia_agents``:

* an agent joining a room **claims** it (:meth:`Leases.claim`): it becomes the room's
  agent unless another agent holds a lease renewed within the timeout, in which case the
  newcomer must leave (so a late second dispatch never makes two agents serve a room);
* its worker **renews** every lease it holds at once, every heartbeat interval
  (:meth:`Leases.beat`, one statement per worker process);
* a clean leave **releases** the room (:meth:`Leases.release`): the row stays, with no
  agent, so the room's next claim raises its epoch again;
* the watcher finds the leases nobody renews (:meth:`Leases.stale`) and, for a room that
  still has clients, takes the **dispatch decision** in the database
  (:meth:`Leases.begin_dispatch`): under a per-room lock (PostgreSQL advisory lock; SQLite
  serialises writers anyway) it marks the room as being dispatched unless a live lease or
  a recent mark says another watcher (or agent) already has it.

Times are taken from the database clock (``heartbeat_at``, ``dispatched_at``: epoch
seconds of the database), so hosts whose clocks differ agree on which lease is stale; a
:class:`Lease` read back gives them on the reader's clock.

**Fencing.** Each claim raises the row's ``epoch``; the agent holds the epoch it claimed.
An epoch never repeats for a room: a release or a forgotten dead lease clears the row's
agent and keeps its epoch (a deleted row would start again at 1, and an agent stopped at
epoch 1 would pass its check once a third agent claimed the room). Its renewals
(:meth:`Leases.beat`) and every write of its storage writer (:func:`fence_check`, in the
writer's transaction) are conditional on the epoch and on the agent's identity: once
another agent has claimed the room, the old one renews nothing and writes nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import ColumnElement, delete, literal_column, select, text, tuple_, update
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from alicia.agent.engine.sink import Fenced

from .engine import IDLE_TXN_TIMEOUT_S, create_engine, is_postgres
from .errors import _mapped
from .fence import NO_EPOCH, Fence
from .migrate import migrate_once
from .tables import agent_leases as LEASES

__all__ = [
    "LEASE_REQUIRED",
    "Fence",
    "Lease",
    "Leases",
    "fence_check",
    "fence_check_pg",
    "lease_required",
]

LEASE_REQUIRED: Final = '{"alicia_lease": "required"}'
"""The metadata of a dispatch the watcher decided with the database (a takeover, a room
whose agent is gone): the agent it starts may serve the room only with the lease. A
worker that cannot reach the database then refuses the job, so a worker cut off from
the database alone never serves a room another agent is given. Dispatches made while
the watcher itself cannot reach the database carry none: their rooms are served without
failover guarantees until it answers."""


def lease_required(metadata: str | None) -> bool:
    """A job's dispatch ``metadata`` asks for the lease (:data:`LEASE_REQUIRED`)."""
    return bool(metadata) and '"alicia_lease": "required"' in (metadata or "")


_VACANT: Final = {
    "agent_identity": None,
    "worker_id": None,
    "heartbeat_at": 0.0,
    "dispatched_at": None,
    "accepted_at": None,
}
"""A lease row with no agent: what a release or a forgotten dead lease leaves (the epoch
stays)."""

_PG_NOW = "extract(epoch from clock_timestamp())::float8"
_SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"


def db_now(postgres: bool) -> ColumnElement[float]:
    """The database clock as epoch seconds (a SQL expression)."""
    return literal_column(_PG_NOW if postgres else _SQLITE_NOW)


@dataclass(frozen=True, slots=True)
class Lease:
    """One room's lease row, its times on the reader's clock (``time.time()``)."""

    conversation_id: str
    agent_identity: str | None
    worker_id: str | None
    heartbeat_at: float
    """Epoch seconds of the last renewal (0: never)."""
    dispatched_at: float | None
    """Epoch seconds when a watcher last dispatched an agent to the room."""
    epoch: int = 0
    """The generation of the last claim."""
    accepted_at: float | None = None
    """When a worker last started a job for the room (before its agent joined)."""


def _fenced(fence: Fence, row: Any) -> None:
    if row is None and fence.epoch == NO_EPOCH:
        return  # nobody ever claimed the room
    epoch, identity = (None, None) if row is None else (row[0], row[1])
    if epoch is None or int(epoch) != fence.epoch:
        raise Fenced(f"room {fence.room}: lease epoch {fence.epoch} was superseded ({epoch})")
    if fence.identity is not None and identity != fence.identity:
        raise Fenced(f"room {fence.room}: lease epoch {fence.epoch} is no longer this agent's")


async def fence_check(conn: AsyncConnection, fence: Fence | None, *, postgres: bool) -> None:
    """In a write transaction: raise :class:`Fenced` unless ``fence`` still holds. The row
    stays share-locked until the transaction ends, so a claim waits for it."""
    if fence is None or fence.epoch is None:
        return
    c = LEASES.c
    query = select(c.epoch, c.agent_identity).where(c.conversation_id == fence.room)
    if postgres:
        query = query.with_for_update(read=True)
    _fenced(fence, (await conn.execute(query)).first())


async def fence_check_pg(apg: Any, fence: Fence | None) -> None:
    """:func:`fence_check` on a raw asyncpg connection (the writer's fast path)."""
    if fence is None or fence.epoch is None:
        return
    row = await apg.fetchrow(
        "SELECT epoch, agent_identity FROM alicia_agents WHERE conversation_id = $1 FOR SHARE",
        fence.room,
    )
    _fenced(fence, row)


def _lease(row: Any) -> Lease:
    """A row selected with ``age`` and ``dispatch_age`` (database clock) as a Lease."""
    now = time.time()
    beat = 0.0 if not row.heartbeat_at else now - float(row.age)
    dispatched = None if row.dispatch_age is None else now - float(row.dispatch_age)
    accepted = None if row.accept_age is None else now - float(row.accept_age)
    return Lease(
        row.conversation_id,
        row.agent_identity,
        row.worker_id,
        beat,
        dispatched,
        int(row.epoch),
        accepted,
    )


class Leases:
    """The lease table on one database (see the module docstring)."""

    def __init__(self, url: str, *, pool_size: int = 2) -> None:
        """``url``: the storage database (``DATABASE_URL``); ``pool_size``: connections
        kept (two more when busy)."""
        self.url = url
        self._pool_size = pool_size
        self._postgres = is_postgres(url)
        self._engine: AsyncEngine | None = None
        self._migrated = False

    async def _ready(self) -> AsyncEngine:
        if self._engine is None:
            self._engine = create_engine(
                self.url,
                pool_size=self._pool_size,
                pre_ping=True,
                idle_txn_timeout_s=IDLE_TXN_TIMEOUT_S,
            )
        if not self._migrated:
            await migrate_once(self._engine)
            self._migrated = True
        return self._engine

    async def aclose(self) -> None:
        """Release the connections."""
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    @property
    def _now(self) -> ColumnElement[float]:
        return db_now(self._postgres)

    def _insert(self) -> Any:
        return (pg_dialect.insert if self._postgres else sqlite_dialect.insert)(LEASES)

    def _select(self) -> Any:
        c = LEASES.c
        return select(
            LEASES,
            (self._now - c.heartbeat_at).label("age"),
            (self._now - c.dispatched_at).label("dispatch_age"),
            (self._now - c.accepted_at).label("accept_age"),
        )

    async def get(self, room: str) -> Lease | None:
        """The lease of ``room``, if it has one."""
        engine = await self._ready()
        async with _mapped(), engine.connect() as conn:
            row = (
                await conn.execute(self._select().where(LEASES.c.conversation_id == room))
            ).first()
        return None if row is None else _lease(row)

    async def stale(self, timeout_s: float) -> list[Lease]:
        """Leases held by an agent but not renewed within ``timeout_s``."""
        engine = await self._ready()
        c = LEASES.c
        query = self._select().where(
            c.agent_identity.is_not(None), c.heartbeat_at < self._now - timeout_s
        )
        async with _mapped(), engine.connect() as conn:
            return [_lease(row) for row in await conn.execute(query)]

    async def claim(self, room: str, identity: str, worker_id: str, timeout_s: float) -> int | None:
        """Make ``identity`` the agent of ``room``: the epoch it now holds, or None if
        another live agent holds it."""
        engine = await self._ready()
        c = LEASES.c
        insert = self._insert().values(
            conversation_id=room,
            agent_identity=identity,
            worker_id=worker_id,
            heartbeat_at=self._now,
            dispatched_at=None,
            epoch=1,
        )
        taken = insert.excluded
        upsert = insert.on_conflict_do_update(
            index_elements=["conversation_id"],
            set_={
                "agent_identity": taken.agent_identity,
                "worker_id": taken.worker_id,
                "heartbeat_at": taken.heartbeat_at,
                "dispatched_at": None,
                "epoch": c.epoch + 1,
            },
            where=(c.agent_identity.is_(None))
            | (c.agent_identity == taken.agent_identity)
            | (c.heartbeat_at < self._now - timeout_s),
        )
        async with _mapped(), engine.begin() as conn:
            await conn.execute(upsert)
            row = (
                await conn.execute(
                    select(c.agent_identity, c.epoch).where(c.conversation_id == room)
                )
            ).first()
        return int(row.epoch) if row is not None and row.agent_identity == identity else None

    async def beat(self, worker_id: str, held: dict[str, int]) -> set[str]:
        """Renew the leases ``worker_id`` holds (room -> epoch), each only while still at
        its epoch; the rooms renewed."""
        if not held:
            return set()
        engine = await self._ready()
        c = LEASES.c
        statement = (
            update(LEASES)
            .where(c.worker_id == worker_id, tuple_(c.conversation_id, c.epoch).in_(held.items()))
            .values(heartbeat_at=self._now)
            .returning(c.conversation_id)
        )
        async with _mapped(), engine.begin() as conn:
            return {row[0] for row in await conn.execute(statement)}

    async def accept(self, room: str, timeout_s: float, window_s: float) -> bool:
        """A worker takes a job for ``room`` (its agent joins next): noted on the room's
        lease row, so the watcher does not dispatch again. False, and nothing noted, if a
        live agent (renewed within ``timeout_s``) serves the room or another worker took a
        job for it within ``window_s`` (its agent is on its way): do not join. Of jobs
        that race for a room, one is taken (the row's lock orders them)."""
        engine = await self._ready()
        c = LEASES.c
        now = self._now
        free = (c.agent_identity.is_(None) | (c.heartbeat_at < now - timeout_s)) & (
            c.accepted_at.is_(None) | (c.accepted_at < now - window_s)
        )
        statement = (
            update(LEASES)
            .where(c.conversation_id == room, free)
            .values(accepted_at=now)
            .returning(c.conversation_id)
        )
        async with _mapped(), engine.begin() as conn:
            if (await conn.execute(statement)).first() is not None:
                return True
            held = await conn.scalar(select(c.conversation_id).where(c.conversation_id == room))
        return held is None

    async def release(self, room: str, identity: str) -> None:
        """``identity`` no longer serves ``room`` (a clean leave): its own entry only. The
        row keeps its epoch (see the module docstring)."""
        engine = await self._ready()
        c = LEASES.c
        statement = (
            update(LEASES)
            .where(c.conversation_id == room, c.agent_identity == identity)
            .values(**_VACANT)
        )
        async with _mapped(), engine.begin() as conn:
            await conn.execute(statement)

    async def forget(self, room: str, timeout_s: float, grace_s: float) -> bool:
        """Clear ``room``'s lease if it is dead (not renewed within ``timeout_s``, no
        dispatch within ``grace_s``): the room is gone or has nobody left to serve. The
        row keeps its epoch."""
        engine = await self._ready()
        c = LEASES.c
        statement = (
            update(LEASES)
            .where(
                c.conversation_id == room,
                c.agent_identity.is_not(None),
                c.heartbeat_at < self._now - timeout_s,
                c.dispatched_at.is_(None) | (c.dispatched_at < self._now - grace_s),
            )
            .values(**_VACANT)
        )
        async with _mapped(), engine.begin() as conn:
            result = await conn.execute(statement)
        return bool(result.rowcount)

    async def sweep(self, older_than_s: float) -> int:
        """Clear dispatch marks no agent claimed, older than ``older_than_s`` (a dispatch
        that failed in a room that is gone); how many. A row never claimed goes; a claimed
        one keeps its epoch."""
        engine = await self._ready()
        c = LEASES.c
        unclaimed = c.agent_identity.is_(None), c.dispatched_at < self._now - older_than_s
        async with _mapped(), engine.begin() as conn:
            gone = await conn.execute(delete(LEASES).where(*unclaimed, c.epoch == 0))
            kept = await conn.execute(
                update(LEASES).where(*unclaimed).values(dispatched_at=None, accepted_at=None)
            )
        return int(gone.rowcount or 0) + int(kept.rowcount or 0)

    async def begin_dispatch(self, room: str, timeout_s: float, grace_s: float) -> bool:
        """Decide, once for every watcher, to dispatch an agent to ``room``.

        True (and the room marked) unless a live lease or a dispatch within ``grace_s``
        already covers it.
        """
        engine = await self._ready()
        c = LEASES.c
        async with _mapped(), engine.begin() as conn:
            if self._postgres:
                await conn.execute(
                    text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": f"alicia:{room}"}
                )
            query = self._select().where(c.conversation_id == room)
            if self._postgres:
                query = query.with_for_update(of=LEASES)
            row = (await conn.execute(query)).first()
            if row is not None:
                if row.agent_identity and row.heartbeat_at and float(row.age) <= timeout_s:
                    return False
                if row.dispatch_age is not None and float(row.dispatch_age) < grace_s:
                    return False
            insert = self._insert().values(
                conversation_id=room,
                agent_identity=None,
                worker_id=None,
                heartbeat_at=0.0,
                dispatched_at=self._now,
            )
            await conn.execute(
                insert.on_conflict_do_update(
                    index_elements=["conversation_id"], set_={"dispatched_at": self._now}
                )
            )
        return True
