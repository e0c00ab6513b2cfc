"""Attach the reasoning bridge to anyone's running AgentSession.

:func:`attach_reasoning` opens storage and keys as the settings say and starts a
:class:`~alicia.agent.session.bridge.ReasoningBridge`; :func:`session_settings` reads the
worker's variables a bridge needs (the LiveKit and LLM ones may be absent).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from livekit import rtc
from livekit.agents import AgentSession

from alicia.agent.gate.grants import grants_of
from alicia.agent.gate.room import doors_of_room
from alicia.agent.settings import Settings

from .bridge import ReasoningBridge
from .host import gate_session_host
from .preconnect import gate_pre_connect_audio
from .takeover import Lease

__all__ = ["attach_reasoning", "session_settings"]


async def attach_reasoning(
    agent_session: AgentSession[Any],
    room: rtc.Room,
    *,
    settings: Settings | None = None,
    conversation_id: str | None = None,
    chat_topic: str | None = None,
    lease: Lease | None = None,
) -> ReasoningBridge:
    """Speak the Alicia protocol in ``room`` for ``agent_session`` (started with that room).

    Settings come from the environment as for the worker (``ALICIA_REASONING_VISIBILITY``,
    ``DATABASE_URL``, ``ALICIA_REASONING_KEYS``, ``ALICIA_ZDR``, ...); the LiveKit and LLM
    variables are not needed here. The bridge closes with the session. The session's own
    session host (``lk.agent.session``) then answers each request only to a participant
    entitled to it (:mod:`alicia.agent.session.host`). ``chat_topic`` (``lk.chat``, with
    the session's RoomIO text input off): typed input read by the bridge, bounded (open
    streams per sender, a deadline, a rate) and under the UserMessage rules. Pre-connect
    audio (``lk.agent.pre-connect-audio-buffer``) is taken only from the participant who
    published the track it names (:mod:`alicia.agent.session.preconnect`).

    ``lease`` (failover, ``ALICIA_FAILOVER``): the room's lease this agent holds. Every
    envelope is stored, under its fence, before it leaves, and none leaves once the lease
    is lost; the conversation is restored from storage first (its exchanges go into the
    agent's chat context, :mod:`alicia.agent.session.takeover`).
    """
    from alicia.agent.wiring import open_keys, open_sink  # storage only when configured

    # The gates first: until then livekit-agents' open host answers anyone in the room,
    # and its pre-connect audio takes anyone's audio as anyone's. Every stream handler of
    # a topic in the table of doors (livekit-agents' own) goes through its door.
    grants_of(room)
    doors_of_room(room).adopt()
    gate_pre_connect_audio(room)
    await gate_session_host(agent_session, room)
    if settings is None:
        settings = session_settings(os.environ, model=getattr(agent_session.llm, "model", ""))
    sink = await open_sink(
        settings.database_url,
        close_timeout_s=settings.storage_close_timeout_s,
        linger_s=None if lease is None else 0.0,
        fence=None if lease is None else lease.fence,
        pool_size=settings.db_pool_size,
    )
    bridge = ReasoningBridge(
        agent_session,
        room,
        settings=settings,
        sink=sink,
        keys=open_keys(settings),
        conversation_id=conversation_id,
    )
    bridge.chat_topic = chat_topic
    bridge.tenure = lease
    await bridge.start()
    return bridge


def session_settings(env: Mapping[str, str], *, model: object = "") -> Settings:
    """:class:`Settings` from ``env`` for a bridge: the worker's variables that only the
    worker needs (LiveKit and LLM endpoints) may be absent."""
    defaults = {
        "LIVEKIT_URL": "ws://unused",
        "LIVEKIT_API_KEY": "unused",
        "LIVEKIT_API_SECRET": "unused",
        "LLM_BASE_URL": "http://unused",
        "LLM_MODEL": model if isinstance(model, str) and model else "unknown",
    }
    return Settings.from_env({**defaults, **{k: v for k, v in env.items() if v.strip()}})
