"""The AG-UI room listener under failover (issue 25, part 6): real livekit-server
(webhooks to the watcher), real Postgres, the real worker (``ALICIA_FAILOVER``, explicit
dispatch under ``ALICIA_AGENT_NAME``), the watcher and the endpoint as processes.

* A room that only a dashboard watches (``GET /agui/rooms/{room}/events``, no LiveKit
  client at all) gets its agent: the watcher counts the listener as a client.
* The listener trusts only the agent named ``ALICIA_AGENT_NAME``: an impostor of kind
  AGENT under another agent name, in the room before the real agent, answers the
  listener's handshake and sends it turns; none of it reaches the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from livekit import api, rtc

from alicia.agent.agui.room import trusts_agent
from alicia.harness import LiveKitServer, PostgresServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import (
    DATA_TOPIC,
    AssistantMessage,
    Configuration,
    encode,
    envelope,
    new_id,
)
from tests.e2e.failover.helpers import running_watcher
from tests.e2e.worker import running_worker
from tests.support.agui_endpoint import EventStream, agui_token, running_agui
from tests.support.db import new_database

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

LLM_STREAMS = "shared"  # llm (tests/conftest.py): the streams of tests/streams only

NAME = "alicia"
AGENT = rtc.ParticipantKind.PARTICIPANT_KIND_AGENT
CANARY = "the impostor speaks"


def failover_env(url: str) -> dict[str, str]:
    return {
        "DATABASE_URL": url,
        "ALICIA_FAILOVER": "true",
        "ALICIA_AGENT_NAME": NAME,
        "ALICIA_JOB_EXECUTOR": "thread",
        "ALICIA_LOAD_THRESHOLD": "inf",
    }


async def test_a_room_watched_only_through_the_agui_listener_gets_its_agent(
    livekit: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    watch_port: int,
    tmp_path: Path,
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "agui_watch")
    room = new_id("conv")
    async with (
        running_watcher(livekit, url, port=watch_port) as watcher,
        running_worker(livekit, llm.base_url, env=failover_env(url)) as worker,
        running_agui(livekit, llm.base_url, env={"ALICIA_AGENT_NAME": NAME}) as agui,
    ):
        token = agui_token(livekit, room, "dashboard", "full")
        async with EventStream(f"{agui.url}/rooms/{room}/events", token) as stream:
            try:
                started = await stream.wait("RUN_STARTED", timeout=20)
            except BaseException as exc:
                logs = f"{watcher.log()}\n{worker.log()}\n{agui.log()}"
                raise AssertionError(f"{exc!r}: {stream.events}\n{logs}") from exc
        assert started["threadId"] == room
        assert f"agent dispatched to {room}" in watcher.log(tail=10**8)


LISTENER = "agui.dashboard."
"""Identity prefix of the AG-UI listener of the dashboard's token."""


class Impostor:
    """An AGENT-kind participant dispatched under another agent name: it answers every
    Configuration, and keeps sending every other participant a handshake answer and a
    whole answer with the canary (:meth:`run`)."""

    def __init__(self, room: rtc.Room, conversation_id: str) -> None:
        self.room = room
        self.conversation_id = conversation_id
        self.sent: list[str] = []
        """Identities the impostor's packets went to."""
        self._stanza = 0

    def to(self, prefix: str, *, after: int = 0) -> list[str]:
        """The packets sent (after the first ``after``) to identities starting ``prefix``."""
        return [i for i in self.sent[after:] if i.startswith(prefix)]

    async def _send(self, body: Configuration | AssistantMessage, to: str) -> None:
        self._stanza -= 1
        env = envelope(body, stanza_id=self._stanza, conversation_id=self.conversation_id)
        await self.room.local_participant.publish_data(
            encode(env), reliable=True, destination_identities=[to], topic=DATA_TOPIC
        )
        self.sent.append(to)

    async def run(self) -> None:
        """Speak to everyone who is not an agent, three times a second, until cancelled."""
        cid = self.conversation_id
        while True:
            for p in list(self.room.remote_participants.values()):
                if p.kind == AGENT:
                    continue
                await self._send(
                    Configuration(conversation_id=cid, features=["streaming"]), p.identity
                )
                answer = AssistantMessage(id=new_id("msg"), conversation_id=cid, content=CANARY)
                await self._send(answer, p.identity)
            await asyncio.sleep(0.3)


async def test_the_listener_ignores_an_agent_with_another_agent_name(
    livekit: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    watch_port: int,
    tmp_path: Path,
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "agui_impostor")
    room = new_id("conv")
    grants = api.VideoGrants(room_join=True, room=room, agent=True)
    impostor_token = (
        api.AccessToken(livekit.api_key, livekit.api_secret)
        .with_identity("agent-impostor")
        .with_kind("agent")
        .with_attributes({"lk.agent_name": "someone-else"})
        .with_grants(grants)
        .to_jwt()
    )
    async with (
        running_watcher(livekit, url, port=watch_port) as watcher,
        running_worker(livekit, llm.base_url, env=failover_env(url)) as worker,
        running_agui(livekit, llm.base_url, env={"ALICIA_AGENT_NAME": NAME}) as agui,
        contextlib.AsyncExitStack() as stack,
    ):
        fake = rtc.Room()
        await fake.connect(livekit.url, impostor_token)
        stack.push_async_callback(fake.disconnect)
        impostor = Impostor(fake, room)
        speaking = asyncio.create_task(impostor.run())
        stack.callback(speaking.cancel)
        token = agui_token(livekit, room, "dashboard", "full")
        stream = await stack.enter_async_context(
            EventStream(f"{agui.url}/rooms/{room}/events", token)
        )
        try:
            await stream.wait("RUN_STARTED", timeout=20)
            heard = len(impostor.sent)
            # The impostor keeps speaking to the listener (it sees the listener once its
            # own room hears of it: on a loaded machine, later than the run starts).
            async with asyncio.timeout(20):
                while len(impostor.to(LISTENER, after=heard)) < 4:
                    await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # what it said has had time to reach the stream
        except BaseException as exc:
            logs = f"{watcher.log()}\n{worker.log()}\n{agui.log()}"
            raise AssertionError(f"{exc!r}: {stream.events}\n{logs}") from exc
        agents = [p for p in fake.remote_participants.values() if p.kind == AGENT]
        assert [p.attributes.get("lk.agent_name") for p in agents] == [NAME]  # the real one
        assert len(impostor.to(LISTENER, after=heard)) >= 4, impostor.sent
        assert CANARY not in str(stream.events), stream.events
        assert not speaking.done()


def test_the_trusted_agent_name_rule_also_without_a_name() -> None:
    """Unset ``ALICIA_AGENT_NAME`` (automatic dispatch): only an agent with no name. Either
    way only an agent that announces the protocol (an avatar or another framework's agent
    in the room is not ours)."""
    standard = rtc.ParticipantKind.PARTICIPANT_KIND_STANDARD
    ours = {"alicia.protocol": "1"}
    assert trusts_agent(AGENT, {**ours, "lk.agent_name": NAME}, NAME)
    assert not trusts_agent(AGENT, {**ours, "lk.agent_name": "someone-else"}, NAME)
    assert not trusts_agent(AGENT, ours, NAME)
    assert trusts_agent(AGENT, ours, "") and trusts_agent(AGENT, {**ours, "lk.agent_name": ""}, "")
    assert not trusts_agent(AGENT, {**ours, "lk.agent_name": NAME}, "")
    assert not trusts_agent(standard, {**ours, "lk.agent_name": NAME}, NAME)
    assert not trusts_agent(AGENT, {"lk.agent_name": NAME}, NAME)  # no protocol announced
    assert not trusts_agent(AGENT, {}, "") and not trusts_agent(AGENT, {"alicia.protocol": "2"}, "")
