"""A turn detector whose verdict is scripted, at the port of LiveKit's end-of-turn model.

LiveKit's end-of-turn model cannot tell a half question from a whole one on espeak-ng's
synthetic speech (P(turn ended) 0.11 to 0.73 for both, measured), so a test of the rule
"a pause the model judges unfinished does not end the turn" scripts the verdict:
``ALICIA_TURN_DETECTION=tests.support.scripted_turns:detector`` (the worker loads it like
any detector plugin). Its verdict, per user turn: the first pause is **unfinished**, every
later one **finished**. A pause counts once the audio the detector was given ends in
:data:`PAUSE_S` of silence (the verdict is given then): the short gaps between words, which
start a prediction and are cut by the next word, do not use up the first verdict. The
pause is measured in the audio itself, not on the clock, so a job process that lags behind
its audio on a loaded machine gets the same verdicts.

Everything else is livekit-agents' own: its detector stream (the audio channel, the
requests, superseding and flushing them), the audio recognition that asks for verdicts and
waits ``max_delay`` on an unfinished one.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import numpy as np
from livekit import rtc
from livekit.agents.inference import TurnDetector
from livekit.agents.inference.eot.base import _BaseStreamingTurnDetectorStream

__all__ = ["FINISHED", "PAUSE_S", "UNFINISHED", "ScriptedTurnDetector", "detector"]

PAUSE_S = 0.4
"""Seconds of silence at the end of the audio before a prediction is answered (livekit-agents
asks 0.2 s into a silence, and waits up to 1 s for the answer)."""
LOUD = 300.0
"""RMS of a 16-bit frame above which it is speech (espeak-ng's: thousands; the tests' pad
of faint noise: 20)."""
UNFINISHED = 0.01
"""P(turn ended) of the first pause of a turn (under every language's threshold)."""
FINISHED = 0.99
"""P(turn ended) of the later pauses."""


class _ScriptedTransport:
    """The detector stream's transport: no model, the script's verdicts."""

    def __init__(self) -> None:
        self._stream: weakref.ref[_BaseStreamingTurnDetectorStream] | None = None
        self._answered = 0
        """Verdicts given in this user turn (reset when the turn is committed)."""
        self._silence_s = 0.0
        """Silence at the end of the audio given so far."""
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def session_id(self) -> str | None:
        return None

    def attach(self, stream: _BaseStreamingTurnDetectorStream) -> None:
        self._stream = weakref.ref(stream)

    def detach(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()

    def run_inference(self, request_id: str) -> None:
        task = asyncio.create_task(self._answer(request_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, request_id: str) -> None:
        while True:
            stream = self._stream() if self._stream is not None else None
            if stream is None or stream._request_id != request_id:
                return  # superseded: the speech resumed
            if self._silence_s >= PAUSE_S:
                break
            await asyncio.sleep(0.01)
        verdict = UNFINISHED if self._answered == 0 else FINISHED
        self._answered += 1
        stream._resolve_prediction(request_id, verdict, inference_duration=0.0)

    def push_frame(self, frame: rtc.AudioFrame) -> None:
        samples = np.frombuffer(frame.data, dtype=np.int16).astype(np.float64)
        if samples.size and np.sqrt((samples**2).mean()) > LOUD:
            self._silence_s = 0.0
        else:
            self._silence_s += frame.samples_per_channel / frame.sample_rate

    def flush(self) -> None:
        self._answered = 0  # the turn was committed (or cleared): the next one starts

    async def run(self) -> None:
        stream = self._stream() if self._stream is not None else None
        if stream is not None:
            await stream._drain_audio_channel()


class ScriptedTurnDetector(TurnDetector):
    """LiveKit's offline end-of-turn detector with :class:`_ScriptedTransport` for the model."""

    def stream(self, **_: Any) -> _BaseStreamingTurnDetectorStream:
        return _BaseStreamingTurnDetectorStream(
            detector=self, opts=self._opts, transport=_ScriptedTransport(), model=self.model
        )


def detector() -> ScriptedTurnDetector:
    """The plugin factory (``tests.support.scripted_turns:detector``)."""
    return ScriptedTurnDetector(version="v1-mini")
