"""Per-conversation data keys (wrapped by the master key) for encrypted reasoning.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23

``alicia_conversation_keys`` holds one data key per conversation, sealed (JWE) with the
deployment's master key from ``ALICIA_REASONING_KEYS``. Under zero data retention the
stored reasoning is encrypted with it; erasing it (``wrapped`` NULL) is crypto-shredding.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``alicia_conversation_keys``."""
    tstz = sa.DateTime(timezone=True)
    op.create_table(
        "alicia_conversation_keys",
        sa.Column("conversation_id", sa.Text(), nullable=False),
        sa.Column("kid", sa.Text(), nullable=False),
        sa.Column("wrapped", sa.Text(), nullable=True),
        sa.Column("created_at", tstz, nullable=False, server_default=sa.func.now()),
        sa.Column("erased_at", tstz, nullable=True),
        sa.PrimaryKeyConstraint("conversation_id", name="pk_alicia_conversation_keys"),
    )


def downgrade() -> None:
    """Drop ``alicia_conversation_keys`` (its keys are gone for good)."""
    op.drop_table("alicia_conversation_keys")
