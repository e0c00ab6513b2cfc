"""The reasoning bridge inside a real AgentSession, in a real room on livekit-server.

An ordinary livekit-agents ``AgentSession`` (AliciaLLM over the recorded LLM, real HTTP)
joins a room as an agent participant; :func:`attach_reasoning` attaches the bridge. A
protocol client in the room sends a UserMessage and gets ReasoningSteps, the answer and
its end, exactly like from the worker's own turn runner: the same recorded turn through
both sources gives the same envelope types in the same order and the same steps.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from livekit.agents import Agent, AgentSession, tts
from livekit.agents.voice import room_io

from alicia.agent.engine.conversation import Conversation
from alicia.agent.engine.remarks import CUES
from alicia.agent.engine.sink import NullSink
from alicia.agent.engine.tools import default_tools
from alicia.agent.gate.transport import RoomTransport
from alicia.agent.session import AliciaLLM, ReasoningBridge, attach_reasoning
from alicia.agent.session.tools import session_tools
from alicia.agent.speech import EspeakTTS
from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import (
    AssistantSentence,
    ControlStop,
    ErrorMessage,
    ReasoningStep,
    StartAnswer,
    ToolUseRequest,
    ToolUseResult,
    UserMessage,
    new_id,
)
from alicia.protocol import ids as id_prefix
from tests.e2e.voice.helpers import agent_room, settings_for
from tests.support.livekit_rooms import ProtocolClient, joined, protocol_client

pytestmark = pytest.mark.integration

SHAPE = "deepseek_reasoning_content"


@contextlib.asynccontextmanager
async def session_agent(
    server: LiveKitServer,
    llm: RecordedLLM,
    room: str,
    *,
    tts_: tts.TTS[Any] | None = None,
    provider: str | None = None,
    **env: str,
) -> AsyncIterator[tuple[AgentSession[Any], ReasoningBridge]]:
    """An ordinary AgentSession app in ``room``, with the bridge attached."""
    async with agent_room(server, room) as r:
        model = AliciaLLM(
            model="recorded-model", base_url=llm.base_url, api_key="test", provider=provider
        )
        session: AgentSession[Any] = (
            AgentSession(llm=model, tts=tts_) if tts_ else AgentSession(llm=model)
        )
        options = room_io.RoomOptions(audio_input=False, audio_output=tts_ is not None)
        agent = Agent(instructions="Be brief.", tools=session_tools(default_tools()))
        await session.start(agent, room=r, room_options=options)
        bridge = await attach_reasoning(session, r, settings=settings_for(llm, **env))
        try:
            yield session, bridge
        finally:
            await bridge.aclose()
            await session.aclose()
            await model.aclose()


@contextlib.asynccontextmanager
async def runner_agent(server: LiveKitServer, llm: RecordedLLM, room: str) -> AsyncIterator[None]:
    """The worker's own turn runner in ``room`` (what ``python -m alicia.agent`` serves)."""
    import openai

    async with (
        agent_room(server, room) as r,
        openai.AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0) as client,
        RoomTransport(r) as transport,
    ):
        conversation = Conversation(
            conversation_id=room,
            options=settings_for(llm).engine_options(),
            transport=transport,
            sink=NullSink(),
            llm=client,
            tools=default_tools(),
        )
        task = asyncio.create_task(conversation.run())
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def ask(client: ProtocolClient, text: str) -> str:
    user_id = new_id(id_prefix.MESSAGE)
    await client.send(UserMessage(id=user_id, content=text, conversation_id=client.room.name))
    await client.wait_for(AssistantSentence, within=30.0, is_final=True)
    return user_id


def traffic(client: ProtocolClient) -> list[str]:
    return [type(env.body).__name__ for env in client.box]


async def test_a_user_message_through_the_agent_session_gives_steps_and_the_answer(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    spec = llm.spec(SHAPE)
    llm.route_model("recorded-model", SHAPE)
    room = f"bridge-{new_id('r')}"
    async with (
        session_agent(livekit_server, llm, room),
        protocol_client(livekit_server, room) as client,
    ):
        user_id = await ask(client, spec.user)
    steps = client.of(ReasoningStep)
    assert [s.content for s in steps] == list(spec.steps)
    assert [s.step_index for s in steps] == list(range(1, len(spec.steps) + 1))
    assert {s.previous_id for s in steps} == {user_id}
    (start,) = client.of(StartAnswer)
    assert start.previous_id == user_id
    sentences = client.of(AssistantSentence)
    assert " ".join(s.text for s in sentences if s.text).split() == spec.answer.split()
    assert [s.sequence for s in sentences] == list(range(1, len(sentences) + 1))
    assert all(s.previous_id == start.id for s in sentences)
    # The recorded server saw the user's text from the session's own chat context.
    assert llm.requests[-1]["messages"][-1] == {"role": "user", "content": spec.user}


async def test_what_the_llm_reports_while_the_bridge_is_busy_is_applied_not_dropped(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    # The bridge applies what it observes in order on one task; that task may be busy
    # (storing a transcript on a loaded database) when a speech starts and its model
    # streams. Its reasoning must wait for the speech's turn to open there, not find no
    # turn and be dropped (a fresh-clone run's preemptive turn lost every step that way).
    spec = llm.spec(SHAPE)
    llm.route_model("recorded-model", SHAPE)
    room = f"bridge-busy-{new_id('r')}"
    async with (
        session_agent(livekit_server, llm, room) as (_, bridge),
        protocol_client(livekit_server, room) as client,
    ):
        await client.handshake()
        bridge._later(lambda: asyncio.sleep(2.0))  # the busy task: the turn opens after it
        user_id = await ask(client, spec.user)
    assert llm.served.count(SHAPE) == 1  # streamed whole while the task was busy
    steps = client.of(ReasoningStep)
    assert [s.content for s in steps] == list(spec.steps)
    assert {s.previous_id for s in steps} == {user_id}
    assert len(client.of(StartAnswer)) == 1
    assert " ".join(s.text for s in client.of(AssistantSentence) if s.text).split() == (
        spec.answer.split()
    )


async def test_the_same_turn_through_both_sources_gives_the_same_traffic(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    spec = llm.spec(SHAPE)
    llm.route_model("recorded-model", SHAPE)
    seen: dict[str, tuple[list[str], list[tuple[int, str]]]] = {}
    for source in ("runner", "session"):
        room = f"same-{source}-{new_id('r')}"
        agent = (
            runner_agent(livekit_server, llm, room)
            if source == "runner"
            else session_agent(livekit_server, llm, room)
        )
        async with agent, protocol_client(livekit_server, room) as client:
            await ask(client, spec.user)
        steps = [(s.step_index, s.content) for s in client.of(ReasoningStep)]
        seen[source] = (traffic(client), steps)
    assert seen["session"] == seen["runner"]
    assert [text for _, text in seen["runner"][1]] == list(spec.steps)


async def test_a_participant_without_a_grant_gets_no_steps(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    spec = llm.spec(SHAPE)
    llm.route_model("recorded-model", SHAPE)
    room = f"nogrant-{new_id('r')}"
    token = livekit_server.token("bob", room, attributes={})
    async with (
        session_agent(livekit_server, llm, room),
        joined(livekit_server, room, "bob", token) as r,
    ):
        client = ProtocolClient(r, room)
        await client.wait_for_agent()
        await client.handshake()
        await ask(client, spec.user)
    assert client.of(ReasoningStep) == []
    assert client.of(StartAnswer)


async def test_stop_is_authorised_like_the_worker_s(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    from alicia.harness.recorded_llm import ENDLESS, Play

    llm.route_model("recorded-model", Play(ENDLESS, chunk_delay=0.01))
    room = f"stop-{new_id('r')}"
    async with (
        session_agent(livekit_server, llm, room),
        protocol_client(livekit_server, room, "alice") as alice,
        protocol_client(livekit_server, room, "mallory") as mallory,
    ):
        user_id = new_id(id_prefix.MESSAGE)
        await alice.send(UserMessage(id=user_id, content="Go on forever.", conversation_id=room))
        await alice.wait_for(ReasoningStep, within=30.0)  # endless reasoning streams
        await mallory.send(ControlStop(conversation_id=room, target_id=user_id))
        refused = await mallory.wait_for(ErrorMessage, within=10.0)
        assert refused.code == 203
        await alice.send(ControlStop(conversation_id=room, target_id=user_id))
        final = await alice.wait_for(AssistantSentence, within=20.0, is_final=True)
        (start,) = alice.of(StartAnswer)
        assert final.previous_id == start.id and start.previous_id == user_id
        assert mallory.of(ReasoningStep)  # mallory saw the turn but could not stop it


async def test_the_session_s_own_tool_calls_reach_the_room_with_their_results(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    spec = llm.spec("deepseek_v4_tool_call")
    assert spec.followup is not None
    follow = llm.spec(spec.followup)
    llm.script(spec.name)
    room = f"tools-{new_id('r')}"
    async with (
        session_agent(livekit_server, llm, room, provider="deepseek"),
        protocol_client(livekit_server, room) as client,
    ):
        user_id = await ask(client, spec.user)
    assert list(llm.rejections) == []
    (request,) = client.of(ToolUseRequest)
    (result,) = client.of(ToolUseResult)
    assert request.tool_name == "calculator" and request.previous_id == user_id
    assert request.parameters == {"expression": "250 * 162.4"}
    assert result.request_id == request.id and result.success
    assert result.result is not None and result.result["value"] == 40600
    kinds = traffic(client)
    steps = client.of(ReasoningStep)
    assert [s.content for s in steps] == [*spec.steps, *follow.steps]
    assert kinds.index("ToolUseRequest") < kinds.index("ToolUseResult") < kinds.index("StartAnswer")
    sentences = client.of(AssistantSentence)
    assert " ".join(s.text for s in sentences if s.text).split() == follow.answer.split()
    # DeepSeek V4 got its reasoning back on the session's tool round.
    (assistant,) = [m for m in llm.requests[-1]["messages"] if m.get("tool_calls")]
    assert spec.passback is not None
    assert assistant["reasoning_content"] == spec.passback["reasoning_content"]


class RecordingTTS(EspeakTTS):
    """espeak-ng that keeps every text it was asked to speak."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def synthesize(self, text: str, **kwargs: Any) -> tts.ChunkedStream:
        self.texts.append(text)
        return super().synthesize(text, **kwargs)


@pytest.mark.parametrize("shape", ["ollama_qwen3_think_inline", "deepseek_reasoning_content"])
async def test_reasoning_never_reaches_the_tts(
    livekit_server: LiveKitServer, llm: RecordedLLM, shape: str
) -> None:
    spec = llm.spec(shape)
    llm.route_model("recorded-model", shape)
    room = f"tts-{new_id('r')}"
    speech = RecordingTTS()
    async with (
        session_agent(livekit_server, llm, room, tts_=speech),
        protocol_client(livekit_server, room) as client,
    ):
        await ask(client, spec.user)
    # Besides the answer, the TTS speaks only progress cues (synthesized ahead of use).
    spoken = " ".join(t for t in speech.texts if t not in CUES)
    assert spoken.split() == spec.answer.split()
    everything = " ".join(speech.texts)
    for step in spec.steps:
        assert step not in everything
        canary = " ".join(step.split()[:6])
        assert canary not in everything
    assert "<think>" not in everything and "think>" not in everything
    assert [s.content for s in client.of(ReasoningStep)] == list(spec.steps)
