"""Debian's ``espeak-ng`` as a livekit-agents ``tts.TTS`` (offline, no network)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import wave
from pathlib import Path
from typing import Final, Never

from livekit.agents import APIConnectionError, tts, utils
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, APIConnectOptions

__all__ = ["DEFAULT_SPEED", "DEFAULT_VOICE", "EspeakTTS", "synthesize_wav"]

DEFAULT_VOICE: Final = "en-us+klatt"
"""The voice pocketsphinx understands best (SPEECH.md: recall 0.91 vs 0.63 for en-us)."""
DEFAULT_SPEED: Final = 160
"""Words per minute (160-175 measured best)."""
SAMPLE_RATE: Final = 22050
"""What espeak-ng writes."""
_TIMEOUT_S: Final = 30.0


async def synthesize_wav(
    text: str, *, voice: str = DEFAULT_VOICE, speed: int = DEFAULT_SPEED
) -> tuple[bytes, int]:
    """``text`` spoken by espeak-ng: 16-bit mono PCM and its sample rate."""
    binary = shutil.which("espeak-ng")
    if binary is None:
        raise APIConnectionError("espeak-ng is not installed (scripts/setup installs it)")
    with tempfile.TemporaryDirectory(prefix="alicia-espeak-") as tmp:
        out = Path(tmp) / "speech.wav"
        proc = await asyncio.create_subprocess_exec(
            binary,
            "-v",
            voice,
            "-s",
            str(speed),
            "-w",
            str(out),
            "--",
            text,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with asyncio.timeout(_TIMEOUT_S):
                _, err = await proc.communicate()
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if proc.returncode != 0 or not out.exists():
            raise APIConnectionError(f"espeak-ng failed: {err.decode(errors='replace')[-200:]}")
        with wave.open(str(out)) as w:
            if w.getsampwidth() != 2 or w.getnchannels() != 1:
                raise APIConnectionError("espeak-ng wrote audio that is not 16-bit mono")
            return w.readframes(w.getnframes()), w.getframerate()


class EspeakTTS(tts.TTS[Never]):
    """Text to speech with espeak-ng (22,050 Hz mono)."""

    def __init__(self, *, voice: str = DEFAULT_VOICE, speed: int = DEFAULT_SPEED) -> None:
        """``voice`` and ``speed`` (words per minute) as espeak-ng takes them."""
        super().__init__(
            capabilities=tts.TTSCapabilities(streaming=False),
            sample_rate=SAMPLE_RATE,
            num_channels=1,
        )
        self._voice = voice
        self._speed = speed

    @property
    def model(self) -> str:
        """The espeak-ng voice."""
        return self._voice

    @property
    def provider(self) -> str:
        """Debian's espeak-ng."""
        return "espeak-ng"

    def synthesize(
        self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> tts.ChunkedStream:
        """Speak ``text`` (one espeak-ng run)."""
        return _EspeakStream(tts=self, input_text=text, conn_options=conn_options)


class _EspeakStream(tts.ChunkedStream):
    def __init__(self, *, tts: EspeakTTS, input_text: str, conn_options: APIConnectOptions):
        super().__init__(tts=tts, input_text=input_text, conn_options=conn_options)
        self._espeak = tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        pcm, rate = await synthesize_wav(
            self.input_text, voice=self._espeak._voice, speed=self._espeak._speed
        )
        output_emitter.initialize(
            request_id=utils.shortuuid(),
            sample_rate=rate,
            num_channels=1,
            mime_type="audio/pcm",
        )
        output_emitter.push(pcm)
        output_emitter.flush()
