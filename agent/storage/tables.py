"""SQLAlchemy 2 declarative models of the ``alicia_*`` tables (PROTOCOL.md §5).

``Base.metadata`` is Alembic's target; the migrations in ``migrations/versions`` create
exactly these tables (``tests/storage/test_migrations.py`` compares the two). The same schema
runs on PostgreSQL (production, ``postgresql+asyncpg``) and SQLite (embedded,
``sqlite+aiosqlite``):

* enums are ``VARCHAR`` + ``CHECK`` constraints on both backends (no native enum types,
  so adding a value is a plain constraint change);
* JSON columns are ``JSONB`` on PostgreSQL and ``JSON`` (text) on SQLite;
* timestamps are ``TIMESTAMP WITH TIME ZONE`` (UTC) with ``now()`` defaults;
  ``updated_at`` is kept by a trigger (created by the migration);
* soft delete: ``deleted_at`` NULL = live row.

Columns beyond §5, for analytics and for a writer that must never lose a step:

* ``sent_at`` — when the envelope passed through the worker (event time; ``created_at``
  is insert time, which lags during a database outage);
* ``alicia_messages.model`` — the LLM model of an answer (envelope ``meta.model``);
* ``alicia_messages.placeholder`` — row created because something referenced the id
  before the message itself was stored (steps of a turn whose user message arrives in
  a later batch); the real message fills it in;
* ``alicia_messages.completed_at`` — final sentence / AssistantMessage time;
* ``alicia_messages.prompt_tokens``, ``completion_tokens``, ``reasoning_tokens`` — an
  answer's provider-reported token usage, summed over the turn's LLM rounds, and
  ``first_reasoning_ms`` — ms from the turn's first LLM request to its first reasoning
  text (storage-only envelope meta, :mod:`alicia.agent.engine.sink`); NULL when not reported;
* ``alicia_sentences`` — AssistantSentence chunks (idempotent by ``(message_id,
  sentence_sequence_number)``); the answer's ``contents`` is their join;
* ``alicia_tool_uses.conversation_id``, ``execution``, ``error_code``;
* ``alicia_remarks`` — the progress remarks the agent spoke while its model reasoned
  (assistant ``progress`` Commentary), as spoken or, under zero data retention, only
  ``sealed`` with the conversation's data key.
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any, Final

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Double,
    Enum,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
    func,
)
from sqlalchemy import (
    text as sql_text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "TABLE_NAMES",
    "AgentLease",
    "Base",
    "CompletionStatus",
    "Conversation",
    "ConversationStatus",
    "Message",
    "MessageRole",
    "ReasoningStep",
    "Remark",
    "SentLog",
    "Sentence",
    "SyncStatus",
    "ToolStatus",
    "ToolUse",
    "agent_leases",
    "conversations",
    "messages",
    "reasoning_steps",
    "remarks",
    "sent_log",
    "sentences",
    "tool_uses",
]

NAMING: Final = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

Json = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
"""Portable JSON: JSONB on PostgreSQL, JSON text on SQLite; Python ``None`` is SQL NULL."""


class ConversationStatus(enum.StrEnum):
    """``alicia_conversations.status``."""

    ACTIVE = "active"
    ARCHIVED = "archived"
    DELETED = "deleted"


class MessageRole(enum.StrEnum):
    """``alicia_messages.message_role``."""

    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"


class CompletionStatus(enum.StrEnum):
    """``alicia_messages.completion_status``: ``streaming`` at StartAnswer, then ``completed``."""

    PENDING = "pending"
    STREAMING = "streaming"
    COMPLETED = "completed"
    FAILED = "failed"


class SyncStatus(enum.StrEnum):
    """``alicia_messages.sync_status`` (offline sync of clients that keep a local copy)."""

    PENDING = "pending"
    SYNCED = "synced"
    CONFLICT = "conflict"


class ToolStatus(enum.StrEnum):
    """``alicia_tool_uses.status``: request ⇒ pending/running; result ⇒ success/error/cancelled."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCESS = "success"
    ERROR = "error"
    CANCELLED = "cancelled"


def _enum(cls: type[enum.StrEnum], name: str) -> Enum:
    # VARCHAR + CHECK on every backend, values (not member names) stored.
    return Enum(
        cls,
        name=name,
        native_enum=False,
        create_constraint=True,
        length=16,
        validate_strings=True,
        values_callable=lambda members: [m.value for m in members],
    )


def _now() -> Any:
    return func.now()


class Base(DeclarativeBase):
    """Declarative base; its metadata (with a naming convention) is Alembic's target."""

    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {  # noqa: RUF012 - SQLAlchemy's documented class attribute
        dt.datetime: DateTime(timezone=True),
        str: Text(),
    }


class _Timestamps:
    created_at: Mapped[dt.datetime] = mapped_column(server_default=_now())
    updated_at: Mapped[dt.datetime] = mapped_column(server_default=_now())
    deleted_at: Mapped[dt.datetime | None] = mapped_column(default=None)


class Conversation(_Timestamps, Base):
    """One conversation = one LiveKit room (``id`` = room name = ``conversationId``)."""

    __tablename__ = "alicia_conversations"

    id: Mapped[str] = mapped_column(primary_key=True)
    user_id: Mapped[str] = mapped_column(server_default=sql_text("'default_user'"))
    title: Mapped[str] = mapped_column(server_default=sql_text("''"))
    status: Mapped[ConversationStatus] = mapped_column(
        _enum(ConversationStatus, "conversation_status"), server_default=sql_text("'active'")
    )
    livekit_room_name: Mapped[str | None]
    preferences: Mapped[dict[str, Any]] = mapped_column(Json, server_default=sql_text("'{}'"))
    last_client_stanza_id: Mapped[int] = mapped_column(Integer, server_default=sql_text("0"))
    last_server_stanza_id: Mapped[int] = mapped_column(Integer, server_default=sql_text("-1"))


class Message(_Timestamps, Base):
    """A user turn (UserMessage, final Transcription) or answer (StartAnswer, AssistantMessage)."""

    __tablename__ = "alicia_messages"

    id: Mapped[str] = mapped_column(primary_key=True)
    conversation_id: Mapped[str] = mapped_column(
        ForeignKey("alicia_conversations.id", ondelete="CASCADE")
    )
    sequence_number: Mapped[int] = mapped_column(Integer)
    """``|stanzaId|`` of the envelope that created the message (0 for a placeholder)."""
    previous_id: Mapped[str | None] = mapped_column(
        ForeignKey("alicia_messages.id", ondelete="SET NULL")
    )
    message_role: Mapped[MessageRole] = mapped_column(_enum(MessageRole, "message_role"))
    contents: Mapped[str] = mapped_column(server_default=sql_text("''"))
    completion_status: Mapped[CompletionStatus] = mapped_column(
        _enum(CompletionStatus, "completion_status"), server_default=sql_text("'completed'")
    )
    model: Mapped[str | None]
    placeholder: Mapped[bool] = mapped_column(Boolean, server_default=sql_text("false"))
    local_id: Mapped[str | None]
    server_id: Mapped[str | None]
    sync_status: Mapped[SyncStatus] = mapped_column(
        _enum(SyncStatus, "sync_status"), server_default=sql_text("'synced'")
    )
    synced_at: Mapped[dt.datetime | None]
    sent_at: Mapped[dt.datetime] = mapped_column(server_default=_now())
    completed_at: Mapped[dt.datetime | None]
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    """Answers: provider-reported prompt tokens of the turn (all LLM rounds)."""
    completion_tokens: Mapped[int | None] = mapped_column(Integer)
    """Answers: completion tokens of the turn, reasoning tokens included."""
    reasoning_tokens: Mapped[int | None] = mapped_column(Integer)
    """Answers: reasoning tokens of the turn (part of ``completion_tokens``)."""
    first_reasoning_ms: Mapped[float | None] = mapped_column(Double)
    """Answers: ms from the turn's first LLM request to its first reasoning text."""
    participant: Mapped[str | None]
    """User messages: the identity that sent it (its owner), from storage-only meta."""

    __table_args__ = (
        Index("ix_alicia_messages_conversation_sequence", "conversation_id", "sequence_number"),
        Index("ix_alicia_messages_previous_id", "previous_id"),
        Index("ix_alicia_messages_sent_at", "sent_at"),
    )


class Sentence(_Timestamps, Base):
    """One AssistantSentence chunk of a streamed answer."""

    __tablename__ = "alicia_sentences"

    message_id: Mapped[str] = mapped_column(
        ForeignKey("alicia_messages.id", ondelete="CASCADE"), primary_key=True
    )
    sentence_sequence_number: Mapped[int] = mapped_column(Integer, primary_key=True)
    id: Mapped[str | None]
    text: Mapped[str]
    is_final: Mapped[bool] = mapped_column(Boolean, server_default=sql_text("false"))
    sent_at: Mapped[dt.datetime] = mapped_column(server_default=_now())


class ReasoningStep(_Timestamps, Base):
    """One ReasoningStep; ``message_id`` is its ``previousId`` (the user turn)."""

    __tablename__ = "alicia_reasoning_steps"

    id: Mapped[str] = mapped_column(primary_key=True)
    message_id: Mapped[str] = mapped_column(ForeignKey("alicia_messages.id", ondelete="CASCADE"))
    conversation_id: Mapped[str] = mapped_column(
        ForeignKey("alicia_conversations.id", ondelete="CASCADE")
    )
    content: Mapped[str]
    sequence_number: Mapped[int] = mapped_column(Integer)
    """``stepIndex``."""
    total_steps: Mapped[int | None] = mapped_column(Integer)
    sent_at: Mapped[dt.datetime] = mapped_column(server_default=_now())

    __table_args__ = (
        Index(
            "uq_alicia_reasoning_steps_live_message_sequence",
            "message_id",
            "sequence_number",
            unique=True,
            postgresql_where=sql_text("deleted_at IS NULL"),
            sqlite_where=sql_text("deleted_at IS NULL"),
        ),
        Index("ix_alicia_reasoning_steps_conversation_id", "conversation_id"),
    )


class ToolUse(_Timestamps, Base):
    """A ToolUseRequest and, once it arrives, its ToolUseResult."""

    __tablename__ = "alicia_tool_uses"

    id: Mapped[str] = mapped_column(primary_key=True)
    message_id: Mapped[str] = mapped_column(ForeignKey("alicia_messages.id", ondelete="CASCADE"))
    conversation_id: Mapped[str | None] = mapped_column(
        ForeignKey("alicia_conversations.id", ondelete="CASCADE")
    )
    tool_name: Mapped[str]
    tool_arguments: Mapped[dict[str, Any]] = mapped_column(Json, server_default=sql_text("'{}'"))
    tool_result: Mapped[Any | None] = mapped_column(Json)
    status: Mapped[ToolStatus] = mapped_column(
        _enum(ToolStatus, "tool_status"), server_default=sql_text("'pending'")
    )
    execution: Mapped[str | None]
    error_code: Mapped[str | None]
    error_message: Mapped[str | None]
    sequence_number: Mapped[int] = mapped_column(Integer)
    """Order of the request within its message (1, 2, …)."""
    sent_at: Mapped[dt.datetime] = mapped_column(server_default=_now())
    completed_at: Mapped[dt.datetime | None]

    __table_args__ = (
        Index("ix_alicia_tool_uses_message_sequence", "message_id", "sequence_number"),
    )


class Remark(_Timestamps, Base):
    """A progress remark the agent spoke while its model reasoned (type 15 Commentary,
    ``authorRole`` assistant, ``commentType`` progress), keyed by the Commentary id."""

    __tablename__ = "alicia_remarks"

    id: Mapped[str] = mapped_column(primary_key=True)
    conversation_id: Mapped[str] = mapped_column(
        ForeignKey("alicia_conversations.id", ondelete="CASCADE")
    )
    target_id: Mapped[str | None]
    """The user message the remark answers (``targetId``; not a foreign key: the remark
    is kept whatever becomes of the message)."""
    sequence_number: Mapped[int] = mapped_column(Integer)
    """``|stanzaId|`` of the envelope that announced it."""
    content: Mapped[str | None]
    """The spoken text; NULL when only ``sealed`` is kept."""
    sealed: Mapped[str | None]
    """Under zero data retention, the spoken text sealed with the conversation's data key
    (JWE bound to ``knd`` remark and ``ref`` = ``id``); NULL otherwise."""
    spoken_at: Mapped[dt.datetime] = mapped_column(server_default=_now())
    """The Commentary ``timestamp`` (else the envelope's time)."""
    sent_at: Mapped[dt.datetime] = mapped_column(server_default=_now())

    __table_args__ = (
        CheckConstraint("content IS NULL OR sealed IS NULL", name="plaintext_or_sealed"),
        Index("ix_alicia_remarks_conversation_spoken", "conversation_id", "spoken_at"),
        Index("ix_alicia_remarks_target_id", "target_id"),
    )


class ConversationKey(Base):
    """A conversation's data key, wrapped by the deployment's master key (JWE).

    Reasoning stored under zero data retention is encrypted with it; erasing it
    (``wrapped`` = NULL, ``alicia-admin erase``) makes that reasoning unreadable for good.
    """

    __tablename__ = "alicia_conversation_keys"

    conversation_id: Mapped[str] = mapped_column(primary_key=True)
    kid: Mapped[str]
    """Id of the master key that wrapped it."""
    wrapped: Mapped[str | None]
    """The data key sealed with the master key; NULL once erased."""
    created_at: Mapped[dt.datetime] = mapped_column(server_default=_now())
    erased_at: Mapped[dt.datetime | None]


class SentLog(Base):
    """Every envelope an agent sent, as sent (failover: replay and numbering go on)."""

    __tablename__ = "alicia_sent_log"

    conversation_id: Mapped[str] = mapped_column(
        ForeignKey("alicia_conversations.id", ondelete="CASCADE"), primary_key=True
    )
    stanza: Mapped[int] = mapped_column(Integer, primary_key=True)
    """``|stanzaId|``."""
    recipients: Mapped[Any | None] = mapped_column(Json)
    """Identities it went to; NULL = every client in the room."""
    level: Mapped[str | None]
    """Reasoning level of a ReasoningStep rendition, or ``remark:summary`` (a remark made
    from the reasoning: replayed only to participants granted summary or full)."""
    data: Mapped[bytes | None] = mapped_column(LargeBinary)
    """The bytes as sent (NULL when only ``sealed`` is kept)."""
    sealed: Mapped[str | None]
    """Under zero data retention, a plaintext step's bytes sealed with the data key."""
    sent_at: Mapped[dt.datetime] = mapped_column(server_default=_now())


class AgentLease(Base):
    """Which agent serves which room, renewed by its worker (epoch seconds, database clock)."""

    __tablename__ = "alicia_agents"

    conversation_id: Mapped[str] = mapped_column(primary_key=True)
    agent_identity: Mapped[str | None]
    worker_id: Mapped[str | None] = mapped_column(index=True)
    heartbeat_at: Mapped[float] = mapped_column(Double, server_default=sql_text("0"))
    dispatched_at: Mapped[float | None] = mapped_column(Double)
    epoch: Mapped[int] = mapped_column(BigInteger, server_default=sql_text("0"))
    """Raised by each claim; the holder's writes and renewals are conditional on it."""
    accepted_at: Mapped[float | None] = mapped_column(Double)
    """When a worker last started a job for the room (before its agent joins)."""


TABLE_NAMES: Final = tuple(Base.metadata.tables)
"""Every table this module defines, in dependency order."""


def _table(model: type[Base]) -> Table:
    table = model.__table__
    if not isinstance(table, Table):  # pragma: no cover - declarative always builds a Table
        raise TypeError(f"{model.__name__} is not mapped to a Table")
    return table


conversations: Final = _table(Conversation)
"""``alicia_conversations`` as a Core ``Table``."""
messages: Final = _table(Message)
"""``alicia_messages`` as a Core ``Table``."""
sentences: Final = _table(Sentence)
"""``alicia_sentences`` as a Core ``Table``."""
reasoning_steps: Final = _table(ReasoningStep)
"""``alicia_reasoning_steps`` as a Core ``Table``."""
tool_uses: Final = _table(ToolUse)
"""``alicia_tool_uses`` as a Core ``Table``."""
remarks: Final = _table(Remark)
"""``alicia_remarks`` as a Core ``Table``."""
conversation_keys: Final = _table(ConversationKey)
"""``alicia_conversation_keys`` as a Core ``Table``."""
sent_log: Final = _table(SentLog)
"""``alicia_sent_log`` as a Core ``Table``."""
agent_leases: Final = _table(AgentLease)
"""``alicia_agents`` as a Core ``Table``."""
