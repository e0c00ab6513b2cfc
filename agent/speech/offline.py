"""The offline speech parts of an AgentSession: Silero VAD, pocketsphinx, espeak-ng."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from livekit.agents import stt, tts, vad

from .early import EarlyStreamAdapter
from .espeak import EspeakTTS
from .sphinx import PocketSphinxSTT, start_recognizer

__all__ = ["OfflineSpeech", "load_vad", "offline_speech", "prewarm", "register_plugins"]

_VAD: vad.VAD | None = None
_VAD_LOCK = threading.Lock()


def register_plugins() -> None:
    """Import livekit-plugins-silero now: livekit-agents registers plugins on the main
    thread only, so a worker whose rooms run in job threads imports it at start."""
    from livekit.plugins import silero  # noqa: F401


def load_vad() -> vad.VAD:
    """Silero VAD (the model ships in livekit-plugins-silero), loaded once per process."""
    global _VAD
    with _VAD_LOCK:
        if _VAD is None:
            from livekit.plugins import silero

            _VAD = silero.VAD.load()
        return _VAD


def prewarm() -> None:
    """Load the VAD and start the recognizer process (with a decoder loading) now: in a
    job process's prewarm, so that a room's first utterance finds them ready."""
    load_vad()
    start_recognizer()


@dataclass(frozen=True, slots=True)
class OfflineSpeech:
    """``AgentSession(stt=..., tts=..., vad=...)`` with nothing leaving the machine."""

    stt: stt.STT[Any]
    tts: tts.TTS[Any]
    vad: vad.VAD


def offline_speech(*, vad_: vad.VAD | None = None) -> OfflineSpeech:
    """pocketsphinx streamed through livekit-agents' StreamAdapter with Silero VAD (each
    utterance recognized as soon as its silence begins), and espeak-ng."""
    detector = vad_ or load_vad()
    return OfflineSpeech(
        stt=EarlyStreamAdapter(stt=PocketSphinxSTT(), vad=detector),
        tts=EspeakTTS(),
        vad=detector,
    )
