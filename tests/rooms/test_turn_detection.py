"""Voice rooms' turn handling from the settings: LiveKit's end-of-turn model run offline by
default, the VAD alone, or a plugin; and a text worker does not load the model."""

from __future__ import annotations

import os

import pytest
from livekit.agents.inference import TurnDetector

from alicia.agent.rooms.voice_agent import VoiceParts, turn_detector, turn_handling
from alicia.agent.settings import Settings

REQUIRED = {
    "LIVEKIT_URL": "ws://127.0.0.1:7880",
    "LIVEKIT_API_KEY": "devkey",
    "LIVEKIT_API_SECRET": "very-secret-value",
    "LLM_BASE_URL": "http://127.0.0.1:8000/v1",
    "LLM_MODEL": "m",
}


async def test_the_default_is_the_offline_end_of_turn_model_with_both_delays() -> None:
    settings = Settings.from_env(REQUIRED)
    options = turn_handling(VoiceParts(None, None, vad=object()), settings)  # type: ignore[arg-type]
    detector = options.get("turn_detection")
    assert isinstance(detector, TurnDetector) and detector.model == "turn-detector-v1-mini"
    assert options.get("endpointing") == {"min_delay": 0.8, "max_delay": 1.5}
    assert options.get("interruption") == {"false_interruption_timeout": 2.0}


async def test_speech_over_the_agent_pauses_it_as_long_as_told_or_interrupts_at_once() -> None:
    for told, timeout in (("20", 20.0), ("0", None)):
        env = {**REQUIRED, "ALICIA_FALSE_INTERRUPTION_TIMEOUT": told}
        settings = Settings.from_env(env)
        options = turn_handling(VoiceParts(None, None, vad=object()), settings)  # type: ignore[arg-type]
        assert options.get("interruption") == {"false_interruption_timeout": timeout}


async def test_vad_and_a_plugin_are_taken_as_told_and_no_vad_means_no_turn_handling() -> None:
    vad = Settings.from_env({**REQUIRED, "ALICIA_TURN_DETECTION": "vad"})
    assert turn_detector(vad) is None
    options = turn_handling(VoiceParts(None, None, vad=object()), vad)  # type: ignore[arg-type]
    assert options.get("turn_detection") == "vad"
    plugin = Settings.from_env(
        {**REQUIRED, "ALICIA_TURN_DETECTION": "tests.support.scripted_turns:detector"}
    )
    assert type(turn_detector(plugin)).__name__ == "ScriptedTurnDetector"
    assert turn_handling(VoiceParts(None, None, None), plugin) == {}


def test_a_text_worker_does_not_load_the_end_of_turn_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """livekit-agents' forkserver loads it (244 MB) unless told not to; a voice worker's
    job processes share it from there."""
    from alicia.agent.rooms.worker import build_server

    monkeypatch.delenv("LIVEKIT_AGENTS_PRELOAD_LOCAL_INFERENCE", raising=False)
    monkeypatch.setenv("RUST_LOG", os.environ.get("RUST_LOG", "warn"))  # restored after
    build_server(Settings.from_env(REQUIRED))
    assert os.environ["LIVEKIT_AGENTS_PRELOAD_LOCAL_INFERENCE"] == "0"
    monkeypatch.delenv("LIVEKIT_AGENTS_PRELOAD_LOCAL_INFERENCE")
    build_server(Settings.from_env({**REQUIRED, "ALICIA_VOICE": "offline"}))
    assert "LIVEKIT_AGENTS_PRELOAD_LOCAL_INFERENCE" not in os.environ
