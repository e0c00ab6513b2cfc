"""Create the alicia_* tables, their indexes and the updated_at triggers.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = (
    "alicia_conversations",
    "alicia_messages",
    "alicia_sentences",
    "alicia_reasoning_steps",
    "alicia_tool_uses",
)


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON(none_as_null=True).with_variant(
        postgresql.JSONB(none_as_null=True), "postgresql"
    )


def _ts(name: str, *, nullable: bool = False) -> sa.Column[object]:
    tstz = sa.DateTime(timezone=True)
    if nullable:
        return sa.Column(name, tstz, nullable=True)
    return sa.Column(name, tstz, nullable=False, server_default=sa.func.now())


def _stamps() -> list[sa.Column[object]]:
    return [_ts("created_at"), _ts("updated_at"), _ts("deleted_at", nullable=True)]


def _check(table: str, name: str, column: str, values: Sequence[str]) -> sa.CheckConstraint:
    listed = ", ".join(f"'{v}'" for v in values)
    return sa.CheckConstraint(f"{column} IN ({listed})", name=f"ck_{table}_{name}")


def upgrade() -> None:
    """Create the tables, indexes and triggers."""
    op.create_table(
        "alicia_conversations",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False, server_default=sa.text("'default_user'")),
        sa.Column("title", sa.Text(), nullable=False, server_default=sa.text("''")),
        sa.Column("status", sa.String(16), nullable=False, server_default=sa.text("'active'")),
        sa.Column("livekit_room_name", sa.Text(), nullable=True),
        sa.Column("preferences", _json(), nullable=False, server_default=sa.text("'{}'")),
        sa.Column("last_client_stanza_id", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("last_server_stanza_id", sa.Integer(), nullable=False, server_default="-1"),
        *_stamps(),
        sa.PrimaryKeyConstraint("id", name="pk_alicia_conversations"),
        _check(
            "alicia_conversations",
            "conversation_status",
            "status",
            ("active", "archived", "deleted"),
        ),
    )
    op.create_table(
        "alicia_messages",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("conversation_id", sa.Text(), nullable=False),
        sa.Column("sequence_number", sa.Integer(), nullable=False),
        sa.Column("previous_id", sa.Text(), nullable=True),
        sa.Column("message_role", sa.String(16), nullable=False),
        sa.Column("contents", sa.Text(), nullable=False, server_default=sa.text("''")),
        sa.Column(
            "completion_status",
            sa.String(16),
            nullable=False,
            server_default=sa.text("'completed'"),
        ),
        sa.Column("model", sa.Text(), nullable=True),
        sa.Column("placeholder", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        sa.Column("local_id", sa.Text(), nullable=True),
        sa.Column("server_id", sa.Text(), nullable=True),
        sa.Column("sync_status", sa.String(16), nullable=False, server_default=sa.text("'synced'")),
        _ts("synced_at", nullable=True),
        _ts("sent_at"),
        _ts("completed_at", nullable=True),
        *_stamps(),
        sa.PrimaryKeyConstraint("id", name="pk_alicia_messages"),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["alicia_conversations.id"],
            name="fk_alicia_messages_conversation_id_alicia_conversations",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["previous_id"],
            ["alicia_messages.id"],
            name="fk_alicia_messages_previous_id_alicia_messages",
            ondelete="SET NULL",
        ),
        _check("alicia_messages", "message_role", "message_role", ("user", "assistant", "system")),
        _check(
            "alicia_messages",
            "completion_status",
            "completion_status",
            ("pending", "streaming", "completed", "failed"),
        ),
        _check("alicia_messages", "sync_status", "sync_status", ("pending", "synced", "conflict")),
    )
    op.create_index(
        "ix_alicia_messages_conversation_sequence",
        "alicia_messages",
        ["conversation_id", "sequence_number"],
    )
    op.create_index("ix_alicia_messages_previous_id", "alicia_messages", ["previous_id"])
    op.create_index("ix_alicia_messages_sent_at", "alicia_messages", ["sent_at"])

    op.create_table(
        "alicia_sentences",
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("sentence_sequence_number", sa.Integer(), nullable=False),
        sa.Column("id", sa.Text(), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("is_final", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        _ts("sent_at"),
        *_stamps(),
        sa.PrimaryKeyConstraint(
            "message_id", "sentence_sequence_number", name="pk_alicia_sentences"
        ),
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["alicia_messages.id"],
            name="fk_alicia_sentences_message_id_alicia_messages",
            ondelete="CASCADE",
        ),
    )

    op.create_table(
        "alicia_reasoning_steps",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("conversation_id", sa.Text(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("sequence_number", sa.Integer(), nullable=False),
        sa.Column("total_steps", sa.Integer(), nullable=True),
        _ts("sent_at"),
        *_stamps(),
        sa.PrimaryKeyConstraint("id", name="pk_alicia_reasoning_steps"),
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["alicia_messages.id"],
            name="fk_alicia_reasoning_steps_message_id_alicia_messages",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["alicia_conversations.id"],
            name="fk_alicia_reasoning_steps_conversation_id_alicia_conversations",
            ondelete="CASCADE",
        ),
    )
    op.create_index(
        "uq_alicia_reasoning_steps_live_message_sequence",
        "alicia_reasoning_steps",
        ["message_id", "sequence_number"],
        unique=True,
        postgresql_where=sa.text("deleted_at IS NULL"),
        sqlite_where=sa.text("deleted_at IS NULL"),
    )
    op.create_index(
        "ix_alicia_reasoning_steps_conversation_id", "alicia_reasoning_steps", ["conversation_id"]
    )

    op.create_table(
        "alicia_tool_uses",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("conversation_id", sa.Text(), nullable=True),
        sa.Column("tool_name", sa.Text(), nullable=False),
        sa.Column("tool_arguments", _json(), nullable=False, server_default=sa.text("'{}'")),
        sa.Column("tool_result", _json(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False, server_default=sa.text("'pending'")),
        sa.Column("execution", sa.Text(), nullable=True),
        sa.Column("error_code", sa.Text(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("sequence_number", sa.Integer(), nullable=False),
        _ts("sent_at"),
        _ts("completed_at", nullable=True),
        *_stamps(),
        sa.PrimaryKeyConstraint("id", name="pk_alicia_tool_uses"),
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["alicia_messages.id"],
            name="fk_alicia_tool_uses_message_id_alicia_messages",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["alicia_conversations.id"],
            name="fk_alicia_tool_uses_conversation_id_alicia_conversations",
            ondelete="CASCADE",
        ),
        _check(
            "alicia_tool_uses",
            "tool_status",
            "status",
            ("pending", "running", "success", "error", "cancelled"),
        ),
    )
    op.create_index(
        "ix_alicia_tool_uses_message_sequence",
        "alicia_tool_uses",
        ["message_id", "sequence_number"],
    )

    _create_updated_at_triggers()


def _create_updated_at_triggers() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            """
            CREATE FUNCTION alicia_set_updated_at() RETURNS trigger
            LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.updated_at IS NOT DISTINCT FROM OLD.updated_at THEN
                    NEW.updated_at := now();
                END IF;
                RETURN NEW;
            END
            $$
            """
        )
        for table in TABLES:
            op.execute(
                f"CREATE TRIGGER trg_{table}_updated_at BEFORE UPDATE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION alicia_set_updated_at()"
            )
    else:
        for table in TABLES:
            op.execute(
                f"CREATE TRIGGER trg_{table}_updated_at AFTER UPDATE ON {table} "
                "FOR EACH ROW WHEN NEW.updated_at IS OLD.updated_at "
                f"BEGIN UPDATE {table} SET updated_at = CURRENT_TIMESTAMP "
                "WHERE rowid = NEW.rowid; END"
            )


def downgrade() -> None:
    """Drop everything :func:`upgrade` created (data included)."""
    postgres = op.get_bind().dialect.name == "postgresql"
    for table in reversed(TABLES):
        op.execute(
            f"DROP TRIGGER IF EXISTS trg_{table}_updated_at" + (f" ON {table}" if postgres else "")
        )
    if postgres:
        op.execute("DROP FUNCTION IF EXISTS alicia_set_updated_at()")
    op.drop_table("alicia_tool_uses")
    op.drop_table("alicia_reasoning_steps")
    op.drop_table("alicia_sentences")
    op.drop_table("alicia_messages")
    op.drop_table("alicia_conversations")
