"""A turn detector whose verdict is scripted, at the port of LiveKit's end-of-turn model.

LiveKit's end-of-turn model cannot tell a half question from a whole one on espeak-ng's
synthetic speech (P(turn ended) 0.11 to 0.73 for both, measured), so a test of the rule
"a pause the model judges unfinished does not end the turn" scripts the verdict:
``ALICIA_TURN_DETECTION=tests.support.scripted_turns:detector`` (the worker loads it like
any detector plugin). Its verdict, per user turn: **unfinished** until the speech has gone
on after a first pause of :data:`TURN_PAUSE_S` or more, **finished** after that. It is judged
from the audio the detector was given, not from the predictions asked (livekit-agents
asks again, and drops a verdict, when the VAD, lagging behind the audio on a loaded
machine, still hears the last words): whichever predictions the first pause gets, they
are all unfinished. A prediction is answered once the audio ends in :data:`PAUSE_S` of
silence; the gaps between words are shorter.

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

__all__ = ["FINISHED", "PAUSE_S", "TURN_PAUSE_S", "UNFINISHED", "ScriptedTurnDetector", "detector"]

PAUSE_S = 0.4
"""Seconds of silence at the end of the audio before a prediction is answered (livekit-agents
asks 0.2 s into a silence, and waits up to 1 s for the answer)."""
TURN_PAUSE_S = 1.5
"""Seconds of silence that make a pause of the question (the test pauses 10.5 s): longer than
any gap between words, even from a sender starved on a loaded machine."""
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
        self._silence_s = 0.0
        """Silence at the end of the audio given so far."""
        self._spoken = False
        """Speech was heard in this user turn (reset when the turn is committed)."""
        self._past_pause = False
        """The speech went on after a pause of :data:`TURN_PAUSE_S` in this user turn."""
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
        verdict = FINISHED if self._past_pause else UNFINISHED
        stream._resolve_prediction(request_id, verdict, inference_duration=0.0)

    def push_frame(self, frame: rtc.AudioFrame) -> None:
        samples = np.frombuffer(frame.data, dtype=np.int16).astype(np.float64)
        if samples.size and np.sqrt((samples**2).mean()) > LOUD:
            if self._spoken and self._silence_s >= TURN_PAUSE_S:
                self._past_pause = True
            self._spoken, self._silence_s = True, 0.0
        else:
            self._silence_s += frame.samples_per_channel / frame.sample_rate

    def flush(self) -> None:
        self._spoken = self._past_pause = False  # the turn was committed: the next starts

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
