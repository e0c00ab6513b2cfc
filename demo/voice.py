"""``./scripts/demo --voice``: ask by voice, hear the answer, see the reasoning.

The question is spoken with espeak-ng into a WAV file and published into the room as a
microphone track; the worker (``ALICIA_VOICE=offline``: an AgentSession with Silero VAD,
pocketsphinx and espeak-ng, plus the reasoning bridge) transcribes it, streams its
reasoning steps (shown as they arrive) and speaks the answer, which is recorded to a WAV
file; then pocketsphinx says what it hears in that answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

from livekit import rtc
from rich.console import Console

from alicia.harness.speech import ROOM_RATE, AudioRecorder, Microphone, speak, transcribe, write_wav
from alicia.protocol import (
    DATA_TOPIC,
    AssistantSentence,
    Configuration,
    DecodeError,
    ReasoningStep,
    StanzaCounter,
    Transcription,
    decode,
    encode,
    envelope,
)

if TYPE_CHECKING:
    from alicia.harness import LiveKitServer

__all__ = ["VOICE_QUESTION", "VOICE_STREAM", "ask_by_voice"]

VOICE_QUESTION: Final = "How much sleep does an adult need?"
VOICE_STREAM: Final = "openrouter_gpt5_summary"
"""The recording the demo model answers voice questions with (pocketsphinx hears it well)."""


async def ask_by_voice(
    console: Console, server: LiveKitServer, room: str, question: str, data_dir: Path
) -> int:
    """Speak ``question`` into ``room``; show the steps; record and transcribe the answer."""
    pcm, rate = speak(question)
    question_wav = write_wav(data_dir / "question.wav", pcm, rate)
    console.print(
        f"\n[bold]Asking by voice[/]  [dim]{question!r}, spoken by espeak-ng: {question_wav}[/]"
    )
    r = rtc.Room()
    recorder = AudioRecorder(r)
    agent: list[str] = []
    done = asyncio.Event()
    understood = asyncio.Event()
    configured = asyncio.Event()
    steps = 0

    def on_data(packet: rtc.DataPacket) -> None:
        nonlocal steps
        sender = packet.participant
        if packet.topic != DATA_TOPIC or sender is None or sender.identity not in agent:
            return
        with contextlib.suppress(DecodeError):
            body = decode(packet.data).body
            if isinstance(body, Configuration):
                configured.set()
            elif isinstance(body, Transcription):
                understood.set()
                console.print(f"you (heard) > {body.text}")
            elif isinstance(body, ReasoningStep):
                steps += 1
                console.print(f"  [dim]▸ step {body.step_index}: {body.content}[/]")
            elif isinstance(body, AssistantSentence):
                if body.text:
                    console.print(f"alicia > {body.text}")
                if body.is_final:
                    done.set()

    r.on("data_received", on_data)
    await r.connect(server.url, server.token("demo-voice", room))
    try:
        async with asyncio.timeout(90):
            while not agent:
                agent.extend(
                    p.identity
                    for p in r.remote_participants.values()
                    if p.kind == rtc.ParticipantKind.PARTICIPANT_KIND_AGENT
                )
                await asyncio.sleep(0.05)
        counter = StanzaCounter("client")
        hello = Configuration(features=["reasoning_step_display", "streaming", "audio_output"])
        for _ in range(30):  # until answered: the agent may not know this participant yet
            data = encode(envelope(hello, stanza_id=counter.next(), conversation_id=room))
            await r.local_participant.publish_data(
                data, reliable=True, destination_identities=agent, topic=DATA_TOPIC
            )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await configured.wait()
            if configured.is_set():
                break
        mic = Microphone(r)
        await mic.start()
        for _ in range(3):  # speech sent before the agent listens is lost: say it again
            ended = await mic.say(pcm, rate)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(30):
                    await understood.wait()
            if understood.is_set():
                break
        async with asyncio.timeout(180):
            await done.wait()
            while True:  # the answer has been said when its audio goes quiet
                last = [at for at, s in recorder.frames if at > ended and abs(s).max() > 300]
                if last and time.monotonic() - last[-1] > 1.5:
                    break
                await asyncio.sleep(0.2)
    finally:
        await recorder.aclose()
        await r.disconnect()
    answer = recorder.pcm()
    answer_wav = write_wav(data_dir / "answer.wav", answer, ROOM_RATE)
    console.print(f"\n[bold]The spoken answer[/] ({len(answer) / ROOM_RATE:.1f} s): {answer_wav}")
    heard = await asyncio.to_thread(transcribe, answer, ROOM_RATE)
    console.print(f"[bold]pocketsphinx hears[/]: {heard}")
    console.print(f"({steps} reasoning steps were shown above; none of them was spoken)")
    return 0 if steps and heard else 1
