"""Read one stored conversation's live rows (``deleted_at IS NULL``) back as turns.

:func:`read_conversation` loads the conversation, its messages, reasoning steps and tool
uses through the storage tables (PostgreSQL or SQLite) and hands them to
:func:`~alicia.agent.export.turns.build_turns`. Nothing is decrypted.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import make_url

from alicia.agent.storage.engine import create_engine, is_sqlite
from alicia.agent.storage.errors import StorageError, map_error
from alicia.agent.storage.tables import conversations, messages, reasoning_steps, tool_uses

from .turns import StoredConversation, StoredMessage, StoredStep, StoredToolUse, build_turns, utc

__all__ = ["ConversationNotFound", "read_conversation"]


class ConversationNotFound(LookupError):
    """No live conversation with that id in the database."""


def _row(values: Mapping[Any, Any]) -> dict[str, Any]:
    return {str(k): utc(v) if isinstance(v, dt.datetime) else v for k, v in values.items()}


def _message(r: dict[str, Any]) -> StoredMessage:
    return StoredMessage(
        r["id"],
        str(r["message_role"]),
        r["contents"] or "",
        str(r["completion_status"]),
        r["previous_id"],
        r["sequence_number"],
        r["sent_at"],
        r,
    )


def _step(r: dict[str, Any]) -> StoredStep:
    return StoredStep(r["id"], r["message_id"], r["sequence_number"], r["content"], r["sent_at"], r)


def _tool(r: dict[str, Any]) -> StoredToolUse:
    args = r["tool_arguments"]
    return StoredToolUse(
        r["id"],
        r["message_id"],
        r["tool_name"],
        args if isinstance(args, dict) else {},
        r["tool_result"],
        str(r["status"]),
        r["error_code"],
        r["error_message"],
        r["sequence_number"],
        r["sent_at"],
        r["completed_at"],
        r,
    )


def _check_sqlite_file(url: str) -> None:
    database = make_url(url).database
    if database and database != ":memory:" and not Path(database).is_file():
        raise StorageError(f"no SQLite database at {database}")


async def read_conversation(url: str, conversation_id: str) -> StoredConversation:
    """The live rows of ``conversation_id`` in ``url`` as turns.

    Raises :class:`ConversationNotFound`, or :class:`~alicia.agent.storage.errors.StorageError`
    when the database cannot be read.
    """
    try:
        if is_sqlite(url):
            _check_sqlite_file(url)
        engine = create_engine(url, pooled=False)
    except StorageError:
        raise
    except Exception as exc:  # a URL SQLAlchemy cannot parse, a driver it cannot load
        raise map_error(exc) from exc
    try:
        async with engine.connect() as conn:
            conv = (
                await conn.execute(
                    select(conversations).where(
                        conversations.c.id == conversation_id, conversations.c.deleted_at.is_(None)
                    )
                )
            ).one_or_none()
            if conv is None:
                raise ConversationNotFound(conversation_id)
            found: list[list[dict[str, Any]]] = []
            for table in (messages, reasoning_steps, tool_uses):
                result = await conn.execute(
                    select(table).where(
                        table.c.conversation_id == conversation_id, table.c.deleted_at.is_(None)
                    )
                )
                found.append([_row(r._mapping) for r in result])
    except ConversationNotFound:
        raise
    except Exception as exc:
        raise map_error(exc) from exc
    finally:
        await engine.dispose()
    msg_rows, step_rows, tool_rows = found
    turns = build_turns(map(_message, msg_rows), map(_step, step_rows), map(_tool, tool_rows))
    return StoredConversation(conversation_id, _row(conv._mapping), turns)
