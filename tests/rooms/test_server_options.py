"""What the settings hand to livekit-agents' AgentServer: the warm job processes, what
their forkserver imports once."""

from __future__ import annotations

import os

import pytest
from livekit.agents.worker import ServerEnvOption

from alicia.agent.rooms.forkserver import MODULE as FORKSERVER_PRELOAD
from alicia.agent.rooms.worker import build_server, forkserver_preloads
from alicia.agent.settings import Settings
from tests.rooms.test_turn_detection import REQUIRED


def test_idle_processes_are_livekit_agents_own_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUST_LOG", os.environ.get("RUST_LOG", "warn"))  # restored after
    monkeypatch.setenv("LIVEKIT_AGENTS_PRELOAD_LOCAL_INFERENCE", "0")
    default = build_server(Settings.from_env(REQUIRED))
    assert isinstance(default._num_idle_processes, ServerEnvOption)
    one = build_server(Settings.from_env({**REQUIRED, "ALICIA_IDLE_PROCESSES": "1"}))
    assert one._num_idle_processes == 1
    none = build_server(Settings.from_env({**REQUIRED, "ALICIA_IDLE_PROCESSES": "0"}))
    assert none._num_idle_processes == 0


def test_the_forkserver_imports_each_room_s_modules_once_for_every_job_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RUST_LOG", os.environ.get("RUST_LOG", "warn"))
    monkeypatch.setenv("LIVEKIT_AGENTS_PRELOAD_LOCAL_INFERENCE", "0")
    text = Settings.from_env(REQUIRED)
    assert forkserver_preloads(text) == [FORKSERVER_PRELOAD, "alicia.agent.rooms.worker"]
    assert build_server(text)._preload_modules == forkserver_preloads(text)
    voice = Settings.from_env({**REQUIRED, "ALICIA_VOICE": "offline"})
    assert forkserver_preloads(voice)[:2] == forkserver_preloads(text)
    assert {"alicia.agent.rooms.voice_agent", "alicia.agent.speech.offline"} <= set(
        forkserver_preloads(voice)
    )
