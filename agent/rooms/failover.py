"""The worker's side of failover (``ALICIA_FAILOVER``): room leases
(:mod:`.lease_keeper`), leaving a room for good, and a graceful drain.

* :mod:`.lease_keeper`: an agent serves a room only once it holds the room's lease, renewed
  on a thread of its own; a lost lease makes the agent leave at once.
* :func:`keep_out`: a fenced agent that left its room stays out. The watcher removes a
  stalled agent from its room when it moves the room; when the process wakes, livekit's
  SDK tries to resume, is told to reconnect, and rejoins the room with its still valid
  token, natively, whatever the agent decided meanwhile (seen in half of the stall tests:
  the old agent stayed in the room for good). For :data:`KEEP_OUT_S` after leaving, the
  agent asks livekit-server whether its participant is back, and removes it if it is.
  Leaving itself (:func:`leave`) is bounded: the SDK's disconnect waits for a
  reconnection under way, and after a stall that is one (a stress run's fenced agents
  stayed 14 s, until the drain cancelled them); :func:`keep_out` starts at once.
* :func:`watch_drain`: on SIGTERM livekit-agents drains the worker (no new rooms); this
  notices it (:data:`DRAINING`) so each room lets its running turns finish (bounded by
  ``ALICIA_DRAIN_TURN_TIMEOUT``), releases its lease and leaves: the jobs end, the worker
  exits 0, and the watcher moves the rooms. livekit-agents' own drain timeout is raised
  to cover that bound, so it never cuts those turns. Rooms see it at once with the thread job
  executor (every room in the worker's process); with the process executor a job process
  learns it only when the drain times out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import weakref
from typing import Any, Final

from livekit import api, rtc
from livekit.agents import AgentServer
from livekit.agents.types import NOT_GIVEN, NotGivenOr
from livekit.agents.utils import is_given

__all__ = [
    "DRAINING",
    "KEEP_OUT_S",
    "DrainingServer",
    "keep_out",
    "leave",
    "wait_draining",
    "warm_storage",
    "watch_drain",
]

logger = logging.getLogger("alicia.worker")

DRAINING: Final = threading.Event()
"""Set once this process's worker is draining (SIGTERM): rooms finish turns and leave."""
_POLL_S: Final = 0.1


async def wait_draining() -> None:
    """Return once the worker drains."""
    # A threading.Event shared by every loop of the process: polled, not awaited.
    while not DRAINING.is_set():  # noqa: ASYNC110
        await asyncio.sleep(_POLL_S)


DRAIN_LEAVE_S: Final = 10
"""Time a drained room has, past its turns, to release its lease and leave."""


class DrainingServer(AgentServer):
    """An AgentServer whose drain timeout (``--drain-timeout``) never cuts a running
    turn short: it is at least ``ALICIA_DRAIN_TURN_TIMEOUT`` + :data:`DRAIN_LEAVE_S`."""

    def __init__(self, *args: Any, turn_timeout_s: float, **kwargs: Any) -> None:
        """``AgentServer``'s arguments, and the longest a drained turn may run."""
        self.min_drain_s = math.ceil(turn_timeout_s) + DRAIN_LEAVE_S
        super().__init__(*args, **kwargs)

    def update_options(self, *, drain_timeout: NotGivenOr[int] = NOT_GIVEN, **kwargs: Any) -> None:
        """``AgentServer.update_options``, with ``drain_timeout`` raised to the minimum."""
        if is_given(drain_timeout) and drain_timeout < self.min_drain_s:
            logger.info(
                "drain timeout raised to cover ALICIA_DRAIN_TURN_TIMEOUT",
                extra={"from_s": drain_timeout, "to_s": self.min_drain_s},
            )
            drain_timeout = self.min_drain_s
        super().update_options(drain_timeout=drain_timeout, **kwargs)


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


def warm_storage(url: str) -> None:
    """Bring the database to ``head`` once, as the worker starts (call on
    ``worker_started``): Alembic's first run costs a few hundred milliseconds of this
    process's time, which a takeover of many rooms at once would otherwise wait on.

    It runs on a thread of its own, with its own loop: Alembic's imports and migrations
    are synchronous, and on the worker's loop they held up its first job requests (on a
    loaded machine past livekit-server's assignment timeout, leaving a room without an
    agent)."""

    async def warm() -> None:
        from alicia.agent.storage.engine import create_engine
        from alicia.agent.storage.migrate import migrate_once

        engine = create_engine(url, pooled=False)
        try:
            await migrate_once(engine)
        except Exception as exc:  # the database is away: the first room migrates
            logger.info("database not ready at start", extra={"error": repr(exc)})
        finally:
            await engine.dispose()

    def run() -> None:
        asyncio.run(warm())

    task = asyncio.get_running_loop().create_task(
        asyncio.to_thread(run), name="alicia-storage-warm"
    )
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)


_TASKS: set[asyncio.Task[None]] = set()

LEAVE_S: Final = 2.0
"""How long :func:`leave` waits for the SDK's disconnect."""


async def leave(room: rtc.Room, *, within: float = LEAVE_S) -> bool:
    """Disconnect from ``room``, waiting at most ``within`` seconds: the SDK's disconnect
    waits for a reconnection under way (seconds, after a stall). It is never cancelled
    (cut short, the SDK's room would stay "connected" for good): it goes on in a task of
    its own, which a later call for the same room waits on again. False if it did not
    finish in time (logged)."""
    task = _LEAVING.get(room)
    if task is None:
        task = asyncio.create_task(room.disconnect(), name="alicia-leave")
        _LEAVING[room] = task
        _TASKS.add(task)
        task.add_done_callback(_left)
    done, _ = await asyncio.wait({task}, timeout=within)
    if not done:
        logger.warning("the SDK is slow to leave the room", extra={"room": room.name})
        return False
    return True


_LEAVING: Final[weakref.WeakKeyDictionary[rtc.Room, asyncio.Task[None]]] = (
    weakref.WeakKeyDictionary()
)


def _left(task: asyncio.Task[None]) -> None:
    _TASKS.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.warning("leaving the room failed", extra={"error": repr(task.exception())})


KEEP_OUT_S: Final = 10.0
"""How long a fenced agent that left its room makes sure its SDK does not rejoin it: the
SDK's own reconnect attempts end well within it."""
_KEEP_OUT_EVERY_S: Final = 0.25


async def keep_out(
    server: tuple[str, str, str], room: str, identity: str, *, within: float = KEEP_OUT_S
) -> int:
    """Remove ``identity`` from ``room`` whenever livekit-server has it there, for ``within``
    seconds (see the module docstring); ``server``: its URL, API key and secret. Returns
    how many times it was removed. Never raises."""
    url, key, secret = server
    http = "http" + url[2:] if url.startswith("ws") else url
    who = api.RoomParticipantIdentity(room=room, identity=identity)
    removed = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    try:
        async with api.LiveKitAPI(http, key, secret) as lk:
            while True:
                try:
                    await lk.room.get_participant(who)
                except api.TwirpError as exc:
                    if exc.code != api.TwirpErrorCode.NOT_FOUND:
                        logger.info("room presence not checked", extra={"error": str(exc)})
                else:
                    with contextlib.suppress(api.TwirpError):
                        await lk.room.remove_participant(who)
                    removed += 1
                    logger.warning(
                        "this fenced agent was still (or again) in the room: removed",
                        extra={"room": room},
                    )
                if loop.time() >= deadline:
                    return removed
                await asyncio.sleep(_KEEP_OUT_EVERY_S)
    except Exception as exc:
        logger.warning("room presence not checked", extra={"room": room, "error": repr(exc)})
    return removed
