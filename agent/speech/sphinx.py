"""``pocketsphinx`` (the PyPI wheel's en-us model) as a livekit-agents ``stt.STT``.

Non-streaming: an AgentSession streams it through ``stt.StreamAdapter`` with a VAD
(:func:`alicia.agent.speech.offline_speech`), which hands it each utterance. Audio is resampled
to 16 kHz (pocketsphinx gives garbage at other rates), padded with a faint noise floor
(exact-zero silence breaks its noise and level estimates) and split at pauses of 0.6 s
or more, each part decoded on its own (:mod:`.decoding`), in a process of its own.
"""

from __future__ import annotations

import asyncio
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

from .decoding import RATE, decode_16k, recognize_16k, serve

__all__ = ["RATE", "PocketSphinxSTT", "decode", "start_recognizer", "to_16k"]


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

    async def _recognize_impl(
        self,
        buffer: utils.AudioBuffer,
        *,
        language: NotGivenOr[str] = NOT_GIVEN,
        conn_options: APIConnectOptions,
    ) -> stt.SpeechEvent:
        frame = rtc.combine_audio_frames(buffer)
        pcm = np.frombuffer(frame.data, dtype=np.int16)
        if frame.num_channels > 1:
            pcm = pcm.reshape(-1, frame.num_channels).mean(axis=1).astype(np.int16)
        audio = to_16k(pcm, frame.sample_rate).tobytes()
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
