"""pocketsphinx decoding, with nothing else imported (no livekit): it runs in the
recognizer process of :class:`~alicia.agent.speech.sphinx.PocketSphinxSTT`.

Audio at 16 kHz (pocketsphinx gives garbage at other rates) with a faint noise floor added
(exact-zero silence breaks its noise and level estimates), decoded in one of two ways:

* whole (:func:`decode_16k`): split at pauses of 0.6 s or more, each part padded and
  decoded on its own, with the cepstral mean of the whole part (batch CMN);
* live (:func:`stream_open`, :func:`stream_feed`, :func:`stream_close`): an utterance fed
  while it is spoken, so that its transcript is ready about 0.2 s after its last audio, not
  after a second's decoding. The cepstral mean is estimated as it goes, from
  :data:`CMN_SEED`: with pocketsphinx's own starting point the live decoder heard 0.71 of
  the suite's questions' content words; from the seed 0.84 (whole: 0.78).
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from typing import Final

import numpy as np
from pocketsphinx import Decoder  # type: ignore[import-untyped]

__all__ = [
    "CMN_SEED",
    "RATE",
    "decode_16k",
    "new_decoder",
    "recognize_16k",
    "serve",
    "stream_close",
    "stream_drop",
    "stream_feed",
    "stream_open",
]

RATE: Final = 16_000
_PAD_S: Final = 0.3
_NOISE_RMS: Final = 20.0
"""About -64 dB of full scale."""
_PAUSE_S: Final = 0.6
_FRAME_S: Final = 0.02
_SILENCE_RMS: Final = 150.0
CMN_SEED: Final = "57.72,1.05,-6.08,6.05,-12.46,-1.99,-1.83,-12.00,2.01,-4.37,2.18,0.10,-3.85"
"""The cepstral mean pocketsphinx's batch CMN found in a spoken sentence (espeak-ng's
``en-us+klatt``, "Most adults need about seven to nine hours of sleep."), where live
decoding starts. Its default (``40,3,-1``) is far from speech at a microphone's level."""
_MAX_STREAMS: Final = 8
"""Utterances decoded live at once in one recognizer; the oldest is dropped past that."""


def _parts(pcm: np.ndarray) -> list[np.ndarray]:
    """``pcm`` (16 kHz) split at pauses of 0.6 s or more; silent parts dropped."""
    step = int(RATE * _FRAME_S)
    n = len(pcm) // step
    if n == 0:
        return []
    frames = pcm[: n * step].astype(np.float32).reshape(n, step)
    loud = np.sqrt((frames**2).mean(axis=1)) > _SILENCE_RMS
    gap = int(_PAUSE_S / _FRAME_S)
    parts: list[np.ndarray] = []
    start: int | None = None
    quiet = 0
    for i, is_loud in enumerate(loud):
        if is_loud:
            start = i if start is None else start
            quiet = 0
        elif start is not None:
            quiet += 1
            if quiet >= gap:
                parts.append(pcm[start * step : (i - quiet + 1) * step])
                start, quiet = None, 0
    if start is not None:
        parts.append(pcm[start * step :])
    return parts


def _padded(part: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    pad = int(RATE * _PAD_S)
    body = np.concatenate([np.zeros(pad), part.astype(np.float64), np.zeros(pad)])
    noisy = body + rng.normal(0.0, _NOISE_RMS, len(body))
    return np.clip(noisy, -32768, 32767).astype(np.int16)


def decode_16k(audio: np.ndarray) -> str:
    """What pocketsphinx hears in mono int16 ``audio`` at 16 kHz (blocking), with a kept
    decoder (:class:`_Decoders`: loading one costs 0.3 to 0.6 CPU-s)."""
    rng = np.random.default_rng(0)
    words: list[str] = []
    decoder = _DECODERS.take()
    for part in _parts(audio):
        decoder.start_utt()
        decoder.process_raw(_padded(part, rng).tobytes(), full_utt=True)
        decoder.end_utt()
        hyp = decoder.hyp()
        if hyp is not None and hyp.hypstr:
            words.append(hyp.hypstr)
    _DECODERS.give(decoder)  # not one that failed mid-utterance: it is dropped
    return " ".join(words)


def new_decoder() -> Decoder:
    """A pocketsphinx decoder with the wheel's en-us model, at :data:`RATE`."""
    return Decoder(samprate=RATE, loglevel="FATAL")


class _Decoders:
    """Loaded decoders kept for the next utterance: loading one (the model, its language
    model and dictionary) takes 0.3 to 0.6 CPU-s, as much as decoding a short utterance, and
    held the recognizer while the utterance it was loaded for was being fed. A decoder is
    given back once its utterance has ended and reused with its feature state reset
    (``reinit_feat``: noise, level and cepstral mean estimates; the live decoder's mean then
    seeded from :data:`CMN_SEED`): twelve sentences were heard word for word as by fresh
    decoders, live and whole."""

    def __init__(self, keep: int = 2) -> None:
        self._keep = keep
        self._idle: queue.SimpleQueue[Decoder] = queue.SimpleQueue()

    def take(self) -> Decoder:
        """A decoder with nothing heard: an idle one, or one loaded now."""
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            return new_decoder()

    def give(self, decoder: Decoder) -> None:
        """``decoder``'s utterance has ended: reset, it is kept for the next (up to ``keep``)."""
        if self._idle.qsize() < self._keep:
            decoder.reinit_feat()
            self._idle.put(decoder)


_DECODERS: Final = _Decoders()


def serve(parent: int) -> None:
    """The recognizer process's initializer: leave as soon as ``parent`` is gone, and load a
    decoder before the first call (a call waits for it; one loading in a thread beside the
    first utterance's, as before, took the CPU from both: 4 s to open that utterance in a
    loaded job process). A parent killed outright (a job process past its shutdown
    timeout) never shuts its pool down; an orphaned recognizer would keep its stdout and
    stderr, and whoever reads them to their end (a terminal pipe, a test) would wait
    forever."""
    threading.Thread(
        target=_outlive_not, args=(parent,), name="alicia-sphinx-parent", daemon=True
    ).start()
    with contextlib.suppress(Exception):  # the first utterance loads one, or says why not
        _DECODERS.give(new_decoder())


def _outlive_not(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.25)
    os._exit(0)


def recognize_16k(pcm: bytes) -> str:
    """In the recognizer process: what pocketsphinx hears in 16 kHz 16-bit mono ``pcm``."""
    return decode_16k(np.frombuffer(pcm, dtype=np.int16))


_STREAMS: Final[dict[str, tuple[Decoder, np.random.Generator]]] = {}


def stream_open(key: str) -> None:
    """In the recognizer process: start decoding utterance ``key`` live (a fresh decoder,
    its cepstral mean from :data:`CMN_SEED`, a short noise floor before the speech)."""
    while len(_STREAMS) >= _MAX_STREAMS:
        stream_drop(next(iter(_STREAMS)))
    decoder = _DECODERS.take()
    decoder.set_cmn(CMN_SEED)
    decoder.start_utt()
    rng = np.random.default_rng(0)
    _STREAMS[key] = (decoder, rng)
    _feed(decoder, rng, np.zeros(int(RATE * _PAD_S)))


def stream_feed(key: str, pcm: bytes) -> None:
    """In the recognizer process: more of utterance ``key`` (16 kHz 16-bit mono)."""
    decoder, rng = _STREAMS[key]
    _feed(decoder, rng, np.frombuffer(pcm, dtype=np.int16).astype(np.float64))


def stream_close(key: str) -> str:
    """In the recognizer process: what pocketsphinx heard in utterance ``key``, now ended."""
    decoder, _ = _STREAMS.pop(key)
    decoder.end_utt()
    hyp = decoder.hyp()
    text = str(hyp.hypstr) if hyp is not None and hyp.hypstr else ""
    _DECODERS.give(decoder)
    return text


def stream_drop(key: str) -> None:
    """In the recognizer process: forget utterance ``key`` (it is no longer needed)."""
    entry = _STREAMS.pop(key, None)
    if entry is not None:
        entry[0].end_utt()
        _DECODERS.give(entry[0])


def _feed(decoder: Decoder, rng: np.random.Generator, samples: np.ndarray) -> None:
    noisy = samples + rng.normal(0.0, _NOISE_RMS, len(samples))
    pcm = np.clip(noisy, -32768, 32767).astype(np.int16)
    decoder.process_raw(pcm.tobytes(), full_utt=False)
