"""Persistence on, end to end: the real worker process (``python -m alicia.agent start``) with
``DATABASE_URL`` set to a fresh, unmigrated database on the real Postgres, a client in a
real livekit-server room, the recorded LLM over HTTP. What the client received must be
exactly what is stored, and the analytics views must count it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from alicia.harness import LiveKitServer, PostgresServer
from alicia.harness.recorded_llm import RecordedLLM
from alicia.protocol import (
    AssistantSentence,
    ReasoningStep,
    StartAnswer,
    ToolUseRequest,
    UserMessage,
    new_id,
)
from tests.e2e.worker import PROCESS_EXECUTOR, running_worker
from tests.support.db import fetch, new_database
from tests.support.livekit_rooms import protocol_client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


async def test_a_turn_through_the_real_worker_is_stored_exactly(
    livekit_server: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    tmp_path: Path,
) -> None:
    url = await new_database("postgres", postgres_server, tmp_path, "worker")
    home = tmp_path / "home"
    env = {
        "DATABASE_URL": url,
        "HOME": str(home),  # the default spill root lives under it
        "ALICIA_STEP_MAX_DELAY": "0.2",
        "ALICIA_LOAD_THRESHOLD": "inf",
        **PROCESS_EXECUTOR,  # stored from the room's job process, as by default
    }
    room = new_id("conv")
    call, follow = llm.spec("calculator_tool_call"), llm.spec("calculator_tool_followup")
    async with running_worker(livekit_server, llm.base_url, env=env) as worker:
        try:
            async with protocol_client(livekit_server, room) as alice:
                llm.script("calculator_tool_call")
                question = UserMessage(id=new_id("msg"), conversation_id=room, content=call.user)
                await alice.send(question)
                await alice.wait_for(AssistantSentence, is_final=True)
            # The writer is asynchronous: wait (bounded) until the answer is stored.
            deadline = time.monotonic() + 30
            while await answer_status(url) != "completed":
                assert time.monotonic() < deadline, worker.log()
                await asyncio.sleep(0.2)
        except BaseException as exc:
            raise AssertionError(f"{exc!r}\n--- worker log ---\n{worker.log()}") from exc

    steps: list[ReasoningStep] = alice.of(ReasoningStep)
    assert len(steps) == len(call.steps) + len(follow.steps)
    stored = await fetch(
        url,
        "SELECT id, message_id, conversation_id, sequence_number, content, deleted_at "
        "FROM alicia_reasoning_steps ORDER BY sequence_number",
    )
    assert [(s["id"], s["message_id"], s["sequence_number"], s["content"]) for s in stored] == [
        (s.id, s.previous_id, s.step_index, s.content) for s in steps
    ]
    assert {s["conversation_id"] for s in stored} == {room}
    assert all(s["deleted_at"] is None for s in stored)

    start: StartAnswer = alice.of(StartAnswer)[0]
    sentences: list[AssistantSentence] = alice.of(AssistantSentence)
    msgs = {m["id"]: m for m in await fetch(url, "SELECT * FROM alicia_messages")}
    assert set(msgs) == {question.id, start.id}
    user, answer = msgs[question.id], msgs[start.id]
    assert (user["message_role"], user["contents"], user["placeholder"]) == (
        "user",
        call.user,
        False,
    )
    assert (answer["message_role"], answer["previous_id"], answer["model"]) == (
        "assistant",
        question.id,
        "recorded-model",
    )
    assert answer["contents"].split() == " ".join(s.text for s in sentences).split()
    assert answer["contents"].split() == follow.answer.split()
    # The provider's usage, summed over both rounds, and the time to first reasoning.
    assert (answer["prompt_tokens"], answer["completion_tokens"]) == (212 + 305, 59 + 72)
    assert answer["reasoning_tokens"] == 0  # these recordings report no reasoning tokens
    assert 0 <= answer["first_reasoning_ms"] < 30_000
    assert user["prompt_tokens"] is None

    request: ToolUseRequest = alice.of(ToolUseRequest)[0]
    [tool] = await fetch(url, "SELECT * FROM alicia_tool_uses")
    assert (tool["id"], tool["message_id"], tool["tool_name"], tool["status"]) == (
        request.id,
        question.id,
        "calculator",
        "success",
    )
    assert tool["tool_arguments"] == request.parameters
    assert tool["tool_result"] == {"expression": "(17 * 23) + 4.0", "value": 395}

    [conv] = await fetch(url, "SELECT * FROM alicia_conversations")
    assert conv["id"] == room
    assert conv["last_client_stanza_id"] == alice.last_sent
    assert conv["last_server_stanza_id"] <= min(e.stanza_id for e in alice.box)

    [daily] = await fetch(url, "SELECT * FROM alicia_model_daily")
    assert (daily["model"], daily["answers"], daily["steps"]) == ("recorded-model", 1, len(steps))
    assert (daily["tool_calls"], daily["tool_failures"]) == (1, 0)
    assert daily["avg_ms_to_first_step"] is not None and daily["avg_ms_to_answer"] > 0
    # A clean shutdown left nothing behind in the spill area.
    assert not list(home.glob(".local/state/alicia/spill/*/*/*.seg"))


async def answer_status(url: str) -> str | None:
    """The stored answer's completion status (None until the worker has migrated/written)."""
    tables = await fetch(
        url,
        "SELECT count(*) AS n FROM information_schema.tables "
        "WHERE table_name = 'alicia_alembic_version'",
    )
    if not tables[0]["n"]:
        return None
    rows = await fetch(
        url, "SELECT completion_status FROM alicia_messages WHERE message_role = 'assistant'"
    )
    return str(rows[0]["completion_status"]) if rows else None


async def test_a_message_id_held_in_storage_is_refused_with_204_where_memory_has_forgotten(
    livekit_server: LiveKitServer,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    tmp_path: Path,
) -> None:
    """Message ids are unique in storage. A UserMessage reusing an id that another
    conversation stored (so outside this room's in-memory window, as after 256 turns or a
    takeover) gets ErrorMessage 204 to its sender, starts no turn and stores nothing."""
    from alicia.protocol import ErrorMessage

    url = await new_database("postgres", postgres_server, tmp_path, "ids")
    env = {"DATABASE_URL": url, "ALICIA_LOAD_THRESHOLD": "inf"}
    spec = llm.spec("deepseek_reasoning_content")
    taken = new_id("msg")
    async with running_worker(livekit_server, llm.base_url, env=env) as worker:
        first, second = new_id("conv"), new_id("conv")
        async with protocol_client(livekit_server, first) as alice:
            llm.script("deepseek_reasoning_content")
            await alice.send(UserMessage(id=taken, conversation_id=first, content=spec.user))
            await alice.wait_for(AssistantSentence, is_final=True)
        deadline = time.monotonic() + 30
        while not await stored_ids(url, taken):  # the schema comes with the first write
            assert time.monotonic() < deadline, worker.log()
            await asyncio.sleep(0.2)
        before = len(llm.requests)
        async with protocol_client(livekit_server, second, "mallory") as mallory:
            await mallory.send(UserMessage(id=taken, conversation_id=second, content="Mine now."))
            error = await mallory.wait_for(ErrorMessage, within=10.0)
    assert error.code == 204 and taken in error.message, error
    assert not mallory.of(StartAnswer) and len(llm.requests) == before
    rows = await fetch(
        url, f"SELECT conversation_id, contents FROM alicia_messages WHERE id = '{taken}'"
    )
    assert rows == [{"conversation_id": first, "contents": spec.user}]
    # The first room's answer has the stream's usage, reasoning tokens too: asked for
    # (stream_options.include_usage), as real servers send it only then.
    answers = await fetch(
        url,
        "SELECT prompt_tokens, completion_tokens, reasoning_tokens FROM alicia_messages"
        f" WHERE conversation_id = '{first}' AND message_role = 'assistant'",
    )
    assert answers == [{"prompt_tokens": 19, "completion_tokens": 172, "reasoning_tokens": 130}]


async def stored_ids(url: str, message_id: str) -> list[dict[str, object]]:
    """The stored message rows with ``message_id`` (none before the schema exists)."""
    from sqlalchemy.exc import SQLAlchemyError

    try:
        return await fetch(url, f"SELECT id FROM alicia_messages WHERE id = '{message_id}'")
    except SQLAlchemyError:
        return []
