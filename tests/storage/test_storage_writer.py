"""The storage writer against real databases: PostgreSQL (the session's real server)
and SQLite (embedded), same tests, same migrations: every stored type round trips,
redelivery, ordering, superseded steps, statuses, unstorable values, batches, open_sink.

Each backend gets its own fresh database per module, emptied before every test
(``tests/storage/conftest.py``). Spilling: ``test_storage_spill.py``; an answer's
figures: ``test_storage_figures.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import math
from pathlib import Path

import pytest

from alicia.agent.engine.sink import NullSink, StepSink
from alicia.agent.storage.rows import build_rows
from alicia.agent.storage.writer import StorageWriter, WriterOptions, open_sink
from alicia.protocol import (
    AssistantMessage,
    AssistantSentence,
    ControlStop,
    StartAnswer,
    ToolUseRequest,
    UserMessage,
)
from tests.storage.traffic import CID, MODEL, Conv, script, snapshot, step, table, write
from tests.support.db import execute, fetch

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_every_stored_type_round_trips(url: str, options: WriterOptions) -> None:
    c = Conv()
    envs = script(c)
    before = dt.datetime.now(dt.UTC)
    await write(url, options, envs)

    [conv] = await table(url, "alicia_conversations")
    assert conv["id"] == CID and conv["livekit_room_name"] == CID
    assert conv["last_client_stanza_id"] == c.client_n == 3
    assert conv["last_server_stanza_id"] == c.server_n == -16
    assert conv["preferences"] == {
        "features": ["streaming", "reasoning_step_display"],
        "preferredLanguage": "en-US",
        "device": "web",
    }
    assert conv["status"] == "active" and conv["deleted_at"] is None

    msgs = {m["id"]: m for m in await table(url, "alicia_messages")}
    assert sorted(msgs) == ["msg_a1", "msg_a2", "msg_t2", "msg_u1"]
    u1, a1, t2, a2 = msgs["msg_u1"], msgs["msg_a1"], msgs["msg_t2"], msgs["msg_a2"]
    assert (u1["message_role"], u1["contents"], u1["previous_id"]) == (
        "user",
        "Italian food in NYC?",
        None,
    )
    assert u1["sequence_number"] == 2 and u1["completion_status"] == "completed"
    assert (a1["message_role"], a1["previous_id"], a1["model"]) == ("assistant", "msg_u1", MODEL)
    assert a1["contents"] == "Try Carbone. It is on Thompson Street. Book ahead."
    assert a1["completion_status"] == "completed" and a1["completed_at"] >= a1["sent_at"]
    assert a1["sequence_number"] == 9
    assert (t2["message_role"], t2["contents"], t2["previous_id"]) == (
        "user",
        "what about pizza",
        "msg_a1",
    )
    assert (a2["contents"], a2["completion_status"], a2["model"]) == (
        "Try Joe's Pizza.",
        "completed",
        MODEL,
    )
    for m in msgs.values():
        assert m["placeholder"] is False and m["deleted_at"] is None
        assert before <= m["sent_at"] <= dt.datetime.now(dt.UTC)

    steps = await table(url, "alicia_reasoning_steps", "message_id, sequence_number")
    assert [(s["id"], s["message_id"], s["sequence_number"], s["total_steps"]) for s in steps] == [
        ("rs_msg_t2_1", "msg_t2", 1, None),
        ("rs_msg_u1_1", "msg_u1", 1, 3),
        ("rs_msg_u1_2", "msg_u1", 2, 3),
        ("rs_msg_u1_3", "msg_u1", 3, 3),
    ]
    assert steps[3]["content"] == "Carbone is the best match."
    assert {s["conversation_id"] for s in steps} == {CID}

    sentences = await table(url, "alicia_sentences", "sentence_sequence_number")
    assert [(s["sentence_sequence_number"], s["is_final"]) for s in sentences] == [
        (1, False),
        (2, False),
        (3, True),
    ]

    tools = await table(url, "alicia_tool_uses")
    assert [
        (t["id"], t["message_id"], t["sequence_number"], t["tool_name"], t["status"]) for t in tools
    ] == [
        ("toolreq_1", "msg_u1", 1, "web_search", "success"),
        ("toolreq_2", "msg_u1", 2, "calculator", "error"),
    ]
    ok, failed = tools
    assert ok["tool_arguments"] == {"query": "italian nyc", "limit": 3, "filters": {"open": True}}
    assert ok["tool_result"] == {"hits": ["Carbone", "Lilia"]}
    assert ok["execution"] == "server" and ok["error_message"] is None
    assert failed["tool_result"] is None
    assert (failed["error_code"], failed["error_message"]) == (
        "execution_error",
        "division by zero",
    )
    assert failed["completed_at"] >= failed["sent_at"]


async def test_streamed_answer_stays_streaming_until_its_final_sentence(
    url: str, options: WriterOptions
) -> None:
    c = Conv()
    head = [
        c.client(UserMessage(id="msg_u1", conversation_id=CID, content="hi")),
        c.server(StartAnswer(id="msg_a1", previous_id="msg_u1", conversation_id=CID)),
        c.server(
            AssistantSentence(previous_id="msg_a1", conversation_id=CID, sequence=1, text="Hello")
        ),
        c.server(
            AssistantSentence(previous_id="msg_a1", conversation_id=CID, sequence=2, text=" there,")
        ),
    ]
    async with StorageWriter(url, options) as w:
        for env in head:
            w.submit(env)
        await w.flush(timeout=30)
        [a1] = await fetch(url, "SELECT * FROM alicia_messages WHERE id = 'msg_a1'")
        assert (a1["completion_status"], a1["contents"], a1["completed_at"]) == (
            "streaming",
            "Hello there,",
            None,
        )
        w.submit(
            c.server(
                AssistantSentence(
                    previous_id="msg_a1",
                    conversation_id=CID,
                    sequence=3,
                    text="friend.",
                    is_final=True,
                )
            )
        )
        await w.flush(timeout=30)
    [a1] = await fetch(url, "SELECT * FROM alicia_messages WHERE id = 'msg_a1'")
    assert (a1["completion_status"], a1["contents"]) == ("completed", "Hello there, friend.")
    assert a1["model"] is None  # no meta.model on this StartAnswer


async def test_redelivered_envelopes_are_stored_once(url: str, options: WriterOptions) -> None:
    envs = script(Conv())
    await write(url, options, envs)
    first = await snapshot(url)
    assert sum(len(rows) for rows in first.values()) == 1 + 4 + 3 + 4 + 2

    # Same envelopes again: in one batch with themselves, then by a second writer.
    async with StorageWriter(url, options) as w:
        for env in [*envs, *envs]:
            w.submit(env)
        await w.flush(timeout=30)
        assert w.stats.written == 2 * len(envs)
    await write(url, options, list(reversed(envs)))
    assert await snapshot(url) == first


async def test_steps_before_their_user_message_are_kept(url: str, options: WriterOptions) -> None:
    c = Conv()
    async with StorageWriter(url, options) as w:
        w.submit(c.server(step("msg_late", 1, "thinking before the message is stored")))
        w.submit(c.server(step("msg_late", 2, "still thinking")))
        await w.flush(timeout=30)
        [holder] = await table(url, "alicia_messages")
        assert (holder["id"], holder["placeholder"], holder["completion_status"]) == (
            "msg_late",
            True,
            "pending",
        )
        w.submit(c.client(UserMessage(id="msg_late", conversation_id=CID, content="the question")))
        await w.flush(timeout=30)
    [msg] = await table(url, "alicia_messages")
    assert (msg["placeholder"], msg["contents"], msg["message_role"], msg["sequence_number"]) == (
        False,
        "the question",
        "user",
        1,
    )
    assert msg["completion_status"] == "completed"
    steps = await table(url, "alicia_reasoning_steps", "sequence_number")
    assert [(s["message_id"], s["sequence_number"]) for s in steps] == [
        ("msg_late", 1),
        ("msg_late", 2),
    ]


async def test_reused_step_index_supersedes_and_keeps_both(
    url: str, options: WriterOptions
) -> None:
    c = Conv()
    async with StorageWriter(url, options) as w:
        w.submit(c.client(UserMessage(id="msg_u1", conversation_id=CID, content="q")))
        w.submit(c.server(step("msg_u1", 1, "first chain", sid="rs_old_1")))
        w.submit(c.server(step("msg_u1", 2, "first chain, step 2", sid="rs_old_2")))
        await w.flush(timeout=30)
        # A restarted worker that was not seeded reuses index 1 with a new id; in the same
        # batch a duplicate pair too (the later one wins).
        w.submit(c.server(step("msg_u1", 1, "second chain", sid="rs_new_1")))
        w.submit(c.server(step("msg_u1", 3, "dup a", sid="rs_dup_a")))
        w.submit(c.server(step("msg_u1", 3, "dup b", sid="rs_dup_b")))
        await w.flush(timeout=30)
        assert w.stats.dead_lettered == 0
    rows = {r["id"]: r for r in await table(url, "alicia_reasoning_steps")}
    assert sorted(rows) == ["rs_dup_a", "rs_dup_b", "rs_new_1", "rs_old_1", "rs_old_2"]
    live = sorted((r["sequence_number"], r["id"]) for r in rows.values() if r["deleted_at"] is None)
    assert live == [(1, "rs_new_1"), (2, "rs_old_2"), (3, "rs_dup_b")]
    assert rows["rs_old_1"]["deleted_at"] is not None
    assert rows["rs_dup_a"]["deleted_at"] is not None


async def test_stop_and_partial_answers_are_marked_failed(url: str, options: WriterOptions) -> None:
    c = Conv()
    envs = [
        c.client(UserMessage(id="msg_u1", conversation_id=CID, content="long story please")),
        c.server(StartAnswer(id="msg_a1", previous_id="msg_u1", conversation_id=CID)),
        c.server(
            AssistantSentence(previous_id="msg_a1", conversation_id=CID, sequence=1, text="Once")
        ),
        c.client(ControlStop(conversation_id=CID)),  # no target: the latest streaming answer
        c.server(
            AssistantSentence(
                previous_id="msg_a1", conversation_id=CID, sequence=2, text="upon.", is_final=True
            )
        ),
        c.client(UserMessage(id="msg_u2", conversation_id=CID, content="again")),
        c.server(
            AssistantMessage(
                id="msg_a2",
                conversation_id=CID,
                content="Once",
                previous_id="msg_u2",
                state="partial",
            )
        ),
        c.client(UserMessage(id="msg_u3", conversation_id=CID, content="short")),
        c.server(StartAnswer(id="msg_a3", previous_id="msg_u3", conversation_id=CID)),
        c.server(
            AssistantSentence(
                previous_id="msg_a3", conversation_id=CID, sequence=1, text="Done.", is_final=True
            )
        ),
        c.client(ControlStop(conversation_id=CID, target_id="msg_a3")),  # too late
    ]
    await write(url, options, envs)
    status = {
        m["id"]: (m["completion_status"], m["contents"])
        for m in await table(url, "alicia_messages")
        if m["message_role"] == "assistant"
    }
    assert status == {
        "msg_a1": ("failed", "Once upon."),
        "msg_a2": ("failed", "Once"),
        "msg_a3": ("completed", "Done."),
    }


async def test_unstorable_values_are_kept_not_refused(url: str, options: WriterOptions) -> None:
    c = Conv()
    envs = [
        c.server(step("msg_u1", 1, "nul\x00inside, surrogate \ud800 end")),
        c.server(
            ToolUseRequest(
                id="toolreq_x",
                tool_name="t\x00",
                parameters={"blob": b"\x00\x01", "nan": math.nan, "s": "a\x00b"},
                execution="client",
                previous_id="msg_u1",
            )
        ),
    ]
    w = await write(url, options, envs)
    assert w.stats.dead_lettered == 0
    [s] = await table(url, "alicia_reasoning_steps")
    assert s["content"] == "nul\ufffdinside, surrogate \ufffd end"
    [t] = await table(url, "alicia_tool_uses")
    assert t["tool_name"] == "t\ufffd" and t["status"] == "pending" and t["execution"] == "client"
    assert t["tool_arguments"] == {"blob": "AAE=", "nan": None, "s": "a\ufffdb"}
    assert t["conversation_id"] == CID  # from the envelope when the body has none


async def test_persistence_off_writes_nothing(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for off in (None, ""):
        sink = await open_sink(off)
        assert isinstance(sink, NullSink) and isinstance(sink, StepSink)
        for env in script(Conv()):
            sink.submit(env)
        assert await sink.last_step_index("msg_u1") == 0
        await sink.aclose()
    assert await snapshot(url) == {name: [] for name in await snapshot(url)}
    assert not (tmp_path / "home").exists()


async def test_open_sink_writes_and_closes(url: str, options: WriterOptions) -> None:
    sink = await open_sink(url, options)
    assert isinstance(sink, StorageWriter) and isinstance(sink, StepSink)
    env = Conv().server(step("msg_u1", 1, "x"))
    sink.submit(env)
    await sink.aclose()  # flushes
    assert [r["id"] for r in await table(url, "alicia_reasoning_steps")] == ["rs_msg_u1_1"]
    with pytest.raises(RuntimeError, match="closed"):
        sink.submit(env)
    await sink.aclose()  # idempotent


def test_build_rows_groups_a_batch() -> None:
    from alicia.agent.storage.spill import Item

    c = Conv()
    items = [Item(i + 1, 1_700_000_000.0 + i, env) for i, env in enumerate(script(c))]
    rows = build_rows(items)
    assert list(rows.convs) == [CID]
    assert rows.convs[CID][:2] == [3, -16]
    assert sorted(rows.messages) == ["msg_a1", "msg_a2", "msg_t2", "msg_u1"]
    assert len(rows.steps) == 4 and len(rows.sentences) == 3
    assert sorted(rows.tool_requests) == ["toolreq_1", "toolreq_2"]
    assert rows.tool_results["toolreq_2"]["status"] == "error"
    assert rows.steps[0][6] == dt.datetime.fromtimestamp(1_700_000_003.0, dt.UTC)
    assert json.dumps(rows.convs[CID][2])  # preferences are JSON-safe


async def test_large_batches_redelivered_or_reusing_an_index(
    url: str, options: WriterOptions
) -> None:
    # Big batches take the COPY path on PostgreSQL; a row already stored, or a reused
    # (message, stepIndex), sends them down the ON CONFLICT / superseding paths.
    c = Conv()
    first = [
        c.server(step(f"msg_{i // 10}", i % 10 + 1, f"s{i}", sid=f"rs_{i}")) for i in range(300)
    ]
    await write(url, options, first)
    more = [c.server(step("msg_new", i + 1, f"n{i}", sid=f"rs_new_{i}")) for i in range(300)]
    reuse = c.server(step("msg_0", 1, "replaces rs_0", sid="rs_reuse"))
    async with StorageWriter(url, options) as w:
        for env in [*first, *more, reuse]:
            w.submit(env)
        await w.flush(timeout=30)
        assert w.stats.dead_lettered == 0 and w.stats.written == 601
    rows = await fetch(url, "SELECT id, deleted_at FROM alicia_reasoning_steps")
    assert len(rows) == 601
    deleted = sorted(r["id"] for r in rows if r["deleted_at"] is not None)
    assert deleted == ["rs_0"]


async def test_message_deleted_behind_the_writers_back(url: str, options: WriterOptions) -> None:
    c = Conv()
    async with StorageWriter(url, options) as w:
        w.submit(c.client(UserMessage(id="msg_gone", conversation_id=CID, content="q")))
        w.submit(c.server(step("msg_gone", 1, "a")))
        await w.flush(timeout=30)
        await execute(url, "DELETE FROM alicia_messages WHERE id = 'msg_gone'")  # cascades
        w.submit(c.server(step("msg_gone", 2, "b")))
        await w.flush(timeout=30)
        assert w.stats.dead_lettered == 0
    [msg] = await table(url, "alicia_messages")
    assert (msg["id"], msg["placeholder"]) == ("msg_gone", True)
    assert [r["id"] for r in await table(url, "alicia_reasoning_steps")] == ["rs_msg_gone_2"]


async def test_a_record_that_breaks_conversion_is_isolated(
    url: str, options: WriterOptions
) -> None:
    c = Conv()
    broken = UserMessage(id="msg_bad", conversation_id=CID, content=None)  # type: ignore[arg-type]
    envs = [c.server(step("msg_u1", i, f"s{i}")) for i in (1, 2)]
    async with StorageWriter(url, options) as w:
        for env in [envs[0], c.client(broken), envs[1]]:
            w.submit(env)
        await w.flush(timeout=30)
        assert w.stats.dead_lettered == 1
    assert [r["id"] for r in await table(url, "alicia_reasoning_steps")] == [
        "rs_msg_u1_1",
        "rs_msg_u1_2",
    ]


def test_writer_options_are_checked() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        WriterOptions(batch_size=0)
    with pytest.raises(ValueError, match="retry_max_s"):
        WriterOptions(retry_initial_s=2.0, retry_max_s=1.0)
    with pytest.raises(ValueError, match="negative"):
        WriterOptions(linger_s=-1)


async def test_the_writers_of_one_loop_share_one_pool_of_connections(
    url: str, options: WriterOptions
) -> None:
    """Twelve writers (a thread-executor worker's rooms) on one loop and one PostgreSQL
    database hold at most ``pool_size`` connections between them, not one each (100 rooms
    were Postgres's default ``max_connections``); the last one closed closes them."""
    if not url.startswith("postgresql"):
        pytest.skip("SQLite: a writer's own engine")
    count = "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database()"
    opts = dataclasses.replace(options, pool_size=2)
    writers = [await StorageWriter(url, opts).start() for _ in range(12)]
    try:
        for i, w in enumerate(writers):
            c = Conv(f"conv_pool_test_{i:09d}")
            w.submit(c.client(UserMessage(id=f"msg_pool_{i}", conversation_id=c.cid, content="hi")))
        await asyncio.gather(*(w.flush(timeout=30) for w in writers))
        held = (await fetch(url, count))[0]["n"] - 1  # not the counting connection
        assert 1 <= held <= 2, held
        stored = await fetch(url, "SELECT count(*) AS n FROM alicia_messages")
        assert stored[0]["n"] == 12
        for w in writers[:-1]:
            await w.aclose()
        assert (await fetch(url, count))[0]["n"] - 1 == held  # still the last one's
    finally:
        for w in writers:
            await w.aclose()
    assert (await fetch(url, count))[0]["n"] - 1 == 0
