"""What a voice room hears of the reasoning: who listens, and how a remark is announced.

* :func:`listening_level`: the most every listener in the room may hear (cues or
  summaries), from their grants;
* :func:`announce_remark`: a remark being spoken, as a Commentary (type 15) to the
  protocol clients entitled to its level, stored as spoken (under zero data retention
  only sealed).
"""

from __future__ import annotations

import time

import msgspec
from livekit import rtc

from alicia.agent.engine.outbox import SUMMARY_REMARK, entitled
from alicia.agent.engine.participants import REASONING_GRANT, Visibility, visibility_of
from alicia.agent.engine.remarks import SpokenLevel, spoken_level
from alicia.agent.engine.session import ProtocolSession
from alicia.agent.engine.sink import META_SEALED, REMARK_TYPE
from alicia.agent.rooms.transport import peer_of
from alicia.protocol import Commentary, new_id
from alicia.protocol import ids as id_prefix

__all__ = ["announce_remark", "listening_level"]


def listening_level(room: rtc.Room, default: Visibility) -> SpokenLevel:
    """The level every listener in ``room`` holds (``default`` for those without a grant).
    Every participant but agents listens: people (standard, SIP) and recorders (egress,
    whose files are a disk the reasoning must be entitled to)."""
    return spoken_level(
        visibility_of(peer_of(p).grant(REASONING_GRANT), default)
        for p in room.remote_participants.values()
        if p.kind != rtc.ParticipantKind.PARTICIPANT_KIND_AGENT
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
