"""Optional speech: STT on the participants' microphones, TTS for the answers.

Only used when ``ALICIA_STT`` and/or ``ALICIA_TTS`` name a plugin factory
(``module:callable``, e.g. ``livekit.plugins.deepgram:STT``); text-only operation needs
none of this. The plugin packages are not dependencies of this project: install the
ones you configure.

* STT: each subscribed audio track is fed to a streaming ``livekit.agents.stt.STT``;
  every final transcript is handed to ``on_final(identity, text)`` (the turn runner
  sends the Transcription and runs the turn).
* TTS: :class:`Voice` is the turn runner's ``Speaker``: ``say`` queues a sentence, one
  task synthesises it into a published audio track, ``interrupt`` drops what is queued
  and playing. Reasoning never gets here: only answer sentences are spoken.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from livekit import rtc
from livekit.agents import stt as agents_stt
from livekit.agents import tts as agents_tts

__all__ = ["Voice", "load_plugin"]

logger = logging.getLogger("alicia.voice")

_MAX_QUEUED_SENTENCES = 64


def load_plugin(spec: str) -> Any:
    """Call the factory named by ``spec`` (``module:callable``) and return its result."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"plugin spec must look like module:callable, not {spec!r}")
    factory = getattr(importlib.import_module(module_name), attr)
    return factory()


class Voice:
    """Speech in and out for one room; start with :meth:`start`, stop with :meth:`aclose`."""

    def __init__(
        self,
        room: rtc.Room,
        *,
        stt: agents_stt.STT[Any] | None,
        tts: agents_tts.TTS[Any] | None,
        on_final: Callable[[str, str], Awaitable[None]],
    ) -> None:
        """Nothing runs until :meth:`start`."""
        if stt is not None and not stt.capabilities.streaming:
            raise ValueError("ALICIA_STT must be a streaming STT (no VAD adapter is wired)")
        self._room = room
        self._stt = stt
        self._tts = tts
        self._on_final = on_final
        self._listeners: dict[str, asyncio.Task[None]] = {}
        self._sentences: asyncio.Queue[str] = asyncio.Queue(maxsize=_MAX_QUEUED_SENTENCES)
        self._source: rtc.AudioSource | None = None
        self._speaker_task: asyncio.Task[None] | None = None
        self._playing: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Publish the answer track (TTS) and listen to audio tracks (STT)."""
        if self._tts is not None:
            self._source = rtc.AudioSource(self._tts.sample_rate, self._tts.num_channels)
            track = rtc.LocalAudioTrack.create_audio_track("alicia-voice", self._source)
            options = rtc.TrackPublishOptions(source=rtc.TrackSource.SOURCE_MICROPHONE)
            await self._room.local_participant.publish_track(track, options)
            self._speaker_task = asyncio.create_task(self._speak_loop(), name="alicia-tts")
        if self._stt is not None:
            self._room.on("track_subscribed", self._on_track)
            self._room.on("track_unsubscribed", self._on_track_gone)
            for participant in self._room.remote_participants.values():
                for pub in participant.track_publications.values():
                    if pub.track is not None:
                        self._on_track(pub.track, pub, participant)

    async def aclose(self) -> None:
        """Stop listening and speaking; wait for the tasks."""
        if self._stt is not None:
            self._room.off("track_subscribed", self._on_track)
            self._room.off("track_unsubscribed", self._on_track_gone)
        tasks = [*self._listeners.values(), self._speaker_task, self._playing]
        running = [t for t in tasks if t is not None and not t.done()]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        self._listeners.clear()

    # -- Speaker --------------------------------------------------------------------

    def say(self, text: str) -> None:
        """Queue one answer sentence (dropped, with a log line, if far behind)."""
        if self._tts is None:
            return
        try:
            self._sentences.put_nowait(text)
        except asyncio.QueueFull:
            logger.warning("speech queue full, sentence dropped")

    def interrupt(self) -> None:
        """Drop queued sentences and stop the one playing."""
        while not self._sentences.empty():
            self._sentences.get_nowait()
        if self._playing is not None:
            self._playing.cancel()
        if self._source is not None:
            self._source.clear_queue()

    async def _speak_loop(self) -> None:
        while True:
            text = await self._sentences.get()
            self._playing = asyncio.create_task(self._speak(text))
            with contextlib.suppress(asyncio.CancelledError):
                await self._playing
            self._playing = None

    async def _speak(self, text: str) -> None:
        assert self._tts is not None and self._source is not None
        async with self._tts.synthesize(text) as stream:
            async for audio in stream:
                await self._source.capture_frame(audio.frame)

    # -- STT ------------------------------------------------------------------------

    def _on_track(
        self,
        track: rtc.Track,
        publication: rtc.RemoteTrackPublication,
        participant: rtc.RemoteParticipant,
    ) -> None:
        if track.kind != rtc.TrackKind.KIND_AUDIO or track.sid in self._listeners:
            return
        task = asyncio.create_task(self._listen(track, participant.identity))
        self._listeners[track.sid] = task

    def _on_track_gone(
        self,
        track: rtc.Track,
        publication: rtc.RemoteTrackPublication,
        participant: rtc.RemoteParticipant,
    ) -> None:
        task = self._listeners.pop(track.sid, None)
        if task is not None:
            task.cancel()

    async def _listen(self, track: rtc.Track, identity: str) -> None:
        assert self._stt is not None
        audio = rtc.AudioStream(track)
        recognizer = self._stt.stream()

        async def pump() -> None:
            async for event in audio:
                recognizer.push_frame(event.frame)

        pumping = asyncio.create_task(pump())
        try:
            async for speech in recognizer:
                if speech.type != agents_stt.SpeechEventType.FINAL_TRANSCRIPT:
                    continue
                text = speech.alternatives[0].text if speech.alternatives else ""
                if text.strip():
                    await self._on_final(identity, text)
        finally:
            pumping.cancel()
            await asyncio.gather(pumping, return_exceptions=True)
            await recognizer.aclose()
            await audio.aclose()
