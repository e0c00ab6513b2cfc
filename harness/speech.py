"""Real speech for tests, the demo and the voice benchmark (espeak-ng, pocketsphinx, rooms).

* :func:`speak`: text spoken by espeak-ng (``en-us+klatt``, 160 wpm), padded with 0.3 s
  of faint noise on both sides, as SPEECH.md measured best for pocketsphinx;
* :func:`transcribe` / :func:`spotted`: what pocketsphinx hears, and whether it hears a
  phrase (keyword spotting; use phrases of two or more words: single words false-alarm);
* :func:`publish_speech`: a microphone track in a LiveKit room, paced in real time, with
  trailing silence so a VAD sees the end of the speech;
* :class:`AudioRecorder`: every audio frame a room receives, with arrival times.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import re
import tempfile
import time
import wave
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import numpy as np
from livekit import rtc
from pocketsphinx import Decoder  # type: ignore[import-untyped]

from alicia.agent.speech.espeak import DEFAULT_SPEED, DEFAULT_VOICE
from alicia.agent.speech.sphinx import RATE, decode, to_16k

__all__ = [
    "ROOM_RATE",
    "AudioRecorder",
    "Microphone",
    "pairs_heard",
    "publish_speech",
    "read_wav",
    "resample",
    "speak",
    "speak_with_pause",
    "speech_bounds",
    "spotted",
    "transcribe",
    "write_wav",
]

ROOM_RATE: Final = 48_000
_FRAME_MS: Final = 20
_MAX_RECORDED_S: Final = 120.0


def speak(text: str) -> tuple[np.ndarray, int]:
    """``text`` spoken by espeak-ng, with 0.3 s of faint noise on both sides."""
    pcm, rate = _espeak(text)
    audio = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    pad = np.zeros(int(0.3 * rate))
    body = np.concatenate([pad, audio, pad])
    noisy = body + np.random.default_rng(7).normal(0.0, 20.0, len(body))
    return np.clip(noisy, -32768, 32767).astype(np.int16), rate


def speak_with_pause(first: str, then: str, pause_s: float) -> tuple[np.ndarray, int]:
    """``first``, a pause of ``pause_s`` of faint noise (silence to a VAD), then ``then``,
    spoken by espeak-ng as one utterance (padded like :func:`speak`). The pause is the
    silence between the two parts' speech: espeak-ng's own quiet at the ends of each part
    (about 0.35 s together) is cut."""
    a, rate = speak(first)
    b, _ = speak(then)
    gap = np.random.default_rng(11).normal(0.0, 20.0, int(pause_s * rate)).astype(np.int16)
    return np.concatenate(
        [a[: speech_bounds(a, rate)[1]], gap, b[speech_bounds(b, rate)[0] :]]
    ), rate


def speech_bounds(pcm: np.ndarray, rate: int) -> tuple[int, int]:
    """The first and the last sample of 10 ms frames of ``pcm`` louder than RMS 300."""
    step = rate // 100
    n = len(pcm) // step
    frames = pcm[: n * step].astype(np.float64).reshape(n, step)
    loud = np.nonzero(np.sqrt((frames**2).mean(axis=1)) > 300)[0]
    return int(loud[0]) * step, (int(loud[-1]) + 1) * step


def _espeak(text: str) -> tuple[bytes, int]:
    """espeak-ng run synchronously (tests call it from inside and outside event loops)."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "s.wav"
        subprocess.run(
            [
                "espeak-ng",
                "-v",
                DEFAULT_VOICE,
                "-s",
                str(DEFAULT_SPEED),
                "-w",
                str(out),
                "--",
                text,
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )
        pcm, rate = read_wav(out)
        return pcm.tobytes(), rate


def resample(pcm: np.ndarray, rate: int, to: int) -> np.ndarray:
    """Mono int16 ``pcm`` from ``rate`` to ``to`` Hz."""
    if rate == to:
        return pcm
    if to == RATE:
        return to_16k(pcm, rate)
    resampler = rtc.AudioResampler(rate, to, num_channels=1, quality=rtc.AudioResamplerQuality.HIGH)
    frames = [*resampler.push(bytearray(pcm.tobytes())), *resampler.flush()]
    return np.concatenate([np.frombuffer(f.data, dtype=np.int16) for f in frames])


def transcribe(pcm: np.ndarray, rate: int) -> str:
    """What pocketsphinx hears (lower case, split at pauses)."""
    return decode(pcm, rate)


def pairs_heard(heard: str, said: str) -> float:
    """The share of ``said``'s word pairs (adjacent words, case and punctuation aside)
    that come in a row in ``heard``. A recognizer that misses a word here and there keeps
    most pairs, while other speech shares almost none: a steadier test that ``said`` was
    heard than a few key words, each of which the recognizer misses now and then."""

    def pairs(text: str) -> set[tuple[str, str]]:
        words = re.findall(r"[a-z0-9']+", text.lower())
        return set(itertools.pairwise(words))

    expected = pairs(said)
    return len(expected & pairs(heard)) / len(expected) if expected else 0.0


def spotted(pcm: np.ndarray, rate: int, phrase: str, *, threshold: float = 1e-20) -> bool:
    """Whether pocketsphinx's keyword spotting hears ``phrase`` anywhere in ``pcm``."""
    return phrase.lower() in spotted_phrases(pcm, rate, [phrase], threshold=threshold)


def spotted_phrases(
    pcm: np.ndarray, rate: int, phrases: Iterable[str], *, threshold: float = 1e-20
) -> set[str]:
    """Which of ``phrases`` (lower case) pocketsphinx's keyword spotting hears anywhere in
    ``pcm``: one pass for all of them (each phrase is searched on its own, so the answer is
    that of one pass per phrase, at a fraction of the CPU: 0.7 s against 3.7 s for five)."""
    wanted = sorted({p.lower() for p in phrases})
    if any(len(p.split()) < 2 for p in wanted):
        raise ValueError("spot phrases of two or more words (single words false-alarm)")
    if not wanted:
        return set()
    audio = to_16k(pcm, rate)
    pad = np.random.default_rng(3).normal(0.0, 20.0, int(0.3 * RATE)).astype(np.int16)
    # no language model: spotting searches the phrases alone (loading it cost 0.22 CPU-s)
    decoder = Decoder(samprate=RATE, kws_threshold=threshold, lm=None, loglevel="FATAL")
    with tempfile.TemporaryDirectory(prefix="alicia-kws-") as tmp:
        keys = Path(tmp) / "phrases.kws"
        keys.write_text("".join(f"{p} /{threshold}/\n" for p in wanted))
        decoder.add_kws("canary", str(keys))
    decoder.activate_search("canary")
    decoder.start_utt()
    decoder.process_raw(np.concatenate([pad, audio, pad]).tobytes(), full_utt=True)
    decoder.end_utt()
    return {seg.word.strip() for seg in decoder.seg() or ()} & set(wanted)


def write_wav(path: Path, pcm: np.ndarray, rate: int) -> Path:
    """Write mono int16 ``pcm`` as a WAV file."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.astype(np.int16).tobytes())
    return path


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """A mono 16-bit WAV file's samples and rate."""
    with wave.open(str(path)) as w:
        data = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
        if w.getnchannels() > 1:
            data = data.reshape(-1, w.getnchannels()).mean(axis=1).astype(np.int16)
        return data, w.getframerate()


class Microphone:
    """A microphone track in a LiveKit room that speaks PCM in real time."""

    def __init__(self, room: rtc.Room) -> None:
        """Nothing is published until :meth:`start`."""
        self._room = room
        self._source = rtc.AudioSource(ROOM_RATE, 1)
        self._sid: str | None = None

    async def start(self, *, subscribed_timeout_s: float = 20.0) -> None:
        """Publish the track and wait until some participant subscribed to it (audio sent
        before that is lost)."""
        track = rtc.LocalAudioTrack.create_audio_track("microphone", self._source)
        options = rtc.TrackPublishOptions(source=rtc.TrackSource.SOURCE_MICROPHONE)
        publication = await self._room.local_participant.publish_track(track, options)
        self._sid = publication.sid
        subscribed = asyncio.Event()

        def on_subscribed(pub: rtc.LocalTrackPublication) -> None:
            if pub.sid == publication.sid:
                subscribed.set()

        self._room.on("local_track_subscribed", on_subscribed)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(subscribed_timeout_s):
                await subscribed.wait()
        self._room.off("local_track_subscribed", on_subscribed)
        await asyncio.sleep(0.3)  # the subscriber's decoder starts

    async def say(self, pcm: np.ndarray, rate: int, *, trailing_silence_s: float = 1.5) -> float:
        """Speak ``pcm`` paced in real time (20 ms frames on a monotonic clock), then
        ``trailing_silence_s`` of silence; returns when the speech itself ended
        (``time.monotonic()``)."""
        audio = resample(pcm, rate, ROOM_RATE)
        step = ROOM_RATE * _FRAME_MS // 1000
        silence = np.zeros(int(trailing_silence_s * ROOM_RATE), dtype=np.int16)
        samples = np.concatenate([audio, silence])
        start = time.monotonic()
        speech_end = start + len(audio) / ROOM_RATE
        for i in range(0, len(samples), step):
            chunk = samples[i : i + step]
            if len(chunk) < step:
                chunk = np.concatenate([chunk, np.zeros(step - len(chunk), dtype=np.int16)])
            await self._source.capture_frame(rtc.AudioFrame(chunk.tobytes(), ROOM_RATE, 1, step))
            delay = start + (i + step) / ROOM_RATE - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        await self._source.wait_for_playout()
        return speech_end

    async def stop(self) -> None:
        """Unpublish the track (once the agent has taken what was said: frames it has not
        read yet are lost). A published microphone costs the agent's job process about a
        sixth of a core even when silent (its frames go through AGC, resampling and the
        VAD; measured 5.5 % without it, 22 % with it), the publisher and livekit-server a
        few percent more."""
        if self._sid is not None:
            sid, self._sid = self._sid, None
            await self._room.local_participant.unpublish_track(sid)


async def publish_speech(
    room: rtc.Room, pcm: np.ndarray, rate: int, *, trailing_silence_s: float = 1.5
) -> float:
    """Publish a :class:`Microphone` in ``room`` and speak ``pcm`` once; returns when the
    speech ended (``time.monotonic()``)."""
    mic = Microphone(room)
    await mic.start()
    return await mic.say(pcm, rate, trailing_silence_s=trailing_silence_s)


@dataclass
class AudioRecorder:
    """Records every remote audio track ``room`` subscribes to (started at subscription,
    so the start of an early answer is not lost)."""

    room: rtc.Room
    frame_ms: int = 50
    """The length of the frames it receives, joined natively: the tests' default, 50 ms, is
    a fifth of the SDK's 10 ms frames' events (each handled in Python); a benchmark that
    times the first sound asks for 10."""
    frames: list[tuple[float, np.ndarray]] = field(default_factory=list)
    """(``time.monotonic()`` at arrival, :attr:`frame_ms` of 48 kHz mono samples)."""
    senders: list[str] = field(default_factory=list)
    """The identity of the participant each of :attr:`frames` came from."""
    levels: list[float] = field(default_factory=list)
    """The RMS level of each of :attr:`frames` (computed once, as it arrives: the waits
    poll :meth:`loud` every 0.2 s over the whole recording)."""
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _reading: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    """The reader of each subscribed track, by track sid (ended when it is unsubscribed:
    a stream left open on a track that is gone went on yielding another track's audio)."""

    def __post_init__(self) -> None:
        self.room.on("track_subscribed", self._on_track)
        self.room.on("track_unsubscribed", self._on_track_gone)

    def _on_track(
        self, track: rtc.Track, pub: rtc.RemoteTrackPublication, p: rtc.RemoteParticipant
    ) -> None:
        if track.kind == rtc.TrackKind.KIND_AUDIO:
            task = asyncio.create_task(self._read(track, p.identity))
            self._tasks.append(task)
            self._reading[track.sid] = task

    def _on_track_gone(
        self, track: rtc.Track, pub: rtc.RemoteTrackPublication, p: rtc.RemoteParticipant
    ) -> None:
        task = self._reading.pop(track.sid, None)
        if task is not None:
            task.cancel()

    async def _read(self, track: rtc.Track, sender: str) -> None:
        stream = rtc.AudioStream(
            track, sample_rate=ROOM_RATE, num_channels=1, frame_size_ms=self.frame_ms
        )
        limit = int(_MAX_RECORDED_S * 1000 / self.frame_ms)
        try:
            async for event in stream:
                if len(self.frames) < limit:
                    samples = np.frombuffer(event.frame.data, dtype=np.int16).copy()
                    at = time.monotonic()
                    self.frames.append((at, samples))
                    self.senders.append(sender)
                    self.levels.append(float(np.sqrt((samples.astype(np.float64) ** 2).mean())))
        finally:
            await stream.aclose()

    def first_sound_at(self, *, after: float = 0.0, level: float = 300.0) -> float | None:
        """Arrival time of the first frame after ``after`` louder than ``level`` RMS."""
        for i in range(self._first_after(after), len(self.frames)):
            if self.levels[i] > level:
                return self.frames[i][0]
        return None

    def _first_after(self, after: float) -> int:
        """The index of the first frame that arrived at or after ``after`` (frames arrive
        in order, on one loop)."""
        return bisect.bisect_left(self.frames, after, key=lambda frame: frame[0])

    async def until_quiet(self, since: float, *, quiet_s: float, within: float = 90.0) -> None:
        """Wait until the agent, heard after ``since``, has been silent for ``quiet_s``."""
        async with asyncio.timeout(within):
            while True:
                loud = self.loud(after=since)
                if loud and time.monotonic() - loud[-1] >= quiet_s:
                    return
                await asyncio.sleep(0.2)

    def loud(
        self, *, after: float = 0.0, level: float = 300.0, sender: str | None = None
    ) -> list[float]:
        """Arrival times of the frames after ``after`` louder than ``level`` RMS (from
        ``sender`` only, if given)."""
        return [
            self.frames[i][0]
            for i in range(self._first_after(after), len(self.frames))
            if self.levels[i] > level and (sender is None or self.senders[i] == sender)
        ]

    def longest_silence(self, start: float, end: float, *, level: float = 300.0) -> float:
        """The longest stretch (seconds) between ``start`` and ``end`` with no frame louder
        than ``level`` RMS."""
        marks = [start, *(at for at in self.loud(after=start, level=level) if at <= end), end]
        return max(b - a for a, b in itertools.pairwise(marks))

    def pcm_between(self, start: float, end: float) -> np.ndarray:
        """What arrived between ``start`` and ``end``, as one 48 kHz mono int16 array."""
        parts = [s for at, s in self.frames if start <= at <= end]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)

    def pcm(self) -> np.ndarray:
        """Everything received, as one 48 kHz mono int16 array."""
        if not self.frames:
            return np.zeros(0, dtype=np.int16)
        return np.concatenate([s for _, s in self.frames])

    async def aclose(self) -> None:
        """Stop reading."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
