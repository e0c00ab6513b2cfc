"""``pocketsphinx`` (the PyPI wheel's en-us model) as a livekit-agents ``stt.STT``.

Non-streaming for livekit-agents: an AgentSession streams it through a stream adapter with
a VAD (:func:`alicia.agent.speech.offline_speech`), which cuts the utterances. The adapter
feeds each one to pocketsphinx while it is spoken (:meth:`PocketSphinxSTT.utterance`), so its
transcript is ready soon after it ends; ``recognize()`` decodes a whole buffer. Audio is
resampled to 16 kHz (pocketsphinx gives garbage at other rates) and decoded
(:mod:`.decoding`) in a process of its own.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Final, Never

import numpy as np
from livekit import rtc
from livekit.agents import stt, utils
from livekit.agents.language import LanguageCode
from livekit.agents.types import NOT_GIVEN, APIConnectOptions, NotGivenOr

from .decoding import (
    RATE,
    decode_16k,
    recognize_16k,
    serve,
    stream_close,
    stream_drop,
    stream_feed,
    stream_open,
)

__all__ = [
    "RATE",
    "LiveUtterance",
    "PocketSphinxSTT",
    "decode",
    "mono",
    "start_recognizer",
    "to_16k",
]


def mono(frame: rtc.AudioFrame) -> np.ndarray:
    """``frame``'s int16 samples, its channels averaged."""
    pcm = np.frombuffer(frame.data, dtype=np.int16)
    if frame.num_channels > 1:
        pcm = pcm.reshape(-1, frame.num_channels).mean(axis=1).astype(np.int16)
    return pcm


def to_16k(pcm: np.ndarray, rate: int) -> np.ndarray:
    """Mono int16 ``pcm`` at ``rate`` resampled to 16 kHz."""
    if rate == RATE:
        return pcm
    resampler = rtc.AudioResampler(
        rate, RATE, num_channels=1, quality=rtc.AudioResamplerQuality.HIGH
    )
    frames = [*resampler.push(bytearray(pcm.astype(np.int16).tobytes())), *resampler.flush()]
    if not frames:
        return np.zeros(0, dtype=np.int16)
    return np.concatenate([np.frombuffer(f.data, dtype=np.int16) for f in frames])


def decode(pcm: np.ndarray, rate: int) -> str:
    """What pocketsphinx hears in mono int16 ``pcm`` at ``rate`` (blocking, in this
    process)."""
    return decode_16k(to_16k(pcm, rate))


class PocketSphinxSTT(stt.STT[Never]):
    """Speech to text with pocketsphinx (English), one utterance at a time."""

    def __init__(self) -> None:
        """The wheel's en-us acoustic model, language model and dictionary."""
        super().__init__(capabilities=stt.STTCapabilities(streaming=False, interim_results=False))
        start_recognizer()  # the first utterance finds the recognizer loaded

    @property
    def model(self) -> str:
        """The model pocketsphinx ships."""
        return "en-us"

    @property
    def provider(self) -> str:
        """CMU pocketsphinx."""
        return "pocketsphinx"

    def utterance(self) -> LiveUtterance:
        """An utterance to recognize as it is spoken: push its audio as it comes."""
        return LiveUtterance(_recognizer())

    async def _recognize_impl(
        self,
        buffer: utils.AudioBuffer,
        *,
        language: NotGivenOr[str] = NOT_GIVEN,
        conn_options: APIConnectOptions,
    ) -> stt.SpeechEvent:
        frame = rtc.combine_audio_frames(buffer)
        audio = to_16k(mono(frame), frame.sample_rate).tobytes()
        started = time.monotonic()
        text = await asyncio.get_running_loop().run_in_executor(_recognizer(), recognize_16k, audio)
        logger.debug(
            "recognized",
            extra={
                "audio_s": round(len(audio) / 2 / RATE, 2),
                "took_s": round(time.monotonic() - started, 3),
            },
        )
        return stt.SpeechEvent(
            type=stt.SpeechEventType.FINAL_TRANSCRIPT,
            alternatives=[stt.SpeechData(language=LanguageCode("en"), text=text)],
        )


logger = logging.getLogger("alicia.speech")

_FEED_S: Final = 0.1
"""Audio gathered before it is sent to the recognizer process."""
_KEYS: Final = itertools.count()


class LiveUtterance:
    """One utterance decoded in the recognizer process while it is spoken (pocketsphinx
    keeps up with speech), so its transcript is ready about 0.2 s after the last audio."""

    def __init__(self, pool: ProcessPoolExecutor) -> None:
        """Open the utterance in ``pool``'s recognizer (one worker: calls run in order)."""
        self._pool = pool
        self._key = f"{os.getpid()}-{next(_KEYS)}"
        self._resampler: rtc.AudioResampler | None = None
        self._rate = 0
        self._pending: list[bytes] = []
        self._pending_samples = 0
        pool.submit(stream_open, self._key)
        self._seconds = 0.0
        self._ended = False

    def push(self, frame: rtc.AudioFrame) -> None:
        """More of the utterance (any rate; mono, or channels averaged)."""
        if self._ended:
            raise RuntimeError("the utterance has ended")
        pcm = mono(frame)
        self._seconds += len(pcm) / frame.sample_rate
        if frame.sample_rate == RATE:
            self._gather(pcm.tobytes())
            return
        if self._resampler is None or frame.sample_rate != self._rate:
            self._flush_resampler()
            self._rate = frame.sample_rate
            self._resampler = rtc.AudioResampler(
                self._rate, RATE, num_channels=1, quality=rtc.AudioResamplerQuality.HIGH
            )
        for out in self._resampler.push(bytearray(pcm.tobytes())):
            self._gather(bytes(out.data))

    def end(self) -> asyncio.Future[str]:
        """End the utterance: what pocketsphinx heard in it (a future, already under way)."""
        self._ended = True
        self._flush_resampler()
        self._send()
        started = time.monotonic()
        seconds = self._seconds
        result = asyncio.wrap_future(self._pool.submit(stream_close, self._key))

        def done(f: asyncio.Future[str]) -> None:
            if not f.cancelled() and f.exception() is None:
                logger.debug(
                    "recognized live",
                    extra={
                        "audio_s": round(seconds, 2),
                        "after_end_s": round(time.monotonic() - started, 3),
                    },
                )

        result.add_done_callback(done)
        return result

    def drop(self) -> None:
        """The utterance is not needed (the user spoke on): its decoder is freed."""
        if not self._ended:
            self._ended = True
            self._pool.submit(stream_drop, self._key)

    def _flush_resampler(self) -> None:
        if self._resampler is not None:
            for out in self._resampler.flush():
                self._gather(bytes(out.data))
            self._resampler = None

    def _gather(self, pcm: bytes) -> None:
        self._pending.append(pcm)
        self._pending_samples += len(pcm) // 2
        if self._pending_samples >= RATE * _FEED_S:
            self._send()

    def _send(self) -> None:
        if self._pending:
            self._pool.submit(stream_feed, self._key, b"".join(self._pending))
            self._pending, self._pending_samples = [], 0


_POOL: ProcessPoolExecutor | None = None
_POOL_LOCK: Final = threading.Lock()


def start_recognizer() -> None:
    """Start this process's recognizer (once), so the first utterance need not wait."""
    _recognizer()


def _recognizer() -> ProcessPoolExecutor:
    """The process that recognizes speech for this one, started (and warmed) once.

    pocketsphinx holds the GIL while it decodes (about a second per utterance here), so
    decoding in a thread stalls the event loop, and with it the VAD, the audio output and
    every room of the process. A separate process leaves them running."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            context = multiprocessing.get_context("spawn")
            _POOL = ProcessPoolExecutor(
                max_workers=1, mp_context=context, initializer=serve, initargs=(os.getpid(),)
            )
            _POOL.submit(int)  # starts the recognizer now, not at the first utterance
        return _POOL
