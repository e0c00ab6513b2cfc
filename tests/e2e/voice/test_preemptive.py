"""Preemptive generation (livekit-agents' default) shows only the generation that is spoken.

An AgentSession with real offline speech (Silero VAD, pocketsphinx, espeak-ng), AliciaLLM
and the bridge, in a real livekit-server room, with storage on the real Postgres. A client
granted ``full`` speaks a question in two halves with a pause: the first half's final
transcript starts a preemptive generation (the whole recorded reasoning streams and is
cut into steps at once), the user goes on speaking, the session discards it and answers
the whole question. The model gets both requests; the client gets one chain of steps and
one StartAnswer, those of the spoken generation, and the stored steps are exactly those.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from livekit.agents import Agent, AgentSession

from alicia.agent.engine.remarks import CUES
from alicia.agent.engine.sink import REMARK_TYPE
from alicia.agent.session import AliciaLLM, attach_reasoning
from alicia.agent.speech import offline_speech
from alicia.harness import LiveKitServer, PostgresServer
from alicia.harness.recorded_llm import Play, RecordedLLM
from alicia.harness.speech import Microphone, speak
from alicia.protocol import (
    AssistantSentence,
    Commentary,
    ReasoningStep,
    StartAnswer,
    Transcription,
    new_id,
)
from bench.progress import SHAPE as PROGRESS
from bench.progress import pace
from tests.e2e.voice.helpers import agent_room, settings_for
from tests.support.db import fetch, new_database
from tests.support.livekit_rooms import ProtocolClient, joined

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SHAPE = "openrouter_gpt5_summary"
FIRST, SECOND = "how much sleep does an adult", "need every night to feel rested"
REASONS_S = 20.0
"""How long the remark test's model reasons: well past the endpointing delay (below)."""
PAUSE_S = 1.5
"""Longer than the VAD's end of speech (so the first half gets a final transcript and a
preemptive generation), much shorter than the endpointing delay (the turn goes on)."""


def two_halves() -> tuple[np.ndarray, int]:
    """The question in espeak-ng's voice, with a faintly noisy pause in the middle."""
    first, rate = speak(FIRST)
    second, _ = speak(SECOND)
    pause = np.random.default_rng(3).normal(0.0, 20.0, int(PAUSE_S * rate)).astype(np.int16)
    return np.concatenate([first, pause, second]), rate


@contextlib.asynccontextmanager
async def voice_app(
    server: LiveKitServer, llm: RecordedLLM, room: str, database_url: str
) -> AsyncIterator[None]:
    """An ordinary voice app (preemptive generation on, the default) with the bridge."""
    speech = offline_speech()
    async with agent_room(server, room) as r:
        model = AliciaLLM(model="recorded-model", base_url=llm.base_url, api_key="test")
        session: AgentSession[Any] = AgentSession(
            stt=speech.stt,
            vad=speech.vad,
            tts=speech.tts,
            llm=model,
            # Generous: the VAD runs in this process next to the client's audio and lags
            # on a loaded 2-core machine; the pause must not end the user's turn (at 6 s
            # a fresh-clone run committed the first half as a turn of its own: two answers,
            # and livekit-agents' "transcript arrives after turn has been committed").
            turn_handling={"endpointing": {"min_delay": 12.0, "max_delay": 15.0}},
        )
        assert session.options.preemptive_generation["enabled"]
        await session.start(Agent(instructions="Be brief."), room=r)
        bridge = await attach_reasoning(
            session, r, settings=settings_for(llm, DATABASE_URL=database_url)
        )
        try:
            yield
        finally:
            await bridge.aclose()
            await session.aclose()
            await model.aclose()


async def test_a_discarded_preemptive_generation_shows_and_stores_nothing(
    livekit_server: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    tmp_path: Path,
) -> None:
    spec = llm.spec(SHAPE)
    llm.route_model("recorded-model", SHAPE)
    url = await new_database("postgres", postgres_server, tmp_path, "preempt")
    room = f"preempt-{new_id('r')}"
    question, rate = two_halves()
    async with (
        voice_app(livekit_server, llm, room, url),
        joined(livekit_server, room, "alice") as r,
    ):
        client = ProtocolClient(r, room)
        await client.wait_for_agent()
        await client.handshake()
        mic = Microphone(r)
        await mic.start()
        await mic.say(question, rate)
        await client.wait_for(AssistantSentence, within=90.0, is_final=True)
        await asyncio.sleep(1.0)
        for _ in range(50):  # storage is asynchronous
            rows = await fetch(url, "SELECT content FROM alicia_reasoning_steps")
            if len(rows) >= len(spec.steps):
                break
            await asyncio.sleep(0.2)
    # The model was asked twice: the first half alone (discarded), then the whole question.
    asked = [str(body["messages"][-1]["content"]) for body in llm.requests]
    heard = [(t.text, t.final) for t in client.of(Transcription)]
    assert len(asked) >= 2 and len(asked[0]) < len(asked[-1]), (asked, heard)
    assert llm.served.count(SHAPE) == len(asked)
    # The client saw one generation: one chain of steps, one StartAnswer.
    steps = client.of(ReasoningStep)
    starts = client.of(StartAnswer)
    assert len(starts) == 1, (asked, heard, starts)
    (start,) = starts
    assert [s.content for s in steps] == list(spec.steps)
    assert [s.step_index for s in steps] == list(range(1, len(spec.steps) + 1))
    assert {s.previous_id for s in steps} == {start.previous_id}
    assert start.previous_id in {t.id for t in client.of(Transcription)}
    # What is stored is what was shown.
    stored = await fetch(
        url,
        "SELECT message_id, sequence_number, content FROM alicia_reasoning_steps "
        "WHERE deleted_at IS NULL ORDER BY sequence_number",
    )
    assert [(s["message_id"], s["sequence_number"], s["content"]) for s in stored] == [
        (s.previous_id, s.step_index, s.content) for s in steps
    ]


async def test_a_discarded_preemptive_generation_gets_no_remark(
    livekit_server: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    tmp_path: Path,
) -> None:
    """With a model that reasons for 20 s (past the 12 s endpointing delay, during which
    the spoken generation, started preemptively, reasons unheard), it gets progress remarks
    (``cue``, the default); the discarded one, still reasoning when it is dropped, none."""
    llm.route_model("recorded-model", Play(PROGRESS, chunk_delay=pace(REASONS_S)))
    url = await new_database("postgres", postgres_server, tmp_path, "preempt_remarks")
    room = f"preempt-remarks-{new_id('r')}"
    question, rate = two_halves()
    async with (
        voice_app(livekit_server, llm, room, url),
        joined(livekit_server, room, "alice") as r,
    ):
        client = ProtocolClient(r, room)
        await client.wait_for_agent()
        await client.handshake()
        mic = Microphone(r)
        await mic.start()
        await mic.say(question, rate)
        await client.wait_for(AssistantSentence, within=120.0, is_final=True)
    asked = [str(body["messages"][-1]["content"]) for body in llm.requests]
    assert len(asked) >= 2 and len(asked[0]) < len(asked[-1]), asked
    (start,) = client.of(StartAnswer)
    remarks = [c for c in client.of(Commentary) if c.comment_type == REMARK_TYPE]
    assert remarks, f"the spoken generation reasons for {REASONS_S} s"
    assert {c.target_id for c in remarks} == {start.previous_id}
    assert remarks[0].content == CUES[0]
