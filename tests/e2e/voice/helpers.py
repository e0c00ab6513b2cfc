"""What the voice tests share: the session settings an app attaches the bridge with, a
room joined as an agent participant, and a listener that speaks to the agent.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from livekit import rtc

from alicia.agent.session.attach import session_settings
from alicia.agent.settings import Settings
from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.harness.speech import AudioRecorder, Microphone
from alicia.protocol import new_id
from tests.support.livekit_rooms import ProtocolClient, joined


def settings_for(llm: RecordedLLM, **env: str) -> Settings:
    return session_settings(
        {"ALICIA_REASONING_VISIBILITY": "none", "LLM_BASE_URL": llm.base_url, **env},
        model="recorded-model",
    )


@contextlib.asynccontextmanager
async def agent_room(server: LiveKitServer, room: str) -> AsyncIterator[rtc.Room]:
    from livekit import api

    identity = f"agent-{new_id('x')}"
    token = (
        api.AccessToken(server.api_key, server.api_secret)
        .with_identity(identity)
        .with_kind("agent")
        .with_grants(api.VideoGrants(room_join=True, room=room, agent=True))
        .to_jwt()
    )
    async with joined(server, room, identity, token) as r:
        yield r


async def listening(
    room: rtc.Room, conversation: str
) -> tuple[AudioRecorder, ProtocolClient, Microphone]:
    """In ``room``: a recorder of the agent's audio, a protocol client that has greeted the
    agent, and a published microphone to speak with."""
    recorder = AudioRecorder(room)
    client = ProtocolClient(room, conversation)
    await client.wait_for_agent()
    await client.handshake()
    mic = Microphone(room)
    await mic.start()
    return recorder, client, mic
