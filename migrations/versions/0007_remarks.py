"""Spoken progress remarks.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26

* ``alicia_remarks`` — the short progress remarks the agent spoke while its model
  reasoned, one row per assistant ``progress`` Commentary (type 15), keyed by its id
  (a re-delivered envelope changes nothing). ``target_id`` is the user message the remark
  answers, ``spoken_at`` the Commentary's ``timestamp``. Under zero data retention the
  text is kept only ``sealed`` with the conversation's data key (``content`` NULL), so
  ``alicia-admin erase`` shreds it with the reasoning. Rows go with their conversation
  (``ON DELETE CASCADE``); ``updated_at`` is kept by the trigger of 0001.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "alicia_remarks"


def upgrade() -> None:
    """Create ``alicia_remarks``, its indexes and its ``updated_at`` trigger."""
    tstz = sa.DateTime(timezone=True)
    op.create_table(
        TABLE,
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("conversation_id", sa.Text(), nullable=False),
        sa.Column("target_id", sa.Text(), nullable=True),
        sa.Column("sequence_number", sa.Integer(), nullable=False),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("sealed", sa.Text(), nullable=True),
        sa.Column("spoken_at", tstz, nullable=False, server_default=sa.func.now()),
        sa.Column("sent_at", tstz, nullable=False, server_default=sa.func.now()),
        sa.Column("created_at", tstz, nullable=False, server_default=sa.func.now()),
        sa.Column("updated_at", tstz, nullable=False, server_default=sa.func.now()),
        sa.Column("deleted_at", tstz, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_alicia_remarks"),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["alicia_conversations.id"],
            name="fk_alicia_remarks_conversation_id_alicia_conversations",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(
            "content IS NULL OR sealed IS NULL", name="ck_alicia_remarks_plaintext_or_sealed"
        ),
    )
    op.create_index(
        "ix_alicia_remarks_conversation_spoken", TABLE, ["conversation_id", "spoken_at"]
    )
    op.create_index("ix_alicia_remarks_target_id", TABLE, ["target_id"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            f"CREATE TRIGGER trg_{TABLE}_updated_at BEFORE UPDATE ON {TABLE} "
            "FOR EACH ROW EXECUTE FUNCTION alicia_set_updated_at()"
        )
    else:
        op.execute(
            f"CREATE TRIGGER trg_{TABLE}_updated_at AFTER UPDATE ON {TABLE} "
            "FOR EACH ROW WHEN NEW.updated_at IS OLD.updated_at "
            f"BEGIN UPDATE {TABLE} SET updated_at = CURRENT_TIMESTAMP "
            "WHERE rowid = NEW.rowid; END"
        )


def downgrade() -> None:
    """Drop ``alicia_remarks`` (the remarks are gone)."""
    postgres = op.get_bind().dialect.name == "postgresql"
    on = f" ON {TABLE}" if postgres else ""
    op.execute(f"DROP TRIGGER IF EXISTS trg_{TABLE}_updated_at{on}")
    op.drop_index("ix_alicia_remarks_target_id", table_name=TABLE)
    op.drop_index("ix_alicia_remarks_conversation_spoken", table_name=TABLE)
    op.drop_table(TABLE)
