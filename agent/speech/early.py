"""livekit-agents' STT stream adapter for pocketsphinx: decoding while the user speaks,
the transcript ready as soon as the silence begins.

``stt.StreamAdapter`` gives a non-streaming STT to an AgentSession: the VAD cuts the
utterance and the STT recognizes it once the VAD reports the end of speech, after its
silence window (Silero: 0.55 s). With an offline recognizer that takes most of a second,
the user's turn ends about that much later.

:class:`EarlyStreamAdapter` feeds each utterance to pocketsphinx while it is spoken
(:class:`~.sphinx.LiveUtterance`), and ends it as soon as the VAD has heard
:data:`EARLY_SILENCE_S` of silence, while the VAD's window is still open: the transcript
is ready about 0.2 s later. If the user speaks again, that result is dropped and the
utterance heard so far is fed again, live. If live decoding fails, the whole utterance is
recognized at its end, as the stock adapter does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Final

from livekit import rtc
from livekit.agents import APIConnectOptions, stt, utils
from livekit.agents.language import LanguageCode
from livekit.agents.stt import SpeechEvent, SpeechEventType
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, NOT_GIVEN, NotGivenOr
from livekit.agents.vad import VAD, VADEvent, VADEventType, VADStream

from .sphinx import LiveUtterance, PocketSphinxSTT

__all__ = ["EARLY_SILENCE_S", "EarlyStreamAdapter"]

EARLY_SILENCE_S: Final = 0.2
"""Silence inside an utterance after which it is recognized, before the VAD's end."""


class EarlyStreamAdapter(stt.StreamAdapter):
    """``stt.StreamAdapter`` for :class:`~.sphinx.PocketSphinxSTT`: each utterance decoded
    while it is spoken, and ended early (module docstring)."""

    def __init__(self, *, stt: PocketSphinxSTT, vad: VAD) -> None:
        """``stt`` decodes, ``vad`` cuts the utterances."""
        super().__init__(stt=stt, vad=vad)
        self._recognizer = stt

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
        live: LiveUtterance | None = None
        early: asyncio.Future[str] | None = None
        try:
            async for ev in vad_stream:
                if ev.type == VADEventType.START_OF_SPEECH:
                    _drop(early, live)
                    heard = list(ev.frames)
                    early, live = None, self._live(heard)
                    self._event_ch.send_nowait(SpeechEvent(SpeechEventType.START_OF_SPEECH))
                elif ev.type == VADEventType.INFERENCE_DONE and ev.speaking:
                    heard.extend(ev.frames)
                    if ev.raw_accumulated_silence == 0.0 and early is not None:
                        # speaking again: what was heard so far is decoded again, live
                        _drop(early, None)
                        early, live = None, self._live(heard)
                    elif live is not None and not _push(live, ev.frames):
                        live = None  # dropped: the whole utterance is decoded at its end
                    elif live is not None and ev.raw_accumulated_silence >= EARLY_SILENCE_S:
                        early, live = _end(live), None
                elif ev.type == VADEventType.END_OF_SPEECH:
                    if early is None and live is not None:
                        early, live = _end(live), None
                    guess, early = early, None
                    await self._ended(ev, guess)
                    heard = []
        finally:
            _drop(early, live)

    def _live(self, frames: list[rtc.AudioFrame]) -> LiveUtterance | None:
        """A live utterance fed ``frames`` (None if the recognizer cannot take one)."""
        try:
            live = self._adapter._recognizer.utterance()
        except Exception:
            logger.warning("no live recognition", exc_info=True)
            return None
        return live if _push(live, frames) else None

    async def _ended(self, ev: VADEvent, early: asyncio.Future[str] | None) -> None:
        end = time.time() - ev.silence_duration - ev.inference_duration
        self._event_ch.send_nowait(
            SpeechEvent(type=SpeechEventType.END_OF_SPEECH, speech_end_time=end)
        )
        text: str | None = None
        if early is not None:
            try:
                text = await early
            except Exception:
                logger.warning("live recognition failed", exc_info=True)
        if text is None:
            result = await self._adapter.wrapped_stt.recognize(
                buffer=utils.merge_frames(list(ev.frames)),
                language=self._language,
                conn_options=self._recognize_options,
            )
            text = result.alternatives[0].text if result.alternatives else ""
        if not text:
            return
        self._event_ch.send_nowait(
            SpeechEvent(
                type=SpeechEventType.FINAL_TRANSCRIPT,
                alternatives=[stt.SpeechData(language=LanguageCode("en"), text=text)],
                speech_end_time=end,
            )
        )


logger = logging.getLogger("alicia.speech")


def _push(live: LiveUtterance, frames: list[rtc.AudioFrame]) -> bool:
    """Feed ``frames`` to ``live``; False (and ``live`` dropped) if it cannot take them."""
    try:
        for frame in frames:
            live.push(frame)
    except Exception:
        logger.warning("live recognition failed", exc_info=True)
        live.drop()
        return False
    return True


def _end(live: LiveUtterance) -> asyncio.Future[str] | None:
    """End ``live``: its transcript to come (None if it cannot be ended)."""
    try:
        return live.end()
    except Exception:
        logger.warning("live recognition failed", exc_info=True)
        live.drop()
        return None


def _drop(early: asyncio.Future[str] | None, live: LiveUtterance | None) -> None:
    """Forget a transcript that no longer covers the utterance, and a live utterance."""
    if early is not None and not early.done():
        early.cancel()
    if live is not None:
        live.drop()
