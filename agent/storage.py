"""Persistence of protocol traffic: a bounded, batched, asynchronous writer.

The worker calls :func:`open_sink` once and then ``sink.submit(env)`` for every envelope
it sends and every valid one it receives. ``submit`` only appends to an in-memory queue
and returns; a background task (owned by the writer, stopped by :meth:`aclose`) turns
queued envelopes into rows and writes them in batches, one transaction per batch:

* every row is keyed by its protocol id and written with ``INSERT … ON CONFLICT``, so
  re-delivering an envelope (a replay, a retried batch) never duplicates anything;
* rows a record refers to (the conversation, the user message a step's ``previousId``
  names) are created first in the same transaction, as placeholders if needed, so a
  step is stored even when its message is not (yet) known; the real message fills the
  placeholder in when it arrives;
* on PostgreSQL, reasoning steps go in with ``COPY`` into a temporary table plus one
  ``INSERT … SELECT … ON CONFLICT DO NOTHING`` (small batches: one ``INSERT … SELECT
  FROM unnest(…)``); ``bench/storage.py`` measures it against plain ``COPY``.

When the database is unreachable the failed batch is retried with exponential backoff
while new envelopes keep queueing in memory (bounded by ``max_memory_records`` /
``max_memory_bytes``); past that bound the oldest queued records move to fsync'd spill
segments on disk (:mod:`agent._spill`), which are written back, oldest first, once the
database answers. :meth:`StorageWriter.aclose` flushes for up to ``close_timeout``
seconds and spills whatever is left; the next writer on the same spill root replays it
first. Records the database refuses (a constraint or data error that a retry cannot fix)
are isolated by bisecting the batch and kept in the spill root's ``dead-letter/``.

Exception tree (SQLAlchemy/asyncpg/sqlite errors are mapped at this boundary)::

    Exception
    └── StorageError                 a database operation failed
        ├── StorageUnavailableError  cannot reach the database (refused, lost, restarting,
        │                            timed out) — the writer retries
        └── StorageRejectedError     the database refused the data (constraint, bad value)
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import enum
import hashlib
import logging
import math
import re
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgspec
from sqlalchemy import and_, bindparam, case, exists, func, literal, select, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from protocol import (
    AssistantMessage,
    AssistantSentence,
    Configuration,
    ControlStop,
    Envelope,
    ReasoningStep,
    StartAnswer,
    ToolUseRequest,
    ToolUseResult,
    Transcription,
    UnknownBody,
    UserMessage,
)

from ._db import create_engine, is_postgres
from ._spill import Item, Segment, SpillDir
from .sink import NullSink, StepSink
from .tables import conversations as CONVERSATIONS
from .tables import messages as MESSAGES
from .tables import reasoning_steps as STEPS
from .tables import sentences as SENTENCES
from .tables import tool_uses as TOOL_USES

__all__ = [
    "StorageError",
    "StorageRejectedError",
    "StorageUnavailableError",
    "StorageWriter",
    "WriterOptions",
    "WriterStats",
    "default_spill_root",
    "migrate",
    "open_sink",
]

logger = logging.getLogger("alicia.storage")

MIGRATIONS_DIR: Final = Path(__file__).resolve().parent.parent / "migrations"
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
_UTC: Final = dt.UTC


# --------------------------------------------------------------------------- errors


class StorageError(Exception):
    """A database operation failed (see the module docstring for the tree)."""


class StorageUnavailableError(StorageError):
    """The database cannot be reached right now; retrying later may succeed."""


class StorageRejectedError(StorageError):
    """The database refused the data itself (constraint or value); retrying cannot help."""


_UNAVAILABLE_SQLSTATE_CLASSES: Final = ("08", "53", "57", "40", "58", "XX")
_REJECTED_SQLSTATE_CLASSES: Final = ("22", "23")


def _sqlstate(exc: BaseException) -> str | None:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        for attr in ("sqlstate", "pgcode"):
            code = getattr(cur, attr, None)
            if isinstance(code, str) and len(code) == 5:
                return code
        nxt = getattr(cur, "orig", None)
        cur = nxt if isinstance(nxt, BaseException) else cur.__cause__
    return None


def map_error(exc: BaseException) -> StorageError:
    """Translate a driver/SQLAlchemy/OS error into our :class:`StorageError` tree."""
    if isinstance(exc, StorageError):
        return exc
    msg = f"{type(exc).__name__}: {exc}"
    state = _sqlstate(exc)
    if state is not None:
        if state[:2] in _REJECTED_SQLSTATE_CLASSES:
            return StorageRejectedError(msg)
        if state[:2] in _UNAVAILABLE_SQLSTATE_CLASSES:
            return StorageUnavailableError(msg)
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return StorageUnavailableError(msg)
    if isinstance(exc, sa_exc.IntegrityError | sa_exc.DataError):
        return StorageRejectedError(msg)
    if isinstance(exc, sa_exc.StatementError) and not isinstance(exc, sa_exc.DBAPIError):
        return StorageRejectedError(msg)  # a value could not even be bound (e.g. JSON)
    if isinstance(exc, UnicodeError | TypeError | ValueError | OverflowError):
        return StorageRejectedError(msg)  # raised by the driver while encoding a value
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.TimeoutError):
        return StorageUnavailableError(msg)
    if isinstance(exc, OSError | TimeoutError | ConnectionError | EOFError):
        return StorageUnavailableError(msg)
    module = type(exc).__module__
    if module.startswith("asyncpg") and (
        "Connection" in type(exc).__name__ or "Interface" in type(exc).__name__
    ):
        return StorageUnavailableError(msg)
    return StorageError(msg)


@contextlib.asynccontextmanager
async def _mapped() -> AsyncIterator[None]:
    try:
        yield
    except (asyncio.CancelledError, KeyboardInterrupt, SystemExit, MemoryError):
        raise
    except Exception as exc:
        raise map_error(exc) from exc


# --------------------------------------------------------------------------- options


def default_spill_root(url: str) -> Path:
    """``~/.local/state/alicia/spill/<database hash>``: one spill area per database."""
    safe = make_url(url).render_as_string(hide_password=True)
    digest = hashlib.sha256(safe.encode()).hexdigest()[:16]
    return Path.home() / ".local" / "state" / "alicia" / "spill" / digest


@dataclass(frozen=True, slots=True, kw_only=True)
class WriterOptions:
    """Tuning of :class:`StorageWriter`; the defaults suit one worker process."""

    spill_dir: Path | None = None
    """Spill root (default :func:`default_spill_root` of the URL). Writers on the same
    database must share it so a restarted worker replays what the last one left."""
    batch_size: int = 5000
    """Records per transaction at most."""
    linger_s: float = 0.05
    """How long a batch waits to fill once its first record is queued."""
    max_memory_records: int = 100_000
    """Queued records kept in memory before the oldest move to the spill file."""
    max_memory_bytes: int = 64 * 1024 * 1024
    """Approximate text bytes kept in memory before spilling."""
    spill_chunk: int = 10_000
    """Records per spill segment at most."""
    retry_initial_s: float = 0.1
    """First retry delay after a failed write; doubles up to ``retry_max_s``."""
    retry_max_s: float = 5.0
    """Longest delay between retries."""
    close_timeout_s: float = 10.0
    """:meth:`StorageWriter.aclose` writes for at most this long, then spills the rest."""
    query_timeout_s: float = 2.0
    """Time limit of :meth:`StorageWriter.last_step_index`'s database query."""
    copy_min_rows: int = 256
    """PostgreSQL: batches with at least this many steps use COPY, smaller ones unnest."""
    migrate: bool = True
    """Run ``alembic upgrade head`` on the first successful connection."""
    pool_size: int = 3
    """Connections kept by the engine (writer, step-index queries, spare)."""
    step_chains: int = 100_000
    """Chains whose last submitted step index is remembered (for seeding)."""


@dataclass(slots=True)
class WriterStats:
    """Counters of one writer, for tests, logs and benchmarks."""

    submitted: int = 0
    written: int = 0
    batches: int = 0
    retries: int = 0
    spilled: int = 0
    replayed: int = 0
    dead_lettered: int = 0
    last_error: str | None = None


# --------------------------------------------------------------------------- rows


_NUL: Final = "\x00"
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _text(s: str) -> str:
    """Storable text: NUL (PostgreSQL text cannot hold it) and lone surrogates (not
    UTF-8) become U+FFFD, so the record is kept instead of refused."""
    if _NUL in s:
        s = s.replace(_NUL, "\ufffd")
    if not s.isascii():
        try:
            s.encode()
        except UnicodeEncodeError:
            s = _SURROGATE.sub("\ufffd", s)
    return s


def _json(value: Any, depth: int = 0) -> Any:
    """A JSON-safe copy: NUL-free strings, bytes as base64, non-finite floats as null."""
    if depth > 64:
        return None
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, bool | int) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dict):
        return {_text(str(k)): _json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v, depth + 1) for v in value]
    if isinstance(value, msgspec.Struct):
        return _json(msgspec.to_builtins(value), depth + 1)
    return _text(str(value))


def _join_sentences(texts: Sequence[str]) -> str:
    """Chunks joined as one answer: a space only where neither side has whitespace."""
    out: list[str] = []
    for t in texts:
        if out and t and out[-1] and not out[-1][-1].isspace() and not t[0].isspace():
            out.append(" ")
        out.append(t)
    return "".join(out)


def _model_of(env: Envelope[Any]) -> str | None:
    meta = env.meta
    if not meta:
        return None
    model = meta.get("model")
    return _text(model) if isinstance(model, str) and model else None


def _tool_status(result: ToolUseResult) -> str:
    if result.success:
        return "success"
    code = (result.error_code or "").lower()
    return "cancelled" if code in ("tool_cancelled", "cancelled") else "error"


@dataclass(slots=True)
class _Rows:
    """The rows of one batch, grouped by table, ready to be written in one transaction."""

    convs: dict[str, list[Any]] = field(default_factory=dict)
    """conversation id -> [max client stanza | None, min server stanza | None, prefs | None]."""
    holders: dict[str, dict[str, Any]] = field(default_factory=dict)
    messages: dict[str, dict[str, Any]] = field(default_factory=dict)
    sentences: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    steps: list[tuple[Any, ...]] = field(default_factory=list)
    tool_requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    tool_results: dict[str, dict[str, Any]] = field(default_factory=dict)
    stops: list[dict[str, Any]] = field(default_factory=list)
    incomplete: list[dict[str, Any]] = field(default_factory=list)
    """AssistantMessages with ``state: partial``: the answer is marked failed."""
    final_seen: set[str] = field(default_factory=set)

    def conv(self, cid: str) -> list[Any]:
        c = self.convs.get(cid)
        if c is None:
            c = self.convs[cid] = [None, None, None]
        return c

    def holder(self, mid: str, cid: str, role: str, at: dt.datetime) -> None:
        if mid not in self.holders:
            self.conv(cid)
            self.holders[mid] = {
                "id": mid,
                "conversation_id": cid,
                "sequence_number": 0,
                "message_role": role,
                "contents": "",
                "completion_status": "pending",
                "placeholder": True,
                "sent_at": at,
            }

    def message(
        self,
        env: Envelope[Any],
        at: dt.datetime,
        *,
        mid: str,
        cid: str,
        previous: str | None,
        role: str,
        contents: str,
        status: str,
        completed: dt.datetime | None,
        model: str | None,
    ) -> None:
        self.holder(mid, cid, role, at)
        if previous:
            self.holder(previous, cid, "assistant" if role == "user" else "user", at)
        if mid in self.messages:
            return
        self.messages[mid] = {
            "id": mid,
            "conversation_id": cid,
            "sequence_number": abs(env.stanza_id),
            "previous_id": previous or None,
            "message_role": role,
            "contents": _text(contents),
            "completion_status": status,
            "placeholder": False,
            "model": model,
            "sent_at": at,
            "completed_at": completed,
        }


def build_rows(items: Iterable[Item]) -> _Rows:
    """Group queued envelopes into table rows (pure; envelopes that store nothing only
    update their conversation's stanza marks)."""
    rows = _Rows()
    for item in items:
        env = item.env
        body = env.body
        kind = type(body)
        if kind is UnknownBody:
            continue
        cid_env = env.conversation_id
        if cid_env:
            c = rows.conv(cid_env)
            sid = env.stanza_id
            if sid > 0:
                if c[0] is None or sid > c[0]:
                    c[0] = sid
            elif sid < 0 and (c[1] is None or sid < c[1]):
                c[1] = sid
        at = dt.datetime.fromtimestamp(item.at, _UTC)
        if kind is ReasoningStep:
            cid = body.conversation_id or cid_env
            rows.conv(cid)
            rows.holder(body.previous_id, cid, "user", at)
            rows.steps.append(
                (
                    body.id,
                    body.previous_id,
                    cid,
                    _text(body.content),
                    body.step_index,
                    body.total_steps,
                    at,
                )
            )
        elif kind is UserMessage or (kind is Transcription and body.final):
            rows.message(
                env,
                at,
                mid=body.id,
                cid=body.conversation_id or cid_env,
                previous=body.previous_id,
                role="user",
                contents=body.content if kind is UserMessage else body.text,
                status="completed",
                completed=at,
                model=None,
            )
        elif kind is StartAnswer:
            rows.message(
                env,
                at,
                mid=body.id,
                cid=body.conversation_id or cid_env,
                previous=body.previous_id,
                role="assistant",
                contents="",
                status="streaming",
                completed=None,
                model=_model_of(env),
            )
        elif kind is AssistantMessage:
            rows.message(
                env,
                at,
                mid=body.id,
                cid=body.conversation_id or cid_env,
                previous=body.previous_id,
                role="assistant",
                contents=body.content,
                status="failed" if body.state == "partial" else "completed",
                completed=at,
                model=_model_of(env),
            )
            if body.state == "partial":
                rows.incomplete.append({"b_id": body.id, "b_at": at})
        elif kind is AssistantSentence:
            cid = body.conversation_id or cid_env
            rows.holder(body.previous_id, cid, "assistant", at)
            key = (body.previous_id, body.sequence)
            if body.is_final:
                rows.final_seen.add(body.previous_id)
            if key not in rows.sentences:
                rows.sentences[key] = {
                    "message_id": body.previous_id,
                    "sentence_sequence_number": body.sequence,
                    "id": body.id,
                    "text": _text(body.text),
                    "is_final": bool(body.is_final),
                    "sent_at": at,
                }
        elif kind is ToolUseRequest:
            cid = body.conversation_id or cid_env
            mid = body.previous_id or item.turn or f"{cid}:unknown-turn"
            rows.conv(cid)
            rows.holder(mid, cid, "user", at)
            if body.id not in rows.tool_requests:
                rows.tool_requests[body.id] = {
                    "id": body.id,
                    "message_id": mid,
                    "conversation_id": cid,
                    "tool_name": _text(body.tool_name),
                    "tool_arguments": _json(body.parameters),
                    "status": "running" if body.execution == "server" else "pending",
                    "execution": body.execution,
                    "sent_at": at,
                }
        elif kind is ToolUseResult:
            rows.tool_results[body.request_id] = {
                "b_id": body.request_id,
                "status": _tool_status(body),
                "tool_result": _json(body.result),
                "error_code": _text(body.error_code) if body.error_code else None,
                "error_message": _text(body.error_message) if body.error_message else None,
                "completed_at": at,
            }
        elif kind is ControlStop and cid_env and body.target_id not in rows.final_seen:
            # Stops apply before this batch's sentences; one aimed at an answer whose
            # final sentence came earlier in the batch arrived too late to stop it.
            rows.stops.append({"b_conv": cid_env, "b_target": body.target_id, "b_at": at})
        elif kind is Configuration and env.stanza_id > 0 and cid_env:
            prefs = {
                "features": body.features,
                "preferredLanguage": body.preferred_language,
                "device": body.device,
                "clientVersion": body.client_version,
                "enableReordering": body.enable_reordering,
            }
            rows.conv(cid_env)[2] = _json({k: v for k, v in prefs.items() if v is not None})
    return rows


# --------------------------------------------------------------------------- statements


class _StepConflictError(StorageRejectedError):
    """A step took a (message, stepIndex) already held by another live step."""


class _Dialect:
    """Dialect-specific SQL for one transaction (PostgreSQL or SQLite)."""

    def __init__(self, postgres: bool, copy_min_rows: int) -> None:
        self.postgres = postgres
        self.insert = pg_dialect.insert if postgres else sqlite_dialect.insert
        self.copy_min_rows = copy_min_rows
        self._upsert_message = self._message_upsert()

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
            },
            where=t.c.placeholder.is_(True),
        )

    async def write(self, conn: AsyncConnection, rows: _Rows, *, supersede: bool) -> None:
        """Apply ``rows`` on ``conn`` (inside the caller's transaction)."""
        if rows.convs:
            await conn.execute(
                self.insert(CONVERSATIONS).on_conflict_do_nothing(index_elements=["id"]),
                [{"id": cid, "livekit_room_name": cid} for cid in sorted(rows.convs)],
            )
        if rows.holders:
            await conn.execute(
                self.insert(MESSAGES).on_conflict_do_nothing(index_elements=["id"]),
                [rows.holders[k] for k in sorted(rows.holders)],
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
        if rows.steps:
            if supersede:
                await self._steps_superseding(conn, rows.steps)
            else:
                await self._steps(conn, rows.steps)
        if rows.tool_requests:
            await self._tool_requests(conn, rows)
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

    async def _sentences(self, conn: AsyncConnection, rows: _Rows) -> None:
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
                "b_contents": _join_sentences(parts),
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
                await self._steps_pg(conn, steps)
            else:
                await conn.execute(
                    self.insert(STEPS).on_conflict_do_nothing(index_elements=["id"]),
                    [dict(zip(_STEP_COLUMNS, s, strict=True)) for s in steps],
                )
        except Exception as exc:
            if _STEP_UNIQUE in str(exc) or "alicia_reasoning_steps.message_id" in str(exc):
                raise _StepConflictError(str(exc)) from exc
            raise

    async def _steps_pg(self, conn: AsyncConnection, steps: list[tuple[Any, ...]]) -> None:
        raw = await conn.get_raw_connection()
        apg: Any = raw.driver_connection
        if not apg.is_in_transaction():  # pragma: no cover - write() always starts one first
            raise RuntimeError("step COPY outside the batch transaction")
        cols = ", ".join(_STEP_COLUMNS)
        if len(steps) >= self.copy_min_rows:
            await apg.execute(
                "CREATE TEMP TABLE IF NOT EXISTS alicia_tmp_steps ("
                "id text, message_id text, conversation_id text, content text, "
                "sequence_number integer, total_steps integer, sent_at timestamptz"
                ") ON COMMIT DELETE ROWS"
            )
            await apg.copy_records_to_table(
                "alicia_tmp_steps", records=steps, columns=_STEP_COLUMNS
            )
            await apg.execute(
                f"INSERT INTO alicia_reasoning_steps ({cols}) SELECT {cols} "
                "FROM alicia_tmp_steps ON CONFLICT (id) DO NOTHING"
            )
        else:
            columns = [list(c) for c in zip(*steps, strict=True)]
            await apg.execute(
                f"INSERT INTO alicia_reasoning_steps ({cols}) SELECT * FROM unnest("
                "$1::text[], $2::text[], $3::text[], $4::text[], $5::integer[], "
                "$6::integer[], $7::timestamptz[]) ON CONFLICT (id) DO NOTHING",
                *columns,
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

    async def _tool_requests(self, conn: AsyncConnection, rows: _Rows) -> None:
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

    async def _conversation_marks(self, conn: AsyncConnection, rows: _Rows) -> None:
        c = CONVERSATIONS
        marks = [
            {"b_id": cid, "b_client": v[0], "b_server": v[1]}
            for cid, v in sorted(rows.convs.items())
            if v[0] is not None or v[1] is not None
        ]
        if marks:
            client = bindparam("b_client", type_=c.c.last_client_stanza_id.type)
            server = bindparam("b_server", type_=c.c.last_server_stanza_id.type)
            await conn.execute(
                update(c)
                .where(c.c.id == bindparam("b_id"))
                .values(
                    last_client_stanza_id=case(
                        (client > c.c.last_client_stanza_id, client),
                        else_=c.c.last_client_stanza_id,
                    ),
                    last_server_stanza_id=case(
                        (server < c.c.last_server_stanza_id, server),
                        else_=c.c.last_server_stanza_id,
                    ),
                ),
                marks,
            )
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


# --------------------------------------------------------------------------- migrations


def _upgrade_sync(connection: Any, revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    cfg.attributes["configure_logger"] = False
    command.upgrade(cfg, revision)


def _downgrade_sync(connection: Any, revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    cfg.attributes["configure_logger"] = False
    command.downgrade(cfg, revision)


async def migrate(
    target: str | AsyncEngine, revision: str = "head", *, downgrade: bool = False
) -> None:
    """Run ``alembic upgrade <revision>`` (or ``downgrade``) on a URL or engine."""
    engine = create_engine(target, pooled=False) if isinstance(target, str) else target
    try:
        async with _mapped(), engine.begin() as conn:
            await conn.run_sync(_downgrade_sync if downgrade else _upgrade_sync, revision)
    finally:
        if isinstance(target, str):
            await engine.dispose()


# --------------------------------------------------------------------------- writer


class _State(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


def _weight(body: Any) -> int:
    text = getattr(body, "content", None) or getattr(body, "text", None)
    return 128 + (len(text) if isinstance(text, str) else 256)


class StorageWriter:
    """The :class:`~agent.sink.StepSink` that stores traffic in PostgreSQL or SQLite.

    Use ``async with StorageWriter(url) as w`` or :func:`open_sink`. ``submit`` after
    :meth:`aclose` raises :class:`RuntimeError`.
    """

    def __init__(self, url: str, options: WriterOptions | None = None) -> None:
        self.url = url
        self.options = opts = options or WriterOptions()
        self.stats = WriterStats()
        self._postgres = is_postgres(url)
        self._engine: AsyncEngine | None = None
        self._dialect = _Dialect(self._postgres, opts.copy_min_rows)
        self._spill = SpillDir(opts.spill_dir or default_spill_root(url))
        self._state = _State.NEW
        self._mem: deque[Item] = deque()
        self._mem_bytes = 0
        self._seq = 0
        self._done_seq = 0
        self._inflight: list[Item] = []
        self._inflight_seg: Segment | None = None
        self._lock = asyncio.Lock()  # orders spilling against batch taking
        self._wake = asyncio.Event()
        self._spill_wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._closing = asyncio.Event()
        self._migrated = not opts.migrate
        self._turns: OrderedDict[str, str] = OrderedDict()
        self._steps: OrderedDict[str, int] = OrderedDict()
        self._write_atask: asyncio.Task[None] | None = None
        self._spill_atask: asyncio.Task[None] | None = None
        self._deadline: float | None = None

    # -- lifecycle --------------------------------------------------------------

    async def start(self) -> StorageWriter:
        """Adopt leftover spill segments, open the engine and start the background tasks."""
        if self._state is not _State.NEW:
            raise RuntimeError("StorageWriter can only be started once")
        adopted = await asyncio.to_thread(self._spill.open)
        if adopted:
            await asyncio.to_thread(self._index_segments, adopted)
            logger.info(
                "adopted spilled records",
                extra={"segments": len(adopted), "spill_dir": str(self._spill.root)},
            )
        self._engine = create_engine(self.url, pool_size=self.options.pool_size)
        self._state = _State.RUNNING
        self._write_atask = asyncio.create_task(self._write_loop(), name="alicia-storage-writer")
        self._spill_atask = asyncio.create_task(self._spill_loop(), name="alicia-storage-spill")
        return self

    async def __aenter__(self) -> StorageWriter:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Write what can be written within ``close_timeout_s``, spill the rest, stop."""
        if self._state in (_State.CLOSING, _State.CLOSED):
            return
        if self._state is _State.NEW:
            self._state = _State.CLOSED
            return
        self._state = _State.CLOSING
        self._deadline = time.monotonic() + self.options.close_timeout_s
        self._closing.set()
        self._wake.set()
        self._spill_wake.set()
        tasks = [t for t in (self._write_atask, self._spill_atask) if t is not None]
        try:
            await asyncio.wait_for(
                asyncio.gather(*tasks, return_exceptions=True),
                self.options.close_timeout_s + 5.0,
            )
        except TimeoutError:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        left = list(self._inflight if self._inflight_seg is None else [])
        left.extend(self._mem)
        self._mem.clear()
        self._inflight = []
        if left:
            left.sort(key=lambda it: it.seq)
            for i in range(0, len(left), self.options.spill_chunk):
                self._spill.write(left[i : i + self.options.spill_chunk])
            self.stats.spilled += len(left)
            logger.warning(
                "records left in the spill file at close",
                extra={"records": len(left), "spill_dir": str(self._spill.own)},
            )
        self._spill.close()
        if self._engine is not None:
            await self._engine.dispose()
        self._state = _State.CLOSED

    # -- StepSink -----------------------------------------------------------------

    def submit(self, env: Envelope[Any]) -> None:
        """Queue ``env`` and return at once (never blocks, never raises for the database)."""
        if self._state is not _State.RUNNING:
            raise RuntimeError(f"StorageWriter is {self._state.value}")
        body = env.body
        kind = type(body)
        turn = None
        if kind is ReasoningStep:
            self._note_step(body.previous_id, body.step_index)
            self._note_turn(env.conversation_id, body.previous_id)
        elif kind is UserMessage or (kind is Transcription and body.final):
            self._note_turn(env.conversation_id, body.id)
        elif kind is ToolUseRequest and not body.previous_id:
            turn = self._turns.get(env.conversation_id)
        elif kind is UnknownBody:
            return
        self._seq += 1
        self._mem.append(Item(self._seq, time.time(), env, turn))
        self._mem_bytes += _weight(body)
        self.stats.submitted += 1
        self._wake.set()
        opts = self.options
        if len(self._mem) > opts.max_memory_records or self._mem_bytes > opts.max_memory_bytes:
            self._spill_wake.set()

    async def last_step_index(self, previous_id: str) -> int:
        """Highest ``stepIndex`` of the chain: stored, queued or spilled (0 if none).

        If the database does not answer within ``query_timeout_s`` the queued/spilled
        part alone is returned (logged); a later duplicate index supersedes, never loses.
        """
        local = self._steps.get(previous_id, 0)
        if self._engine is None:
            return local
        t = STEPS
        try:
            async with (
                asyncio.timeout(self.options.query_timeout_s),
                _mapped(),
                self._engine.connect() as conn,
            ):
                stored = await conn.scalar(
                    select(func.max(t.c.sequence_number)).where(
                        t.c.message_id == previous_id, t.c.deleted_at.is_(None)
                    )
                )
        except (StorageError, TimeoutError) as exc:
            logger.warning("step index query failed", extra={"error": str(exc)})
            return local
        return max(local, int(stored or 0))

    async def flush(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Wait until everything submitted so far (and every adopted segment) is stored."""
        target = self._seq
        async with asyncio.timeout(timeout):
            while self._done_seq < target or any(
                s.dir_key != self._spill.own.name for s in self._spill.segments
            ):
                if self._state is not _State.RUNNING:
                    raise RuntimeError(f"StorageWriter is {self._state.value}")
                self._progress.clear()
                await self._progress.wait()

    @property
    def queued(self) -> int:
        """Records not yet stored: in memory, in flight and in spill segments."""
        spilled = sum(max(s.count, 1) for s in self._spill.segments)
        return len(self._mem) + len(self._inflight) + spilled

    # -- bookkeeping -------------------------------------------------------------

    def _note_step(self, previous_id: str, index: int) -> None:
        steps = self._steps
        if steps.get(previous_id, 0) < index:
            steps[previous_id] = index
        steps.move_to_end(previous_id)
        if len(steps) > self.options.step_chains:
            steps.popitem(last=False)

    def _note_turn(self, conversation_id: str, message_id: str) -> None:
        turns = self._turns
        turns[conversation_id] = message_id
        turns.move_to_end(conversation_id)
        if len(turns) > 10_000:
            turns.popitem(last=False)

    def _index_segments(self, segments: Sequence[Segment]) -> None:
        for seg in segments:
            try:
                items = self._spill.read(seg)
            except (OSError, msgspec.DecodeError, KeyError, ValueError):
                continue
            for it in items:
                body = it.env.body
                if isinstance(body, ReasoningStep):
                    self._note_step(body.previous_id, body.step_index)

    # -- background: spilling ---------------------------------------------------------

    async def _spill_loop(self) -> None:
        opts = self.options
        while True:
            await self._spill_wake.wait()
            self._spill_wake.clear()
            if self._closing.is_set():
                return
            while (
                len(self._mem) > opts.max_memory_records or self._mem_bytes > opts.max_memory_bytes
            ):
                async with self._lock:
                    n = min(opts.spill_chunk, len(self._mem))
                    chunk = [self._mem[i] for i in range(n)]
                    try:
                        await asyncio.to_thread(self._spill.write, chunk)
                    except OSError as exc:
                        logger.error("spill write failed", extra={"error": str(exc)})
                        await asyncio.sleep(1.0)
                        continue
                    for _ in range(n):
                        self._mem_bytes -= _weight(self._mem.popleft().env.body)
                    self.stats.spilled += n
                logger.warning(
                    "database behind: records spilled to disk",
                    extra={"records": n, "spill_dir": str(self._spill.own)},
                )

    # -- background: writing ----------------------------------------------------------

    async def _next_batch(self) -> bool:
        """Fill ``_inflight`` (a spilled segment first, else memory); False when done."""
        opts = self.options
        while True:
            if self._out_of_time():
                return False
            async with self._lock:
                seg = self._spill.oldest()
                if seg is not None:
                    try:
                        items = await asyncio.to_thread(self._spill.read, seg)
                    except (OSError, msgspec.DecodeError, KeyError, ValueError) as exc:
                        logger.error(
                            "unreadable spill segment moved aside", extra={"error": str(exc)}
                        )
                        self._spill.quarantine(seg)
                        continue
                    self._inflight, self._inflight_seg = items, seg
                    return True
                if self._mem:
                    n = min(opts.batch_size, len(self._mem))
                    batch = [self._mem.popleft() for _ in range(n)]
                    self._mem_bytes -= sum(_weight(it.env.body) for it in batch)
                    self._inflight, self._inflight_seg = batch, None
                    return True
            if self._closing.is_set():
                return False
            self._wake.clear()
            await self._wake.wait()
            if len(self._mem) < opts.batch_size and not self._closing.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), opts.linger_s)

    async def _write_loop(self) -> None:
        while await self._next_batch():
            done = await self._write_resilient(self._inflight)
            if not done:
                return  # closing with the database still down: aclose spills the rest
            if self._inflight_seg is not None:
                self._spill.remove(self._inflight_seg)
                self.stats.replayed += len(self._inflight)
                if self._inflight_seg.dir_key == self._spill.own.name:
                    self._done_seq = max(self._done_seq, self._inflight[-1].seq)
            else:
                self._done_seq = max(self._done_seq, self._inflight[-1].seq)
            self._inflight, self._inflight_seg = [], None
            self._progress.set()

    def _out_of_time(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    async def _write_resilient(self, items: list[Item]) -> bool:
        """Store ``items``, retrying while the database is away; False if closing first."""
        delay = self.options.retry_initial_s
        while True:
            try:
                await self._write(items)
            except StorageRejectedError as exc:
                if len(items) == 1:
                    await asyncio.to_thread(self._spill.dead_letter, items)
                    self.stats.dead_lettered += 1
                    logger.error(
                        "record refused by the database, kept in dead-letter",
                        extra={"error": str(exc), "stanza_id": items[0].env.stanza_id},
                    )
                    return True
                mid = len(items) // 2
                return await self._write_resilient(items[:mid]) and await self._write_resilient(
                    items[mid:]
                )
            except StorageError as exc:
                self.stats.retries += 1
                self.stats.last_error = str(exc)
                logger.warning(
                    "database write failed, will retry",
                    extra={"error": str(exc), "retry_in_s": delay, "records": len(items)},
                )
                if items is self._inflight and self._inflight_seg is None:
                    await self._persist_inflight()
                if self._out_of_time():
                    return False
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), delay)
                if self._closing.is_set() and self._out_of_time():
                    return False
                delay = min(delay * 2, self.options.retry_max_s)
            else:
                self.stats.written += len(items)
                self.stats.batches += 1
                return True

    async def _persist_inflight(self) -> None:
        """Keep a batch that could not be written on disk while it is retried."""
        async with self._lock:
            try:
                seg = await asyncio.to_thread(self._spill.write, self._inflight)
            except OSError as exc:
                logger.error("spill write failed", extra={"error": str(exc)})
                return
        self._inflight_seg = seg
        self.stats.spilled += len(self._inflight)

    async def _write(self, items: Sequence[Item]) -> None:
        engine = self._engine
        if engine is None:
            raise RuntimeError("StorageWriter not started")
        if not self._migrated:
            await migrate(engine)
            self._migrated = True
        rows = build_rows(items)
        supersede = False
        while True:
            try:
                async with _mapped(), engine.begin() as conn:
                    await self._dialect.write(conn, rows, supersede=supersede)
                return
            except _StepConflictError:
                if supersede:
                    raise
                supersede = True


async def open_sink(url: str | None, options: WriterOptions | None = None) -> StepSink:
    """A started :class:`StorageWriter` for ``url``; :class:`NullSink` if ``url`` is empty."""
    if not url:
        return NullSink()
    return await StorageWriter(url, options).start()
