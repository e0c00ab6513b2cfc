"""Offline speech for livekit-agents: nothing leaves the machine.

* :class:`EspeakTTS`: Debian's ``espeak-ng`` as a ``tts.TTS``;
* :class:`PocketSphinxSTT`: ``pocketsphinx`` (its wheel's en-us model) as a
  non-streaming ``stt.STT``, streamed through livekit-agents' ``StreamAdapter`` with
  Silero VAD (:func:`offline_speech`).

The settings that make them work together were measured (``shared/docs/SPEECH.md``):
espeak-ng's ``en-us+klatt`` voice at 160 words per minute, audio resampled to 16 kHz for
pocketsphinx, a faint noise floor around the speech, long audio split at pauses.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .espeak import EspeakTTS
    from .offline import OfflineSpeech, load_vad, offline_speech, prewarm, register_plugins
    from .sphinx import PocketSphinxSTT

__all__ = [
    "EspeakTTS",
    "OfflineSpeech",
    "PocketSphinxSTT",
    "load_vad",
    "offline_speech",
    "prewarm",
    "register_plugins",
]

_HOMES = {
    "EspeakTTS": "espeak",
    "OfflineSpeech": "offline",
    "PocketSphinxSTT": "sphinx",
    "load_vad": "offline",
    "offline_speech": "offline",
    "prewarm": "offline",
    "register_plugins": "offline",
}


def __getattr__(name: str) -> Any:
    """Import on first use: the recognizer process imports only :mod:`.decoding`."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
