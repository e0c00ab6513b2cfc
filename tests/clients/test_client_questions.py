"""A question the agent has not shown it has is sent again (``alicia.client.questions``).

The faults are made by the scripted agent in a real room (livekit-server): it drops the
first UserMessage unread, as a packet lost while a link is rebuilt (the agent's, when its
node died: fD), or starts a turn only after a while (a slow model). Like the worker, it
drops a question that comes again as it was (same stanzaId) and refuses one that comes
again under a new stanzaId (ErrorMessage 204), which the client takes as "it has it".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from alicia.client import ClientSession, mint_token
from alicia.harness import LiveKitServer
from alicia.protocol import Envelope, ErrorMessage, UserMessage, new_id
from tests.support.scripted_agent import Script, ScriptedAgent, scripted_agent
from tests.support.trust import ANSWER, from_clients

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _questions(agent: ScriptedAgent) -> list[tuple[int, str]]:
    """(stanzaId, id) of every UserMessage envelope the agent received, lost ones too."""
    return [(e.stanza_id, e.body.id) for e in agent.received if isinstance(e.body, UserMessage)]


@contextlib.asynccontextmanager
async def ready(
    server: LiveKitServer, script: Script
) -> AsyncIterator[tuple[ClientSession, ScriptedAgent]]:
    """A session handshaken with a scripted agent playing ``script`` in a new room."""
    room = new_id("conv")
    token = mint_token(server.api_key, server.api_secret, room=room, identity="alice")
    async with (
        ClientSession() as session,
        scripted_agent(server, room, script, identity="agent-a") as agent,
    ):
        await session.connect(server.url, token)
        await session.wait_for_agent(15)
        await session.handshake()
        yield session, agent


async def test_a_question_lost_on_the_way_is_sent_again_until_the_agent_has_it(
    livekit_server: LiveKitServer,
) -> None:
    """The first copy is lost: the same envelope comes again a second later, the agent
    answers it once, and the client shows one whole turn."""
    async with ready(livekit_server, Script(lose_questions=1)) as (session, agent):
        turn = await session.wait_turn(await session.ask("6 x 7?"), timeout=15)
    [lost] = agent.lost
    copies = _questions(agent)
    assert len(copies) >= 2 and set(copies) == {(lost.stanza_id, turn.user_message_id)}
    assert turn.answer == ANSWER and turn.error is None
    assert [s.step_index for s in turn.steps] == [1, 2, 3]  # one turn's steps, once


@pytest.mark.parametrize("fault", ["lost", "slow"])
async def test_a_question_followed_by_other_traffic_comes_again_under_a_new_stanza(
    livekit_server: LiveKitServer, fault: str
) -> None:
    """Something went out after the question (here a show-reasoning update): its repeat
    must take a new stanzaId (they rise). Lost, the agent takes the repeat; slow, the
    agent had it and refuses the id (204): the client drops that refusal as noise and
    the turn ends with its answer, not the error."""
    script = Script(lose_questions=1) if fault == "lost" else Script(think_s=2.5)
    async with ready(livekit_server, script) as (session, agent):
        asked = await session.ask("6 x 7?")
        await session.set_show_reasoning(True)
        turn = await session.wait_turn(asked, timeout=15)
    copies = _questions(agent)
    stanzas = sorted({stanza for stanza, _ in copies})
    assert {mid for _, mid in copies} == {turn.user_message_id}
    assert len(stanzas) == 2 and stanzas[0] < stanzas[1], copies  # then a new stanzaId
    assert turn.answer == ANSWER and turn.error is None
    refusals = [e for e in agent.sent if isinstance(e.body, ErrorMessage)]
    if fault == "lost":
        assert refusals == [] and len(agent.lost) == 1
    else:
        assert [e.body.code for e in refusals] == [204] and session.duplicates >= 1
    assert [s.step_index for s in turn.steps] == [1, 2, 3]
    assert len(from_clients(agent, UserMessage)) == len(copies)


async def test_two_questions_unheard_go_again_in_order_and_each_refusal_is_noise(
    livekit_server: LiveKitServer,
) -> None:
    """Two questions in flight, neither heard of yet (a slow start). The first goes again
    under a new stanzaId (the second went after it); then the second is no longer the
    last one sent either (decided as it goes, not before the round: the same envelope
    again would not rise, and the agent would refuse its order, 202), so it takes a new
    one too. The agent refuses only their ids (204), dropped as noise; no more repeats
    then, and both turns end with their answers."""
    events: list[object] = []
    async with ready(livekit_server, Script(think_s=2.5)) as (session, agent):
        session.on_event(events.append)
        first = await session.ask("6 x 7?")
        second = await session.ask("7 x 6?")
        turns = [await session.wait_turn(t, timeout=20) for t in (first, second)]
    refusals = [e.body for e in agent.sent if isinstance(e.body, ErrorMessage)]
    assert sorted(r.code for r in refusals) == [204, 204], refusals
    assert {r.originating_id for r in refusals} == {t.user_message_id for t in turns}
    said = [(t.answer, t.error) for t in turns]
    assert all(t.answer == ANSWER and t.error is None for t in turns), (said, agent.sent)
    assert not [e for e in events if type(e).__name__ == "ErrorReceived"]
    copies = _questions(agent)
    stanzas = [stanza for stanza, _ in copies]
    assert len(copies) == 4 and stanzas == sorted(stanzas), copies  # two each, no more


async def test_a_refusal_back_before_the_repeat_s_send_is_confirmed_is_still_noise(
    livekit_server: LiveKitServer,
) -> None:
    """A loaded client: its repeat's send is confirmed only after the agent's refusal (204)
    has come back (fK, fM: that turn ended with the 204 as its error). The repeat is noted
    before it goes, so the refusal is noise and the turn ends with its answer."""
    async with ready(livekit_server, Script(think_s=2.5)) as (session, agent):
        publish = session._publish

        async def slow(env: Envelope[Any]) -> None:
            await publish(env)
            if isinstance(env.body, UserMessage):
                await asyncio.sleep(0.5)  # the confirmation waits: the refusal comes first

        session._publish = slow  # type: ignore[method-assign]
        first = await session.ask("6 x 7?")
        second = await session.ask("7 x 6?")
        turns = [await session.wait_turn(t, timeout=20) for t in (first, second)]
    refusals = [e.body for e in agent.sent if isinstance(e.body, ErrorMessage)]
    assert [r.code for r in refusals] and {r.code for r in refusals} == {204}, refusals
    assert [(t.answer, t.error) for t in turns] == [(ANSWER, None)] * 2
