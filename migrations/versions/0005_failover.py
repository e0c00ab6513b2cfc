"""Failover: the sent log, agent leases, and who sent each user message.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24

* ``alicia_sent_log`` — every envelope an agent sent, as sent (its bytes, its
  recipients, the reasoning level of a step rendition), written before it leaves the
  worker when failover is on (``ALICIA_FAILOVER``): the agent that takes a room over
  numbers on after it and replays from it to clients that missed more than its memory
  holds. Under zero data retention a plaintext step is kept only sealed with the
  conversation's data key (``sealed``).
* ``alicia_agents`` — which agent serves which room, renewed by its worker
  (``heartbeat_at``, epoch seconds), and when a watcher last dispatched an agent to it.
* ``alicia_messages.participant`` — the identity that sent a user message (its owner:
  who may stop, edit or regenerate it), so a new agent keeps the rule.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``alicia_sent_log`` and ``alicia_agents``; add ``alicia_messages.participant``."""
    tstz = sa.DateTime(timezone=True)
    json = sa.JSON().with_variant(JSONB(), "postgresql")
    op.create_table(
        "alicia_sent_log",
        sa.Column("conversation_id", sa.Text(), nullable=False),
        sa.Column("stanza", sa.Integer(), nullable=False),
        sa.Column("recipients", json, nullable=True),
        sa.Column("level", sa.Text(), nullable=True),
        sa.Column("data", sa.LargeBinary(), nullable=True),
        sa.Column("sealed", sa.Text(), nullable=True),
        sa.Column("sent_at", tstz, nullable=False, server_default=sa.func.now()),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["alicia_conversations.id"],
            name="fk_alicia_sent_log_conversation_id_alicia_conversations",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("conversation_id", "stanza", name="pk_alicia_sent_log"),
    )
    op.create_table(
        "alicia_agents",
        sa.Column("conversation_id", sa.Text(), nullable=False),
        sa.Column("agent_identity", sa.Text(), nullable=True),
        sa.Column("worker_id", sa.Text(), nullable=True),
        sa.Column("heartbeat_at", sa.Double(), nullable=False, server_default=sa.text("0")),
        sa.Column("dispatched_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("conversation_id", name="pk_alicia_agents"),
    )
    op.create_index("ix_alicia_agents_worker_id", "alicia_agents", ["worker_id"])
    op.add_column("alicia_messages", sa.Column("participant", sa.Text(), nullable=True))


def downgrade() -> None:
    """Drop them again (the log and leases are gone; owners of messages too)."""
    op.drop_column("alicia_messages", "participant")
    op.drop_index("ix_alicia_agents_worker_id", table_name="alicia_agents")
    op.drop_table("alicia_agents")
    op.drop_table("alicia_sent_log")
