"""Token usage and time to first reasoning per answer, in the analytics views too.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24

New nullable columns of ``alicia_messages``, filled for answers from storage-only
envelope meta (``alicia.usage``, ``alicia.firstReasoningMs``; see
``agent/engine/sink.py``), NULL when the provider did not report them:

* ``prompt_tokens``, ``completion_tokens``, ``reasoning_tokens`` — summed over the
  turn's LLM rounds (reasoning tokens are part of the completion tokens);
* ``first_reasoning_ms`` — ms from the turn's first LLM request to its first reasoning
  text (unlike ``ms_to_first_step``, which counts from the user message to the first
  stored step).

Two views of ``0002`` are recreated with these figures appended (their other columns
unchanged):

* ``alicia_answer_reasoning`` + ``prompt_tokens``, ``completion_tokens``,
  ``reasoning_tokens``, ``first_reasoning_ms``;
* ``alicia_model_daily`` + ``prompt_tokens``, ``completion_tokens``, ``reasoning_tokens``
  (sums), ``avg_reasoning_tokens`` (mean over the answers that reported usage),
  ``avg_first_reasoning_ms``, ``max_first_reasoning_ms``.

Downgrade restores the ``0002`` views, then drops the columns (their data is lost).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "alicia_messages"
COLUMNS: tuple[tuple[str, sa.types.TypeEngine[Any]], ...] = (
    ("prompt_tokens", sa.Integer()),
    ("completion_tokens", sa.Integer()),
    ("reasoning_tokens", sa.Integer()),
    ("first_reasoning_ms", sa.Double()),
)
VIEWS = ("alicia_answer_reasoning", "alicia_model_daily")
"""The views recreated here, in dependency order (the daily view reads the other)."""


def _sql(postgres: bool) -> dict[str, str]:
    def ms(start: str, end: str) -> str:
        if postgres:
            return f"CAST(EXTRACT(EPOCH FROM ({end} - {start})) * 1000 AS DOUBLE PRECISION)"
        return f"CAST((julianday({end}) - julianday({start})) * 86400000.0 AS DOUBLE PRECISION)"

    day = (
        "CAST((ar.answered_at AT TIME ZONE 'UTC') AS DATE)" if postgres else "date(ar.answered_at)"
    )
    return {
        "alicia_answer_reasoning": f"""
            SELECT a.id AS answer_id,
                   a.conversation_id,
                   a.previous_id AS user_message_id,
                   a.model,
                   a.completion_status,
                   a.sent_at AS answered_at,
                   COALESCE(su.steps, 0) + COALESCE(sa.steps, 0) AS steps,
                   COALESCE(su.chars, 0) + COALESCE(sa.chars, 0) AS reasoning_chars,
                   length(a.contents) AS answer_chars,
                   {ms("a.sent_at", "a.completed_at")} AS ms_answer_duration,
                   a.prompt_tokens,
                   a.completion_tokens,
                   a.reasoning_tokens,
                   a.first_reasoning_ms
            FROM alicia_messages a
            LEFT JOIN (
                SELECT message_id, count(*) AS steps, sum(length(content)) AS chars
                FROM alicia_reasoning_steps WHERE deleted_at IS NULL GROUP BY message_id
            ) su ON su.message_id = a.previous_id
            LEFT JOIN (
                SELECT message_id, count(*) AS steps, sum(length(content)) AS chars
                FROM alicia_reasoning_steps WHERE deleted_at IS NULL GROUP BY message_id
            ) sa ON sa.message_id = a.id
            WHERE a.message_role = 'assistant' AND a.deleted_at IS NULL AND NOT a.placeholder
        """,
        "alicia_model_daily": f"""
            SELECT {day} AS day,
                   COALESCE(ar.model, 'unknown') AS model,
                   count(*) AS answers,
                   sum(ar.steps) AS steps,
                   CAST(avg(ar.steps) AS DOUBLE PRECISION) AS avg_steps,
                   sum(ar.reasoning_chars) AS reasoning_chars,
                   CAST(avg(ar.reasoning_chars) AS DOUBLE PRECISION) AS avg_reasoning_chars,
                   avg(tl.ms_to_first_step) AS avg_ms_to_first_step,
                   max(tl.ms_to_first_step) AS max_ms_to_first_step,
                   avg(tl.ms_to_answer) AS avg_ms_to_answer,
                   max(tl.ms_to_answer) AS max_ms_to_answer,
                   COALESCE(sum(tt.tool_calls), 0) AS tool_calls,
                   COALESCE(sum(tt.failed), 0) AS tool_failures,
                   CAST(COALESCE(sum(tt.failed), 0) AS DOUBLE PRECISION)
                       / NULLIF(COALESCE(sum(tt.tool_calls), 0), 0) AS tool_failure_rate,
                   sum(ar.prompt_tokens) AS prompt_tokens,
                   sum(ar.completion_tokens) AS completion_tokens,
                   sum(ar.reasoning_tokens) AS reasoning_tokens,
                   CAST(avg(ar.reasoning_tokens) AS DOUBLE PRECISION) AS avg_reasoning_tokens,
                   CAST(avg(ar.first_reasoning_ms) AS DOUBLE PRECISION) AS avg_first_reasoning_ms,
                   max(ar.first_reasoning_ms) AS max_first_reasoning_ms
            FROM alicia_answer_reasoning ar
            LEFT JOIN alicia_turn_latency tl ON tl.user_message_id = ar.user_message_id
            LEFT JOIN alicia_turn_tools tt ON tt.user_message_id = ar.user_message_id
            GROUP BY {day}, COALESCE(ar.model, 'unknown')
        """,
    }


def _sql_0002(postgres: bool) -> dict[str, str]:
    """The view definitions of revision ``0002`` (what a downgrade restores)."""
    path = Path(__file__).with_name("0002_analytics_views.py")
    spec = importlib.util.spec_from_file_location("_alicia_migration_0002", path)
    if spec is None or spec.loader is None:  # pragma: no cover - the file is alongside
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    views: dict[str, str] = module._sql(postgres)
    return views


def _drop_views() -> None:
    for name in reversed(VIEWS):
        op.execute(f"DROP VIEW IF EXISTS {name}")


def upgrade() -> None:
    """Add the columns and recreate the two views with them."""
    for name, type_ in COLUMNS:
        op.add_column(TABLE, sa.Column(name, type_, nullable=True))
    _drop_views()
    sql = _sql(op.get_bind().dialect.name == "postgresql")
    for name in VIEWS:
        op.execute(f"CREATE VIEW {name} AS {sql[name]}")


def downgrade() -> None:
    """Restore the ``0002`` views, then drop the columns (and their figures)."""
    _drop_views()  # first: a view that reads a column keeps it from being dropped
    for name, _ in reversed(COLUMNS):
        op.drop_column(TABLE, name)
    sql = _sql_0002(op.get_bind().dialect.name == "postgresql")
    for name in VIEWS:
        op.execute(f"CREATE VIEW {name} AS {sql[name]}")
