"""Worker settings from the environment: defaults, parsing, errors, secrets out of repr."""

from __future__ import annotations

import dataclasses
import math

import pytest

from alicia.agent.settings import Settings, SettingsError, WatchSettings

REQUIRED = {
    "LIVEKIT_URL": "ws://127.0.0.1:7880",
    "LIVEKIT_API_KEY": "devkey",
    "LIVEKIT_API_SECRET": "very-secret-value",
    "LLM_BASE_URL": "http://127.0.0.1:8000/v1",
    "LLM_MODEL": "Qwen/Qwen3-8B",
}


def test_defaults_with_only_the_required_variables() -> None:
    s = Settings.from_env(REQUIRED)
    assert s.livekit_url == "ws://127.0.0.1:7880" and s.llm_model == "Qwen/Qwen3-8B"
    assert s.show_reasoning_default is True and s.tools_enabled is True
    assert s.database_url is None and s.stt is None and s.tts is None and not s.voice
    assert s.step_max_delay_s == 1.0 and s.job_executor == "process"
    assert s.load_threshold is None and s.llm_api_key == "none"
    assert s.max_rooms is None and s.native_logs == "stderr"


def test_every_variable_is_read() -> None:
    env = {
        **REQUIRED,
        "LLM_API_KEY": "sk-test",
        "DATABASE_URL": "postgresql+asyncpg://u:pw@127.0.0.1/db",
        "ALICIA_SHOW_REASONING_DEFAULT": "false",
        "ALICIA_STEP_MAX_DELAY": "0.25",
        "ALICIA_TOOLS": "off",
        "ALICIA_LLM_THINKING_OPEN": "yes",
        "ALICIA_QUEUE_SIZE": "3",
        "ALICIA_RATE": "7.5",
        "ALICIA_RATE_BURST": "9",
        "ALICIA_ERROR_RATE": "0.5",
        "ALICIA_ERROR_BURST": "2",
        "ALICIA_EDIT_TIMEOUT": "3",
        "ALICIA_STT": "livekit.plugins.deepgram:STT",
        "ALICIA_JOB_EXECUTOR": "thread",
        "ALICIA_JOB_START_TIMEOUT": "45",
        "ALICIA_IDLE_PROCESSES": "1",
        "ALICIA_LOAD_THRESHOLD": "inf",
        "ALICIA_AGENT_NAME": "alicia",
        "ALICIA_HTTP_PORT": "8081",
        "ALICIA_TIMING_META": "1",
        "ALICIA_MAX_TOOL_ROUNDS": "2",
        "ALICIA_HISTORY_TURNS": "5",
        "ALICIA_LLM_TIMEOUT": "30",
        "ALICIA_SYSTEM_PROMPT": "Be brief.",
        "ALICIA_MAX_ROOMS": "40",
        "ALICIA_NATIVE_LOGS": "capture",
        "ALICIA_REASONING_VISIBILITY": "full",
        "ALICIA_ZDR": "true",
        "ALICIA_SUMMARY_MODEL": "qwen3-0.6b",
        "ALICIA_SUMMARY_TIMEOUT": "1.5",
        "ALICIA_SUMMARY_CONCURRENCY": "3",
        "ALICIA_REPLAY_MAX_BYTES": "1000",
        "ALICIA_RESUME_BURST": "2",
        "ALICIA_RESUME_RATE": "0.5",
        "ALICIA_METRICS_PORT": "9464",
    }
    s = Settings.from_env(env)
    assert (s.llm_api_key, s.database_url) == ("sk-test", env["DATABASE_URL"])
    assert not s.show_reasoning_default and not s.tools_enabled and s.llm_thinking_open
    assert (s.step_max_delay_s, s.queue_size, s.rate_per_s, s.rate_burst) == (0.25, 3, 7.5, 9)
    assert (s.error_rate_per_s, s.error_burst, s.edit_timeout_s) == (0.5, 2, 3.0)
    assert s.stt == "livekit.plugins.deepgram:STT" and s.voice
    assert s.job_executor == "thread" and s.load_threshold == math.inf
    assert s.job_start_timeout_s == 45.0
    assert s.idle_processes == 1
    assert (s.agent_name, s.http_port, s.timing_meta) == ("alicia", 8081, True)
    assert (s.max_tool_rounds, s.history_turns, s.llm_timeout_s) == (2, 5, 30.0)
    assert s.system_prompt == "Be brief."
    assert (s.max_rooms, s.native_logs) == (40, "capture")
    assert s.reasoning_visibility == "full" and s.zdr
    assert (s.summary_model, s.summary_timeout_s, s.summary_concurrency) == ("qwen3-0.6b", 1.5, 3)
    assert (s.replay_max_bytes, s.resume_burst, s.resume_rate_per_s) == (1000, 2, 0.5)
    assert (s.metrics_port, s.trace_content) == (9464, "none")


def test_reasoning_is_withheld_unless_a_grant_or_the_deployment_says_otherwise() -> None:
    assert Settings.from_env(REQUIRED).reasoning_visibility == "none"


def test_secrets_stay_out_of_repr() -> None:
    env = {**REQUIRED, "LLM_API_KEY": "sk-hidden", "DATABASE_URL": "postgresql://u:pw@h/d"}
    text = repr(Settings.from_env(env))
    for secret in ("very-secret-value", "devkey", "sk-hidden", "pw@h"):
        assert secret not in text
    assert "Qwen/Qwen3-8B" in text


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"LIVEKIT_URL": ""}, "LIVEKIT_URL is required"),
        ({"LLM_MODEL": "  "}, "LLM_MODEL is required"),
        ({"ALICIA_TOOLS": "maybe"}, "ALICIA_TOOLS must be true or false"),
        ({"ALICIA_STEP_MAX_DELAY": "soon"}, "must be a number"),
        ({"ALICIA_STEP_MAX_DELAY": "0"}, "must be at least"),
        ({"ALICIA_QUEUE_SIZE": "1.5"}, "must be an integer"),
        ({"ALICIA_RATE": "nan"}, "must be a number"),
        ({"ALICIA_JOB_EXECUTOR": "fork"}, "process or thread"),
        ({"ALICIA_JOB_START_TIMEOUT": "0.5"}, "ALICIA_JOB_START_TIMEOUT must be at least"),
        ({"ALICIA_IDLE_PROCESSES": "-1"}, "ALICIA_IDLE_PROCESSES must be at least 0"),
        ({"ALICIA_MAX_ROOMS": "0"}, "ALICIA_MAX_ROOMS must be at least 1, not 0"),
        ({"ALICIA_MAX_ROOMS": "-3"}, "ALICIA_MAX_ROOMS must be at least 1"),
        ({"ALICIA_MAX_ROOMS": "x"}, "ALICIA_MAX_ROOMS must be an integer"),
        ({"ALICIA_MAX_ROOMS": "2.5"}, "ALICIA_MAX_ROOMS must be an integer"),
        ({"ALICIA_NATIVE_LOGS": "stdout"}, "ALICIA_NATIVE_LOGS must be stderr or capture"),
        ({"ALICIA_NATIVE_LOGS": "CAPTURE"}, "ALICIA_NATIVE_LOGS must be stderr or capture"),
        ({"ALICIA_REASONING_VISIBILITY": "all"}, "ALICIA_REASONING_VISIBILITY must be full"),
        ({"ALICIA_RESUME_BURST": "0"}, "ALICIA_RESUME_BURST must be at least 1"),
        ({"ALICIA_TRACE_CONTENT": "all"}, "ALICIA_TRACE_CONTENT must be none, summary or full"),
        ({"ALICIA_METRICS_PORT": "0"}, "ALICIA_METRICS_PORT must be at least 1"),
        (
            {"ALICIA_TRACE_CONTENT": "full", "ALICIA_ZDR": "true"},
            "ALICIA_TRACE_CONTENT=full puts reasoning into traces, which ALICIA_ZDR forbids",
        ),
        (
            {"ALICIA_TRACE_CONTENT": "summary", "ALICIA_ZDR": "1"},
            "ALICIA_TRACE_CONTENT=summary puts reasoning into traces",
        ),
        (
            {"LIVEKIT_TELEMETRY_ALLOW_PII": "true", "ALICIA_ZDR": "true"},
            "LIVEKIT_TELEMETRY_ALLOW_PII puts what people said.* which ALICIA_ZDR forbids",
        ),
    ],
)
def test_bad_values_name_the_variable(change: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_env({**REQUIRED, **change})


@pytest.mark.parametrize(
    ("value", "expected"), [(None, None), ("", None), ("  ", None), ("1", 1), ("40", 40)]
)
def test_max_rooms_is_optional_and_an_integer(value: str | None, expected: int | None) -> None:
    env = REQUIRED if value is None else {**REQUIRED, "ALICIA_MAX_ROOMS": value}
    assert Settings.from_env(env).max_rooms == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, "stderr"), ("", "stderr"), ("stderr", "stderr"), ("capture", "capture")],
)
def test_native_logs_is_stderr_unless_capture(value: str | None, expected: str) -> None:
    env = REQUIRED if value is None else {**REQUIRED, "ALICIA_NATIVE_LOGS": value}
    assert Settings.from_env(env).native_logs == expected


def test_settings_are_frozen() -> None:
    s = Settings.from_env(REQUIRED)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.llm_model = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("env", "voice_mode", "voice"),
    [
        ({}, None, False),
        ({"ALICIA_VOICE": "offline"}, "offline", True),
        ({"ALICIA_VOICE": "off"}, None, False),
        ({"ALICIA_STT": "livekit.plugins.deepgram:STT"}, None, True),
    ],
)
def test_alicia_voice_selects_offline_speech(
    env: dict[str, str], voice_mode: str | None, voice: bool
) -> None:
    settings = Settings.from_env({**REQUIRED, **env})
    assert (settings.voice_mode, settings.voice) == (voice_mode, voice)


def test_an_unknown_voice_mode_is_refused_by_name() -> None:
    with pytest.raises(SettingsError, match="ALICIA_VOICE must be offline or off"):
        Settings.from_env({**REQUIRED, "ALICIA_VOICE": "cloud"})


def test_failover_needs_storage_an_agent_name_and_text_rooms() -> None:
    base = {
        "LIVEKIT_URL": "ws://127.0.0.1:7880",
        "LIVEKIT_API_KEY": "k",
        "LIVEKIT_API_SECRET": "s",
        "LLM_BASE_URL": "http://127.0.0.1:8000/v1",
        "LLM_MODEL": "m",
        "ALICIA_FAILOVER": "true",
    }
    with pytest.raises(SettingsError, match="DATABASE_URL and ALICIA_AGENT_NAME"):
        Settings.from_env(base)
    ok = {**base, "DATABASE_URL": "postgresql+asyncpg://u@h/d", "ALICIA_AGENT_NAME": "alicia"}
    settings = Settings.from_env(ok)
    assert (settings.failover, settings.heartbeat_interval_s, settings.heartbeat_timeout_s) == (
        True,
        0.25,
        1.5,
    )
    voice = Settings.from_env({**ok, "ALICIA_VOICE": "offline"})  # voice rooms fail over too
    assert voice.failover and voice.voice
    watch = WatchSettings.from_env({**ok, "ALICIA_WATCH_PORT": "0"})
    assert (watch.agent_name, watch.port, watch.heartbeat_timeout_s) == ("alicia", 0, 1.5)
    with pytest.raises(SettingsError, match="ALICIA_AGENT_NAME"):
        WatchSettings.from_env({k: v for k, v in ok.items() if k != "ALICIA_AGENT_NAME"})


def test_voice_turns_end_on_the_end_of_turn_model_unless_told_otherwise() -> None:
    s = Settings.from_env(REQUIRED)
    assert s.turn_detection == "model"
    assert (s.endpointing_min_delay_s, s.endpointing_max_delay_s) == (0.8, 1.5)
    told = Settings.from_env(
        {
            **REQUIRED,
            "ALICIA_TURN_DETECTION": "VAD",
            "ALICIA_ENDPOINTING_MIN_DELAY": "0.3",
            "ALICIA_ENDPOINTING_MAX_DELAY": "2",
        }
    )
    assert (told.turn_detection, told.endpointing_min_delay_s) == ("vad", 0.3)
    assert told.endpointing_max_delay_s == 2.0
    plugin = {**REQUIRED, "ALICIA_TURN_DETECTION": "my.detectors:Detector"}
    assert Settings.from_env(plugin).turn_detection == "my.detectors:Detector"
    with pytest.raises(SettingsError, match="ALICIA_TURN_DETECTION"):
        Settings.from_env({**REQUIRED, "ALICIA_TURN_DETECTION": "stt"})
    with pytest.raises(SettingsError, match="ALICIA_ENDPOINTING_MAX_DELAY"):
        Settings.from_env({**REQUIRED, "ALICIA_ENDPOINTING_MAX_DELAY": "0.2"})
    assert s.false_interruption_timeout_s == 2.0
    with pytest.raises(SettingsError, match="ALICIA_FALSE_INTERRUPTION_TIMEOUT"):
        Settings.from_env({**REQUIRED, "ALICIA_FALSE_INTERRUPTION_TIMEOUT": "-1"})
