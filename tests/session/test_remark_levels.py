"""A spoken remark carries the level it was made at, live and on replay.

A cue ("Let me work that out.") says nothing of the reasoning: every protocol client gets
its Commentary. A remark made from the reasoning (a step's first sentence, under
``ALICIA_SPOKEN_PROGRESS=summary``) goes only to participants granted ``summary`` or
``full``: live, and when anyone resumes later. A participant granted ``none`` who joins
after the turn and resumes from the start gets the cue and not the summary remark.
"""

from __future__ import annotations

from typing import Any

from alicia.agent.engine.transport import Peer
from alicia.agent.session.spoken import announce_remark
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import Commentary, Configuration, Envelope
from tests.engine.room import CONV, SHOW, count, handshake, of, room

CUE = "Let me work that out."
SUMMARY = "Seventeen times twenty is three hundred forty."


def granted(level: str) -> Peer:
    return Peer(attributes={"alicia.reasoning": level})


def remarks(box: list[Envelope[Any]]) -> list[str]:
    return [c.content for c in of(box, Commentary)]


async def test_a_summary_remark_reaches_only_those_granted_summary_live_and_on_replay(
    llm: RecordedLLM,
) -> None:
    async with room(llm, spoken_progress="summary") as r:
        session = r.conversation.session
        alice, eve = r.client("alice", granted("summary")), r.client("eve", granted("none"))
        await handshake(alice)
        await handshake(eve)
        await announce_remark(session, CUE, None, zdr=False)
        await announce_remark(session, SUMMARY, None, zdr=False, level="summary")
        box = await r.transport.wait_for("alice", lambda b: len(of(b, Commentary)) == 2)
        assert remarks(box) == [CUE, SUMMARY]
        assert remarks(r.transport.inbox("eve")) == [CUE]
        # Late joiners resume from the start of the conversation.
        for name, level, expected in (
            ("late-none", "none", [CUE]),
            ("late-encrypted", "encrypted", [CUE]),
            ("late-summary", "summary", [CUE, SUMMARY]),
            ("late-full", "full", [CUE, SUMMARY]),
        ):
            late = r.client(name, granted(level))
            late.send(Configuration(conversation_id=CONV, features=SHOW))
            await late.wait_for(count(Configuration, 1))
            late.send(Configuration(conversation_id=CONV, features=SHOW, last_sequence_seen=1))
            await late.wait_for(count(Configuration, 2))
            got = remarks(r.transport.inbox(name))
            assert got == expected, (name, got)
        assert SUMMARY.encode() not in b"".join(
            s.data for s in r.transport.sent if s.reaches("eve") or s.reaches("late-none")
        )
