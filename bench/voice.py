"""Voice latency: from the end of the user's speech to the first step and the first audio.

The same AgentSession pipeline (Silero VAD, pocketsphinx through the stream adapter,
espeak-ng) runs in a room on livekit-server twice per trial, alternating:

* **ours**: :class:`~alicia.agent.session.AliciaLLM` and the reasoning bridge
  (ReasoningSteps to the room);
* **stock**: livekit-agents' own OpenAI plugin (``livekit.plugins.openai.LLM``) over the
  same recorded stream: answer only, no capture.

A client speaks the recorded question (espeak-ng) into the room as a microphone track
and measures, from the end of its speech, (a) the first ReasoningStep it decodes and
(b) the first answer audio frame it receives. The recorded LLM streams one SSE event per
token at ``--chunk-delay``. Last line::

    RESULT first_step_ms=<x> first_audio_ms=<x> stock_first_audio_ms=<x> added_first_audio_ms=<x>
           llm_to_audio_ms=<x> stock_llm_to_audio_ms=<x> added_llm_to_audio_ms=<x>

(p50 over the trials; ``added`` = ours - stock; target: at most 5 ms). The end of speech
is followed by VAD endpointing and STT, whose timing jitters by a few hundred ms from
trial to trial, so the same comparison is also given from the moment the LLM request
reaches the (recorded) model to the first audio frame (``llm_to_audio``): that span holds
exactly what differs between the two pipelines (the LLM adapter and the bridge).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import sys
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from livekit import api, rtc
from livekit.agents import Agent, AgentSession, llm
from livekit.agents.voice import room_io

from alicia.agent.rooms.voice_agent import VoiceParts, turn_handling
from alicia.agent.session import AliciaLLM, attach_reasoning
from alicia.agent.session.attach import session_settings
from alicia.agent.speech import load_vad, offline_speech
from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import Play, RecordedLLM
from alicia.harness.speech import AudioRecorder, Microphone, speak
from alicia.protocol import DATA_TOPIC, ReasoningStep, decode, new_id
from bench._stats import percentile
from tests.support.livekit_rooms import ProtocolClient

SHAPE = "openrouter_gpt5_summary"


def agent_token(server: LiveKitServer, room: str) -> str:
    """A join token of kind agent (what livekit-agents' dispatch gives a worker)."""
    return (
        api.AccessToken(server.api_key, server.api_secret)
        .with_identity(f"agent-{new_id('b')}")
        .with_kind("agent")
        .with_grants(api.VideoGrants(room_join=True, room=room, agent=True))
        .to_jwt()
    )


def stock_llm(base_url: str) -> llm.LLM[Any]:
    from livekit.plugins import openai as lk_openai

    return lk_openai.LLM(model="recorded-model", base_url=base_url, api_key="bench")


@contextlib.asynccontextmanager
async def agent_in(
    server: LiveKitServer,
    base_url: str,
    room: str,
    ours: bool,
    *,
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[None]:
    """The voice pipeline in ``room``: with AliciaLLM and the bridge (settings from
    ``env``; spoken progress off unless it says), or stock. Turns end on the VAD, as in
    the worker's voice rooms with ``ALICIA_TURN_DETECTION=vad`` (the end-of-turn model's
    verdict on synthetic speech would add its wait to both, at random)."""
    r = rtc.Room()
    await r.connect(server.url, agent_token(server, room))
    speech = offline_speech(vad_=load_vad())
    model: llm.LLM[Any] = (
        AliciaLLM(model="recorded-model", base_url=base_url, api_key="bench")
        if ours
        else stock_llm(base_url)
    )
    session: AgentSession[Any] = AgentSession(
        stt=speech.stt,
        tts=speech.tts,
        vad=speech.vad,
        llm=model,
        turn_handling=turn_handling(
            VoiceParts(speech.stt, speech.tts, speech.vad),
            session_settings({"ALICIA_TURN_DETECTION": "vad"}),  # the same for both
        ),
    )
    bridge = None
    try:
        await session.start(
            Agent(instructions="Be brief."),
            room=r,
            room_options=room_io.RoomOptions(close_on_disconnect=False),
            record=False,
        )
        if ours:
            defaults = {"ALICIA_REASONING_VISIBILITY": "full", "ALICIA_SPOKEN_PROGRESS": "off"}
            settings = session_settings({**defaults, **(env or {})})
            bridge = await attach_reasoning(session, r, settings=settings)
        yield
    finally:
        if bridge is not None:
            await bridge.aclose()
        await session.aclose()
        await model.aclose()
        await r.disconnect()


async def trial(
    server: LiveKitServer, recorded: RecordedLLM, ours: bool, question: Any, rate: int
) -> tuple[float | None, float | None, float | None]:
    """One spoken question: ms from the end of speech to the first step and the first
    audio, and from the LLM request's arrival to the first audio."""
    room = f"bench-voice-{new_id('r')}"
    steps: list[float] = []
    recorded.received_at.clear()
    async with agent_in(server, recorded.base_url, room, ours):
        client = rtc.Room()
        recorder = AudioRecorder(client, frame_ms=10)

        def on_data(packet: rtc.DataPacket) -> None:
            if packet.topic == DATA_TOPIC and isinstance(decode(packet.data).body, ReasoningStep):
                steps.append(time.monotonic())

        client.on("data_received", on_data)
        await client.connect(server.url, server.token("listener", room))
        protocol = ProtocolClient(client, room)
        try:
            if ours:  # a protocol client asks for the steps (the stock agent speaks none)
                await protocol.wait_for_agent()
                await protocol.handshake()
            mic = Microphone(client)
            await mic.start()
            ended = await mic.say(question, rate, trailing_silence_s=1.5)
            async with asyncio.timeout(60):
                while recorder.first_sound_at(after=ended) is None:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
        finally:
            await recorder.aclose()
            await client.disconnect()
        audio = recorder.first_sound_at(after=ended)
    first_step = min((t for t in steps if t >= ended), default=None)
    asked = recorded.received_at[-1] if recorded.received_at else None
    return (
        None if first_step is None else (first_step - ended) * 1000,
        None if audio is None else (audio - ended) * 1000,
        None if audio is None or asked is None else (audio - asked) * 1000,
    )


async def main(trials: int, chunk_delay: float) -> None:
    question, rate = speak("How much sleep does an adult need?")
    with LiveKitServer() as server:
        async with RecordedLLM() as recorded:
            recorded.route_model("recorded-model", Play(SHAPE, chunk_delay=chunk_delay))
            ours_step: list[float] = []
            ours_audio: list[float] = []
            stock_audio: list[float] = []
            await trial(server, recorded, True, question, rate)  # warm up both
            await trial(server, recorded, False, question, rate)
            ours_from_llm: list[float] = []
            stock_from_llm: list[float] = []
            for i in range(trials):
                for ours in (True, False) if i % 2 == 0 else (False, True):
                    step, audio, from_llm = await trial(server, recorded, ours, question, rate)
                    if audio is None:
                        continue
                    if ours:
                        ours_audio.append(audio)
                        if step is not None:
                            ours_step.append(step)
                        if from_llm is not None:
                            ours_from_llm.append(from_llm)
                    else:
                        stock_audio.append(audio)
                        if from_llm is not None:
                            stock_from_llm.append(from_llm)
                    label = "ours " if ours else "stock"
                    shown = "-" if step is None else f"{step:.1f}"
                    print(
                        f"trial {i + 1} {label}: first step {shown} ms, first audio {audio:.1f} ms"
                    )
    first_step = percentile(ours_step, 50)
    first_audio = percentile(ours_audio, 50)
    stock = percentile(stock_audio, 50)
    llm_to_audio = percentile(ours_from_llm, 50)
    stock_llm_to_audio = percentile(stock_from_llm, 50)
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cores, python {platform.python_version()}"
    )
    print(
        f"RESULT first_step_ms={first_step:.1f} first_audio_ms={first_audio:.1f} "
        f"stock_first_audio_ms={stock:.1f} added_first_audio_ms={first_audio - stock:.1f} "
        f"llm_to_audio_ms={llm_to_audio:.1f} stock_llm_to_audio_ms={stock_llm_to_audio:.1f} "
        f"added_llm_to_audio_ms={llm_to_audio - stock_llm_to_audio:.1f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--chunk-delay", type=float, default=0.02, help="seconds per token")
    args = parser.parse_args()
    asyncio.run(main(args.trials, args.chunk_delay))
