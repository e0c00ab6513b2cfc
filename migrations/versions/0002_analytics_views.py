"""Analytics views: reasoning per answer, turn latency, tool use, per model and day.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22

Every view skips soft-deleted rows and placeholder messages. Times are ``sent_at``
(when the envelope passed through the worker), so a database outage does not distort
them. Millisecond and day expressions differ per backend; the columns do not.

* ``alicia_answer_reasoning`` — one row per answer: steps and reasoning characters
  (steps linked to the user message it answers, or to the answer itself).
* ``alicia_turn_latency`` — one row per user turn: ms from the user message to the
  first reasoning step and to the answer's start (StartAnswer / AssistantMessage).
* ``alicia_turn_tools`` — one row per user turn with tool calls: calls, failures, rate.
* ``alicia_tool_stats`` — one row per tool name: calls, failures, rate, mean duration.
* ``alicia_model_daily`` — one row per UTC day and model: answers, steps, characters,
  latencies, tool calls and failure rate.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

VIEWS = (
    "alicia_answer_reasoning",
    "alicia_turn_latency",
    "alicia_turn_tools",
    "alicia_tool_stats",
    "alicia_model_daily",
)


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
                   {ms("a.sent_at", "a.completed_at")} AS ms_answer_duration
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
        "alicia_turn_latency": f"""
            SELECT u.id AS user_message_id,
                   u.conversation_id,
                   u.sent_at AS user_at,
                   fs.first_step_at,
                   an.answer_at,
                   an.model,
                   {ms("u.sent_at", "fs.first_step_at")} AS ms_to_first_step,
                   {ms("u.sent_at", "an.answer_at")} AS ms_to_answer
            FROM alicia_messages u
            LEFT JOIN (
                SELECT message_id, min(sent_at) AS first_step_at
                FROM alicia_reasoning_steps WHERE deleted_at IS NULL GROUP BY message_id
            ) fs ON fs.message_id = u.id
            LEFT JOIN (
                SELECT previous_id, min(sent_at) AS answer_at, max(model) AS model
                FROM alicia_messages
                WHERE message_role = 'assistant' AND deleted_at IS NULL AND NOT placeholder
                GROUP BY previous_id
            ) an ON an.previous_id = u.id
            WHERE u.message_role = 'user' AND u.deleted_at IS NULL AND NOT u.placeholder
        """,
        "alicia_turn_tools": """
            SELECT message_id AS user_message_id,
                   conversation_id,
                   count(*) AS tool_calls,
                   sum(CASE WHEN status = 'success' THEN 1 ELSE 0 END) AS succeeded,
                   sum(CASE WHEN status IN ('error', 'cancelled') THEN 1 ELSE 0 END) AS failed,
                   sum(CASE WHEN status IN ('pending', 'running') THEN 1 ELSE 0 END) AS unfinished,
                   CAST(sum(CASE WHEN status IN ('error', 'cancelled') THEN 1 ELSE 0 END)
                        AS DOUBLE PRECISION) / count(*) AS failure_rate
            FROM alicia_tool_uses
            WHERE deleted_at IS NULL
            GROUP BY message_id, conversation_id
        """,
        "alicia_tool_stats": f"""
            SELECT tool_name,
                   count(*) AS calls,
                   sum(CASE WHEN status IN ('error', 'cancelled') THEN 1 ELSE 0 END) AS failed,
                   CAST(sum(CASE WHEN status IN ('error', 'cancelled') THEN 1 ELSE 0 END)
                        AS DOUBLE PRECISION) / count(*) AS failure_rate,
                   avg({ms("sent_at", "completed_at")}) AS avg_ms
            FROM alicia_tool_uses
            WHERE deleted_at IS NULL
            GROUP BY tool_name
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
                       / NULLIF(COALESCE(sum(tt.tool_calls), 0), 0) AS tool_failure_rate
            FROM alicia_answer_reasoning ar
            LEFT JOIN alicia_turn_latency tl ON tl.user_message_id = ar.user_message_id
            LEFT JOIN alicia_turn_tools tt ON tt.user_message_id = ar.user_message_id
            GROUP BY {day}, COALESCE(ar.model, 'unknown')
        """,
    }


def upgrade() -> None:
    """Create the views (in dependency order)."""
    sql = _sql(op.get_bind().dialect.name == "postgresql")
    for name in VIEWS:
        op.execute(f"CREATE VIEW {name} AS {sql[name]}")


def downgrade() -> None:
    """Drop the views."""
    for name in reversed(VIEWS):
        op.execute(f"DROP VIEW IF EXISTS {name}")
