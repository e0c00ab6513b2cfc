"""What the settings hand to livekit-agents' AgentServer: the warm job processes."""

from __future__ import annotations

import os

import pytest
from livekit.agents.worker import ServerEnvOption

from alicia.agent.rooms.worker import build_server
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
