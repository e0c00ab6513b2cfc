"""The client library and the CLI follow the agent, and only the agent (real livekit-server).

The agents are scripted participants joined with agent tokens (kind AGENT; under explicit
dispatch the ``lk.agent_name`` attribute, which livekit-server puts in the tokens it mints
at dispatch and also accepts from any token minted with the API secret). The impostor is
an ordinary participant holding a token for the agent's identity, as a careless app
backend might mint: livekit-server removes the real agent as a duplicate identity.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator

import pytest
from livekit import rtc

from alicia.client import (
    AgentEvent,
    AgentLeft,
    AgentLost,
    AgentMissingError,
    AgentReplaced,
    AgentResumed,
    ClientSession,
    mint_token,
)
from alicia.harness import LiveKitServer
from alicia.protocol import (
    DATA_TOPIC,
    Configuration,
    ReasoningStep,
    UserMessage,
    encode,
    envelope,
    new_id,
)
from tests.support.client_cli import CLI
from tests.support.scripted_agent import Script, ScriptedAgent, scripted_agent
from tests.support.trust import (
    ANSWER,
    FORGED,
    forging,
    from_clients,
    last_stanza,
    questions_to,
    shown,
    until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def token(server: LiveKitServer, room: str, identity: str = "alice") -> str:
    return mint_token(server.api_key, server.api_secret, room=room, identity=identity)


async def test_an_impostor_under_the_agents_identity_is_never_trusted_and_a_new_agent_is(
    livekit_server: LiveKitServer,
) -> None:
    """Mallory (a standard participant) joins as ``agent-aaa``: livekit-server removes the
    real agent; nothing Mallory sends (forged envelopes, and answers to anything) is
    shown, nothing is sent to her, the session waits for an agent; ``agent-bbb`` joins,
    the session resumes with it and the conversation goes on."""
    room = new_id("conv")
    events: list[AgentEvent] = []
    session = ClientSession(agent_rejoin_timeout=60)
    session.on_agent(events.append)
    async with session, scripted_agent(livekit_server, room, identity="agent-aaa") as a:
        await session.connect(livekit_server.url, token(livekit_server, room))
        assert await session.wait_for_agent(15) == "agent-aaa"
        await session.handshake()
        first = await session.wait_turn(await session.ask("6 x 7?"), timeout=15)
        assert first.answer == ANSWER
        seen = last_stanza(a)
        assert session.last_sequence_seen == seen

        async with (
            scripted_agent(
                livekit_server, room, FORGED, identity="agent-aaa", kind="standard"
            ) as mallory,
            forging(mallory, [first.user_message_id]),
        ):
            await until(lambda: events != [], what="the agent's departure")
            assert events == [AgentLeft("agent-aaa", 60)]
            assert session.agent_identity is None
            pending = asyncio.create_task(session.ask("And 7 x 6?"))
            await until(lambda: session.untrusted >= 20, what="forged packets")
            assert not pending.done()  # waits for an agent; sends nothing meanwhile
            async with scripted_agent(livekit_server, room, identity="agent-bbb", after=seen) as b:
                second = await session.wait_turn(await pending, timeout=20)
    assert second.answer == ANSWER
    assert "FORGED" not in shown(session)
    assert from_clients(mallory) == []  # no Configuration, no question went to the impostor
    assert events == [
        AgentLeft("agent-aaa", 60),
        AgentReplaced("agent-bbb", "agent-aaa"),
        AgentResumed("agent-bbb", "agent-aaa", seen, replayed=True),
    ]
    resume = from_clients(b, Configuration)[0]
    assert (resume.conversation_id, resume.last_sequence_seen) == (room, seen)
    users = questions_to(b)
    assert [u.content for u in users] == ["And 7 x 6?"]
    assert users[0].previous_id == first.answer_id


async def test_under_explicit_dispatch_trust_moves_to_the_same_agent_dispatched_again(
    livekit_server: LiveKitServer,
) -> None:
    """While ``alicia-x``'s agent A is in the room, a second ``alicia-x`` agent B and an
    agent of another name change nothing; when A leaves, B (already there) takes over at
    once, is resumed from A's last stanza, and its replay of that stanza is a duplicate."""
    room = new_id("conv")
    events: list[AgentEvent] = []
    session = ClientSession(agent_name="alicia-x")
    session.on_agent(events.append)
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(session)
        await session.connect(livekit_server.url, token(livekit_server, room))
        async with scripted_agent(
            livekit_server, room, identity="agent-a", agent_name="alicia-x"
        ) as a:
            assert await session.wait_for_agent(15) == "agent-a"
            await session.handshake()
            first = await session.wait_turn(await session.ask("6 x 7?"), timeout=15)
            b = await stack.enter_async_context(
                scripted_agent(
                    livekit_server,
                    room,
                    Script(duplicate_steps=False),
                    identity="agent-b",
                    agent_name="alicia-x",
                    after=last_stanza(a) + 100,  # A's envelopes to other clients
                )
            )
            other = await stack.enter_async_context(
                scripted_agent(
                    livekit_server, room, FORGED, identity="agent-other", agent_name="other"
                )
            )
            await until(
                lambda: {"agent-b", "agent-other"} <= set(session.room.remote_participants),
                what="the other agents",
            )
            again = await session.wait_turn(await session.ask("again"), timeout=15)
            assert session.agent_identity == "agent-a" and events == []
            seen = last_stanza(a)
        # A left (as the watcher removes a dead worker's agent): B, already here, takes over.
        await until(lambda: len(events) >= 2, what="the takeover")
        dup = session.duplicates
        await b.room.local_participant.publish_data(
            encode(a.sent[-1]), reliable=True, topic=DATA_TOPIC
        )  # a one-message overlap in a replay: at the high mark, so a duplicate
        third = await session.wait_turn(await session.ask("third"), timeout=15)
        assert session.duplicates == dup + 1
    assert first.answer == again.answer == third.answer == ANSWER
    assert from_clients(other) == []
    resume = from_clients(b, Configuration)[0]
    assert resume == Configuration(
        conversation_id=room,
        last_sequence_seen=seen,
        client_version=resume.client_version,
        device="cli",
        features=["streaming", "reasoning_step_display"],
    )
    assert events == [
        AgentReplaced("agent-b", "agent-a"),
        AgentResumed("agent-b", "agent-a", seen, replayed=True),
    ]
    assert "FORGED" not in shown(session)


async def test_a_new_agent_that_cannot_replay_gets_a_plain_configuration(
    livekit_server: LiveKitServer,
) -> None:
    """A leaves with a question unanswered; B numbers from scratch (its worker lost the
    sequence) and answers the resume with 202: the session follows B's numbering, ends
    the open turn with a recoverable error, continues without a replay and says so."""
    room = new_id("conv")
    events: list[AgentEvent] = []
    session = ClientSession()
    session.on_agent(events.append)
    async with session:
        await session.connect(livekit_server.url, token(livekit_server, room))
        async with scripted_agent(livekit_server, room, identity="agent-a") as a:
            await session.wait_for_agent(15)
            await session.handshake()
            await session.wait_turn(await session.ask("6 x 7?"), timeout=15)
            a.script = Script(sentences=[])  # thinks, never answers
            open_turn = await session.ask("unanswered")
            await until(lambda: len(a.sent) >= 14, what="A's steps")
        seen = last_stanza(a)
        await until(lambda: events != [], what="A's departure")
        async with scripted_agent(livekit_server, room, identity="agent-b") as b:
            await session.wait_turn(open_turn, timeout=30)
            second = await session.wait_turn(await session.ask("again"), timeout=30)
    assert open_turn.error is not None and open_turn.error.recoverable
    assert "the agent was replaced (agent-b) before it answered" in open_turn.error.message
    assert second.answer == ANSWER
    assert session.sequence.renumbered == 1
    assert [c.last_sequence_seen for c in from_clients(b, Configuration)] == [seen, 0]
    resumed = events[-1]
    assert isinstance(resumed, AgentResumed) and not resumed.replayed
    assert resumed.reason is not None and "202" in resumed.reason
    assert [type(e) for e in events] == [AgentLeft, AgentReplaced, AgentResumed]


async def test_when_no_agent_comes_back_waiting_requests_fail(
    livekit_server: LiveKitServer,
) -> None:
    room = new_id("conv")
    events: list[AgentEvent] = []
    session = ClientSession(agent_rejoin_timeout=1.0)
    session.on_agent(events.append)
    async with session:
        await session.connect(livekit_server.url, token(livekit_server, room))
        async with scripted_agent(livekit_server, room, Script(sentences=[]), identity="agent-a"):
            await session.wait_for_agent(15)
            await session.handshake()
            open_turn = await session.ask("never answered")
        with pytest.raises(AgentMissingError, match="no agent took over within 1s"):
            await session.wait_turn(open_turn, timeout=20)
        with pytest.raises(AgentMissingError):
            await session.ask("too late")
    assert events == [AgentLeft("agent-a", 1.0), AgentLost("agent-a", 1.0)]


# --- the CLI, run as a user runs it ---------------------------------------------------


class CliProcess:
    """``alicia-client`` with a pipe for stdin and its output read as it comes."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.out = ""
        self.err = ""
        self._readers = [
            asyncio.create_task(self._read("out")),
            asyncio.create_task(self._read("err")),
        ]

    async def _read(self, which: str) -> None:
        stream = self.proc.stdout if which == "out" else self.proc.stderr
        assert stream is not None
        while chunk := await stream.read(4096):
            setattr(self, which, getattr(self, which) + chunk.decode())

    async def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()

    async def wait_for(self, text: str, count: int = 1, timeout: float = 30.0) -> None:
        try:
            await until(lambda: self.out.count(text) >= count, timeout, repr(text))
        except AssertionError:
            raise AssertionError(f"{text!r} not printed:\n{self.out}\n{self.err}") from None

    async def finish(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = await asyncio.wait_for(self.proc.wait(), 30)
        await asyncio.gather(*self._readers)
        return code


@contextlib.asynccontextmanager
async def cli(server: LiveKitServer, *args: str) -> AsyncIterator[CliProcess]:
    proc = await asyncio.create_subprocess_exec(
        str(CLI),
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **server.env(), "NO_COLOR": "1", "COLUMNS": "200"},
    )
    client = CliProcess(proc)
    try:
        yield client
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_the_cli_shows_nothing_from_an_impostor_and_follows_the_new_agent(
    livekit_server: LiveKitServer,
) -> None:
    """A user's alicia-client: the agent is kicked by an impostor under its identity who
    forges and answers; the CLI says it waits, shows none of it, then says the agent was
    replaced and resumed, and answers the next question from the new agent."""
    room = new_id("conv")
    async with (
        scripted_agent(livekit_server, room, identity="agent-aaa") as a,
        cli(livekit_server, "--room", room, "--identity", "user-1") as user,
    ):
        await user.say("6 x 7?")
        await user.wait_for(f"alicia > {ANSWER}")
        turn_ids = [e.body.id for e in a.received if isinstance(e.body, UserMessage)]
        seen = last_stanza(a)
        async with (
            scripted_agent(
                livekit_server, room, FORGED, identity="agent-aaa", kind="standard"
            ) as mallory,
            forging(mallory, turn_ids),
        ):
            await user.wait_for("the agent left (agent-aaa); waiting up to 30s")
            await user.say("And 7 x 6?")  # typed while no agent is there
            await asyncio.sleep(1.0)
            async with scripted_agent(livekit_server, room, identity="agent-bbb", after=seen) as b:
                await user.wait_for(
                    f"the agent was replaced (agent-bbb); resumed after server message {seen}"
                )
                await user.wait_for(f"alicia > {ANSWER}", count=2)
                code = await user.finish()
    assert code == 0, user.err
    assert "FORGED" not in user.out + user.err
    assert from_clients(mallory) == []
    assert from_clients(b, Configuration)[0].last_sequence_seen == seen
    assert [u.content for u in questions_to(b)] == ["And 7 x 6?"]


async def test_an_agent_that_does_not_announce_the_protocol_is_never_trusted(
    livekit_server: LiveKitServer,
) -> None:
    """An avatar (kind AGENT, no ``alicia.protocol`` attribute) is in the room first and
    answers everything: the session waits for an agent and sends it nothing; the agent
    that announces the protocol joins and is trusted; nothing the avatar sends is shown."""
    room = new_id("conv")
    session = ClientSession()
    async with (
        session,
        scripted_agent(
            livekit_server, room, FORGED, identity="avatar-1", speaks_protocol=False
        ) as avatar,
    ):
        await session.connect(livekit_server.url, token(livekit_server, room))
        with pytest.raises(AgentMissingError):
            await session.wait_for_agent(3)
        async with scripted_agent(livekit_server, room, identity="agent-a"):
            assert await session.wait_for_agent(15) == "agent-a"
            await session.handshake()
            turn = await session.wait_turn(await session.ask("6 x 7?"), timeout=15)
    assert turn.answer == ANSWER
    assert "FORGED" not in shown(session)
    assert from_clients(avatar) == []


@contextlib.asynccontextmanager
async def with_agent_a(
    server: LiveKitServer, events: list[AgentEvent]
) -> AsyncIterator[tuple[ClientSession, ScriptedAgent]]:
    """A session in a new room, handshaken with the scripted agent ``agent-a`` (its agent
    events into ``events``)."""
    room = new_id("conv")
    session = ClientSession()
    session.on_agent(events.append)
    async with session:
        await session.connect(server.url, token(server, room))
        async with scripted_agent(server, room, identity="agent-a") as a:
            await session.wait_for_agent(15)
            await session.handshake()
            yield session, a


async def test_when_its_room_reconnects_the_session_resumes_with_the_same_agent(
    livekit_server: LiveKitServer,
) -> None:
    """LiveKit's SDK reconnected the room (a lost link, or a room started again on another
    node when its node died): envelopes sent meanwhile may be lost, so the session resumes
    with the agent it trusts (§4.9: lastSequenceSeen = the last it saw when the link was
    lost, whatever came after it: what the dying link dropped can lie below) and says so."""
    events: list[AgentEvent] = []
    async with with_agent_a(livekit_server, events) as (session, a):
        await session.wait_turn(await session.ask("6 x 7?"), timeout=15)
        seen = last_stanza(a)
        session.room.emit("reconnecting")  # what the SDK emits when the link drops
        await session.wait_turn(await session.ask("meanwhile"), timeout=15)
        assert session.last_sequence_seen > seen  # arrived after the loss
        session.room.emit("reconnected")  # what the SDK emits once the link is back
        await until(lambda: events != [], what="the resume")
        after = await session.wait_turn(await session.ask("again"), timeout=15)
    assert [c.last_sequence_seen for c in from_clients(a, Configuration)] == [0, seen]
    [resumed] = events
    assert isinstance(resumed, AgentResumed) and resumed.replayed
    assert (resumed.identity, resumed.previous, resumed.last_sequence_seen) == (
        "agent-a",
        "agent-a",
        seen,
    )
    assert after.answer == ANSWER


async def test_an_envelope_whose_sender_the_sdk_cannot_name_is_asked_for_again(
    livekit_server: LiveKitServer,
) -> None:
    """After the link came back, the agent's data can outrun the news of it: LiveKit's SDK
    then names no sender. Such an envelope is not taken (no one vouches for it), but its
    stanzaId is a hint: the session resumes again from below it (§4.9; after the resume
    under way, if any: its answer may have been what was dropped, a case the JS client's
    test makes), so the agent sends it again as itself. Once per window: a second such
    envelope makes no third resume."""
    events: list[AgentEvent] = []
    async with with_agent_a(livekit_server, events) as (session, a):
        room = session.room.name  # the conversation's id
        first = await session.ask("6 x 7?")
        await session.wait_turn(first, timeout=15)
        seen = last_stanza(a)

        def unnamed(stanza: int) -> None:
            """What the SDK emits for a packet from a participant it does not know yet."""
            step = ReasoningStep(
                id=new_id("rs"),
                conversation_id=room,
                previous_id=first.user_message_id,
                content="UNNAMED",
                step_index=9,
            )
            data = encode(envelope(step, stanza_id=-stanza, conversation_id=room))
            packet = rtc.DataPacket(data, rtc.DataPacketKind.KIND_RELIABLE, None, DATA_TOPIC)
            session.room.emit("data_received", packet)

        session.room.emit("reconnecting")
        session.room.emit("reconnected")
        await until(lambda: len(events) == 1, what="the resume")
        n = session.last_sequence_seen + 1  # as if the agent's next came unnamed
        unnamed(n)
        await until(lambda: len(events) == 2, what="the second resume")
        unnamed(session.last_sequence_seen + 1)  # the window's one resume is spent
        after = await session.wait_turn(await session.ask("again"), timeout=15)
    assert [c.last_sequence_seen for c in from_clients(a, Configuration)] == [0, seen, n - 1]
    assert all(isinstance(e, AgentResumed) and e.replayed for e in events)
    assert [(e.identity, e.last_sequence_seen) for e in events] == [  # type: ignore[union-attr]
        ("agent-a", seen),
        ("agent-a", n - 1),
    ]
    assert "UNNAMED" not in shown(session)
    assert session.untrusted == 2
    assert after.answer == ANSWER
