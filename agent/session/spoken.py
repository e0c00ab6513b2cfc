"""What a voice room hears of the reasoning: who listens, and how a remark is announced.

* :func:`listening_level`: the most every listener in the room may hear (cues or
  summaries), from their grants;
* :class:`KnownListeners`: only participants the agent knows may subscribe to its audio;
* :func:`announce_remark`: a remark being spoken, as a Commentary (type 15) to the
  protocol clients entitled to its level, stored as spoken (under zero data retention
  only sealed).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import msgspec
from livekit import rtc

from alicia.agent.engine.outbox import SUMMARY_REMARK, entitled
from alicia.agent.engine.participants import REASONING_GRANT, Visibility, visibility_of
from alicia.agent.engine.remarks import SpokenLevel, spoken_level
from alicia.agent.engine.session import ProtocolSession
from alicia.agent.engine.sink import META_SEALED, REMARK_TYPE
from alicia.agent.gate.doors import door
from alicia.agent.gate.grants import peer_of
from alicia.agent.gate.room import doors_of_room
from alicia.protocol import Commentary, new_id
from alicia.protocol import ids as id_prefix

__all__ = ["KnownListeners", "announce_remark", "listening_level"]


def listening_level(room: rtc.Room, default: Visibility) -> SpokenLevel:
    """The level every listener in ``room`` holds (``default`` for those without a grant).
    Every participant but agents listens: people (standard, SIP) and recorders (egress,
    whose files are a disk the reasoning must be entitled to)."""
    return spoken_level(
        visibility_of(peer_of(room, p).grant(REASONING_GRANT), default)
        for p in room.remote_participants.values()
        if p.kind != rtc.ParticipantKind.PARTICIPANT_KIND_AGENT
    )


LET_IN_AFTER_S = 0.5
"""Seconds between a participant's announcement and its leave to subscribe: a summary
remark stops at its next frame once the newcomer counts, and what was already handed to
the audio output (0.1 s ahead, livekit's 200 ms source queue) plays out before it; on a
loaded process later, so the let-in also waits for that (``playing_out``)."""
PLAYED_OUT_POLL_S = 0.05
"""How often a newcomer's let-in looks again whether a stopped remark has played out."""


class KnownListeners:
    """While remarks may be drawn from the reasoning, only participants the agent knows may
    subscribe to its tracks (the server enforces it).

    livekit-server announces a participant that publishes nothing in its next batch of
    joins, up to 3 s after it joined; such a participant may subscribe to the agent's
    audio at once. Until it is announced, :func:`listening_level` cannot count its grant,
    and a summary remark would play to it. So the agent's tracks are closed to everyone
    but the participants in its roster, and a newcomer is let in :data:`LET_IN_AFTER_S`
    after it is announced (a summary remark it may not hear has stopped by then), and not
    while ``playing_out`` says a summary remark's audio still sounds (a loaded process
    plays what it handed to the output late, a remark that ended just before too). It
    hears the agent at most 3.5 s after it joined, or once that remark has played out."""

    def __init__(
        self,
        room: rtc.Room,
        default: Visibility,
        playing_out: Callable[[], bool] | None = None,
    ) -> None:
        """For the agent in ``room`` (connected); ``default``: the level of a participant
        without a grant; ``playing_out``: a summary remark may still sound."""
        self._room = room
        self._default = default
        self._playing_out = playing_out
        self._in: set[str] = set()
        """The identities that may subscribe."""
        self._waiting: dict[str, asyncio.TimerHandle] = {}
        """Announced participants not let in yet."""
        self._stop_following: Callable[[], None] | None = None

    def start(self) -> KnownListeners:
        """Close the tracks to all but the known participants, and follow joins and leaves."""
        self._room.on("participant_connected", self._joined)
        self._room.on("participant_disconnected", self._left)
        self._stop_following = doors_of_room(self._room).changes(door("grants"), self._changed)
        self._in = {i for i, p in self._room.remote_participants.items() if self._may_hear(p)}
        self._update()
        return self

    @property
    def admitted(self) -> frozenset[str]:
        """The identities that may subscribe to the agent's tracks now."""
        return frozenset(self._in)

    def close(self) -> None:
        """Stop following the roster (the permissions stay as they are)."""
        self._room.off("participant_connected", self._joined)
        self._room.off("participant_disconnected", self._left)
        if self._stop_following is not None:
            self._stop_following()
        for handle in self._waiting.values():
            handle.cancel()
        self._waiting.clear()

    def _may_hear(self, p: rtc.RemoteParticipant) -> bool:
        """People hear the agent (a summary remark only while every one of them may);
        another agent (not counted by :func:`listening_level`: a transcriber, a note
        taker) only if its own grant allows summaries."""
        if p.kind != rtc.ParticipantKind.PARTICIPANT_KIND_AGENT:
            return True
        level = visibility_of(peer_of(self._room, p).grant(REASONING_GRANT), self._default)
        return spoken_level([level]) == "summary"

    def _joined(self, p: rtc.RemoteParticipant) -> None:
        if p.identity not in self._waiting and self._may_hear(p):
            loop = asyncio.get_running_loop()
            self._waiting[p.identity] = loop.call_later(LET_IN_AFTER_S, self._let_in, p.identity)

    def _changed(self, p: rtc.RemoteParticipant) -> None:
        """Every grant is checked again at every change: another agent whose grant went
        below summaries is shut out at once; one raised is let in as a newcomer."""
        if p.identity in self._in and not self._may_hear(p):
            self._in.discard(p.identity)
            self._update()
        elif p.identity not in self._in and p.identity not in self._waiting:
            self._joined(p)

    def _let_in(self, identity: str) -> None:
        if self._playing_out is not None and self._playing_out():
            loop = asyncio.get_running_loop()  # the remark's tail first
            self._waiting[identity] = loop.call_later(PLAYED_OUT_POLL_S, self._let_in, identity)
            return
        self._waiting.pop(identity, None)
        p = self._room.remote_participants.get(identity)
        if p is not None and self._may_hear(p):  # its grant may have gone meanwhile
            self._in.add(identity)
            self._update()

    def _left(self, p: rtc.RemoteParticipant) -> None:
        handle = self._waiting.pop(p.identity, None)
        if handle is not None:
            handle.cancel()
        if p.identity in self._in:
            self._in.discard(p.identity)
            self._update()

    def _update(self) -> None:
        allowed = [
            rtc.ParticipantTrackPermission(participant_identity=identity, allow_all=True)
            for identity in sorted(self._in)
        ]
        self._room.local_participant.set_track_subscription_permissions(
            allow_all_participants=False, participant_permissions=allowed
        )


async def announce_remark(
    session: ProtocolSession,
    text: str,
    target: str | None,
    *,
    zdr: bool,
    level: SpokenLevel = "cue",
) -> None:
    """Announce a remark being spoken (``target``: the user message it answers), made at
    ``level``: a cue goes to every protocol client; a remark made from the reasoning
    (``summary``) only to those granted ``summary`` or ``full``, live and on replay. It is
    stored like a step: as it is, or under zero data retention only sealed with the
    conversation's data key (a store-only copy)."""
    body = Commentary(
        id=new_id(id_prefix.COMMENTARY),
        conversation_id=session.id,
        target_id=target,
        author_role="assistant",
        content=text,
        comment_type=REMARK_TYPE,
        timestamp=int(time.time() * 1000),
    )
    kept_at = SUMMARY_REMARK if level == "summary" else None
    to = [
        p.identity
        for p in session.participants.values()
        if p.active and entitled(kept_at, p.step_level, p.visibility)
    ]
    await session.outbox.send(body, to, everyone=True, store=not zdr, level=kept_at)
    session.telemetry.remark_spoken(level)
    if zdr and session.data_sealer is not None:
        sealed = session.data_sealer.seal(session.id, text, knd="remark", ref=body.id)
        kept = msgspec.structs.replace(body, content="")
        await session.outbox.send(kept, [], store_meta={META_SEALED: sealed})
