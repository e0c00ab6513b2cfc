"""A worker's room leases (``ALICIA_FAILOVER``).

An agent serves a room only once it holds the room's lease
(:mod:`alicia.agent.storage.leases`); one task per process renews every lease the
process holds every ``ALICIA_HEARTBEAT_INTERVAL``, so a dead worker's leases go stale
and the watcher (``python -m alicia.agent.watch``) brings its rooms a new agent.
The keeper's claims and renewals run on a thread of their own (``alicia-leases``, with
its own event loop and connections), not on the rooms' loop: a loop busy with many
rooms (or a slow synchronous call on it) does not read as a dead worker, so no room
moves off a live one. A stopped or starved *process* stops renewing, and is fenced.
Each claim gives the agent the lease's epoch (its :class:`Hold`): its renewals and its
storage writes are conditional on it, and after a stall (SIGSTOP, a starved process)
it sends nothing until a renewal confirms it still holds the room; a lost lease makes
the agent leave at once. A room that starts while the database is away is served without
those guarantees (logged) and claimed once the database answers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Coroutine
from typing import Any, Final, TypeVar

from alicia.agent.settings import Settings
from alicia.agent.storage.fence import NO_EPOCH
from alicia.agent.storage.leases import Fence, Leases
from alicia.agent.telemetry.instruments import LEASE_CLAIMS, TAKEOVERS, lease_span

__all__ = [
    "ACCEPT_REQUIRED_FACTOR",
    "ACCEPT_WINDOW_S",
    "WORKER_ID",
    "Hold",
    "LeaseKeeper",
    "keeper_for",
    "lease_keeper",
]

logger = logging.getLogger("alicia.worker")

T = TypeVar("T")

WORKER_ID: Final = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
"""This process's id in the lease table."""
ACCEPT_REQUIRED_FACTOR: Final = 4
"""A job whose dispatch needs the lease waits this many lease timeouts for the database
before it is refused (well within livekit-server's 10 s job assignment timeout)."""
KEEPER_POOL: Final = 4
"""Connections the keeper keeps: one process's claims, renewals and job acceptances share
them (a takeover of many rooms sends two job requests per room at once, each accepted with
a query; with two, the accepts queued past the watcher's follow-up and drew more)."""
ACCEPT_WINDOW_S: Final = 5.0
"""A job taken for a room has this long for its agent to claim it; meanwhile further
dispatches to the room are refused (the watcher sends two at once on a takeover)."""


class Hold:
    """One agent's lease on one room: its :class:`Fence` (the epoch its storage writes are
    conditional on) and the event set once the lease is lost. The conversation's
    :class:`~alicia.agent.engine.outbox.Tenure`. Made on the room's loop; the keeper's
    thread updates it (plain attributes, and :attr:`lost` set on the room's loop)."""

    def __init__(
        self,
        keeper: LeaseKeeper,
        room: str,
        identity: str,
        epoch: int | None,
        home: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """``epoch`` None: not claimed yet (the database is away); ``home``: the room's
        loop (default: the running one)."""
        self.keeper = keeper
        self.room = room
        self.identity = identity
        self.fence = Fence(room, epoch, identity)
        self.lost = asyncio.Event()
        """Set (on the room's loop) once another agent holds the room: leave it at once."""
        self._home = home or asyncio.get_running_loop()
        self._taken = False
        self.suspect = False
        """The process stalled since the last renewal: confirm before sending."""
        self.confirmed_at = time.monotonic()
        """Monotonic time a renewal (or the claim) that succeeded was started: the lease
        was this agent's then, and is for the lease timeout after."""

    @property
    def taken(self) -> bool:
        """Another agent holds the room (known for sure: leave it)."""
        return self._taken

    def unconfirmed(self) -> bool:
        """Renewals have failed for longer than the lease timeout (the database is away
        from this worker, perhaps only from it): the watcher may have moved the room."""
        if self.fence.epoch is None:
            return False  # never claimed: served without failover guarantees
        return time.monotonic() - self.confirmed_at > self.keeper.timeout_s

    def doubtful(self) -> bool:
        """Whether a renewal must confirm the lease before anything more is sent."""
        return self.keeper.stalled() or self.suspect or self.unconfirmed()

    async def held(self) -> bool:
        """Whether this agent may still send: at once while its renewals succeed; after a
        stall (SIGSTOP, a starved process) or once renewals have failed for the lease
        timeout, only once a renewal confirms it."""
        if self._taken:
            return False
        if self.keeper.stalled():
            self.suspect = True
        if self.suspect or self.unconfirmed():
            await self.keeper.beat_now()
        return not (self._taken or self.suspect or self.unconfirmed())

    def lose(self) -> None:
        """Storage refused this agent's writes, or its late claim: the room is another
        agent's now. A hold never claimed gets an epoch no lease has, so that its
        writer's last flush is refused too instead of passing unfenced. Any thread."""
        if self.fence.epoch is None:
            self.fence.epoch = NO_EPOCH
        if self._taken:
            return
        self._taken = True
        logger.warning("room lease lost: leaving", extra={"room": self.room})
        with lease_span("alicia.lease.lost", self.room, **_epoch(self.fence.epoch)):
            try:
                here = asyncio.get_running_loop() is self._home
            except RuntimeError:
                here = False
            if here:
                self.lost.set()
            else:
                with contextlib.suppress(RuntimeError):  # the room's loop is closed: gone
                    self._home.call_soon_threadsafe(self.lost.set)


class LeaseKeeper:
    """The leases one process's rooms hold, renewed together on a thread of their own
    (see the module docstring). Callable from any event loop."""

    def __init__(self, url: str, *, interval_s: float, timeout_s: float) -> None:
        """Leases on the storage database ``url``; nothing starts until the first call."""
        self.leases = Leases(url, pool_size=KEEPER_POOL)
        """The lease table, used on the keeper's thread only."""
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._held: dict[tuple[str, str], Hold] = {}
        """(room, identity) -> its hold (the keeper's thread only)."""
        self._task: asyncio.Task[None] | None = None
        self._renewal: asyncio.Task[None] | None = None
        """The renewal under way (at most one; it ends on its own)."""
        self._ticked = time.monotonic()
        """Monotonic time of the heartbeat loop's last turn (a long gap: the process
        stalled)."""
        self._beat_lock = asyncio.Lock()  # made again with each loop of the keeper's
        self._failing = False
        self._start = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def _home(self) -> asyncio.AbstractEventLoop:
        """The keeper's own loop, on its ``alicia-leases`` thread (started at first use; a
        worker's keeper lives as long as its process, idle while it holds no room)."""
        with self._start:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="alicia-leases", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
                self._beat_lock = asyncio.Lock()
            return self._loop

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``coro`` on the keeper's thread, in this context (spans nest)."""
        context = contextvars.copy_context()
        return context.run(asyncio.run_coroutine_threadsafe, coro, self._home())

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the keeper's thread (in this context: its spans stay under the
        caller's) and return its result here; cancelling the caller cancels it."""
        if asyncio.get_running_loop() is self._home():
            return await coro
        return await asyncio.wrap_future(self._submit(coro))

    async def aclose(self) -> None:
        """Stop renewing, release the connections and stop the keeper's thread (its holds
        are left to go stale)."""
        with self._start:
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        async def close() -> None:
            self._held.clear()
            for task in (self._task, self._renewal):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            await self.leases.aclose()

        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(close(), loop))
        with self._start:
            self._loop = self._thread = None
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join)
        loop.close()

    async def hold(self, room: str, identity: str, *, required: bool = False) -> Hold | None:
        """Claim ``room`` for ``identity``; None if another live agent holds it.

        With the database away the room is served all the same, without failover
        guarantees (logged); the lease is claimed once the database answers again. Unless
        the dispatch ``required`` the lease (the watcher decided with the database: this
        worker alone cannot reach it): None.

        The claim and the start of its renewals are one step on the keeper's thread (a
        busy room loop in between would let the new lease go stale). Cancelled meanwhile,
        the claim still completes there, and what it held is released."""
        work = self._submit(self._hold_here(room, identity, required, asyncio.get_running_loop()))
        try:
            return await asyncio.shield(asyncio.wrap_future(work))
        except asyncio.CancelledError:
            work.add_done_callback(self._release_unclaimed)
            raise

    def _release_unclaimed(self, work: concurrent.futures.Future[Hold | None]) -> None:
        """Release the hold a cancelled :meth:`hold` got (any thread)."""
        if work.cancelled() or work.exception() is not None:
            return
        hold = work.result()
        if hold is not None:
            self._submit(self._release(hold))

    async def _hold_here(
        self, room: str, identity: str, required: bool, home: asyncio.AbstractEventLoop
    ) -> Hold | None:
        started = time.monotonic()
        try:
            epoch = await self._claim(room, identity)
        except Exception as exc:
            LEASE_CLAIMS.add(1, {"alicia.lease.outcome": "unavailable"})
            if required:
                logger.warning(
                    "room lease not claimed (database unavailable) and the dispatch needs it: "
                    "not serving",
                    extra={"room": room, "error": repr(exc)},
                )
                return None
            logger.warning(
                "room lease not claimed (database unavailable): serving without failover "
                "guarantees until it is",
                extra={"room": room, "error": repr(exc)},
            )
            hold = Hold(self, room, identity, None, home)
        else:
            _counted(epoch)
            if epoch is None:
                return None
            hold = Hold(self, room, identity, epoch, home)
            hold.confirmed_at = started
        self._held[room, identity] = hold
        if self._task is None or self._task.done():
            self._ticked = time.monotonic()
            self._task = asyncio.create_task(self._beat_loop(), name="alicia-lease-heartbeat")
            self._task.add_done_callback(_heartbeat_ended)
        return hold

    async def _claim(self, room: str, identity: str) -> int | None:
        """:meth:`Leases.claim`, in an ``alicia.lease.claim`` span (with traces on, how long
        the room had no live agent before a takeover: one more query)."""
        with lease_span("alicia.lease.claim", room) as span:
            vacant: float | None = None
            if span.is_recording():
                with contextlib.suppress(Exception):
                    before = await self.leases.get(room)
                    if before is not None and before.agent_identity not in (None, identity):
                        vacant = max(0.0, time.time() - before.heartbeat_at)
            try:
                epoch = await self.leases.claim(room, identity, WORKER_ID, self.timeout_s)
            except Exception:
                span.set_attribute("alicia.lease.outcome", "unavailable")
                raise
            span.set_attribute("alicia.lease.outcome", "refused" if epoch is None else "held")
            if epoch is not None:
                span.set_attribute("alicia.lease.epoch", epoch)
                if epoch > 1 and vacant is not None:
                    span.set_attribute("alicia.lease.vacant_s", round(vacant, 3))
            return epoch

    async def accept(self, room: str, *, required: bool = False) -> bool:
        """Note at once that this worker takes a job for ``room`` (the watcher then waits
        for its agent instead of dispatching again); False if a live agent serves the room
        already, or another job for it was taken within :data:`ACCEPT_WINDOW_S` (a late or
        redundant dispatch: the job is refused, so clients never see an agent that is about
        to leave). Best effort, bounded: with the database away the job is taken, unless
        its dispatch ``required`` the lease."""
        # A dispatch that needs the lease waits longer before it is refused: a fresh
        # process's first query (its schema check) takes seconds on a loaded machine.
        bound = self.timeout_s * (ACCEPT_REQUIRED_FACTOR if required else 1)
        try:
            async with asyncio.timeout(bound):
                return await self.run(self.leases.accept(room, self.timeout_s, ACCEPT_WINDOW_S))
        except Exception as exc:
            logger.info("job start not noted", extra={"room": room, "error": repr(exc)})
            return not required

    async def release(self, hold: Hold) -> None:
        """``hold``'s agent leaves its room cleanly: its own lease entry goes (the watcher
        may move the room); another agent's entry for the room is left alone."""
        await self.run(self._release(hold))

    async def _release(self, hold: Hold) -> None:
        self._held.pop((hold.room, hold.identity), None)
        if hold.taken or hold.fence.epoch is None:
            return
        try:
            await self.leases.release(hold.room, hold.identity)
        except Exception:
            logger.warning("lease not released", extra={"room": hold.room}, exc_info=True)

    def stalled(self) -> bool:
        """The heartbeat loop has not turned for longer than the lease timeout: this
        process was stopped or starved, and another agent may hold its rooms. Any thread."""
        return time.monotonic() - self._ticked > self.timeout_s

    async def beat_now(self) -> None:
        """Renew at once: confirms or loses every hold. The wait is bounded by half the
        timeout, so the heartbeat loop turns well within it even while the database does
        not answer; the renewal itself is not cancelled at that bound (a slow database,
        a loaded machine): it goes on, one at a time, and confirms when it completes."""
        await self.run(self._beat_now())

    async def _beat_now(self) -> None:
        if self._renewal is None or self._renewal.done():
            self._renewal = asyncio.create_task(self._bounded_beat(), name="alicia-lease-renewal")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._renewal), self.timeout_s / 2)

    async def _bounded_beat(self) -> None:
        """:meth:`_beat`, given up after twice the lease timeout (a connection that hangs
        in a network partition)."""
        try:
            await asyncio.wait_for(self._beat(), 2 * self.timeout_s)
        except TimeoutError:
            if not self._failing:
                logger.warning("lease heartbeat failed", extra={"error": "no answer"})
            self._failing = True

    async def _beat_loop(self) -> None:
        while self._held:
            now = time.monotonic()
            if now - self._ticked > self.timeout_s:
                for hold in self._held.values():
                    hold.suspect = True  # stalled: nothing is sent until renewed
            self._ticked = now
            await self._beat_now()
            await asyncio.sleep(self.interval_s)

    async def _beat(self) -> None:
        """One renewal of every claimed hold, and a claim of every pending one."""
        async with self._beat_lock:
            started = time.monotonic()
            holds = list(self._held.values())
            claimed: dict[str, int] = {}
            for h in holds:
                if h.fence.epoch is not None:
                    claimed[h.room] = max(h.fence.epoch, claimed.get(h.room, 0))
            try:
                renewed = await self.leases.beat(WORKER_ID, claimed)
            except Exception as exc:
                if not self._failing:  # once per outage
                    logger.warning("lease heartbeat failed", extra={"error": repr(exc)})
                self._failing = True
                return
            if self._failing:
                logger.info("lease heartbeat renewed again", extra={"rooms": len(renewed)})
                self._failing = False
            for hold in holds:
                if hold.fence.epoch is None:
                    await self._claim_late(hold)
                elif hold.room in renewed and claimed[hold.room] == hold.fence.epoch:
                    hold.suspect = False
                    hold.confirmed_at = started
                else:
                    hold.lose()
            self._ticked = time.monotonic()  # every hold is known now

    async def _claim_late(self, hold: Hold) -> None:
        """Claim a room served since the database was away."""
        started = time.monotonic()
        try:
            epoch = await self._claim(hold.room, hold.identity)
        except Exception:
            return
        _counted(epoch)
        if epoch is None:
            hold.lose()
        else:
            hold.confirmed_at = started
            hold.fence.epoch = epoch
            hold.suspect = False
            logger.info("room lease claimed: failover guarantees again", extra={"room": hold.room})


def _heartbeat_ended(task: asyncio.Task[None]) -> None:
    """Log a heartbeat loop that failed: renewals stop for every room of the process."""
    if not task.cancelled() and task.exception() is not None:
        logger.error("lease heartbeat stopped", exc_info=task.exception())


def _epoch(epoch: int | None) -> dict[str, int]:
    return {} if epoch is None else {"alicia.lease.epoch": epoch}


def _counted(epoch: int | None) -> None:
    """Count a claim's outcome: held (a takeover past epoch 1) or refused."""
    LEASE_CLAIMS.add(1, {"alicia.lease.outcome": "refused" if epoch is None else "held"})
    if epoch is not None and epoch > 1:
        TAKEOVERS.add(1)


_KEEPERS: dict[int, LeaseKeeper] = {}
"""This process's keeper, by process id (a forked child makes its own)."""
_KEEPERS_LOCK: Final = threading.Lock()


def keeper_for(settings: Settings) -> LeaseKeeper:
    """This process's lease keeper, as ``settings`` say (failover)."""
    assert settings.database_url is not None  # checked by the settings
    return lease_keeper(
        settings.database_url,
        interval_s=settings.heartbeat_interval_s,
        timeout_s=settings.heartbeat_timeout_s,
    )


def lease_keeper(url: str, *, interval_s: float, timeout_s: float) -> LeaseKeeper:
    """This process's lease keeper (one for all its rooms, whichever loop they run on)."""
    with _KEEPERS_LOCK:
        keeper = _KEEPERS.get(os.getpid())
        if keeper is None:
            keeper = LeaseKeeper(url, interval_s=interval_s, timeout_s=timeout_s)
            _KEEPERS[os.getpid()] = keeper
        return keeper
