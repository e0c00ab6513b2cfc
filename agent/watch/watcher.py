"""Bring an agent back to every room that still has clients: LiveKit's own dispatch,
decided from LiveKit's view of the room and the workers' leases.

Self-hosted livekit-server does not dispatch a dead worker's rooms to another worker
(livekit/agents#1472), and it keeps a killed agent's participant in the room for about
20 s (its ICE and ping timeouts), so neither its webhooks nor RoomService can tell quickly
that an agent is gone. The workers can: each room's agent holds a lease row
(:mod:`alicia.agent.storage.leases`) that its worker renews every
``ALICIA_HEARTBEAT_INTERVAL``. The watcher puts the two together:

* webhooks (``participant_joined`` of a client, ``participant_left`` of an agent,
  ``room_started``; signature checked with ``livekit-api``) make it look at a room at
  once; it also looks, every ``ALICIA_WATCH_POLL`` seconds, at every room RoomService
  lists (the fallback when a webhook is lost) and, twice a second, at the leases that
  went stale (a dead worker);
* a room needs an agent when it has a client (a participant that is not an agent) and
  no live agent of ours: no lease renewed within ``ALICIA_HEARTBEAT_TIMEOUT``, and no
  agent of ours that joined within the grace period (still claiming its lease);
* then it removes the dead agent's participant (clients stop waiting for it) and asks
  LiveKit for a new one with AgentDispatchService ``CreateDispatch`` under the workers'
  agent name; LiveKit picks the worker by load;
* livekit-server still counts a stopped (SIGSTOP) worker as registered and may hand it
  the job (it offers jobs at random weighted by the load each worker last reported),
  waiting 10 s for its answer: a room served before (a takeover, or an agent that left
  it drained) gets two dispatches at once (a worker
  takes one job per room, :meth:`~alicia.agent.storage.leases.Leases.accept`, and
  refuses the others), and when no worker noted a job on the room's lease and no agent
  of ours joined within ``ALICIA_REDISPATCH_AFTER``, two more (a job the stopped worker
  answers when it wakes is refused: the room is taken);
* a dead lease of a room that no longer exists, or that has no client left, is deleted,
  and so is a dispatch mark no agent claimed for ten dispatch grace periods;
* while the database is away, a room with clients and no agent of ours at all still gets
  one (once per ``ALICIA_DISPATCH_GRACE`` per watcher); after the database was away, no
  lease counts as stale until the workers had two heartbeat timeouts to renew them (an
  outage never costs a live agent its room).

It is stateless and may run more than once: the decision to dispatch is taken in the
database (:meth:`~alicia.agent.storage.leases.Leases.begin_dispatch`: a per-room lock and a
dispatch mark), so two watchers never dispatch twice for one takeover; and an agent only
serves a room once it holds the room's lease, so even a late second dispatch leaves one
agent serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from livekit import api

from alicia.agent.settings import WatchSettings
from alicia.agent.storage.leases import LEASE_REQUIRED, Lease, Leases

__all__ = ["Decision", "RoomView", "Watcher", "decide"]

logger = logging.getLogger("alicia.watch")

AGENT_NAME_ATTRIBUTE: Final = "lk.agent_name"
_AGENT: Final = api.ParticipantInfo.Kind.AGENT
_STALE_EVERY_S: Final = 0.25
_MAX_REDISPATCH: Final = 8
_TAKEOVER_COPIES: Final = 2
"""Dispatches sent at once for a takeover: livekit-server picks a worker for each by load,
and may pick a stopped one; one of them is taken, the others refused by the workers."""
_SWEEP_AFTER: Final = 10
"""Dispatch marks nobody claimed are deleted after this many dispatch grace periods."""
_CLOCK_SLACK_S: Final = 0.05
"""Slack between this host's clock and the database's, read back on this host's."""
_BLIND_KEEP: Final = 10_000
"""Rooms remembered at most for dispatches decided without the database."""
"""Dispatches replaced at most per room check (then the next check starts over)."""


@dataclass(frozen=True, slots=True)
class RoomView:
    """What LiveKit says is in a room: its clients and its agents of our name."""

    clients: tuple[str, ...]
    agents: tuple[tuple[str, float], ...]
    """(identity, joined_at epoch seconds) of each agent participant of our agent name."""


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do for one room."""

    dispatch: bool
    remove: tuple[str, ...] = ()
    """Agent participants to remove first (dead: their lease is stale)."""
    reason: str = ""


def decide(
    view: RoomView, lease: Lease | None, *, now: float, timeout_s: float, grace_s: float
) -> Decision:
    """Whether a room needs an agent (pure; see the module docstring)."""
    if not view.clients:
        return Decision(False, reason="no client")
    present = {identity for identity, _ in view.agents}
    holder = lease.agent_identity if lease is not None else None
    if lease is not None and holder in present and now - lease.heartbeat_at <= timeout_s:
        return Decision(False, reason="live agent")
    pending = lease.dispatched_at if lease is not None else None
    if pending is not None and now - pending < grace_s:
        return Decision(False, reason="dispatch pending")
    starting = [i for i, joined in view.agents if now - joined < grace_s]
    if starting and (lease is None or lease.agent_identity not in starting):
        return Decision(False, reason="agent starting")
    # The holder of a lease gone stale is dead (or stopped) however recently it joined.
    dead = tuple(i for i, _ in view.agents if i not in starting or i == holder)
    return Decision(True, remove=dead, reason="no live agent")


class Watcher:
    """The watcher's loops and its dispatches (see the module docstring)."""

    def __init__(self, settings: WatchSettings, leases: Leases) -> None:
        """Nothing runs until :meth:`run`."""
        self.settings = settings
        self.leases = leases
        self.dispatches = 0
        """Dispatches this watcher created."""
        self._lk: api.LiveKitAPI | None = None
        self._pending: set[str] = set()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._following: dict[str, asyncio.Task[None]] = {}
        """Rooms whose last dispatch is being followed (:meth:`_follow`)."""
        self._blind: dict[str, float] = {}
        """Loop time of each dispatch decided while the database was away, by room."""
        self._db_back_at: float | None = -math.inf
        """Loop time the database last answered after being away (None: away now)."""

    @property
    def lk(self) -> api.LiveKitAPI:
        """The LiveKit server API client (while running)."""
        if self._lk is None:
            raise RuntimeError("the watcher is not running")
        return self._lk

    def look_at(self, rooms: Iterable[str]) -> None:
        """Check these rooms soon (a webhook said something changed)."""
        self._pending.update(rooms)
        self._wake.set()

    async def start(self) -> None:
        """Open the API client and start the loops."""
        s = self.settings
        url = s.livekit_url
        http = "http" + url[2:] if url.startswith("ws") else url
        self._lk = api.LiveKitAPI(http, s.livekit_api_key, s.livekit_api_secret)
        self._tasks = [
            asyncio.create_task(self._stale_loop(), name="alicia-watch-leases"),
            asyncio.create_task(self._poll_loop(), name="alicia-watch-rooms"),
            asyncio.create_task(self._pending_loop(), name="alicia-watch-webhooks"),
        ]
        logger.info("watcher started", extra={"agent_name": s.agent_name})

    async def aclose(self) -> None:
        """Stop the loops and close the API client."""
        tasks = [*self._tasks, *self._following.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks = []
        if self._lk is not None:
            await self._lk.aclose()
            self._lk = None

    # -- loops ------------------------------------------------------------------------

    async def _stale_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                stale = await self.leases.stale(self.settings.heartbeat_timeout_s)
            except Exception:
                self._db_back_at = None  # away: leases look stale until renewed again
            else:
                if self._db_back_at is None:
                    self._db_back_at = loop.time()
                await asyncio.gather(*(self._check(lease.conversation_id) for lease in stale))
            await asyncio.sleep(_STALE_EVERY_S)

    def _settling(self) -> bool:
        """The database answered again less than two heartbeat timeouts ago (or not yet)."""
        back = self._db_back_at
        timeout = 2 * self.settings.heartbeat_timeout_s
        return back is None or asyncio.get_running_loop().time() - back < timeout

    async def _poll_loop(self) -> None:
        while True:
            try:
                rooms = await self.lk.room.list_rooms(api.ListRoomsRequest())
                for room in rooms.rooms:
                    if room.num_participants > 0:
                        await self._check(room.name)
            except Exception:
                logger.exception("room poll failed")
            with contextlib.suppress(Exception):
                await self.leases.sweep(_SWEEP_AFTER * self.settings.dispatch_grace_s)
            await asyncio.sleep(self.settings.poll_s)

    async def _pending_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            rooms, self._pending = self._pending, set()
            await asyncio.gather(*(self._check(room) for room in rooms))

    # -- one room ---------------------------------------------------------------------

    async def _view(self, room: str) -> RoomView:
        reply = await self.lk.room.list_participants(api.ListParticipantsRequest(room=room))
        clients: list[str] = []
        agents: list[tuple[str, float]] = []
        name = self.settings.agent_name
        for p in reply.participants:
            if p.kind == _AGENT:
                if p.attributes.get(AGENT_NAME_ATTRIBUTE, "") == name:
                    agents.append((p.identity, float(p.joined_at)))
            else:
                clients.append(p.identity)
        return RoomView(tuple(clients), tuple(agents))

    async def _check(self, room: str) -> None:
        """Look at one room and dispatch an agent to it if it needs one."""
        s = self.settings
        try:
            view = await self._view(room)
            try:
                lease = await self.leases.get(room)
            except Exception:
                await self._dispatch_without_database(room, view)
                return
            decision = decide(
                view,
                lease,
                now=time.time(),
                timeout_s=s.heartbeat_timeout_s,
                grace_s=s.dispatch_grace_s,
            )
            if not decision.dispatch:
                if decision.reason == "no client" and lease is not None:
                    await self._forget(room)
                return
            if lease is not None and lease.agent_identity and self._settling():
                return  # the database was away: the workers get to renew first
            if not await self.leases.begin_dispatch(
                room, s.heartbeat_timeout_s, s.dispatch_grace_s
            ):
                return  # another watcher dispatches, or the room got its agent meanwhile
            for identity in decision.remove:
                with contextlib.suppress(api.TwirpError):
                    await self.lk.room.remove_participant(
                        api.RoomParticipantIdentity(room=room, identity=identity)
                    )
            removed = f", removed {', '.join(decision.remove)}" if decision.remove else ""
            # A room served before (taken over, or left by a drained agent) is followed: a
            # stopped worker may be handed the job (livekit-server offers it by the load
            # the worker last reported) and hold it until livekit-server times it out.
            handover = lease is not None and (lease.agent_identity is not None or lease.epoch > 0)
            await self._dispatch(room, f"{decision.reason}{removed}", follow=handover)
        except api.TwirpError as exc:
            if exc.code == api.TwirpErrorCode.NOT_FOUND:  # the room is gone
                await self._forget(room)
            else:
                logger.warning("room check failed", extra={"room": room, "error": str(exc)})
        except Exception:
            logger.exception("room check failed", extra={"room": room})

    async def _dispatch(
        self, room: str, why: str, attempt: int = 0, *, follow: bool = True, lease: bool = True
    ) -> None:
        """Create a dispatch of our agent to ``room``; ``follow`` (a room served before):
        two at once, and again while no worker takes one (:meth:`_follow`). Workers take one job per
        room (:meth:`~alicia.agent.storage.leases.Leases.accept`) and refuse the others.
        ``lease``: decided with the database, so its agent serves only with the lease
        (:data:`~alicia.agent.storage.leases.LEASE_REQUIRED`)."""
        request = api.CreateAgentDispatchRequest(
            agent_name=self.settings.agent_name,
            room=room,
            metadata=LEASE_REQUIRED if lease else "",
        )
        copies = _TAKEOVER_COPIES if follow else 1
        sent = time.time()  # a worker may take the job before the request returns
        created = (
            await asyncio.gather(
                *(self.lk.agent_dispatch.create_dispatch(request) for _ in range(copies))
            )
        )[-1]
        self.dispatches += copies
        logger.info(
            f"agent dispatched to {room} ({why})",
            extra={"room": room, "reason": why, "attempt": attempt},
        )
        if follow and attempt < _MAX_REDISPATCH and room not in self._following:
            task = asyncio.create_task(self._follow(room, created.id, attempt, sent))
            self._following[room] = task
            task.add_done_callback(self._followed)

    async def _dispatch_without_database(self, room: str, view: RoomView) -> None:
        """The database is away: a room with clients and no agent of ours at all still
        gets one (it serves without failover guarantees until the database is back),
        at most once per grace period from this watcher."""
        s = self.settings
        loop = asyncio.get_running_loop()
        if not view.clients or view.agents:
            return
        if loop.time() - self._blind.get(room, -math.inf) < s.dispatch_grace_s:
            return
        self._blind[room] = loop.time()
        while len(self._blind) > _BLIND_KEEP:
            del self._blind[next(iter(self._blind))]
        await self._dispatch(room, "no agent; the database is away", follow=False, lease=False)

    def _followed(self, task: asyncio.Task[None]) -> None:
        for room, t in list(self._following.items()):
            if t is task:
                del self._following[room]

    async def _follow(self, room: str, dispatch_id: str, attempt: int, since: float) -> None:
        """Dispatch again if no worker took the dispatch sent at ``since`` (epoch seconds)
        and no agent of ours joined in time (a stalled worker has the job; a dispatch is
        never deleted: that would end a job a worker did take)."""
        s = self.settings
        try:
            await asyncio.sleep(s.redispatch_s)
            lease = await self.leases.get(room)
            if lease is not None and (lease.accepted_at or 0.0) >= since - _CLOCK_SLACK_S:
                return  # a worker took the job: its agent joins and claims the room
            view = await self._view(room)
            if any(joined >= since - 1.0 for _, joined in view.agents) or not view.clients:
                return  # an agent is joining (it claims the room), or nobody needs one
            # Nobody claimed the room meanwhile: the decision is still ours to take.
            if not await self.leases.begin_dispatch(room, s.heartbeat_timeout_s, 0.0):
                return
            self._following.pop(room, None)
            why = f"no agent joined within {s.redispatch_s:g} s of dispatch {dispatch_id}"
            await self._dispatch(room, why, attempt + 1)
        except api.TwirpError:
            return  # the room is gone
        except Exception:
            logger.exception("dispatch not followed", extra={"room": room})

    async def _forget(self, room: str) -> None:
        """Clear the dead lease of a room that is gone or has nobody to serve (its row and
        epoch stay)."""
        s = self.settings
        with contextlib.suppress(Exception):
            if await self.leases.forget(room, s.heartbeat_timeout_s, s.dispatch_grace_s):
                logger.info("dead lease cleared", extra={"room": room})
