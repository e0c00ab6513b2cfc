"""What a conversation left in storage, read back by the agent that takes it over.

:func:`load_conversation` gives the last server ``stanzaId`` the conversation's sent log
holds (the numbering goes on after it) and its recent turns: the user message (and who
sent it), the answer so far and whether it was finished. :func:`sent_after` gives the
logged envelopes after a ``stanzaId``, for a client that resumes beyond the in-memory
ring. :func:`stored_message` says who holds a message id. All read on a connection of
the writer's engine.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from alicia.agent.engine.sink import (
    SentRecord,
    StoredConversation,
    StoredMessage,
    StoredTurn,
    TurnState,
)

from .tables import conversations as CONVERSATIONS
from .tables import messages as MESSAGES
from .tables import sent_log as SENT
from .tables import sentences as SENTENCES

__all__ = ["load_conversation", "sent_after", "stored_message"]


async def load_conversation(
    conn: AsyncConnection, conversation_id: str, *, limit: int
) -> StoredConversation:
    """The conversation's last logged server stanza and its last ``limit`` turns."""
    last = await conn.scalar(
        select(func.max(SENT.c.stanza)).where(SENT.c.conversation_id == conversation_id)
    )
    marked = await conn.scalar(
        select(CONVERSATIONS.c.last_server_stanza_id).where(CONVERSATIONS.c.id == conversation_id)
    )
    last_stanza = max(int(last or 0), abs(int(marked or 0)) if marked and marked < -1 else 0)
    m = MESSAGES.c
    live = (m.conversation_id == conversation_id) & m.deleted_at.is_(None)
    users = list(
        (
            await conn.execute(
                select(m.id, m.contents, m.participant, m.sent_at)
                .where(live, m.message_role == "user", m.placeholder.is_(False))
                .order_by(m.sent_at.desc(), m.id.desc())
                .limit(limit)
            )
        ).all()
    )
    users.reverse()
    ids = [u.id for u in users]
    answers: dict[str, Any] = {}
    if ids:
        rows = await conn.execute(
            select(m.id, m.previous_id, m.contents, m.completion_status, m.sent_at)
            .where(live, m.message_role == "assistant", m.previous_id.in_(ids))
            .order_by(m.sent_at)
        )
        for row in rows:
            answers[row.previous_id] = row  # the latest answer of each user message
    turns: list[StoredTurn] = []
    for user in users:
        answer = answers.get(user.id)
        if answer is None:
            turns.append(StoredTurn(user.id, user.contents, user.participant, None, "", "missing"))
            continue
        text, sentences = answer.contents or "", 0
        if answer.completion_status == "streaming":
            s = SENTENCES.c
            parts = (
                await conn.execute(
                    select(s.sentence_sequence_number, s.text)
                    .where(s.message_id == answer.id, s.deleted_at.is_(None))
                    .order_by(s.sentence_sequence_number)
                )
            ).all()
            text = " ".join(p.text for p in parts if p.text)
            sentences = max((p.sentence_sequence_number for p in parts), default=0)
        state: TurnState = "failed"
        if answer.completion_status == "completed":
            state = "complete"
        elif answer.completion_status == "streaming":
            state = "streaming"
        turns.append(
            StoredTurn(user.id, user.contents, user.participant, answer.id, text, state, sentences)
        )
    return StoredConversation(last_stanza, turns)


async def sent_after(
    conn: AsyncConnection, conversation_id: str, after: int, *, limit: int
) -> list[SentRecord]:
    """Logged server envelopes of the conversation with ``|stanzaId| > after``, in order."""
    s = SENT.c
    rows = await conn.execute(
        select(s.stanza, s.recipients, s.level, s.data, s.sealed)
        .where(s.conversation_id == conversation_id, s.stanza > after)
        .order_by(s.stanza)
        .limit(limit)
    )
    return [
        SentRecord(
            row.stanza,
            None if row.recipients is None else tuple(row.recipients),
            row.level,
            None if row.data is None else bytes(row.data),
            row.sealed,
        )
        for row in rows
    ]


async def stored_message(conn: AsyncConnection, message_id: str) -> StoredMessage | None:
    """The stored message with ``message_id``, soft-deleted ones included (None: free)."""
    m = MESSAGES.c
    row = (
        await conn.execute(
            select(m.conversation_id, m.message_role, m.participant).where(m.id == message_id)
        )
    ).first()
    if row is None:
        return None
    role = getattr(row.message_role, "value", row.message_role)
    return StoredMessage(row.conversation_id, str(role), row.participant)
