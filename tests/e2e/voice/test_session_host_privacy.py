"""No reasoning through livekit-agents' own channel: its session host (``lk.agent.session``).

livekit-agents 1.8 starts a ``SessionHost`` for every primary AgentSession in a room, on
by default: it sends every conversation item (``extra`` maps included, stringified) to
every participant on the byte-stream topic ``lk.agent.session``, and answers
``get_chat_history`` from anyone (``get_agent_info`` only to an operator here:
``test_session_host_requests.py``). A participant with no reasoning grant listens there
during a tool round whose reasoning carries canary phrases, then asks the agent for its
chat history and its agent info. The canaries appear nowhere in what it
gets (while the same channel does carry the round's function call, so the listener hears
it), in an app built as the README's adoption diff for DeepSeek V4 (``reasoning_content``
back on the tool round), OpenRouter (signed ``reasoning_details`` back on the tool round)
and the Responses API (reasoning items, summaries included, back on every later turn),
and in the worker's own voice rooms for the Responses API. (The worker's voice rooms run
the same ``AliciaLLM`` and bridge as the app; what differs is the worker's wiring, which
one provider shows. A voice worker of its own for each shape cost 12 CPU-s of the suite.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from livekit import rtc
from livekit.agents import Agent, AgentSession, room_io
from livekit.protocol.agent_pb import agent_session as pb

from alicia.agent.engine.tools import default_tools
from alicia.agent.session import AliciaLLM, attach_reasoning
from alicia.agent.session.tools import session_tools
from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import AssistantSentence, ReasoningStep, UserMessage, new_id
from alicia.protocol import ids as id_prefix
from tests.e2e.voice.helpers import agent_room, settings_for
from tests.e2e.worker import running_worker
from tests.support.livekit_rooms import ProtocolClient, joined

pytestmark = pytest.mark.integration

TOPIC = "lk.agent.session"

CASES = {
    # name: (provider, api, canaries: phrases of the recorded reasoning, never of the answer)
    "deepseek_v4_tool_call": (
        "deepseek",
        "chat",
        ("instead of doing it in my head", "so the user will likely get a bit less"),
    ),
    "openrouter_claude_tool_call": (
        "openrouter",
        "chat",
        ("Mixing hours and minutes by hand", "so the user sees the wait is included"),
    ),
    "responses_summary_tool_call": (
        "openai",
        "responses",
        ("splitting the total between four people", "so the share is exact to the cent"),
    ),
}


class Listener:
    """A participant's view of ``lk.agent.session``: every message, raw and decoded."""

    def __init__(self, room: rtc.Room) -> None:
        self.room = room
        self.raw: list[bytes] = []
        self.messages: list[pb.AgentSessionMessage] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._arrived = asyncio.Event()
        room.register_byte_stream_handler(TOPIC, self._on_stream)

    def _on_stream(self, reader: rtc.ByteStreamReader, identity: str) -> None:
        task = asyncio.create_task(self._read(reader))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _read(self, reader: rtc.ByteStreamReader) -> None:
        data = b"".join([chunk async for chunk in reader])
        message = pb.AgentSessionMessage()
        message.ParseFromString(data)
        self.raw.append(data)
        self.messages.append(message)
        self._arrived.set()

    async def response(self, agent: str, request: pb.SessionRequest) -> pb.SessionResponse:
        """Send ``request`` to ``agent`` and wait (10 s) for its response (an error or not)."""
        request.request_id = new_id("req")
        data = pb.AgentSessionMessage(request=request).SerializeToString()
        await self.room.local_participant.send_bytes(
            data, topic=TOPIC, destination_identities=[agent]
        )
        async with asyncio.timeout(10):
            while True:
                for m in self.messages:
                    if m.HasField("response") and m.response.request_id == request.request_id:
                        return m.response
                self._arrived.clear()
                await self._arrived.wait()

    async def ask(self, agent: str, request: pb.SessionRequest) -> pb.SessionResponse:
        """:meth:`response`, which must not be an error."""
        response = await self.response(agent, request)
        assert not response.error, response.error
        return response

    def carries(self, text: str) -> int:
        """How many received messages hold ``text`` anywhere (raw bytes or decoded)."""
        pairs = zip(self.raw, self.messages, strict=True)
        return sum(1 for raw, m in pairs if text.encode() in raw or text in str(m))

    def function_calls(self) -> list[str]:
        """The names of the function calls broadcast (as items or executed tools)."""
        names: list[str] = []
        for m in self.messages:
            if not m.HasField("event"):
                continue
            if m.event.HasField("conversation_item_added"):
                item = m.event.conversation_item_added.item
                if item.HasField("function_call"):
                    names.append(item.function_call.name)
            if m.event.HasField("function_tools_executed"):
                names += [c.name for c in m.event.function_tools_executed.function_calls]
        return names

    def kinds(self) -> list[str]:
        """What each message was (event or response kind)."""
        out = []
        for m in self.messages:
            if m.HasField("event"):
                out.append(str(m.event.WhichOneof("event")))
            elif m.HasField("response"):
                out.append(str(m.response.WhichOneof("response")))
        return out


async def eavesdrop_a_tool_round(
    server: LiveKitServer, llm: RecordedLLM, room: str, name: str
) -> Listener:
    """A granted client asks the question; ``eve`` (no grant) listens on the session host
    throughout, then asks the agent for its chat history and agent info."""
    spec = llm.spec(name)
    eve_token = server.token("eve", room, attributes={})  # no alicia.reasoning grant
    async with (
        joined(server, room, "eve", eve_token) as eve_room,
        joined(server, room, "alice") as r,
    ):
        eve = Listener(eve_room)
        client = ProtocolClient(r, room)
        await client.wait_for_agent()
        await client.handshake()
        user_id = new_id(id_prefix.MESSAGE)
        await client.send(UserMessage(id=user_id, content=spec.user, conversation_id=room))
        await client.wait_for(AssistantSentence, within=60.0, is_final=True)
        await asyncio.sleep(1.0)  # the session host's last broadcasts of the turn
        history = await eve.ask(
            client.agent, pb.SessionRequest(get_chat_history=pb.SessionRequest.GetChatHistory())
        )
        info = await eve.response(
            client.agent, pb.SessionRequest(get_agent_info=pb.SessionRequest.GetAgentInfo())
        )
        assert any(i.HasField("function_call") for i in history.get_chat_history.items)
        assert info.error.startswith("not permitted"), info  # an operator's request
    # The granted client did get the reasoning, so the canaries were really in play.
    said = " ".join(s.content for s in client.of(ReasoningStep))
    for canary in CASES[name][2]:
        assert canary in said, canary
    return eve


def heard_nothing(eve: Listener, canaries: tuple[str, ...]) -> None:
    """``eve`` heard the tool round on the session host, and none of the canaries."""
    assert "calculator" in eve.function_calls(), eve.kinds()
    print(f"lk.agent.session messages received by eve: {len(eve.messages)} {eve.kinds()}")
    for canary in canaries:
        assert eve.carries(canary) == 0, canary


@contextlib.asynccontextmanager
async def readme_app(
    server: LiveKitServer, llm: RecordedLLM, room: str, provider: str, api: Any
) -> AsyncIterator[None]:
    """An app as the README's adoption diff builds it: ``AliciaLLM(...)`` with no keys,
    an AgentSession with the host's defaults (session host on), ``attach_reasoning``."""
    async with agent_room(server, room) as r:
        model = AliciaLLM(
            model="recorded-model",
            base_url=llm.base_url,
            api_key="test",
            provider=provider,
            api=api,
        )
        session: AgentSession[Any] = AgentSession(llm=model)
        agent = Agent(instructions="Be brief.", tools=session_tools(default_tools()))
        options = room_io.RoomOptions(audio_input=False, audio_output=False)
        await session.start(agent, room=r, room_options=options)
        assert session._session_host is not None  # the host framework's default
        bridge = await attach_reasoning(session, r, settings=settings_for(llm))
        try:
            yield
        finally:
            await bridge.aclose()
            await session.aclose()
            await model.aclose()


@pytest.mark.parametrize("name", list(CASES))
async def test_no_reasoning_on_the_session_host_of_an_app_built_as_the_readme_shows(
    livekit_server: LiveKitServer, llm: RecordedLLM, name: str
) -> None:
    provider, api, canaries = CASES[name]
    llm.script(name)
    room = f"host-{new_id('r')}"
    async with readme_app(livekit_server, llm, room, provider, api):
        eve = await eavesdrop_a_tool_round(livekit_server, llm, room, name)
    assert list(llm.rejections) == []  # the provider still got its reasoning back
    heard_nothing(eve, canaries)


async def test_no_reasoning_on_the_session_host_of_the_workers_voice_rooms(
    livekit_server: LiveKitServer, llm: RecordedLLM
) -> None:
    name = "responses_summary_tool_call"  # the most reasoning sent back (see the module)
    provider, api, canaries = CASES[name]
    llm.script(name)
    env = {
        "ALICIA_VOICE": "offline",
        "LLM_PROVIDER": provider,
        "LLM_API": api,
        "ALICIA_REASONING_VISIBILITY": "none",
    }
    room = f"voice-host-{new_id('r')}"
    async with running_worker(livekit_server, llm.base_url, env=env) as worker:
        eve = await eavesdrop_a_tool_round(livekit_server, llm, room, name)
        log = worker.log(20_000)
    assert list(llm.rejections) == [], log
    heard_nothing(eve, canaries)
    for canary in canaries:
        assert canary not in log
