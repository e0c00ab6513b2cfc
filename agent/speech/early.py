"""livekit-agents' STT stream adapter, recognizing as soon as the silence begins.

``stt.StreamAdapter`` gives a non-streaming STT to an AgentSession: the VAD cuts the
utterance and the STT recognizes it once the VAD reports the end of speech, after its
silence window (Silero: 0.55 s). With an offline recognizer that takes most of a second,
the user's turn ends about that much later.

:class:`EarlyStreamAdapter` starts recognizing the utterance heard so far as soon as the
VAD has heard :data:`EARLY_SILENCE_S` of silence in it, while the VAD's window is still
open. If the user speaks again, that attempt is dropped; at the end of speech its result
is used when it covers everything said (else the whole utterance is recognized, as the
stock adapter does). What is recognized is the same audio, so the transcript is too.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Final

from livekit import rtc
from livekit.agents import APIConnectOptions, stt, utils
from livekit.agents.stt import SpeechEvent, SpeechEventType
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, NOT_GIVEN, NotGivenOr
from livekit.agents.vad import VADEvent, VADEventType, VADStream

__all__ = ["EARLY_SILENCE_S", "EarlyStreamAdapter"]

EARLY_SILENCE_S: Final = 0.2
"""Silence inside an utterance after which it is recognized, before the VAD's end."""


class EarlyStreamAdapter(stt.StreamAdapter):
    """``stt.StreamAdapter`` that recognizes each utterance early (module docstring)."""

    def stream(
        self,
        *,
        language: NotGivenOr[str] = NOT_GIVEN,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
    ) -> stt.RecognizeStream:
        """A stream that segments with the VAD and recognizes each utterance early."""
        return _EarlyStream(self, language=language, conn_options=conn_options)


class _EarlyStream(stt.RecognizeStream):
    def __init__(
        self,
        adapter: EarlyStreamAdapter,
        *,
        language: NotGivenOr[str],
        conn_options: APIConnectOptions,
    ) -> None:
        super().__init__(stt=adapter, conn_options=conn_options)
        self._adapter = adapter
        self._language = language
        self._recognize_options = conn_options

    async def _run(self) -> None:
        vad_stream = self._adapter._vad.stream()

        async def forward() -> None:
            async for item in self._input_ch:
                if isinstance(item, self._FlushSentinel):
                    vad_stream.flush()
                else:
                    vad_stream.push_frame(item)
            vad_stream.end_input()

        tasks = [
            asyncio.create_task(forward(), name="alicia-stt-forward"),
            asyncio.create_task(self._recognize(vad_stream), name="alicia-stt-recognize"),
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            await utils.aio.cancel_and_wait(*tasks)
            await vad_stream.aclose()

    async def _recognize(self, vad_stream: VADStream) -> None:
        heard: list[rtc.AudioFrame] = []
        early: asyncio.Task[SpeechEvent] | None = None
        try:
            async for ev in vad_stream:
                if ev.type == VADEventType.START_OF_SPEECH:
                    _drop(early)
                    early, heard = None, list(ev.frames)
                    self._event_ch.send_nowait(SpeechEvent(SpeechEventType.START_OF_SPEECH))
                elif ev.type == VADEventType.INFERENCE_DONE and ev.speaking:
                    heard.extend(ev.frames)
                    if ev.raw_accumulated_silence == 0.0:  # speaking again
                        _drop(early)
                        early = None
                    elif early is None and ev.raw_accumulated_silence >= EARLY_SILENCE_S:
                        early = asyncio.create_task(self._stt_of(heard))
                elif ev.type == VADEventType.END_OF_SPEECH:
                    guess, early = early, None
                    await self._ended(ev, guess)
                    heard = []
        finally:
            _drop(early)

    async def _ended(self, ev: VADEvent, early: asyncio.Task[SpeechEvent] | None) -> None:
        end = time.time() - ev.silence_duration - ev.inference_duration
        self._event_ch.send_nowait(
            SpeechEvent(type=SpeechEventType.END_OF_SPEECH, speech_end_time=end)
        )
        result: SpeechEvent | None = None
        if early is not None:
            with contextlib.suppress(Exception):
                result = await early
        if result is None:
            result = await self._stt_of(list(ev.frames))
        if not result.alternatives or not result.alternatives[0].text:
            return
        self._event_ch.send_nowait(
            SpeechEvent(
                type=SpeechEventType.FINAL_TRANSCRIPT,
                alternatives=[result.alternatives[0]],
                speech_end_time=result.speech_end_time or end,
            )
        )

    async def _stt_of(self, frames: list[rtc.AudioFrame]) -> SpeechEvent:
        return await self._adapter.wrapped_stt.recognize(
            buffer=utils.merge_frames(frames),
            language=self._language,
            conn_options=self._recognize_options,
        )


def _drop(task: asyncio.Task[SpeechEvent] | None) -> None:
    """Cancel an early recognition that no longer covers the utterance."""
    if task is not None and not task.done():
        task.cancel()
