"""The client library follows the real worker's agent, and only it (real livekit-server,
the worker process with recorded LLM streams over HTTP).

* An ordinary participant joins under the worker's agent identity: livekit-server removes
  the real agent; nothing the impostor sends is shown, nothing is sent to it.
* The agent's worker dies (SIGKILL); its participant is removed from the room (what the
  watcher does), a second worker is dispatched under the same agent name: the session
  moves its trust to the new agent, resumes, and the conversation goes on.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from livekit import api

from alicia.client import (
    AgentEvent,
    AgentLeft,
    AgentLost,
    AgentReplaced,
    AgentResumed,
    ClientSession,
)
from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM, StreamSpec, load_manifest
from alicia.protocol import new_id
from tests.client_helpers import scripted_agent
from tests.test_client_trust import FORGED, forging, from_clients, shown, until
from tests.worker_proc import running_worker
from tests.worker_streams import combined_streams

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

NO_LOAD_LIMIT = {"ALICIA_LOAD_THRESHOLD": "inf"}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def llm(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RecordedLLM]:
    async with RecordedLLM(streams_dir=combined_streams(tmp_path_factory.mktemp("s"))) as server:
        yield server


@pytest.fixture(scope="module")
def streams(llm: RecordedLLM) -> dict[str, StreamSpec]:
    return load_manifest(llm.streams_dir)


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


async def test_a_second_worker_takes_over_and_the_session_resumes_with_its_agent(
    livekit_server: LiveKitServer, llm: RecordedLLM, streams: dict[str, StreamSpec]
) -> None:
    first_spec = streams["deepseek_reasoning_content"]
    second_spec = streams["vllm_reasoning_both_fields"]
    room = new_id("conv")
    name = f"alicia-{new_id('t')[2:10].lower()}"
    env = {**NO_LOAD_LIMIT, "ALICIA_AGENT_NAME": name}
    events: list[AgentEvent] = []
    session = ClientSession(agent_name=name, agent_rejoin_timeout=90)
    session.on_agent(events.append)
    async with session:
        await session.connect(livekit_server.url, livekit_server.token("alice", room))
        async with running_worker(livekit_server, llm.base_url, env=env) as w1:
            await dispatch(livekit_server, room, name)
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
        async with api.LiveKitAPI(
            livekit_server.http_url, livekit_server.api_key, livekit_server.api_secret
        ) as lk:  # as the watcher does: the dead agent's participant goes at once
            await lk.room.remove_participant(api.RoomParticipantIdentity(room=room, identity=old))
        await until(lambda: events != [], what="the old agent's departure")
        async with running_worker(livekit_server, llm.base_url, env=env) as w2:
            await dispatch(livekit_server, room, name)
            try:
                await until(lambda: len(events) >= 3, timeout=60, what="the resume")
            except AssertionError as exc:
                raise AssertionError(f"{events}\n{w2.log()}") from exc
            second = await session.wait_turn(await session.ask(second_spec.user), timeout=30)
    new = session.agent_identity
    print("EVENTS", events, session.sequence.renumbered)
    assert new is not None and new != old and new.startswith("agent-")
    assert first.answer.split() == first_spec.answer.split()
    assert second.answer.split() == second_spec.answer.split()
    assert [type(e) for e in events] == [AgentLeft, AgentReplaced, AgentResumed]
    resumed = events[-1]
    assert isinstance(resumed, AgentResumed)
    assert (resumed.identity, resumed.previous, resumed.last_sequence_seen) == (new, old, seen)
    # The worker either continues the sequence and replays, or says it cannot (202).
    assert resumed.replayed or (resumed.reason is not None and "202" in resumed.reason)
