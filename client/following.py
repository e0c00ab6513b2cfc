"""Following the agent across takeovers: the part of :class:`~alicia.client.session.ClientSession`
that reacts to agents joining and leaving the room.

The trusted agent (:class:`~alicia.client.trust.AgentTrust`) leaves: the session stops
sending, tells its listeners (:class:`~alicia.client.agent_events.AgentLeft`) and waits
up to ``agent_rejoin_timeout`` seconds; an agent already in the room, or the next one to
join, is trusted instead (:class:`~alicia.client.agent_events.AgentReplaced`), and once
the conversation has begun the session resumes with it (PROTOCOL.md §4.9): a
Configuration naming the conversation with ``lastSequenceSeen`` = the highest server
|stanzaId| received before the agent (or the link, when LiveKit's SDK reconnects it) was
lost; what the replay sends again is dropped by its id (:mod:`alicia.client.sequence`).
Requests wait meanwhile (:meth:`AgentFollowing._until_ready`).

An envelope whose sender LiveKit's SDK cannot name yet (the agent's data outran the news
of its rejoining) is not taken, but its stanzaId is a hint
(:meth:`~alicia.client.sequence.ServerSequence.suspect`): the session resumes again from
below it, after any resume in flight (whose answer it may have been), so the agent sends
it again as itself.

An agent that cannot replay (ErrorMessage 202: its worker lost what was sent) gets a
plain Configuration (``lastSequenceSeen`` 0): the conversation continues, and the
session's own turns still open are ended with a recoverable error 503, as no one will
finish them. No agent in time (:class:`~alicia.client.agent_events.AgentLost`), or a new
one that answers nothing (:class:`~alicia.client.agent_events.AgentResumeFailed`): every
waiting request fails with that reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Final, Literal

from livekit import rtc

from alicia.protocol import (
    Configuration,
    ErrorCode,
    ErrorMessage,
    ProtocolError,
    Severity,
    decode,
    envelope,
)
from alicia.protocol.ids import ERROR, new_id

from .agent_events import (
    AgentEvent,
    AgentLeft,
    AgentLost,
    AgentReplaced,
    AgentResumed,
    AgentResumeFailed,
)
from .assembly import Event, TurnAssembler
from .errors import AgentMissingError, ClientError, HandshakeError, features_for
from .sequence import ServerSequence
from .trust import AgentTrust

__all__ = ["AgentFollowing", "AgentListener"]

logger = logging.getLogger("alicia.client.session")

AgentListener = Callable[[AgentEvent], None]

UNNAMED = "an envelope from a sender the SDK could not name: resuming"
UNNAMED_WINDOW_S: Final = 10.0
"""After the link came back or the agent (re)joined, how long an envelope from a sender
the SDK cannot name may make the session resume once more (the race is then; anyone can
send such a packet, so at most one such resume per window)."""


class AgentFollowing:
    """Mixin of :class:`~alicia.client.session.ClientSession` (see the module docstring)."""

    # Provided by the session.
    room: rtc.Room
    trust: AgentTrust
    sequence: ServerSequence
    assembler: TurnAssembler
    conversation_id: str | None
    device: str
    client_version: str
    agent_rejoin_timeout: float
    resume_timeout: float
    _state: Literal["new", "connected", "closed"]
    _turn_done: dict[str, asyncio.Event]
    _config_waiter: asyncio.Future[Configuration] | None

    async def _configure(self, body: Configuration, timeout: float) -> Configuration:  # noqa: ASYNC109
        raise NotImplementedError

    def _dispatch(self, event: Event) -> None:
        raise NotImplementedError

    def _init_following(self) -> None:
        self._agent_listeners: list[AgentListener] = []
        self._agent_seen = asyncio.Event()
        self._ready = asyncio.Event()
        """Set once requests may go out: configured with the trusted agent (or lost)."""
        self._lost: ClientError | None = None
        """Why requests fail now (no agent came back, or the new one never answered)."""
        self._lost_timer: asyncio.TimerHandle | None = None
        self._resume_task: asyncio.Task[None] | None = None
        self._last_agent: str | None = None
        self._resync = False
        """An envelope was suspected dropped while a resume was in flight: resume again
        once it is answered."""
        self._unnamed_until = 0.0
        """Until when (loop time) an envelope from an unnamed sender may cause one more
        resume (see UNNAMED_WINDOW_S); 0 once that resume is spent."""

    def on_agent(self, listener: AgentListener) -> None:
        """Call ``listener`` when the agent leaves, is replaced, resumes or is lost."""
        self._agent_listeners.append(listener)

    async def _until_ready(self) -> None:
        await self._ready.wait()
        if self._lost is not None:
            raise self._lost

    async def _stop_following(self) -> None:
        if self._lost_timer is not None:
            self._lost_timer.cancel()
        task = self._resume_task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _on_participant(self, participant: rtc.RemoteParticipant) -> None:
        self._check_agent()  # a newcomer under the agent's identity replaced it
        if self.trust.offer(participant, self.room.remote_participants):
            self._adopted()

    def _on_attributes(self, changed: Mapping[str, str], participant: rtc.Participant) -> None:
        """An agent announces the protocol once joined (``alicia.protocol``): offer it."""
        if isinstance(participant, rtc.RemoteParticipant):
            self._on_participant(participant)

    def _on_participant_left(self, participant: rtc.RemoteParticipant) -> None:
        self._check_agent()

    def _on_reconnecting(self) -> None:
        """LiveKit's SDK lost the link: the next resume asks from what had arrived."""
        self.sequence.lost()

    def _on_reconnected(self) -> None:
        """LiveKit's SDK brought the link back (after a network loss, or into the room
        started again on another node when the room's node died): what the agent sent
        meanwhile may be lost, so resume with it (§4.9), as with a new agent."""
        identity = self.trust.identity
        if identity is None or self.conversation_id is None or self._state != "connected":
            return
        self._ready.clear()
        self._cancel_resume()
        self._open_unnamed_window()
        self._start_resume("the link came back: resuming", identity, identity)

    def _open_unnamed_window(self) -> None:
        self._unnamed_until = asyncio.get_running_loop().time() + UNNAMED_WINDOW_S

    def _unknown_sender(self, data: bytes) -> None:
        """A packet on the protocol's topic from a sender the SDK cannot name: if it is a
        server envelope not held, resume (again) from below it with the trusted agent
        (once per window after the link or the agent came back)."""
        if asyncio.get_running_loop().time() > self._unnamed_until:  # none, or spent
            return
        if self._lost is not None:
            return  # no agent, or it did not resume: nothing to resume with
        try:
            env = decode(data)
        except ProtocolError:
            return
        if not self.sequence.suspect(env.stanza_id):
            return
        identity = self.trust.identity
        if identity is None or self.conversation_id is None or self._state != "connected":
            return  # the resume with the agent once it is trusted asks from below it
        self._unnamed_until = 0.0  # the window's one resume
        if self._resume_task is not None and not self._resume_task.done():
            self._resync = True  # its answer may be what was dropped: once more after it
            return
        self._start_resume(UNNAMED, identity, identity)

    def _check_agent(self) -> None:
        """The trusted agent left, or its identity now belongs to someone else?"""
        gone = self.trust.identity
        if gone is None or not self.trust.leave(self.room.remote_participants):
            return
        self.sequence.lost()
        self._agent_seen.clear()
        self._ready.clear()
        self._cancel_resume()
        if self.trust.successor(self.room.remote_participants) is not None:
            self._adopted()
            return
        wait = self.agent_rejoin_timeout
        logger.info("the agent left", extra={"agent": gone})
        self._emit(AgentLeft(gone, wait))
        if self._lost_timer is not None:
            self._lost_timer.cancel()
        loop = asyncio.get_running_loop()
        self._lost_timer = loop.call_later(wait, self._agent_lost, gone)

    def _adopted(self) -> None:
        identity = self.trust.identity
        assert identity is not None
        previous, self._last_agent = self._last_agent, identity
        if self._lost_timer is not None:
            self._lost_timer.cancel()
            self._lost_timer = None
        self._lost = None
        self._agent_seen.set()
        if self.conversation_id is None or self._state != "connected":
            return  # no conversation yet: the handshake (repeated) goes to this agent
        self._ready.clear()
        self._emit(AgentReplaced(identity, previous))
        self._cancel_resume()
        self._open_unnamed_window()
        self._start_resume("the agent was replaced: resuming", identity, previous)

    def _start_resume(self, why: str, identity: str, previous: str | None) -> None:
        """Resume with ``identity`` in a task of its own (one at a time: the caller
        cancelled any other)."""
        logger.info(why, extra={"agent": identity, "previous": previous})
        point = self.sequence.asking()  # now: a hint that comes meanwhile is above it
        self._resume_task = asyncio.get_running_loop().create_task(
            self._resume_safely(identity, previous, point)
        )

    def _cancel_resume(self) -> None:
        if self._resume_task is not None and not self._resume_task.done():
            self._resume_task.cancel()
        self._resume_task = None

    async def _resume_safely(
        self, identity: str, previous: str | None, point: tuple[int, int]
    ) -> None:
        try:
            await self._resume(identity, previous, point)
        except Exception as exc:  # e.g. publishing fails: the room is gone
            logger.warning("resume failed", exc_info=True, extra={"agent": identity})
            self._resume_failed(identity, exc)

    async def _resume(self, identity: str, previous: str | None, point: tuple[int, int]) -> None:
        """Resume with a new agent (§4.9) from ``point`` (:meth:`ServerSequence.asking`);
        without a replay when it cannot give one."""
        self._resync = False
        seen, suspects = point

        def config(last: int) -> Configuration:
            return Configuration(
                conversation_id=self.conversation_id,
                last_sequence_seen=last,
                client_version=self.client_version,
                device=self.device,
                features=features_for(self.assembler.show_reasoning),
            )

        try:
            await self._configure(config(seen), self.resume_timeout)
            event: AgentEvent = AgentResumed(identity, previous, seen, replayed=True)
        except HandshakeError as exc:
            if seen == 0:
                return self._resume_failed(identity, exc)
            # It cannot replay (202: its worker lost what was sent): continue without.
            try:
                await self._configure(config(0), self.resume_timeout)
            except HandshakeError as again:
                return self._resume_failed(identity, again)
            event = AgentResumed(identity, previous, seen, replayed=False, reason=str(exc))
            self._end_unfinished(identity)
        self.sequence.resumed(suspects)
        self._ready.set()
        self._emit(event)
        if self._resync and self.sequence.suspected and self.trust.identity == identity:
            self._start_resume(UNNAMED, identity, identity)  # this task ends here

    def _end_unfinished(self, identity: str) -> None:
        """Without a replay no one finishes the turns still open: end them, recoverable."""
        cid = self.conversation_id or ""
        for turn in self.assembler.turns:
            if not turn.own or turn.finished:
                continue
            error = ErrorMessage(
                id=new_id(ERROR),
                conversation_id=cid,
                code=ErrorCode.SERVICE_UNAVAILABLE,
                message=f"the agent was replaced ({identity}) before it answered: ask again",
                severity=Severity.WARNING,
                recoverable=True,
                originating_id=turn.user_message_id,
            )
            for event in self.assembler.feed(envelope(error, stanza_id=0, conversation_id=cid)):
                self._dispatch(event)

    def _resume_failed(self, identity: str, exc: Exception) -> None:
        self._lost = HandshakeError(f"the new agent {identity} did not resume: {exc}")
        self._wake_all()
        self._emit(AgentResumeFailed(identity, str(exc)))

    def _agent_lost(self, identity: str) -> None:
        self._lost_timer = None
        if self.trust.identity is not None:
            return
        wait = self.agent_rejoin_timeout
        self._lost = AgentMissingError(
            f"the agent {identity} left room {self.room.name!r} and no agent took over "
            f"within {wait:g}s"
        )
        self._wake_all()
        self._emit(AgentLost(identity, wait))

    def _wake_all(self) -> None:
        """Let every waiter see :attr:`_lost`."""
        self._ready.set()
        for done in self._turn_done.values():
            done.set()
        waiter = self._config_waiter
        if waiter is not None and not waiter.done() and self._lost is not None:
            waiter.set_exception(HandshakeError(str(self._lost)))

    def _emit(self, event: AgentEvent) -> None:
        for listener in self._agent_listeners:
            listener(event)
