"""A voice room under failover (``ALICIA_FAILOVER``): held by its lease, as a text room.

The agent serves the room only once it holds the room's lease
(:class:`~alicia.agent.rooms.lease_keeper.Hold`). Its bridge stores every envelope under the
lease's fence before it leaves and, on a takeover, starts from the stored conversation
(:func:`~alicia.agent.session.attach.attach_reasoning` with ``lease``). What the agent
says goes through :class:`FencedAudio`: after a stall (SIGSTOP, a starved loop) no frame
is taken until a renewal confirms the lease, and none once another agent holds the room;
what the output already holds is paused meanwhile and cleared once the lease is lost.
:func:`serve_held` leaves the room at once when the lease is lost (and keeps it out, as a
text room does), and on a drain once the speech under way has ended (bounded by
``ALICIA_DRAIN_TURN_TIMEOUT``), releasing the lease so the watcher moves the room.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Final

from livekit import rtc
from livekit.agents import AgentSession, JobContext
from livekit.agents.voice import io

from alicia.agent.engine.outbox import Tenure
from alicia.agent.session.bridge import ReasoningBridge
from alicia.agent.settings import Settings

from .failover import keep_out, leave, wait_draining
from .lease_keeper import Hold

__all__ = ["FencedAudio", "serve_held"]

logger = logging.getLogger("alicia.voice")

_UNCONFIRMED_POLL_S: Final = 0.1
"""How often a frame waiting for the lease to be confirmed asks again."""


class FencedAudio(io.AudioOutput):
    """The session's audio output, passed through only while this agent holds the room:
    a frame waits while the lease is unconfirmed and is dropped once it is lost."""

    def __init__(self, inner: io.AudioOutput, tenure: Tenure) -> None:
        """Wrap ``inner`` (the session's audio output) under ``tenure``."""
        super().__init__(
            label="alicia.fenced",
            capabilities=io.AudioOutputCapabilities(pause=inner.can_pause),
            next_in_chain=inner,
        )
        self._tenure = tenure
        self.dropped = 0
        """Frames not played: the room is another agent's."""

    @property
    def sample_rate(self) -> int | None:
        """The wrapped output's."""
        nxt = self.next_in_chain
        return self._sample_rate if nxt is None else nxt.sample_rate

    async def capture_frame(self, frame: rtc.AudioFrame) -> None:
        """Play ``frame`` once the lease is confirmed; drop it if the lease is lost."""
        while not await self._tenure.held():
            if self._tenure.taken:
                self.dropped += 1
                return
            await asyncio.sleep(_UNCONFIRMED_POLL_S)
        if self.next_in_chain is not None:
            await self.next_in_chain.capture_frame(frame)
        await super().capture_frame(frame)

    def flush(self) -> None:
        """End the segment."""
        super().flush()
        if self.next_in_chain is not None:
            self.next_in_chain.flush()

    def clear_buffer(self) -> None:
        """Stop playing at once."""
        if self.next_in_chain is not None:
            self.next_in_chain.clear_buffer()

    def pause(self) -> None:
        """Pause the wrapped output."""
        if self.next_in_chain is not None:
            self.next_in_chain.pause()

    def resume(self) -> None:
        """Resume the wrapped output."""
        if self.next_in_chain is not None:
            self.next_in_chain.resume()


async def serve_held(
    ctx: JobContext,
    session: AgentSession[Any],
    bridge: ReasoningBridge,
    hold: Hold,
    settings: Settings,
) -> None:
    """Serve the room until its lease is lost, the worker drains, the session closes or
    the room is left; then close the bridge (its last writes under the fence), release
    the lease, and leave."""
    room = ctx.room
    done, gone = asyncio.Event(), asyncio.Event()

    def disconnected(*_: object) -> None:
        gone.set()
        done.set()

    session.on("close", lambda _: done.set())
    room.on("disconnected", disconnected)
    lost = asyncio.ensure_future(hold.lost.wait())
    drain = asyncio.ensure_future(wait_draining())
    ended = asyncio.ensure_future(done.wait())
    guard = asyncio.ensure_future(_pause_while_doubtful(session, hold))
    kept_out: asyncio.Task[int] | None = None
    try:
        await asyncio.wait({lost, drain, ended}, return_when=asyncio.FIRST_COMPLETED)
        if hold.taken:
            # Another agent serves the room: silent at once, out, and kept out.
            with_audio = session.output.audio
            if with_audio is not None:
                with_audio.clear_buffer()
            server = (settings.livekit_url, settings.livekit_api_key, settings.livekit_api_secret)
            identity = room.local_participant.identity
            kept_out = asyncio.create_task(keep_out(server, room.name, identity))
            await leave(room)
        elif drain.done() and not ended.done():
            settled = await _speech_ended(session, settings.drain_turn_timeout_s)
            logger.info("leaving a drained room", extra={"room": room.name, "settled": settled})
    finally:
        left = gone.is_set()  # the job ends by itself
        for task in (lost, drain, ended, guard):
            task.cancel()
        try:
            await bridge.aclose()  # storage closed before the lease goes: a close begun
            with contextlib.suppress(TimeoutError):  # elsewhere (the session's) finishes first
                await asyncio.wait_for(bridge.closed.wait(), settings.storage_close_timeout_s)
            await session.aclose()
            await hold.keeper.release(hold)
            if not left:  # the room left early (session closed, lease lost, drained)
                ctx.shutdown("room left")  # is left for good
        finally:
            if kept_out is not None:
                await kept_out


async def _pause_while_doubtful(session: AgentSession[Any], hold: Hold) -> None:
    """What the session's output already holds (a whole sentence is synthesized faster than
    it plays) waits too: paused while the lease is in doubt (after a stall, renewals
    failing), resumed once a renewal confirms it."""
    paused = False
    while not hold.taken:
        doubtful = hold.doubtful()
        audio = session.output.audio
        if audio is not None and doubtful != paused:
            audio.pause() if doubtful else audio.resume()
            paused = doubtful
        await asyncio.sleep(_UNCONFIRMED_POLL_S / 2)


async def _speech_ended(session: AgentSession[Any], within: float) -> bool:
    """Wait (at most ``within`` seconds) until the session says nothing; True if it did."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        try:
            speech = session.current_speech
        except RuntimeError:
            return True
        if speech is None:
            return True
        await asyncio.sleep(0.1)
    return False
