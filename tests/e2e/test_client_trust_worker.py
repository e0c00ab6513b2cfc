"""The client library follows the real worker's agent, and only it (real livekit-server,
the worker process with recorded LLM streams over HTTP).

* An ordinary participant joins under the worker's agent identity: livekit-server removes
  the real agent; nothing the impostor sends is shown, nothing is sent to it.
* The agent's worker dies (SIGKILL); its participant is removed from the room (what the
  watcher does), a second worker is dispatched under the same agent name: the session
  moves its trust to the new agent, resumes, and the conversation goes on; with
  ``ALICIA_FAILOVER`` the new agent continues the server's stanza sequence and replays,
  without it it refuses the replay (202) and the session continues without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from livekit import api

from alicia.client import (
    AgentEvent,
    AgentLeft,
    AgentLost,
    AgentReplaced,
    AgentResumed,
    ClientSession,
    Turn,
)
from alicia.harness import LiveKitServer, PostgresServer
from alicia.harness.recorded_llm import RecordedLLM, StreamSpec
from alicia.protocol import new_id
from tests.e2e.worker import NO_LOAD_LIMIT, running_worker
from tests.support.db import new_database
from tests.support.scripted_agent import scripted_agent
from tests.support.trust import FORGED, forging, from_clients, shown, until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


async def dispatch(server: LiveKitServer, room: str, agent_name: str) -> None:
    """Ask livekit-server for an agent of ``agent_name`` in ``room`` (explicit dispatch)."""
    async with api.LiveKitAPI(server.http_url, server.api_key, server.api_secret) as lk:
        await lk.agent_dispatch.create_dispatch(
            api.CreateAgentDispatchRequest(agent_name=agent_name, room=room)
        )


async def test_an_impostor_kicking_the_workers_agent_is_never_shown(
    livekit_server: LiveKitServer, llm: RecordedLLM, streams: dict[str, StreamSpec]
) -> None:
    spec = streams["deepseek_reasoning_content"]
    room = new_id("conv")
    events: list[AgentEvent] = []
    session = ClientSession(agent_rejoin_timeout=3.0)
    session.on_agent(events.append)
    async with (
        running_worker(livekit_server, llm.base_url, env=NO_LOAD_LIMIT) as worker,
        session,
    ):
        await session.connect(livekit_server.url, livekit_server.token("alice", room))
        try:
            agent = await session.wait_for_agent(30)
        except Exception as exc:
            raise AssertionError(worker.log()) from exc
        await session.handshake()
        first = await session.wait_turn(await session.ask(spec.user), timeout=30)
        async with (
            scripted_agent(livekit_server, room, FORGED, identity=agent, kind="standard") as m,
            forging(m, [first.user_message_id]),
        ):
            await until(lambda: len(events) >= 2, what="the agent lost")
            assert session.untrusted > 10
    assert first.answer.split() == spec.answer.split()
    assert events == [AgentLeft(agent, 3.0), AgentLost(agent, 3.0)]
    assert "FORGED" not in shown(session)
    assert from_clients(m) == []


STALE_AFTER_S = 2.0
"""After a worker's death, its agent's lease is stale by then (the default heartbeat
timeout, 1.5 s, past its last renewal)."""


@dataclass
class Takeover:
    """What a session saw across a worker's death and another worker's agent."""

    events: list[AgentEvent]
    old: str
    new: str | None
    seen: int
    first: Turn
    second: Turn
    server_ids: list[int]
    """|stanzaId| of every server envelope accepted after the takeover."""


async def take_over(
    server: LiveKitServer, llm: RecordedLLM, streams: dict[str, StreamSpec], env: dict[str, str]
) -> Takeover:
    """A session asks worker 1's agent, worker 1 is killed (SIGKILL) and its participant
    removed (as the watcher does), worker 2 is dispatched under the same name; the session
    asks again."""
    first_spec = streams["deepseek_reasoning_content"]
    second_spec = streams["vllm_reasoning_both_fields"]
    room = new_id("conv")
    name = f"alicia-{new_id('t')[2:10].lower()}"
    env = {**NO_LOAD_LIMIT, "ALICIA_AGENT_NAME": name, **env}
    events: list[AgentEvent] = []
    session = ClientSession(agent_name=name, agent_rejoin_timeout=90)
    session.on_agent(events.append)
    after: list[int] = []
    session.on_envelope(
        lambda e: after.append(-e.stanza_id) if e.stanza_id < 0 and events else None
    )
    async with session:
        await session.connect(server.url, server.token("alice", room))
        async with running_worker(server, llm.base_url, env=env) as w1:
            await dispatch(server, room, name)
            try:
                old = await session.wait_for_agent(30)
            except Exception as exc:
                raise AssertionError(w1.log()) from exc
            await session.handshake()
            first = await session.wait_turn(await session.ask(first_spec.user), timeout=30)
            seen = session.last_sequence_seen
            with contextlib.suppress(ProcessLookupError):
                os.killpg(w1.proc.pid, signal.SIGKILL)  # the worker dies
            await w1.proc.wait()
            killed = time.monotonic()
        async with api.LiveKitAPI(server.http_url, server.api_key, server.api_secret) as lk:
            # As the watcher does: the dead agent's participant goes at once.
            await lk.room.remove_participant(api.RoomParticipantIdentity(room=room, identity=old))
        await until(lambda: events != [], what="the old agent's departure")
        if "DATABASE_URL" in env:
            # As the watcher does: dispatch again once the dead agent's lease is stale (not
            # renewed for ALICIA_HEARTBEAT_TIMEOUT, 1.5 s by default); a job offered before
            # that is refused (a live agent serves the room), and nobody offers it again.
            await asyncio.sleep(max(0.0, killed + STALE_AFTER_S - time.monotonic()))
        async with running_worker(server, llm.base_url, env=env) as w2:
            await dispatch(server, room, name)
            try:
                await until(lambda: len(events) >= 3, timeout=60, what="the resume")
            except AssertionError as exc:
                raise AssertionError(f"{events}\n{w2.log()}") from exc
            second = await session.wait_turn(await session.ask(second_spec.user), timeout=30)
            new = session.agent_identity  # before the worker stops (its agent leaves then)
            seen_events = list(events)  # the same: its agent's departure is no takeover
    assert first.answer.split() == first_spec.answer.split()
    assert second.answer.split() == second_spec.answer.split()
    return Takeover(seen_events, old, new, seen, first, second, after)


def check_resumed(t: Takeover) -> AgentResumed:
    """Trust moved to a new agent of the worker, and the session resumed with it."""
    assert t.new is not None and t.new != t.old and t.new.startswith("agent-")
    assert [type(e) for e in t.events] == [AgentLeft, AgentReplaced, AgentResumed]
    resumed = t.events[-1]
    assert isinstance(resumed, AgentResumed)
    assert (resumed.identity, resumed.previous, resumed.last_sequence_seen) == (
        t.new,
        t.old,
        t.seen,
    )
    return resumed


async def test_a_second_worker_without_the_sequence_gets_a_plain_configuration(
    livekit_server: LiveKitServer, llm: RecordedLLM, streams: dict[str, StreamSpec]
) -> None:
    """Failover off: the new agent numbers from scratch and answers the resume with 202;
    the session follows its numbering and the conversation continues."""
    t = await take_over(livekit_server, llm, streams, {})
    resumed = check_resumed(t)
    assert not resumed.replayed and resumed.reason is not None and "202" in resumed.reason


async def test_with_failover_the_second_worker_continues_the_sequence_and_replays(
    livekit_server: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    streams: dict[str, StreamSpec],
    tmp_path: Path,
) -> None:
    """``ALICIA_FAILOVER``: the new agent numbers past the old one's last stanza, so the
    resume (lastSequenceSeen = that stanza) is answered with a replay, and everything it
    sends is above the session's high mark."""
    url = await new_database("postgres", postgres_server, tmp_path, "client_takeover")
    t = await take_over(
        livekit_server, llm, streams, {"DATABASE_URL": url, "ALICIA_FAILOVER": "true"}
    )
    assert check_resumed(t).replayed
    assert t.server_ids and min(t.server_ids) > t.seen
    assert t.server_ids == sorted(t.server_ids)
