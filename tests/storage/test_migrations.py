"""Alembic migrations on real PostgreSQL and SQLite: up and down, empty and populated,
and the models in ``agent/storage/tables.py`` matching what the migrations build."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import event, inspect, make_url, text
from sqlalchemy.engine import Connection, Engine

from alicia.agent.engine.sink import META_FIRST_REASONING_MS, META_USAGE
from alicia.agent.storage.engine import VERSION_TABLE, create_engine
from alicia.agent.storage.migrate import migrate_once
from alicia.agent.storage.tables import TABLE_NAMES, Base
from alicia.agent.storage.writer import StorageWriter, WriterOptions, migrate
from alicia.protocol import (
    AssistantMessage,
    Commentary,
    Envelope,
    ReasoningStep,
    StartAnswer,
    ToolUseRequest,
    UserMessage,
    envelope,
)
from tests.paths import ROOT
from tests.support.db import fetch, new_database

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

VIEWS = {
    "alicia_answer_reasoning",
    "alicia_turn_latency",
    "alicia_turn_tools",
    "alicia_tool_stats",
    "alicia_model_daily",
}


@pytest.fixture(params=["postgres", "sqlite"])
async def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    pg = request.getfixturevalue("postgres_server") if request.param == "postgres" else None
    return await new_database(request.param, pg, tmp_path, "migr")


T = TypeVar("T")


async def run_sync(url: str, read: Callable[[Connection], T]) -> T:
    """``read`` on a synchronous connection to the database at ``url``."""
    engine = create_engine(url, pooled=False)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(read)
    finally:
        await engine.dispose()


async def schema(url: str) -> dict[str, Any]:
    """Tables, views and the Alembic revision present in the database."""

    def read(conn: Connection) -> dict[str, Any]:
        insp = inspect(conn)
        tables = set(insp.get_table_names())
        version = None
        if VERSION_TABLE in tables:
            version = conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}").scalar()
        return {
            "tables": {t for t in tables if t.startswith("alicia_") and t != VERSION_TABLE},
            "views": {v for v in insp.get_view_names() if v.startswith("alicia_")},
            "version": version,
        }

    return await run_sync(url, read)


async def populate(url: str, tmp: Path) -> None:
    cid = "conv_migr"
    envs: list[Envelope[Any]] = [
        envelope(
            UserMessage(id="msg_u", conversation_id=cid, content="q"),
            stanza_id=1,
            conversation_id=cid,
        ),
        envelope(
            ReasoningStep(
                id="rs_1", conversation_id=cid, previous_id="msg_u", content="s", step_index=1
            ),
            stanza_id=-1,
            conversation_id=cid,
        ),
        envelope(
            ToolUseRequest(
                id="toolreq_1",
                tool_name="t",
                parameters={},
                execution="server",
                previous_id="msg_u",
            ),
            stanza_id=-2,
            conversation_id=cid,
        ),
        envelope(
            StartAnswer(id="msg_a", previous_id="msg_u", conversation_id=cid),
            stanza_id=-3,
            conversation_id=cid,
            meta={"model": "m"},
        ),
    ]
    async with StorageWriter(url, WriterOptions(spill_dir=tmp / "spill", migrate=False)) as w:
        for env in envs:
            w.submit(env)
        await w.flush(timeout=30)


async def counts(url: str, without: set[str] | None = None) -> dict[str, int]:
    out = {}
    for t in sorted(set(TABLE_NAMES) - (without or set())):
        [row] = await fetch(url, f"SELECT count(*) AS n FROM {t}")
        out[t] = int(row["n"])
    return out


async def test_upgrade_and_downgrade_on_an_empty_database(empty_url: str) -> None:
    assert (await schema(empty_url))["tables"] == set()
    await migrate(empty_url)
    assert await schema(empty_url) == {
        "tables": set(TABLE_NAMES),
        "views": VIEWS,
        "version": "0007",
    }
    await migrate(empty_url, "base", downgrade=True)
    assert await schema(empty_url) == {"tables": set(), "views": set(), "version": None}
    await migrate(empty_url)  # and back up again
    assert (await schema(empty_url))["version"] == "0007"


async def test_a_slow_migration_is_not_ended_by_the_idle_transaction_timeout(
    postgres_server: Any, tmp_path: Path
) -> None:
    """Fenced writers' and leases' engines have the server end a transaction left idle;
    Alembic reads its scripts between statements, which took longer than that on a loaded
    machine (the leases table was then never made). Here the connection ends a
    transaction idle for 0.2 s, and the process is busy for 0.3 s once mid-migration."""
    url = await new_database("postgres", postgres_server, tmp_path, "slowmigr")
    engine = create_engine(url, pool_size=1)
    try:
        async with engine.connect() as conn:  # connected (the dialect's first queries)
            await conn.execute(text("SET SESSION idle_in_transaction_session_timeout = 200"))
            await conn.commit()
        statements = 0

        def busy(*_: Any) -> None:
            nonlocal statements
            statements += 1
            if statements == 5:
                time.sleep(0.3)

        event.listen(engine.sync_engine, "before_cursor_execute", busy)
        await migrate(engine)
    finally:
        await engine.dispose()
    assert statements > 5
    assert (await schema(url))["tables"] == set(TABLE_NAMES)


async def test_migrate_once_keeps_off_the_callers_loop_and_outlives_a_cancelled_caller(
    postgres_server: Any, tmp_path: Path
) -> None:
    """On PostgreSQL, Alembic's synchronous work runs on a thread of its own (not on the
    loop of the room that first opens the database), and a caller that gives up (the data
    key's time limit) leaves it running for the next."""
    empty_url = await new_database("postgres", postgres_server, tmp_path, "migr_once")
    threads: set[int] = set()

    def seen(conn: Connection, *_: Any) -> None:
        if conn.engine.url.database == make_url(empty_url).database:  # not other tests' work
            threads.add(threading.get_ident())

    event.listen(Engine, "before_cursor_execute", seen)
    engine = create_engine(empty_url, pooled=False)
    try:
        first = asyncio.create_task(migrate_once(engine))
        await asyncio.sleep(0)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        async with asyncio.timeout(60):
            await migrate_once(engine)
    finally:
        event.remove(Engine, "before_cursor_execute", seen)
        await engine.dispose()
    assert len(threads) == 1 and threading.get_ident() not in threads  # one run, not two
    assert (await schema(empty_url))["tables"] == set(TABLE_NAMES)


async def test_upgrade_and_downgrade_on_a_populated_database(
    empty_url: str, tmp_path: Path
) -> None:
    await migrate(empty_url)
    await populate(empty_url, tmp_path)
    before = await counts(empty_url)
    assert before == {
        "alicia_agents": 0,
        "alicia_conversation_keys": 0,
        "alicia_conversations": 1,
        "alicia_messages": 2,
        "alicia_reasoning_steps": 1,
        "alicia_remarks": 0,
        "alicia_sent_log": 0,
        "alicia_sentences": 0,
        "alicia_tool_uses": 1,
    }
    [view] = await fetch(empty_url, "SELECT answers, steps FROM alicia_model_daily")
    assert (view["answers"], view["steps"]) == (1, 1)

    await migrate(empty_url, "0001", downgrade=True)  # views and keys go, data stays
    later = {"alicia_conversation_keys", "alicia_sent_log", "alicia_agents", "alicia_remarks"}
    assert await schema(empty_url) == {
        "tables": set(TABLE_NAMES) - later,
        "views": set(),
        "version": "0001",
    }
    assert await counts(empty_url, without=later) == {
        t: n for t, n in before.items() if t not in later
    }
    await migrate(empty_url)
    assert (await schema(empty_url))["views"] == VIEWS
    assert await counts(empty_url) == before

    await migrate(empty_url, "base", downgrade=True)  # everything goes, data included
    assert await schema(empty_url) == {"tables": set(), "views": set(), "version": None}
    await migrate(empty_url)
    assert await counts(empty_url) == dict.fromkeys(before, 0)


LATER = {"alicia_sent_log", "alicia_agents", "alicia_remarks"}
"""Tables of migrations after 0004."""
USAGE_COLUMNS = ["prompt_tokens", "completion_tokens", "reasoning_tokens", "first_reasoning_ms"]


async def columns(url: str, relation: str) -> list[str]:
    """Column names of a table or view, in order."""

    def read(conn: Connection) -> list[str]:
        return [c["name"] for c in inspect(conn).get_columns(relation)]

    return await run_sync(url, read)


async def test_usage_columns_and_views_up_and_down(empty_url: str, tmp_path: Path) -> None:
    await migrate(empty_url, "0003")
    before_answers = await columns(empty_url, "alicia_answer_reasoning")
    before_daily = await columns(empty_url, "alicia_model_daily")
    assert not set(USAGE_COLUMNS) & set(await columns(empty_url, "alicia_messages"))

    await migrate(empty_url, "0004")  # 0003 -> 0004
    assert (await columns(empty_url, "alicia_messages"))[-4:] == USAGE_COLUMNS
    # The views keep their columns, in order, with the figures appended.
    assert await columns(empty_url, "alicia_answer_reasoning") == [*before_answers, *USAGE_COLUMNS]
    assert await columns(empty_url, "alicia_model_daily") == [
        *before_daily,
        "prompt_tokens",
        "completion_tokens",
        "reasoning_tokens",
        "avg_reasoning_tokens",
        "avg_first_reasoning_ms",
        "max_first_reasoning_ms",
    ]
    await migrate(empty_url)  # the writer writes today's rows (later columns too)
    await populate(empty_url, tmp_path)
    cid = "conv_migr"
    final = envelope(
        AssistantMessage(id="msg_a", previous_id="msg_u", conversation_id=cid, content="a"),
        stanza_id=-4,
        conversation_id=cid,
        meta={
            META_USAGE: {"promptTokens": 10, "completionTokens": 7, "reasoningTokens": 5},
            META_FIRST_REASONING_MS: 12.5,
        },
    )
    async with StorageWriter(
        empty_url, WriterOptions(spill_dir=tmp_path / "spill", migrate=False)
    ) as w:
        w.submit(final)
        await w.flush(timeout=30)
    [row] = await fetch(
        empty_url, "SELECT reasoning_tokens, first_reasoning_ms FROM alicia_answer_reasoning"
    )
    assert (row["reasoning_tokens"], row["first_reasoning_ms"]) == (5, 12.5)
    [day] = await fetch(
        empty_url, "SELECT answers, steps, reasoning_tokens, prompt_tokens FROM alicia_model_daily"
    )
    assert (day["answers"], day["steps"], day["reasoning_tokens"], day["prompt_tokens"]) == (
        1,
        1,
        5,
        10,
    )
    before = await counts(empty_url, without=LATER)

    await migrate(empty_url, "0003", downgrade=True)  # columns go, rows and 0002 views stay
    assert await schema(empty_url) == {
        "tables": set(TABLE_NAMES) - LATER,
        "views": VIEWS,
        "version": "0003",
    }
    assert not set(USAGE_COLUMNS) & set(await columns(empty_url, "alicia_messages"))
    assert await columns(empty_url, "alicia_answer_reasoning") == before_answers
    assert await columns(empty_url, "alicia_model_daily") == before_daily
    assert await counts(empty_url, without=LATER) == before
    [day] = await fetch(empty_url, "SELECT answers, steps FROM alicia_model_daily")
    assert (day["answers"], day["steps"]) == (1, 1)

    await migrate(empty_url)  # up again: the figures were dropped with the columns
    [row] = await fetch(
        empty_url,
        "SELECT prompt_tokens, completion_tokens, reasoning_tokens, first_reasoning_ms "
        "FROM alicia_messages WHERE id = 'msg_a'",
    )
    assert row == dict.fromkeys(USAGE_COLUMNS)
    assert await counts(empty_url, without=LATER) == before


async def test_remarks_table_up_and_down(empty_url: str, tmp_path: Path) -> None:
    await migrate(empty_url, "0006")
    assert "alicia_remarks" not in (await schema(empty_url))["tables"]
    await migrate(empty_url)  # 0006 -> 0007
    assert (await schema(empty_url))["version"] == "0007"
    assert await columns(empty_url, "alicia_remarks") == [
        "id",
        "conversation_id",
        "target_id",
        "sequence_number",
        "content",
        "sealed",
        "spoken_at",
        "sent_at",
        "created_at",
        "updated_at",
        "deleted_at",
    ]
    await populate(empty_url, tmp_path)
    remark = envelope(
        Commentary(
            id="cm_1",
            conversation_id="conv_migr",
            target_id="msg_u",
            author_role="assistant",
            content="Still thinking.",
            comment_type="progress",
            timestamp=1_767_225_600_000,
        ),
        stanza_id=-5,
        conversation_id="conv_migr",
    )
    async with StorageWriter(
        empty_url, WriterOptions(spill_dir=tmp_path / "spill", migrate=False)
    ) as w:
        w.submit(remark)
        await w.flush(timeout=30)
    [row] = await fetch(empty_url, "SELECT id, content FROM alicia_remarks")
    assert (row["id"], row["content"]) == ("cm_1", "Still thinking.")
    before = await counts(empty_url, without={"alicia_remarks"})

    await migrate(empty_url, "0006", downgrade=True)  # the table goes, the rest stays
    assert await schema(empty_url) == {
        "tables": set(TABLE_NAMES) - {"alicia_remarks"},
        "views": VIEWS,
        "version": "0006",
    }
    assert await counts(empty_url, without={"alicia_remarks"}) == before

    await migrate(empty_url)  # up again: empty, and written to as before
    assert await fetch(empty_url, "SELECT id FROM alicia_remarks") == []
    async with StorageWriter(
        empty_url, WriterOptions(spill_dir=tmp_path / "spill2", migrate=False)
    ) as w:
        w.submit(remark)
        await w.flush(timeout=30)
    assert await fetch(empty_url, "SELECT id FROM alicia_remarks") == [{"id": "cm_1"}]


async def test_models_match_the_migrations(empty_url: str) -> None:
    await migrate(empty_url)

    def diff(conn: Connection) -> list[Any]:
        ctx = MigrationContext.configure(
            conn, opts={"compare_type": True, "version_table": VERSION_TABLE}
        )
        return list(compare_metadata(ctx, Base.metadata))

    engine = create_engine(empty_url, pooled=False)
    try:
        async with engine.connect() as conn:
            assert await conn.run_sync(diff) == []
    finally:
        await engine.dispose()


async def test_updated_at_is_kept_by_the_database(empty_url: str, tmp_path: Path) -> None:
    await migrate(empty_url)
    await populate(empty_url, tmp_path)
    from sqlalchemy import text

    engine = create_engine(empty_url, pooled=False)
    try:
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "UPDATE alicia_reasoning_steps SET updated_at = '2000-01-01 00:00:00', "
                    "created_at = '2000-01-01 00:00:00'"
                )
            )
        async with engine.begin() as conn:  # a soft delete, as an operator would do it
            await conn.execute(text("UPDATE alicia_reasoning_steps SET deleted_at = created_at"))
    finally:
        await engine.dispose()
    [row] = await fetch(
        empty_url, "SELECT created_at, updated_at, deleted_at FROM alicia_reasoning_steps"
    )
    assert row["deleted_at"] == row["created_at"]
    assert row["updated_at"] > row["created_at"]


def test_alembic_command_line_upgrades_and_downgrades(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}"

    def alembic(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "alembic", "-x", f"url={url}", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr

    upgraded = alembic("upgrade", "head")
    assert "0001 -> 0002" in upgraded and "0003 -> 0004" in upgraded
    assert "0006 -> 0007" in upgraded
    assert "0007 (head)" in alembic("current")
    assert "0001 -> , " in alembic("downgrade", "base")
    sql = alembic("upgrade", "head", "--sql")  # offline mode renders the DDL
    assert "CREATE TABLE alicia_reasoning_steps" in sql and "CREATE VIEW alicia_model_daily" in sql
    assert "ALTER TABLE alicia_messages ADD COLUMN reasoning_tokens INTEGER" in sql
    assert "CREATE TABLE alicia_remarks" in sql
    assert "CREATE INDEX ix_alicia_remarks_conversation_spoken" in sql
