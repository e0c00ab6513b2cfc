"""The worker's side of failover (``ALICIA_FAILOVER``): room leases and a graceful drain.

* :class:`LeaseKeeper`: an agent serves a room only once it holds the room's lease
  (:mod:`alicia.agent.storage.leases`); one task per process renews every lease the
  process holds every ``ALICIA_HEARTBEAT_INTERVAL``, so a dead worker's leases go stale
  and the watcher (``python -m alicia.agent.watch``) brings its rooms a new agent.
* :func:`watch_drain`: on SIGTERM livekit-agents drains the worker (no new rooms); this
  notices it (:data:`DRAINING`) so each room lets its running turns finish (bounded by
  ``ALICIA_DRAIN_TURN_TIMEOUT``), releases its lease and leaves: the jobs end, the worker
  exits 0, and the watcher moves the rooms. Rooms see it at once with the thread job
  executor (every room in the worker's process); with the process executor a job process
  learns it only when the drain times out.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import threading
from typing import TYPE_CHECKING, Final

from alicia.agent.storage.leases import Leases

if TYPE_CHECKING:
    from livekit.agents import AgentServer

__all__ = ["DRAINING", "LeaseKeeper", "lease_keeper", "wait_draining", "watch_drain"]

logger = logging.getLogger("alicia.worker")

DRAINING: Final = threading.Event()
"""Set once this process's worker is draining (SIGTERM): rooms finish turns and leave."""
WORKER_ID: Final = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
"""This process's id in the lease table."""
_POLL_S: Final = 0.1


class LeaseKeeper:
    """The leases one process's rooms hold, renewed together (see the module docstring)."""

    def __init__(self, url: str, *, interval_s: float, timeout_s: float) -> None:
        """Leases on the storage database ``url``."""
        self.leases = Leases(url)
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._held: dict[str, asyncio.Event] = {}
        """Rooms held, each with the event set when its lease is lost."""
        self._task: asyncio.Task[None] | None = None

    async def hold(self, room: str, identity: str) -> asyncio.Event | None:
        """Claim ``room`` for ``identity``: an event set if the lease is ever lost (another
        agent took the room over: leave it); None if another live agent holds it."""
        if not await self.leases.claim(room, identity, WORKER_ID, self.timeout_s):
            return None
        lost = self._held[room] = asyncio.Event()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._beat(), name="alicia-lease-heartbeat")
        return lost

    async def release(self, room: str, identity: str) -> None:
        """``identity`` leaves ``room`` cleanly: its lease goes (the watcher may move it)."""
        self._held.pop(room, None)
        try:
            await self.leases.release(room, identity)
        except Exception:
            logger.warning("lease not released", extra={"room": room}, exc_info=True)

    async def _beat(self) -> None:
        while self._held:
            try:
                still = await self.leases.beat(WORKER_ID)
            except Exception:
                logger.warning("lease heartbeat failed", exc_info=True)
            else:
                for room, lost in list(self._held.items()):
                    if room not in still and not lost.is_set():
                        logger.warning("room lease lost: leaving", extra={"room": room})
                        lost.set()
            await asyncio.sleep(self.interval_s)


_KEEPERS: dict[asyncio.AbstractEventLoop, LeaseKeeper] = {}
_KEEPERS_LOCK: Final = threading.Lock()


def lease_keeper(url: str, *, interval_s: float, timeout_s: float) -> LeaseKeeper:
    """The lease keeper of the running event loop (one per loop: the shared room loop, or
    a job's own)."""
    loop = asyncio.get_running_loop()
    with _KEEPERS_LOCK:
        for old in [lp for lp in _KEEPERS if lp.is_closed()]:
            del _KEEPERS[old]
        keeper = _KEEPERS.get(loop)
        if keeper is None:
            keeper = _KEEPERS[loop] = LeaseKeeper(url, interval_s=interval_s, timeout_s=timeout_s)
        return keeper


async def wait_draining() -> None:
    """Return once the worker drains."""
    # A threading.Event shared by every loop of the process: polled, not awaited.
    while not DRAINING.is_set():  # noqa: ASYNC110
        await asyncio.sleep(_POLL_S)


def watch_drain(server: AgentServer) -> None:
    """Set :data:`DRAINING` when ``server`` starts draining (call on ``worker_started``)."""

    async def watch() -> None:
        while not server.draining:  # noqa: ASYNC110 - livekit-agents offers no drain event
            await asyncio.sleep(_POLL_S)
        logger.info("worker draining: rooms finish their turns and leave")
        DRAINING.set()

    task = asyncio.get_running_loop().create_task(watch(), name="alicia-drain-watch")
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)


_TASKS: set[asyncio.Task[None]] = set()
