"""Failover fencing: a generation (epoch) on each room's lease.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25

* ``alicia_agents.epoch`` — raised by one each time an agent claims the room. The agent
  holds the epoch it claimed; its lease renewals and every write of its storage writer
  (rows and sent log) are conditional on it, so an agent that stalled and was replaced
  writes nothing more. ``heartbeat_at`` and ``dispatched_at`` are now taken from the
  database clock.
* ``alicia_agents.accepted_at`` — when a worker last started a job for the room (before its
  agent joins), so the watcher tells a dispatch a worker took from one livekit-server
  handed to a stopped worker.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``alicia_agents.epoch`` and ``accepted_at``."""
    op.add_column(
        "alicia_agents",
        sa.Column("epoch", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
    )
    op.add_column("alicia_agents", sa.Column("accepted_at", sa.Double(), nullable=True))


def downgrade() -> None:
    """Drop them again."""
    op.drop_column("alicia_agents", "accepted_at")
    op.drop_column("alicia_agents", "epoch")
