"""Writing one batch of rows in one transaction, PostgreSQL or SQLite.

Everything is ``INSERT … ON CONFLICT`` keyed by protocol ids, so a batch can be
written again (a retry after a lost commit, a replayed spill segment) without effect.
On PostgreSQL, a batch of reasoning steps is one ``COPY`` straight into the table inside
a savepoint; if any row is already stored (a retry, a replay) the savepoint is rolled back
and the batch goes in as one ``INSERT … SELECT FROM unnest(…) ON CONFLICT DO NOTHING``
(also used below ``copy_min_rows``). Measured against plain ``COPY`` in
``bench/storage.py``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Final

from sqlalchemy import and_, bindparam, case, exists, func, literal, or_, select, update
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.ext.asyncio import AsyncConnection

from .rows import Rows, join_sentences
from .tables import conversations as CONVERSATIONS
from .tables import messages as MESSAGES
from .tables import reasoning_steps as STEPS
from .tables import remarks as REMARKS
from .tables import sent_log as SENT_LOG
from .tables import sentences as SENTENCES
from .tables import tool_uses as TOOL_USES

__all__ = ["Dialect", "StepConflictError"]

_UNIQUE_VIOLATION: Final = "23505"
_CONVERSATION_UPSERT: Final = """
    INSERT INTO alicia_conversations (id, livekit_room_name, last_client_stanza_id,
                                      last_server_stanza_id)
    SELECT c, c, lc, ls FROM unnest($1::text[], $2::integer[], $3::integer[]) AS t(c, lc, ls)
    ON CONFLICT (id) DO UPDATE SET
        last_client_stanza_id = GREATEST(alicia_conversations.last_client_stanza_id,
                                         EXCLUDED.last_client_stanza_id),
        last_server_stanza_id = LEAST(alicia_conversations.last_server_stanza_id,
                                      EXCLUDED.last_server_stanza_id)
    WHERE EXCLUDED.last_client_stanza_id > alicia_conversations.last_client_stanza_id
       OR EXCLUDED.last_server_stanza_id < alicia_conversations.last_server_stanza_id
"""
_STEP_UNIQUE: Final = "uq_alicia_reasoning_steps_live_message_sequence"
_STEP_COLUMNS: Final = (
    "id",
    "message_id",
    "conversation_id",
    "content",
    "sequence_number",
    "total_steps",
    "sent_at",
)


class StepConflictError(Exception):
    """A step took a (message, stepIndex) already held by another live step."""


class Dialect:
    """Dialect-specific SQL for one transaction (PostgreSQL or SQLite)."""

    def __init__(self, postgres: bool, copy_min_rows: int) -> None:
        self.postgres = postgres
        self.insert = pg_dialect.insert if postgres else sqlite_dialect.insert
        self.copy_min_rows = copy_min_rows
        self._upsert_message = self._message_upsert()
        self._upsert_conversation = self._conversation_upsert()

    def _conversation_upsert(self) -> Any:
        # Creates the conversation if needed and moves its stanza marks forward, in one
        # statement; a row whose marks do not move is left alone.
        t = CONVERSATIONS
        ins = self.insert(t)
        ex = ins.excluded
        client_up = ex.last_client_stanza_id > t.c.last_client_stanza_id
        server_up = ex.last_server_stanza_id < t.c.last_server_stanza_id
        return ins.on_conflict_do_update(
            index_elements=["id"],
            set_={
                "last_client_stanza_id": case(
                    (client_up, ex.last_client_stanza_id), else_=t.c.last_client_stanza_id
                ),
                "last_server_stanza_id": case(
                    (server_up, ex.last_server_stanza_id), else_=t.c.last_server_stanza_id
                ),
            },
            where=or_(client_up, server_up),
        )

    def _message_upsert(self) -> Any:
        t = MESSAGES
        ins = self.insert(t)
        ex = ins.excluded
        return ins.on_conflict_do_update(
            index_elements=["id"],
            set_={
                "conversation_id": ex.conversation_id,
                "sequence_number": ex.sequence_number,
                "previous_id": ex.previous_id,
                "message_role": ex.message_role,
                "contents": case((ex.contents != "", ex.contents), else_=t.c.contents),
                "completion_status": case(
                    (t.c.completion_status == "pending", ex.completion_status),
                    else_=t.c.completion_status,
                ),
                "model": func.coalesce(ex.model, t.c.model),
                "sent_at": ex.sent_at,
                "completed_at": func.coalesce(t.c.completed_at, ex.completed_at),
                "placeholder": False,
                "participant": ex.participant,
            },
            where=t.c.placeholder.is_(True),
        )

    def only_steps(self, rows: Rows) -> bool:
        """True if ``rows`` holds nothing but steps (and their conversation/placeholders):
        on PostgreSQL such a batch, the common one, can go through :meth:`write_steps`."""
        return (
            self.postgres
            and not (
                rows.messages
                or rows.sentences
                or rows.tool_requests
                or rows.tool_results
                or rows.stops
                or rows.incomplete
                or rows.figures
                or rows.sent
                or rows.remarks
            )
            and all(v[2] is None for v in rows.convs.values())
        )

    async def write_steps(self, apg: Any, rows: Rows) -> None:
        """PostgreSQL fast path for :meth:`only_steps` batches, straight on the asyncpg
        connection ``apg`` inside the caller's transaction: no SQLAlchemy per statement,
        so less work on the event loop the realtime path shares."""
        convs = sorted(rows.convs.items())
        await apg.execute(
            _CONVERSATION_UPSERT,
            [cid for cid, _ in convs],
            [0 if v[0] is None else v[0] for _, v in convs],
            [-1 if v[1] is None else v[1] for _, v in convs],
        )
        if rows.holders:
            await self._holders_pg(apg, [rows.holders[k] for k in sorted(rows.holders)])
        if rows.steps:
            try:
                await self._steps_pg(apg, rows.steps)
            except Exception as exc:
                if _STEP_UNIQUE in str(exc):
                    raise StepConflictError(str(exc)) from exc
                raise

    async def write(self, conn: AsyncConnection, rows: Rows, *, supersede: bool) -> None:
        """Apply ``rows`` on ``conn`` (inside the caller's transaction)."""
        if rows.convs:
            await conn.execute(
                self._upsert_conversation,
                [
                    {
                        "id": cid,
                        "livekit_room_name": cid,
                        "last_client_stanza_id": 0 if v[0] is None else v[0],
                        "last_server_stanza_id": -1 if v[1] is None else v[1],
                    }
                    for cid, v in sorted(rows.convs.items())
                ],
            )
        if rows.sent:
            await conn.execute(
                self.insert(SENT_LOG).on_conflict_do_nothing(
                    index_elements=["conversation_id", "stanza"]
                ),
                rows.sent,
            )
        if rows.holders:
            holders = [rows.holders[k] for k in sorted(rows.holders)]
            if self.postgres:
                await self._holders_pg(await _driver(conn), holders)
            else:
                await conn.execute(
                    self.insert(MESSAGES).on_conflict_do_nothing(index_elements=["id"]), holders
                )
        if rows.messages:
            await conn.execute(self._upsert_message, list(rows.messages.values()))
        if rows.stops:
            await self._stops(conn, rows.stops)
        if rows.sentences:
            await self._sentences(conn, rows)
        if rows.incomplete:
            m = MESSAGES
            await conn.execute(
                update(m)
                .where(m.c.id == bindparam("b_id"), m.c.completion_status != "failed")
                .values(
                    completion_status="failed",
                    completed_at=func.coalesce(
                        m.c.completed_at, bindparam("b_at", type_=m.c.completed_at.type)
                    ),
                ),
                rows.incomplete,
            )
        if rows.figures:
            await self._figures(conn, list(rows.figures.values()))
        if rows.steps:
            if supersede:
                await self._steps_superseding(conn, rows.steps)
            else:
                await self._steps(conn, rows.steps)
        if rows.tool_requests:
            await self._tool_requests(conn, rows)
        if rows.remarks:
            # Keyed by the Commentary id: a re-delivered remark changes nothing.
            await conn.execute(
                self.insert(REMARKS).on_conflict_do_nothing(index_elements=["id"]),
                list(rows.remarks.values()),
            )
        if rows.tool_results:
            t = TOOL_USES
            # The first result of a request wins: a re-delivered one changes nothing.
            await conn.execute(
                update(t)
                .where(t.c.id == bindparam("b_id"), t.c.status.in_(("pending", "running")))
                .values(
                    status=bindparam("status"),
                    tool_result=bindparam("tool_result", type_=t.c.tool_result.type),
                    error_code=bindparam("error_code"),
                    error_message=bindparam("error_message"),
                    completed_at=bindparam("completed_at", type_=t.c.completed_at.type),
                ),
                list(rows.tool_results.values()),
            )
        await self._conversation_marks(conn, rows)

    async def _figures(self, conn: AsyncConnection, figures: list[dict[str, Any]]) -> None:
        # After the upsert, which leaves a stored (non-placeholder) answer alone: the
        # figures come with its last envelope, after StartAnswer created the row. A
        # figure missing from this envelope keeps what is stored.
        m = MESSAGES
        await conn.execute(
            update(m)
            .where(m.c.id == bindparam("b_id"))
            .values(
                prompt_tokens=func.coalesce(
                    bindparam("b_prompt", type_=m.c.prompt_tokens.type), m.c.prompt_tokens
                ),
                completion_tokens=func.coalesce(
                    bindparam("b_completion", type_=m.c.completion_tokens.type),
                    m.c.completion_tokens,
                ),
                reasoning_tokens=func.coalesce(
                    bindparam("b_reasoning", type_=m.c.reasoning_tokens.type),
                    m.c.reasoning_tokens,
                ),
                first_reasoning_ms=func.coalesce(
                    bindparam("b_first_reasoning_ms", type_=m.c.first_reasoning_ms.type),
                    m.c.first_reasoning_ms,
                ),
            ),
            figures,
        )

    async def _sentences(self, conn: AsyncConnection, rows: Rows) -> None:
        s = SENTENCES
        await conn.execute(
            self.insert(s).on_conflict_do_nothing(
                index_elements=["message_id", "sentence_sequence_number"]
            ),
            list(rows.sentences.values()),
        )
        ids = sorted({mid for mid, _ in rows.sentences})
        result = await conn.execute(
            select(s.c.message_id, s.c.text, s.c.is_final, s.c.sent_at)
            .where(s.c.message_id.in_(ids), s.c.deleted_at.is_(None))
            .order_by(s.c.message_id, s.c.sentence_sequence_number)
        )
        texts: dict[str, list[str]] = {}
        final_at: dict[str, dt.datetime] = {}
        for mid, text, is_final, sent_at in result:
            texts.setdefault(mid, []).append(text)
            if is_final:
                final_at[mid] = sent_at
        m = MESSAGES
        open_ = m.c.completion_status.in_(("pending", "streaming"))
        params = [
            {
                "b_id": mid,
                "b_contents": join_sentences(parts),
                "b_final": mid in final_at,
                "b_done": final_at.get(mid),
            }
            for mid, parts in texts.items()
        ]
        await conn.execute(
            update(m)
            .where(m.c.id == bindparam("b_id"))
            .values(
                contents=bindparam("b_contents"),
                completion_status=case(
                    (and_(bindparam("b_final"), open_), literal("completed")),
                    else_=m.c.completion_status,
                ),
                completed_at=case(
                    (
                        and_(bindparam("b_final"), open_),
                        func.coalesce(
                            m.c.completed_at, bindparam("b_done", type_=m.c.completed_at.type)
                        ),
                    ),
                    else_=m.c.completed_at,
                ),
            ),
            params,
        )

    async def _steps(self, conn: AsyncConnection, steps: list[tuple[Any, ...]]) -> None:
        try:
            if self.postgres:
                await self._steps_pg(await _driver(conn), steps)
            else:
                await conn.execute(
                    self.insert(STEPS).on_conflict_do_nothing(index_elements=["id"]),
                    [dict(zip(_STEP_COLUMNS, s, strict=True)) for s in steps],
                )
        except Exception as exc:
            if _STEP_UNIQUE in str(exc) or "alicia_reasoning_steps.message_id" in str(exc):
                raise StepConflictError(str(exc)) from exc
            raise

    async def _steps_pg(self, apg: Any, steps: list[tuple[Any, ...]]) -> None:
        if not apg.is_in_transaction():  # pragma: no cover - callers always start one first
            raise RuntimeError("step COPY outside the batch transaction")
        cols = ", ".join(_STEP_COLUMNS)
        if len(steps) >= self.copy_min_rows:
            # Fast path: COPY straight into the table, inside a savepoint. A row that is
            # already stored (a retried batch, a replayed segment) fails it as a whole;
            # then the batch takes the ON CONFLICT path below.
            try:
                async with apg.transaction():
                    await apg.copy_records_to_table(
                        "alicia_reasoning_steps", records=steps, columns=_STEP_COLUMNS
                    )
                return
            except Exception as exc:
                if getattr(exc, "sqlstate", None) != _UNIQUE_VIOLATION:
                    raise
        columns = [list(c) for c in zip(*steps, strict=True)]
        await apg.execute(
            f"INSERT INTO alicia_reasoning_steps ({cols}) SELECT * FROM unnest("
            "$1::text[], $2::text[], $3::text[], $4::text[], $5::integer[], "
            "$6::integer[], $7::timestamptz[]) ON CONFLICT (id) DO NOTHING",
            *columns,
        )

    async def _holders_pg(self, apg: Any, holders: list[dict[str, Any]]) -> None:
        # One statement with arrays instead of a many-row VALUES list: far less Python.
        await apg.execute(
            "INSERT INTO alicia_messages (id, conversation_id, sequence_number, message_role, "
            "contents, completion_status, placeholder, sent_at) "
            "SELECT id, cid, 0, role, '', 'pending', true, at "
            "FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[]) "
            "AS t(id, cid, role, at) ON CONFLICT (id) DO NOTHING",
            [h["id"] for h in holders],
            [h["conversation_id"] for h in holders],
            [h["message_role"] for h in holders],
            [h["sent_at"] for h in holders],
        )

    async def _steps_superseding(self, conn: AsyncConnection, steps: list[tuple[Any, ...]]) -> None:
        # Slow path, taken only after a unique violation: a step re-using a live
        # (message, stepIndex) supersedes the older one, which is soft-deleted, not lost.
        t = STEPS
        last_of_pair: dict[tuple[str, int], int] = {}
        by_id: dict[str, int] = {}
        for i, s in enumerate(steps):
            if s[0] not in by_id:
                by_id[s[0]] = i
                last_of_pair[(s[1], s[4])] = i
        keep = sorted(by_id.values())
        x = t.alias("x")
        await conn.execute(
            update(t)
            .where(
                t.c.message_id == bindparam("b_mid"),
                t.c.sequence_number == bindparam("b_seq"),
                t.c.deleted_at.is_(None),
                t.c.id != bindparam("b_id"),
                ~exists().where(x.c.id == bindparam("b_id")),
            )
            .values(deleted_at=bindparam("b_at", type_=t.c.deleted_at.type)),
            [
                {
                    "b_mid": steps[i][1],
                    "b_seq": steps[i][4],
                    "b_id": steps[i][0],
                    "b_at": steps[i][6],
                }
                for i in keep
                if last_of_pair[(steps[i][1], steps[i][4])] == i
            ],
        )
        rows = []
        for i in keep:
            row = dict(zip(_STEP_COLUMNS, steps[i], strict=True))
            superseded = last_of_pair[(steps[i][1], steps[i][4])] != i
            row["deleted_at"] = steps[i][6] if superseded else None
            rows.append(row)
        await conn.execute(self.insert(t).on_conflict_do_nothing(index_elements=["id"]), rows)

    async def _tool_requests(self, conn: AsyncConnection, rows: Rows) -> None:
        t = TOOL_USES
        mids = sorted({r["message_id"] for r in rows.tool_requests.values()})
        result = await conn.execute(
            select(t.c.message_id, func.max(t.c.sequence_number))
            .where(t.c.message_id.in_(mids))
            .group_by(t.c.message_id)
        )
        last = {mid: n or 0 for mid, n in result}
        params = []
        for r in rows.tool_requests.values():
            n = last.get(r["message_id"], 0) + 1
            last[r["message_id"]] = n
            params.append({**r, "sequence_number": n})
        await conn.execute(self.insert(t).on_conflict_do_nothing(index_elements=["id"]), params)

    async def _stops(self, conn: AsyncConnection, stops: list[dict[str, Any]]) -> None:
        m = MESSAGES
        inner = m.alias("latest")
        latest = (
            select(inner.c.id)
            .where(
                inner.c.conversation_id == bindparam("b_conv"),
                inner.c.message_role == "assistant",
                inner.c.completion_status == "streaming",
                inner.c.deleted_at.is_(None),
            )
            .order_by(inner.c.sent_at.desc())
            .limit(1)
            .scalar_subquery()
        )
        target = func.coalesce(bindparam("b_target", type_=m.c.id.type), latest)
        await conn.execute(
            update(m)
            .where(and_(m.c.id == target, m.c.completion_status == "streaming"))
            .values(
                completion_status="failed",
                completed_at=func.coalesce(
                    m.c.completed_at, bindparam("b_at", type_=m.c.completed_at.type)
                ),
            ),
            stops,
        )

    async def _conversation_marks(self, conn: AsyncConnection, rows: Rows) -> None:
        c = CONVERSATIONS
        prefs = [
            {"b_id": cid, "b_prefs": v[2]} for cid, v in rows.convs.items() if v[2] is not None
        ]
        if prefs:
            await conn.execute(
                update(c)
                .where(c.c.id == bindparam("b_id"))
                .values(preferences=bindparam("b_prefs", type_=c.c.preferences.type)),
                prefs,
            )


async def _driver(conn: AsyncConnection) -> Any:
    raw = await conn.get_raw_connection()
    return raw.driver_connection
