"""The whole voice loop with real offline speech, through the real worker and livekit-server.

The worker runs as ``python -m alicia.agent start`` with ``ALICIA_VOICE=offline``: an
AgentSession with Silero VAD, pocketsphinx, AliciaLLM (recorded provider stream over real
HTTP) and espeak-ng, with the reasoning bridge. A client speaks an espeak-ng question
into the room as a microphone track; the agent transcribes it (Transcription), streams
ReasoningSteps and speaks the answer. The client records the answer's audio frames and
transcribes them with pocketsphinx: the answer's key words are there, and keyword
spotting hears none of the reasoning's canary phrases (it does hear them when they are
spoken, so the check can fail).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import numpy as np
import pytest
import pytest_asyncio
from livekit import rtc

from alicia.agent.session.preconnect import PRE_CONNECT_TOPIC
from alicia.harness import LiveKitServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.harness.speech import (
    ROOM_RATE,
    AudioRecorder,
    Microphone,
    publish_speech,
    speak,
    spotted_phrases,
    transcribe,
)
from alicia.protocol import (
    Acknowledgement,
    AssistantMessage,
    AssistantSentence,
    Configuration,
    ControlStop,
    ReasoningStep,
    StartAnswer,
    Transcription,
    UserMessage,
    new_id,
)
from tests.e2e.worker import WorkerProcess, running_worker
from tests.support.livekit_rooms import ProtocolClient, joined, wait_for_participant

pytestmark = pytest.mark.integration

SHAPE = "openrouter_gpt5_summary"
"""An answer pocketsphinx hears well (SPEECH.md), reasoning with phrases of its own."""
CANARIES = ("common guidance", "individual variation", "regular schedule")
"""Phrases of the recorded reasoning that the answer never says."""
KEY_WORDS = {"adults", "seven", "nine", "hours", "sleep", "bedtime"}
QUESTION_WORDS = {"much", "sleep", "adult", "adults", "need"}
"""Content words of the question ("How much sleep does an adult need?"): one heard is
enough (pocketsphinx heard "the novelty need" once on a loaded machine)."""


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def module_llm() -> AsyncIterator[RecordedLLM]:
    async with RecordedLLM() as server:
        yield server


@pytest.fixture
def llm(module_llm: RecordedLLM) -> RecordedLLM:
    """The module's recorded LLM (its worker's), what earlier tests left forgotten: each
    test routes the worker's model itself."""
    module_llm.reset()
    return module_llm


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def voice_worker(
    livekit_server: LiveKitServer, module_llm: RecordedLLM
) -> AsyncIterator[WorkerProcess]:
    """One voice worker for the module's tests (each in a room of its own; a voice
    worker's start is seconds of CPU: it loads the speech models)."""
    env = {"ALICIA_VOICE": "offline", "ALICIA_REASONING_VISIBILITY": "none"}
    async with running_worker(livekit_server, module_llm.base_url, env=env) as w:
        yield w


async def test_a_spoken_question_gets_steps_and_a_spoken_answer_without_reasoning(
    livekit_server: LiveKitServer, llm: RecordedLLM, voice_worker: WorkerProcess
) -> None:
    spec = llm.spec(SHAPE)
    llm.route_model("recorded-model", SHAPE)
    room = f"voice-{new_id('r')}"
    question, rate = speak(spec.user)
    async with joined(livekit_server, room, "alice") as r:
        recorder = AudioRecorder(r)
        client = ProtocolClient(r, room)
        await client.wait_for_agent()
        await client.handshake()
        spoken_at = time.monotonic()
        mic = Microphone(r)
        await mic.start()
        await mic.say(question, rate)
        transcript = await client.wait_for(Transcription, within=60.0)
        await client.wait_for(AssistantSentence, within=90.0, is_final=True)
        await mic.stop()  # the turn was taken; the answer's speech goes on
        await recorder.until_quiet(spoken_at, quiet_s=2.0, within=60.0)
        await recorder.aclose()
    # The question as pocketsphinx heard it: one of its content words is enough (it hears
    # about 0.85 of them in synthetic speech through livekit-server).
    assert transcript.final, transcript
    heard_question = [t for t in client.of(Transcription) if t.final]
    words = {w for t in heard_question for w in t.text.lower().split()}
    assert QUESTION_WORDS & words, heard_question
    # The turn that was answered. On a loaded machine the voice activity detector runs
    # late and livekit-agents may take the question in two parts: two turns then (both
    # the same recorded stream), the first stopped by the second or answered before it;
    # the last one answers in full, each before it said a part of that answer at most.
    starts = client.of(StartAnswer)
    sentences = client.of(AssistantSentence)
    ended = [a for a in starts if any(s.is_final and s.previous_id == a.id for s in sentences)]
    assert 1 <= len(ended) <= len(heard_question), (ended, heard_question)
    texts = [
        " ".join(s.text for s in sentences if s.previous_id == a.id and s.text).split()
        for a in ended
    ]
    start = ended[-1]
    assert all(a.answer_type == "text+voice" for a in ended)
    assert {a.previous_id for a in ended} <= {t.id for t in heard_question}
    assert texts[-1] == spec.answer.split(), texts
    assert all(t == spec.answer.split()[: len(t)] for t in texts), texts
    steps = client.of(ReasoningStep)
    assert {s.previous_id for s in steps} <= {t.id for t in heard_question}
    assert {s.content for s in steps} <= set(spec.steps), voice_worker.log()  # nothing else
    answered = [s.content for s in steps if s.previous_id == start.previous_id]
    assert answered[-len(spec.steps) :] == list(spec.steps), voice_worker.log()
    for asked in {s.previous_id for s in steps}:  # each step sent once, in order
        indices = [s.step_index for s in steps if s.previous_id == asked]
        assert indices == sorted(set(indices)), indices
    # What the client heard: the answer, and none of the reasoning.
    answer_audio = recorder.pcm()
    heard = transcribe(answer_audio, ROOM_RATE)
    found = KEY_WORDS & set(heard.split())
    assert len(found) >= 4, heard
    for canary in CANARIES:
        assert canary in " ".join(spec.steps)
        assert canary not in spec.answer
    assert not spotted_phrases(answer_audio, ROOM_RATE, CANARIES), heard
    reasoning_audio, reasoning_rate = speak(" ".join(spec.steps))
    assert spotted_phrases(reasoning_audio, reasoning_rate, CANARIES) == set(CANARIES)


async def test_an_authorised_stop_interrupts_the_speech_and_closes_the_answer(
    livekit_server: LiveKitServer, llm: RecordedLLM, voice_worker: WorkerProcess
) -> None:
    spec = llm.spec(SHAPE)
    llm.route_model("recorded-model", SHAPE)
    room = f"voice-stop-{new_id('r')}"
    question, rate = speak(spec.user)
    async with joined(livekit_server, room, "alice") as r:
        recorder = AudioRecorder(r)
        client = ProtocolClient(r, room)
        await client.wait_for_agent()
        await client.handshake()
        spoken_at = time.monotonic()
        await publish_speech(r, question, rate)
        transcript = await client.wait_for(Transcription, within=60.0)
        start = await client.wait_for(StartAnswer, within=60.0)
        async with asyncio.timeout(30):  # the answer is being spoken
            while recorder.first_sound_at(after=spoken_at + len(question) / rate) is None:
                await asyncio.sleep(0.1)
        await client.send(ControlStop(conversation_id=room, target_id=start.id, stop_type="all"))
        final = await client.wait_for(AssistantSentence, within=30.0, is_final=True)
        await recorder.until_quiet(spoken_at, quiet_s=1.5, within=60.0)
        await recorder.aclose()
    assert start.previous_id == transcript.id and final.previous_id == start.id
    # Stopped early: far less audio than the whole answer (about 15 s of speech), from its
    # first sound to its last (the silence before it, longer on a loaded machine, is not
    # the answer's: counting every frame after the question made it 13.3 s once).
    sounds = recorder.loud(after=spoken_at + len(question) / rate)
    whole, _ = speak(spec.answer)
    assert sounds and sounds[-1] - sounds[0] < 0.7 * len(whole) / rate, (len(sounds), sounds[-1:])


async def test_speaking_over_the_answer_interrupts_it_and_closes_it_as_partial(
    livekit_server: LiveKitServer, llm: RecordedLLM, voice_worker: WorkerProcess
) -> None:
    spec = llm.spec(SHAPE)
    llm.route_model("recorded-model", SHAPE)
    room = f"voice-barge-{new_id('r')}"
    question, rate = speak(spec.user)
    interruption, irate = speak("Wait, wait, that is enough for now.")
    async with joined(livekit_server, room, "alice") as r:
        recorder = AudioRecorder(r)
        client = ProtocolClient(r, room)  # takes whole AssistantMessages, not streams
        await client.wait_for_agent()
        await client.send(Configuration(features=["reasoning_step_display"]))
        await client.wait_for(Configuration, within=10.0)
        mic = Microphone(r)
        await mic.start()
        asked_at = await mic.say(question, rate)
        transcript = await client.wait_for(Transcription, within=60.0)
        async with asyncio.timeout(60):  # the answer is being spoken
            while recorder.first_sound_at(after=asked_at + 0.5) is None:
                await asyncio.sleep(0.1)
        await asyncio.sleep(1.5)
        await mic.say(interruption, irate)
        message = await client.wait_for(AssistantMessage, within=30.0)
        await recorder.aclose()
    assert message.previous_id == transcript.id
    assert message.state == "partial"
    assert message.content and len(message.content) < len(spec.answer)
    assert spec.answer.startswith(message.content.split(".")[0])
    assert client.of(StartAnswer) == [] and client.of(AssistantSentence) == []


async def test_a_stop_of_one_s_own_queued_turn_does_not_cut_another_s_answer(
    livekit_server: LiveKitServer, llm: RecordedLLM, voice_worker: WorkerProcess
) -> None:
    """Alice's answer is being spoken; Bob's question waits behind it. Bob stops his own
    turn (``all``: its generation and its speech): Alice's answer plays to its end (the
    speech now playing is hers, so Bob may not stop it), as does what waits after it."""
    spec = llm.spec(SHAPE)
    llm.route_model("recorded-model", SHAPE)
    room = f"voice-own-stop-{new_id('r')}"
    async with (
        joined(livekit_server, room, "alice") as ra,
        joined(livekit_server, room, "bob") as rb,
    ):
        alice, bob = ProtocolClient(ra, room), ProtocolClient(rb, room)
        recorder = AudioRecorder(ra)
        for client in (alice, bob):
            await client.wait_for_agent()
            await client.handshake()
        asked_at = time.monotonic()
        await alice.send(UserMessage(id=new_id("m"), conversation_id=room, content=spec.user))
        start = await alice.wait_for(StartAnswer, within=60.0)
        async with asyncio.timeout(30):  # her answer is being spoken
            while recorder.first_sound_at(after=asked_at) is None:
                await asyncio.sleep(0.1)
        sounding_at = recorder.first_sound_at(after=asked_at)
        mine = new_id("m")
        await bob.send(UserMessage(id=mine, conversation_id=room, content=spec.user))
        await asyncio.sleep(1.0)
        stop = await bob.send(ControlStop(conversation_id=room, target_id=mine, stop_type="all"))
        await bob.wait_for(Acknowledgement, within=30.0, acknowledged_stanza_id=stop)
        final = await alice.wait_for(
            AssistantSentence, within=60.0, previous_id=start.id, is_final=True
        )
        await recorder.until_quiet(asked_at, quiet_s=1.5, within=60.0)
        await recorder.aclose()
    assert sounding_at is not None and final.previous_id == start.id
    loud = recorder.loud(after=sounding_at)
    gaps = [i for i in range(1, len(loud)) if loud[i] - loud[i - 1] > 1.0]
    played = loud[gaps[0] - 1 if gaps else -1] - loud[0]  # her speech, up to its first pause
    whole, rate = speak(spec.answer)
    assert played > 0.8 * len(whole) / rate, (played, len(whole) / rate)


@pytest.mark.parametrize("sender", ["alice", "eve"])
async def test_pre_connect_audio_is_taken_only_from_the_publisher_of_its_track(
    livekit_server: LiveKitServer, llm: RecordedLLM, voice_worker: WorkerProcess, sender: str
) -> None:
    """A LiveKit frontend sends the audio it recorded before the agent joined as a byte
    stream naming its microphone track (``lk.agent.pre-connect-audio-buffer``). From Alice,
    for her own track, the agent hears it: her question is transcribed and asked. From
    Eve, naming Alice's track, it is dropped: nothing is transcribed, the model is not
    asked (livekit-agents alone would take Eve's words as Alice's)."""
    spec = llm.spec(SHAPE)
    llm.route_model("recorded-model", SHAPE)
    room = f"voice-preconnect-{new_id('r')}"
    question, rate = speak(spec.user)
    pcm = np.concatenate([question, np.zeros(int(2.0 * rate), dtype=np.int16)])
    async with joined(livekit_server, room, "alice") as ra:
        alice = ProtocolClient(ra, room)
        await alice.wait_for_agent()
        await alice.handshake()
        async with joined(livekit_server, room, "eve") as re_:
            await wait_for_participant(re_, alice.agent)
            track = rtc.LocalAudioTrack.create_audio_track("microphone", rtc.AudioSource(rate, 1))
            options = rtc.TrackPublishOptions(
                source=rtc.TrackSource.SOURCE_MICROPHONE, preconnect_buffer=True
            )
            publication = await ra.local_participant.publish_track(track, options)
            writer = await (ra if sender == "alice" else re_).local_participant.stream_bytes(
                "pre-connect",
                topic=PRE_CONNECT_TOPIC,
                attributes={"trackId": publication.sid, "sampleRate": str(rate), "channels": "1"},
                destination_identities=[alice.agent],
            )
            await writer.write(pcm.tobytes())
            await writer.aclose()
            if sender == "alice":
                heard = await alice.wait_for(Transcription, within=60.0)
                assert QUESTION_WORDS & set(heard.text.lower().split()), heard.text
                async with asyncio.timeout(30):
                    while not llm.requests:
                        await asyncio.sleep(0.1)
            else:
                await asyncio.sleep(10.0)  # Alice's would be transcribed and asked by now
                assert alice.of(Transcription) == []
                assert list(llm.requests) == []
