"""The storage writer against real databases: PostgreSQL (the session's real server)
and SQLite (embedded), same tests, same migrations.

Each backend gets its own fresh database per module, emptied before every test.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from storage_db import clear, execute, fetch, new_database

from alicia.agent.engine.sink import META_FIRST_REASONING_MS, META_USAGE, NullSink, StepSink
from alicia.agent.storage.rows import build_rows
from alicia.agent.storage.spill import decode_items
from alicia.agent.storage.writer import StorageWriter, WriterOptions, migrate, open_sink
from alicia.harness import free_port
from alicia.protocol import (
    Acknowledgement,
    AssistantMessage,
    AssistantSentence,
    Body,
    Configuration,
    ControlStop,
    Envelope,
    ReasoningStep,
    StartAnswer,
    ToolUseRequest,
    ToolUseResult,
    Transcription,
    UserMessage,
    envelope,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CID = "conv_storage_test_000001"
MODEL = "qwen3-30b-a3b-thinking"


@pytest.fixture(scope="module", params=["postgres", "sqlite"])
async def migrated(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    pg = request.getfixturevalue("postgres_server") if request.param == "postgres" else None
    url = await new_database(request.param, pg, tmp_path_factory.mktemp("db"), "storage")
    await migrate(url)
    return url


@pytest.fixture
async def url(migrated: str) -> str:
    await clear(migrated)
    return migrated


@pytest.fixture
def options(tmp_path: Path) -> WriterOptions:
    return WriterOptions(
        spill_dir=tmp_path / "spill",
        linger_s=0.005,
        retry_initial_s=0.05,
        retry_max_s=0.2,
        close_timeout_s=2.0,
        migrate=False,
    )


def unreachable(url: str, tmp: Path) -> str:
    """A URL of the same backend that cannot be opened."""
    if url.startswith("sqlite"):
        return f"sqlite+aiosqlite:///{tmp / 'missing-dir' / 'x.db'}"
    return f"postgresql+asyncpg://alicia@127.0.0.1:{free_port()}/nowhere"


class Conv:
    """Envelopes of one conversation with both stanza counters."""

    def __init__(self, cid: str = CID) -> None:
        self.cid = cid
        self.server_n = 0
        self.client_n = 0

    def server(self, body: Body, meta: dict[str, Any] | None = None) -> Envelope[Any]:
        self.server_n -= 1
        return envelope(body, stanza_id=self.server_n, conversation_id=self.cid, meta=meta)

    def client(self, body: Body) -> Envelope[Any]:
        self.client_n += 1
        return envelope(body, stanza_id=self.client_n, conversation_id=self.cid)


def step(prev: str, index: int, text: str, *, total: int | None = None, sid: str = "") -> Body:
    return ReasoningStep(
        id=sid or f"rs_{prev}_{index}",
        conversation_id=CID,
        previous_id=prev,
        content=text,
        step_index=index,
        total_steps=total,
    )


def script(c: Conv) -> list[Envelope[Any]]:
    """Two turns covering every stored type: a typed one streamed with tools, a voice one."""
    return [
        c.client(
            Configuration(
                conversation_id=CID,
                last_sequence_seen=0,
                features=["streaming", "reasoning_step_display"],
                preferred_language="en-US",
                device="web",
            )
        ),
        c.server(Configuration(conversation_id=CID, features=["streaming", "reasoning_steps"])),
        c.client(UserMessage(id="msg_u1", conversation_id=CID, content="Italian food in NYC?")),
        c.server(step("msg_u1", 1, "The user wants Italian food in New York.", total=3)),
        c.server(step("msg_u1", 2, "Search for well rated places.", total=3)),
        c.server(
            ToolUseRequest(
                id="toolreq_1",
                tool_name="web_search",
                parameters={"query": "italian nyc", "limit": 3, "filters": {"open": True}},
                execution="server",
                conversation_id=CID,
                previous_id="msg_u1",
            )
        ),
        c.server(
            ToolUseResult(
                request_id="toolreq_1", success=True, result={"hits": ["Carbone", "Lilia"]}
            )
        ),
        c.server(
            ToolUseRequest(
                id="toolreq_2",
                tool_name="calculator",
                parameters={"expression": "1/0"},
                execution="server",
                conversation_id=CID,
                previous_id="msg_u1",
            )
        ),
        c.server(
            ToolUseResult(
                request_id="toolreq_2",
                success=False,
                error_code="execution_error",
                error_message="division by zero",
            )
        ),
        c.server(step("msg_u1", 3, "Carbone is the best match.", total=3)),
        c.server(
            StartAnswer(id="msg_a1", previous_id="msg_u1", conversation_id=CID),
            meta={"model": MODEL},
        ),
        c.server(
            AssistantSentence(
                previous_id="msg_a1", conversation_id=CID, sequence=1, text="Try Carbone."
            )
        ),
        c.server(
            AssistantSentence(
                previous_id="msg_a1",
                conversation_id=CID,
                sequence=2,
                text="It is on Thompson Street.",
            )
        ),
        c.server(
            AssistantSentence(
                previous_id="msg_a1",
                conversation_id=CID,
                sequence=3,
                text="Book ahead.",
                is_final=True,
            )
        ),
        c.client(Acknowledgement(conversation_id=CID, last_seen_stanza_id=14)),
        c.server(Transcription(id="msg_t2", conversation_id=CID, text="what about", final=False)),
        c.server(
            Transcription(
                id="msg_t2",
                conversation_id=CID,
                text="what about pizza",
                previous_id="msg_a1",
                final=True,
            )
        ),
        c.server(step("msg_t2", 1, "Pizza: Joe's is a classic.")),
        c.server(
            AssistantMessage(
                id="msg_a2", conversation_id=CID, content="Try Joe's Pizza.", previous_id="msg_t2"
            ),
            meta={"model": MODEL},
        ),
    ]


async def write(url: str, options: WriterOptions, envs: Sequence[Envelope[Any]]) -> StorageWriter:
    async with StorageWriter(url, options) as w:
        for env in envs:
            w.submit(env)
        await w.flush(timeout=30)
    return w


async def table(url: str, name: str, order: str = "id") -> list[dict[str, Any]]:
    return await fetch(url, f"SELECT * FROM {name} ORDER BY {order}")


async def snapshot(url: str, *, times: bool = True) -> dict[str, list[dict[str, Any]]]:
    """Every table, without ``updated_at`` (and without any timestamp unless ``times``)."""
    out = {}
    for name, order in [
        ("alicia_conversations", "id"),
        ("alicia_messages", "id"),
        ("alicia_sentences", "message_id, sentence_sequence_number"),
        ("alicia_reasoning_steps", "id"),
        ("alicia_tool_uses", "id"),
    ]:
        rows = await table(url, name, order)
        out[name] = [
            {k: v for k, v in r.items() if k != "updated_at" and (times or not k.endswith("_at"))}
            for r in rows
        ]
    return out


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


async def test_last_step_index_counts_stored_queued_and_spilled(
    url: str, options: WriterOptions, tmp_path: Path
) -> None:
    c = Conv()
    await write(url, options, [c.server(step("msg_u1", i, f"s{i}")) for i in (1, 2, 3)])
    async with StorageWriter(url, options) as fresh:  # knows nothing in memory
        assert await fresh.last_step_index("msg_u1") == 3
        assert await fresh.last_step_index("msg_other") == 0

    # Database unreachable: the answer comes from what is queued, without waiting long.
    down = WriterOptions(
        spill_dir=tmp_path / "down", retry_initial_s=0.05, query_timeout_s=0.5, close_timeout_s=0.2
    )
    async with StorageWriter(unreachable(url, tmp_path), down) as w:
        for i in (4, 5):
            w.submit(c.server(step("msg_u1", i, f"s{i}")))
        assert await w.last_step_index("msg_u1") == 5
    # ...and a writer that adopts those spilled records knows them before replaying them.
    async with StorageWriter(unreachable(url, tmp_path), down) as again:
        assert await again.last_step_index("msg_u1") == 5


async def test_close_spills_and_the_next_writer_replays(
    url: str, options: WriterOptions, tmp_path: Path
) -> None:
    envs = script(Conv())
    spill = tmp_path / "shared-spill"
    down = WriterOptions(spill_dir=spill, retry_initial_s=0.05, close_timeout_s=0.3)
    async with StorageWriter(unreachable(url, tmp_path), down) as w:
        for env in envs:
            w.submit(env)
    assert w.stats.written == 0 and w.stats.spilled == len(envs)
    segments = list(spill.glob("*/*.seg"))
    assert len(segments) == 1
    replay = decode_items(segments[0].read_bytes())
    assert [it.env for it in replay] == envs

    async with StorageWriter(url, WriterOptions(spill_dir=spill, linger_s=0.005)) as w2:
        await w2.flush(timeout=30)
        assert w2.stats.replayed == len(envs)
    assert not list(spill.glob("*/*.seg"))
    replayed = await snapshot(url, times=False)
    await clear(url)
    await write(url, options, envs)  # the same envelopes written directly
    assert await snapshot(url, times=False) == replayed


async def test_refused_record_goes_to_dead_letter_and_the_rest_is_stored(
    url: str, options: WriterOptions
) -> None:
    # A rule the writer cannot know about, added by an operator: refuses one record.
    if url.startswith("sqlite"):
        ddl = (
            "CREATE TRIGGER poison BEFORE INSERT ON alicia_reasoning_steps "
            "WHEN NEW.content = 'POISON' BEGIN SELECT RAISE(ABORT, 'poison'); END"
        )
        undo = "DROP TRIGGER poison"
    else:
        ddl = "ALTER TABLE alicia_reasoning_steps ADD CONSTRAINT poison CHECK (content <> 'POISON')"
        undo = "ALTER TABLE alicia_reasoning_steps DROP CONSTRAINT poison"
    await execute(url, ddl)
    try:
        c = Conv()
        envs = [c.server(step("msg_u1", i, "POISON" if i == 7 else f"s{i}")) for i in range(1, 11)]
        w = await write(url, options, envs)
    finally:
        await execute(url, undo)
    assert w.stats.dead_lettered == 1
    stored = [
        r["sequence_number"] for r in await table(url, "alicia_reasoning_steps", "sequence_number")
    ]
    assert stored == [1, 2, 3, 4, 5, 6, 8, 9, 10]
    assert options.spill_dir is not None
    [dead] = list((options.spill_dir / "dead-letter").glob("*.seg"))
    [item] = decode_items(dead.read_bytes())
    assert item.env == envs[6]


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


def figures(
    prompt: Any = 120, completion: Any = 80, reasoning: Any = 64, first_ms: Any = 812.5
) -> dict[str, Any]:
    """The storage-only meta the worker adds to an answer's last stored envelope."""
    return {
        "model": MODEL,
        META_USAGE: {
            "promptTokens": prompt,
            "completionTokens": completion,
            "reasoningTokens": reasoning,
        },
        META_FIRST_REASONING_MS: first_ms,
    }


FIGURES_SQL = (
    "SELECT id, prompt_tokens, completion_tokens, reasoning_tokens, first_reasoning_ms, "
    "contents, completion_status, placeholder FROM alicia_messages "
    "WHERE message_role = 'assistant' ORDER BY id"
)


async def test_answer_usage_and_time_to_first_reasoning_are_stored(
    url: str, options: WriterOptions
) -> None:
    c = Conv()
    async with StorageWriter(url, options) as w:
        # Streamed: StartAnswer and sentences stored first; the figures come later, on the
        # answer's AssistantMessage, when its row is no placeholder any more.
        for env in [
            c.client(UserMessage(id="msg_u1", conversation_id=CID, content="q1")),
            c.server(
                StartAnswer(id="msg_a1", previous_id="msg_u1", conversation_id=CID),
                meta={"model": MODEL},
            ),
            c.server(
                AssistantSentence(
                    previous_id="msg_a1", conversation_id=CID, sequence=1, text="A.", is_final=True
                )
            ),
        ]:
            w.submit(env)
        await w.flush(timeout=30)
        w.submit(
            c.server(
                AssistantMessage(
                    id="msg_a1", conversation_id=CID, content="A.", previous_id="msg_u1"
                ),
                meta=figures(),
            )
        )
        # Not streamed: the AssistantMessage alone, figures in the same batch as its row;
        # then one whose figures ride on its final sentence, an int time, no StartAnswer.
        w.submit(c.client(UserMessage(id="msg_u2", conversation_id=CID, content="q2")))
        w.submit(
            c.server(
                AssistantMessage(
                    id="msg_a2", conversation_id=CID, content="B.", previous_id="msg_u2"
                ),
                meta=figures(10, 5, 0, 0),
            )
        )
        w.submit(
            c.server(
                AssistantSentence(
                    previous_id="msg_a3", conversation_id=CID, sequence=1, text="C.", is_final=True
                ),
                meta=figures(7, 6, 5, 43),
            )
        )
        await w.flush(timeout=30)
        assert w.stats.dead_lettered == 0
    rows = await fetch(url, FIGURES_SQL)
    got = {
        r["id"]: (
            r["prompt_tokens"],
            r["completion_tokens"],
            r["reasoning_tokens"],
            r["first_reasoning_ms"],
        )
        for r in rows
    }
    assert got == {
        "msg_a1": (120, 80, 64, 812.5),
        "msg_a2": (10, 5, 0, 0.0),
        "msg_a3": (7, 6, 5, 43.0),
    }
    a1 = next(r for r in rows if r["id"] == "msg_a1")
    assert (a1["contents"], a1["completion_status"], a1["placeholder"]) == (
        "A.",
        "completed",
        False,
    )
    [view] = await fetch(
        url,
        "SELECT prompt_tokens, completion_tokens, reasoning_tokens, first_reasoning_ms "
        "FROM alicia_answer_reasoning WHERE answer_id = 'msg_a1'",
    )
    assert view == {
        "prompt_tokens": 120,
        "completion_tokens": 80,
        "reasoning_tokens": 64,
        "first_reasoning_ms": 812.5,
    }
    # Redelivered, or repeated without figures: the stored figures stay as they are.
    await write(
        url,
        options,
        [
            c.server(
                AssistantMessage(
                    id="msg_a1", conversation_id=CID, content="A.", previous_id="msg_u1"
                ),
                meta=figures(),
            ),
            c.server(
                AssistantMessage(
                    id="msg_a2", conversation_id=CID, content="B.", previous_id="msg_u2"
                ),
                meta={"model": MODEL},
            ),
        ],
    )
    assert await fetch(url, FIGURES_SQL) == rows


async def test_junk_figures_are_ignored_and_the_answer_kept(
    url: str, options: WriterOptions
) -> None:
    c = Conv()
    junk: dict[str, dict[str, Any]] = {
        "msg_j1": {META_USAGE: "lots", META_FIRST_REASONING_MS: "fast"},
        "msg_j2": figures(-1, 1.5, True, -3.0),
        "msg_j3": figures(2**31, "7", None, math.nan),
        "msg_j4": figures(None, None, None, math.inf),
        "msg_j5": {META_USAGE: ["promptTokens", 1], META_FIRST_REASONING_MS: 10**400},
        "msg_j6": figures(5, {"n": 1}, 2**31 - 1, False),  # partly valid
        "msg_j7": {META_USAGE: {"reasoningTokens": 3}},  # only one figure reported
    }
    envs = []
    for n, (aid, meta) in enumerate(junk.items()):
        uid = f"msg_q{n}"
        envs.append(c.client(UserMessage(id=uid, conversation_id=CID, content="q")))
        envs.append(
            c.server(
                AssistantMessage(id=aid, conversation_id=CID, content="a", previous_id=uid),
                meta=meta,
            )
        )
    w = await write(url, options, envs)
    assert w.stats.dead_lettered == 0 and w.stats.written == len(envs)
    rows = {r["id"]: r for r in await fetch(url, FIGURES_SQL)}
    assert sorted(rows) == sorted(junk)
    figures_of = {
        mid: (r["prompt_tokens"], r["completion_tokens"], r["reasoning_tokens"])
        for mid, r in rows.items()
    }
    empty = (None, None, None)
    assert figures_of == {
        "msg_j1": empty,
        "msg_j2": empty,
        "msg_j3": empty,
        "msg_j4": empty,
        "msg_j5": empty,
        "msg_j6": (5, None, 2**31 - 1),
        "msg_j7": (None, None, 3),
    }
    assert all(r["first_reasoning_ms"] is None for r in rows.values())
    assert all((r["contents"], r["completion_status"]) == ("a", "completed") for r in rows.values())


def test_build_rows_keeps_valid_figures_and_leaves_the_fast_path() -> None:
    from alicia.agent.storage.dialect import Dialect
    from alicia.agent.storage.spill import Item

    c = Conv()
    answer = AssistantMessage(id="msg_a1", conversation_id=CID, content="a", previous_id="msg_u1")
    items = [
        Item(1, 1_700_000_000.0, c.server(step("msg_u1", 1, "s"))),
        Item(2, 1_700_000_001.0, c.server(answer, meta=figures(1, 2, 3, 4.5))),
        Item(3, 1_700_000_002.0, c.server(answer, meta=figures(9, 9, 9, 9.0))),  # first wins
        Item(4, 1_700_000_003.0, c.server(answer, meta={"model": MODEL})),
    ]
    rows = build_rows(items)
    assert rows.figures == {
        "msg_a1": {
            "b_id": "msg_a1",
            "b_prompt": 1,
            "b_completion": 2,
            "b_reasoning": 3,
            "b_first_reasoning_ms": 4.5,
        }
    }
    postgres = Dialect(postgres=True, copy_min_rows=100)
    assert not postgres.only_steps(rows)
    steps_only = build_rows(items[:1])
    assert steps_only.figures == {} and postgres.only_steps(steps_only)
    assert (
        build_rows([Item(1, 1.0, c.server(answer, meta=figures("1", -2, 2.0, "x")))]).figures == {}
    )
