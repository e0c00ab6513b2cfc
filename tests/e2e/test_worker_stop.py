"""A worker stopped the way service managers stop it: SIGTERM to every process of its group
(``systemctl stop``, ``kill -TERM -<pgid>``), not to the worker alone. Its rooms drain as
on a SIGTERM to the worker: the turn under way is stored whole, no job is counted dead."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from alicia.harness import LiveKitServer, PostgresServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import AssistantSentence, ReasoningStep, UserMessage, new_id
from tests.e2e.worker import PROCESS_EXECUTOR, running_worker
from tests.support.db import fetch, new_database
from tests.support.livekit_rooms import protocol_client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


async def test_sigterm_to_the_worker_s_whole_group_drains_and_stores_its_rooms(
    livekit_server: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    tmp_path: Path,
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "group_stop")
    env = {
        "DATABASE_URL": url,
        "HOME": str(tmp_path / "home"),
        "ALICIA_LOAD_THRESHOLD": "inf",
        **PROCESS_EXECUTOR,  # the whole process group: the worker and its job processes
    }
    rooms = [new_id("conv") for _ in range(2)]
    spec = llm.spec("calculator_tool_call")
    async with (
        running_worker(livekit_server, llm.base_url, env=env, as_printed=True) as worker,
        protocol_client(livekit_server, rooms[0]) as a,
        protocol_client(livekit_server, rooms[1]) as b,
    ):
        for client, room in ((a, rooms[0]), (b, rooms[1])):
            llm.script("calculator_tool_call")
            await client.send(
                UserMessage(id=new_id("msg"), conversation_id=room, content=spec.user)
            )
        for client in (a, b):
            await client.wait_for(AssistantSentence, is_final=True)
        # Both turns answered; their steps may not all be written yet. Stop the whole
        # group, as systemd does, while both rooms' clients are still there.
        os.killpg(worker.proc.pid, signal.SIGTERM)
        await asyncio.wait_for(worker.proc.wait(), 30)
    log = worker.text()
    assert "exit code 255" not in log, worker.notable()
    assert log.count("storage writer closed") == 2, worker.notable()
    sent = {
        (s.id, s.previous_id, s.step_index, s.content) for c in (a, b) for s in c.of(ReasoningStep)
    }
    stored = await fetch(
        url, "SELECT id, message_id, sequence_number, content FROM alicia_reasoning_steps"
    )
    assert {(r["id"], r["message_id"], r["sequence_number"], r["content"]) for r in stored} == sent
    assert len(sent) == 2 * len(spec.steps + llm.spec("calculator_tool_followup").steps)
