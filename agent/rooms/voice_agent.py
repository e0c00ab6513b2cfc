"""The worker's voice rooms: a livekit-agents AgentSession with the reasoning bridge.

A voice room (``ALICIA_VOICE=offline``, or ``ALICIA_STT``/``ALICIA_TTS`` naming plugins)
is served by an ordinary ``AgentSession``: VAD, LiveKit's end-of-turn model run offline
(:func:`turn_detector`) with the endpointing delays, interruptions, STT, the
:class:`~alicia.agent.session.llm.AliciaLLM` (reasoning kept out of the speech) and TTS, with
the engine's tools as function tools. :func:`~alicia.agent.session.attach.attach_reasoning`
speaks the Alicia protocol to the protocol clients in the room, exactly as a user's own
AgentSession app would.

Speech parts: ``ALICIA_VOICE=offline`` gives Silero VAD, pocketsphinx (through
livekit-agents' stream adapter) and Debian's espeak-ng (:mod:`alicia.agent.speech`);
``ALICIA_STT`` / ``ALICIA_TTS`` (``module:callable``) replace either part with any
plugin. The plugin packages are not dependencies of this project: install the ones
you configure.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from typing import Any

from livekit.agents import (
    Agent,
    AgentSession,
    EndpointingOptions,
    InterruptionOptions,
    JobContext,
    TurnHandlingOptions,
    stt,
    tts,
    vad,
)
from livekit.agents.voice import room_io
from livekit.agents.voice.events import AgentFalseInterruptionEvent

from alicia.agent.engine.tools import default_tools
from alicia.agent.gate.room import doors_of_room
from alicia.agent.session.attach import attach_reasoning
from alicia.agent.session.bridge import ReasoningBridge
from alicia.agent.session.host import start_gated_host
from alicia.agent.session.llm import AliciaLLM
from alicia.agent.session.preconnect import gate_pre_connect_audio
from alicia.agent.session.tools import session_tools
from alicia.agent.settings import Settings
from alicia.agent.storage.leases import lease_required

from .conventions import CHAT_TOPIC
from .lease_keeper import Hold, keeper_for
from .voice_failover import FencedAudio, serve_held

__all__ = [
    "VoiceParts",
    "load_plugin",
    "serve_voice_room",
    "turn_detector",
    "turn_handling",
    "voice_parts",
]

logger = logging.getLogger("alicia.voice")


def load_plugin(spec: str) -> Any:
    """Call the factory named by ``spec`` (``module:callable``) and return its result."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"plugin spec must look like module:callable, not {spec!r}")
    factory = getattr(importlib.import_module(module_name), attr)
    return factory()


@dataclass(frozen=True, slots=True)
class VoiceParts:
    """The speech parts of an AgentSession (any of them may be absent)."""

    stt: stt.STT[Any] | None
    tts: tts.TTS[Any] | None
    vad: vad.VAD | None


def voice_parts(settings: Settings) -> VoiceParts:
    """The speech parts ``settings`` name: the offline ones, replaced by any plugin."""
    parts = VoiceParts(None, None, None)
    if settings.voice_mode == "offline":
        from alicia.agent.speech import offline_speech  # loads the VAD model

        speech = offline_speech()
        parts = VoiceParts(speech.stt, speech.tts, speech.vad)
    return VoiceParts(
        stt=load_plugin(settings.stt) if settings.stt else parts.stt,
        tts=load_plugin(settings.tts) if settings.tts else parts.tts,
        vad=parts.vad,
    )


def turn_detector(settings: Settings) -> Any | None:
    """The voice rooms' turn detector (``ALICIA_TURN_DETECTION``): LiveKit's end-of-turn
    audio model run offline (``turn-detector-v1-mini``: its weights ship in
    ``livekit-local-inference``, and the worker's forkserver loads them once for every
    job process), a plugin, or None (the VAD alone)."""
    choice = settings.turn_detection
    if choice == "vad":
        return None
    if choice == "model":
        from livekit.agents.inference import TurnDetector

        # The version named: left to choose, livekit-agents picks the cloud model in dev mode.
        return TurnDetector(version="v1-mini")
    return load_plugin(choice)


def turn_handling(parts: VoiceParts, settings: Settings) -> TurnHandlingOptions:
    """With a VAD, a turn ends after ``ALICIA_ENDPOINTING_MIN_DELAY`` of silence when the
    turn detector judges it finished, and after ``ALICIA_ENDPOINTING_MAX_DELAY`` when it
    judges it unfinished (a pause inside a question); with ``vad`` after the first. Speech
    over the agent pauses it for ``ALICIA_FALSE_INTERRUPTION_TIMEOUT``."""
    if parts.vad is None:
        return {}
    endpointing = EndpointingOptions(
        min_delay=settings.endpointing_min_delay_s, max_delay=settings.endpointing_max_delay_s
    )
    detector = turn_detector(settings)
    interruption = InterruptionOptions(
        false_interruption_timeout=settings.false_interruption_timeout_s
    )
    return TurnHandlingOptions(
        turn_detection=detector if detector is not None else "vad",
        endpointing=endpointing,
        interruption=interruption,
    )


async def serve_voice_room(ctx: JobContext, settings: Settings) -> None:
    """Serve the job's (connected) room with an AgentSession and the reasoning bridge;
    with failover only once it holds the room's lease, until it loses it
    (:mod:`.voice_failover`)."""
    hold = None
    if settings.failover:
        identity = ctx.room.local_participant.identity
        required = lease_required(ctx.job.metadata)
        hold = await keeper_for(settings).hold(ctx.room.name, identity, required=required)
        if hold is None:
            logger.warning("room not held: leaving", extra={"room": ctx.room.name})
            ctx.shutdown("room not held")
            return
    try:
        session, bridge = await _start_session(ctx, settings, hold)
    except BaseException:
        if hold is not None:  # the room moves at once, not after a lease timeout
            await hold.keeper.release(hold)
        raise
    if hold is not None:
        await serve_held(ctx, session, bridge, hold, settings)


async def _start_session(
    ctx: JobContext, settings: Settings, hold: Hold | None
) -> tuple[AgentSession[Any], ReasoningBridge]:
    """The room's AgentSession, started, with its gated host and its reasoning bridge."""
    parts = voice_parts(settings)
    speech: dict[str, Any] = {
        name: part
        for name, part in (("stt", parts.stt), ("tts", parts.tts), ("vad", parts.vad))
        if part is not None
    }
    session: AgentSession[Any] = AgentSession(
        llm=AliciaLLM.from_settings(settings, conversation_id=ctx.room.name),
        turn_handling=turn_handling(parts, settings),
        **speech,
    )
    session.on("agent_false_interruption", lambda ev: _false_interruption(ctx.room.name, ev))
    tools = session_tools(default_tools()) if settings.tools_enabled else []
    agent = Agent(instructions=settings.system_prompt, tools=tools)
    # No open session host, not even for a moment: the gated one from the start. Typed
    # input (lk.chat) is read by the bridge's transport, bounded, never by RoomIO's
    # (unbounded, and each message interrupts every queued answer); with LiveKit's
    # conventions off, not at all.
    chat = CHAT_TOPIC if settings.lk_conventions else None
    options = room_io.RoomOptions(text_input=False)
    doors_of_room(ctx.room).adopt()  # livekit-agents' stream handlers through their doors
    gate_pre_connect_audio(ctx.room)  # before RoomIO registers livekit-agents' handler
    await session.start(agent=agent, room=ctx.room, session_host=False, room_options=options)
    if hold is not None and session.output.audio is not None:
        session.output.audio = FencedAudio(session.output.audio, hold)
    await start_gated_host(session, ctx.room)
    bridge = await attach_reasoning(
        session, ctx.room, settings=settings, chat_topic=chat, lease=hold
    )
    ctx.add_shutdown_callback(bridge.aclose)
    logger.info("voice room served by an AgentSession", extra={"room": ctx.room.name})
    return session, bridge


def _false_interruption(room: str, ev: AgentFalseInterruptionEvent) -> None:
    """Say that speech over the agent was judged no interruption (the agent went on)."""
    logger.info(
        "speech over the agent was not a turn within ALICIA_FALSE_INTERRUPTION_TIMEOUT",
        extra={"room": room, "resumed": ev.resumed},
    )
