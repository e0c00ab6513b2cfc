"""Offline speech: espeak-ng and pocketsphinx as livekit-agents plugins, no network.

Key-word recall is asserted with a margin under what SPEECH.md measured (0.91 straight
into pocketsphinx), so the tests fail when audio is mangled (wrong rate, no padding).
"""

from __future__ import annotations

import numpy as np
import pytest
from livekit import rtc
from livekit.agents import stt

from alicia.agent.speech import (
    EspeakTTS,
    OfflineSpeech,
    PocketSphinxSTT,
    load_vad,
    offline_speech,
)
from alicia.agent.speech.sphinx import LiveUtterance
from alicia.harness.speech import speak, spotted, transcribe

SENTENCES = {
    "The capital of Australia is Canberra, not Sydney.": {"capital", "australia", "sydney"},
    "Most adults need about seven to nine hours of sleep.": {"adults", "seven", "hours", "sleep"},
    "The weather today is cloudy with a chance of rain.": {"weather", "cloudy", "chance", "rain"},
}


def recall(heard: str, keys: set[str]) -> float:
    words = set(heard.lower().split())
    return len(keys & words) / len(keys)


@pytest.mark.parametrize("sentence", sorted(SENTENCES))
def test_spoken_sentences_are_heard(sentence: str) -> None:
    pcm, rate = speak(sentence)
    assert rate == 22050
    heard = transcribe(pcm, rate)
    assert recall(heard, SENTENCES[sentence]) >= 0.6, heard


def test_a_spoken_phrase_is_spotted_and_an_unspoken_one_is_not() -> None:
    pcm, rate = speak("It is a classic trap, so I should compare them carefully.")
    assert spotted(pcm, rate, "classic trap")
    assert not spotted(pcm, rate, "purple elephant")
    with pytest.raises(ValueError, match="two or more words"):
        spotted(pcm, rate, "trap")


async def test_espeak_tts_synthesizes_frames_at_its_rate() -> None:
    engine = EspeakTTS()
    frames: list[rtc.AudioFrame] = []
    async with engine.synthesize("Most adults need about seven to nine hours of sleep.") as stream:
        async for audio in stream:
            frames.append(audio.frame)
    assert frames and {f.sample_rate for f in frames} == {22050}
    seconds = sum(f.samples_per_channel for f in frames) / 22050
    assert 1.0 < seconds < 5.0
    pcm = np.concatenate([np.frombuffer(f.data, dtype=np.int16) for f in frames])
    assert "sleep" in transcribe(pcm, 22050)
    await engine.aclose()


async def test_pocketsphinx_stt_recognizes_a_buffer() -> None:
    pcm, rate = speak("Most adults need about seven to nine hours of sleep.")
    frame = rtc.AudioFrame(pcm.tobytes(), rate, 1, len(pcm))
    event = await PocketSphinxSTT().recognize([frame])
    assert event.type == stt.SpeechEventType.FINAL_TRANSCRIPT
    assert recall(event.alternatives[0].text, {"adults", "hours", "sleep"}) >= 0.6


async def test_the_stream_adapter_with_silero_vad_finalizes_an_utterance() -> None:
    pcm, rate = speak("The capital of Australia is Canberra, not Sydney.")
    audio = np.concatenate([pcm, np.zeros(int(1.5 * rate), dtype=np.int16)])
    finals = await _finals(offline_speech(vad_=load_vad()), audio, rate)
    assert len(finals) == 1, finals
    assert recall(" ".join(finals), {"capital", "australia", "sydney"}) >= 0.6, finals


@pytest.mark.parametrize("sentence", sorted(SENTENCES))
async def test_a_live_utterance_is_heard_from_pieces_pushed_as_it_is_spoken(
    sentence: str,
) -> None:
    pcm, rate = speak(sentence)
    utterance = PocketSphinxSTT().utterance()
    step = int(rate * 0.032)  # what Silero hands on per inference
    for i in range(0, len(pcm), step):
        chunk = pcm[i : i + step]
        utterance.push(rtc.AudioFrame(chunk.tobytes(), rate, 1, len(chunk)))
    heard = await utterance.end()
    assert recall(heard, SENTENCES[sentence]) >= 0.6, heard
    with pytest.raises(RuntimeError):
        utterance.push(rtc.AudioFrame(pcm[:step].tobytes(), rate, 1, step))


async def _finals(speech: OfflineSpeech, audio: np.ndarray, rate: int) -> list[str]:
    stream = speech.stt.stream()
    step = rate // 50
    for i in range(0, len(audio) - step, step):
        stream.push_frame(rtc.AudioFrame(audio[i : i + step].tobytes(), rate, 1, step))
    stream.end_input()
    finals = [
        e.alternatives[0].text
        async for e in stream
        if e.type == stt.SpeechEventType.FINAL_TRANSCRIPT and e.alternatives
    ]
    await stream.aclose()
    return finals


async def test_an_utterance_resumed_after_a_short_pause_is_heard_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pause long enough to end the live decoding early (0.2 s) but shorter than the
    VAD's end of speech: the early transcript is dropped, and the utterance is fed again
    from its start to a second live decoding, which hears it whole."""
    opened: list[LiveUtterance] = []
    original = PocketSphinxSTT.utterance

    def counted(self: PocketSphinxSTT) -> LiveUtterance:
        opened.append(original(self))
        return opened[-1]

    monkeypatch.setattr(PocketSphinxSTT, "utterance", counted)
    first, rate = speak("The capital of Australia")
    second, _ = speak("is Canberra, not Sydney.")
    pad = int(0.3 * rate)  # speak() pads both sides with 0.3 s
    pause = np.zeros(int(0.3 * rate), dtype=np.int16)
    tail = np.zeros(int(1.5 * rate), dtype=np.int16)
    audio = np.concatenate([first[:-pad], pause, second[pad:], tail])
    finals = await _finals(offline_speech(vad_=load_vad()), audio, rate)
    assert len(finals) == 1, finals
    assert recall(finals[0], {"capital", "australia", "sydney"}) >= 0.6, finals
    assert len(opened) == 2


@pytest.mark.parametrize("fails_after", [0, 20])
async def test_an_utterance_is_still_heard_when_live_decoding_fails(
    monkeypatch: pytest.MonkeyPatch, fails_after: int
) -> None:
    """Live decoding that cannot start (``fails_after`` 0), or fails halfway: the whole
    utterance is decoded at its end instead."""
    pushes = 0
    original = LiveUtterance.push

    def failing(self: LiveUtterance, frame: rtc.AudioFrame) -> None:
        nonlocal pushes
        pushes += 1
        if pushes > fails_after:
            raise RuntimeError("recognizer gone")
        original(self, frame)

    monkeypatch.setattr(LiveUtterance, "push", failing)
    pcm, rate = speak("The capital of Australia is Canberra, not Sydney.")
    audio = np.concatenate([pcm, np.zeros(int(1.5 * rate), dtype=np.int16)])
    finals = await _finals(offline_speech(vad_=load_vad()), audio, rate)
    assert pushes > fails_after
    assert len(finals) == 1, finals
    assert recall(finals[0], {"capital", "australia", "sydney"}) >= 0.6, finals


_HOLDS_A_RECOGNIZER = """
import sys, time
from alicia.agent.speech.sphinx import _recognizer
pool = _recognizer()
print(pool.submit(__import__("os").getpid).result(), flush=True)
time.sleep(600)
"""


def test_the_recognizer_process_leaves_with_a_parent_killed_outright() -> None:
    """A job process killed past its shutdown timeout never shuts its recognizer pool
    down: the recognizer must not outlive it and hold its stdout (a reader of that pipe,
    like ``./scripts/demo --voice`` under a test, would wait forever)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDS_A_RECOGNIZER], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    recognizer = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(recognizer, 0)
            with open(f"/proc/{recognizer}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break  # ended, not yet reaped (a subreaper: tests.support.cpu_usage)
        except (ProcessLookupError, FileNotFoundError):
            break
        time.sleep(0.1)
    else:
        os.kill(recognizer, signal.SIGKILL)
        pytest.fail("the recognizer outlived its parent")
    assert proc.stdout.read() == ""  # end of file: nobody holds the pipe any more
