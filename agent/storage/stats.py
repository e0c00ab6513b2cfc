"""``alicia-stats`` (``python -m alicia.agent.storage.stats``): analytics views as tables or JSON.

Reads the views created by migrations ``0002`` and ``0004`` (see ``migrations/versions``)::

    alicia-stats                              # DATABASE_URL from the environment
    alicia-stats --database-url sqlite+aiosqlite:///alicia.db --json
    alicia-stats daily tools --days 7

Reports: ``daily`` (per model and UTC day), ``reasoning`` (per model: reasoning tokens,
total and mean per answer, and time to first reasoning, p50 and mean), ``answers`` (latest
answers: steps, reasoning characters and tokens, latency), ``turns`` (latest turns with
tool calls and their failure rate), ``tools`` (per tool name). Token means count only the
answers whose provider reported usage. Exit status 0, or 2 when the database cannot be
read.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import decimal
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, Final

__all__ = ["REPORTS", "Report", "fetch", "main"]


class Report:
    """One named query over the analytics views."""

    def __init__(self, title: str, sql: str, *, dated: str | None = None) -> None:
        self.title = title
        self.sql = sql
        """SQL with a ``{where}`` slot and a ``:limit`` parameter."""
        self.dated = dated
        """Column that ``--days`` compares with ``:since`` (None: not filterable)."""

    def query(self, *, since: bool) -> str:
        """The SQL, filtered on ``self.dated >= :since`` if asked and possible."""
        param = ":since_day" if self.dated == "day" else ":since"
        where = f"WHERE {self.dated} >= {param}" if since and self.dated else ""
        return self.sql.format(where=where)


REPORTS: Final[dict[str, Report]] = {
    "daily": Report(
        "Per model and day (UTC)",
        "SELECT day, model, answers, steps, avg_steps, reasoning_chars, avg_reasoning_chars, "
        "avg_ms_to_first_step, max_ms_to_first_step, avg_ms_to_answer, max_ms_to_answer, "
        "tool_calls, tool_failures, tool_failure_rate, reasoning_tokens, avg_reasoning_tokens, "
        "avg_first_reasoning_ms FROM alicia_model_daily "
        "{where} ORDER BY day DESC, model LIMIT :limit",
        dated="day",
    ),
    "reasoning": Report(
        "Reasoning tokens and time to first reasoning per model",
        # The median without percentile_cont (SQLite has none): the middle value, or the
        # mean of the two middle ones, of each model's ordered non-NULL times.
        "SELECT t.model, t.answers, t.answers_with_usage, t.prompt_tokens, "
        "t.completion_tokens, t.reasoning_tokens, t.avg_reasoning_tokens, "
        "p.p50_first_reasoning_ms, t.avg_first_reasoning_ms FROM ("
        "SELECT COALESCE(model, 'unknown') AS model, count(*) AS answers, "
        "count(reasoning_tokens) AS answers_with_usage, sum(prompt_tokens) AS prompt_tokens, "
        "sum(completion_tokens) AS completion_tokens, sum(reasoning_tokens) AS reasoning_tokens, "
        "CAST(avg(reasoning_tokens) AS DOUBLE PRECISION) AS avg_reasoning_tokens, "
        "CAST(avg(first_reasoning_ms) AS DOUBLE PRECISION) AS avg_first_reasoning_ms "
        "FROM alicia_answer_reasoning {where} GROUP BY COALESCE(model, 'unknown')"
        ") t LEFT JOIN ("
        "SELECT model, CAST(avg(first_reasoning_ms) AS DOUBLE PRECISION) "
        "AS p50_first_reasoning_ms FROM ("
        "SELECT COALESCE(model, 'unknown') AS model, first_reasoning_ms, "
        "row_number() OVER (PARTITION BY COALESCE(model, 'unknown') "
        "ORDER BY first_reasoning_ms) AS n, "
        "count(*) OVER (PARTITION BY COALESCE(model, 'unknown')) AS total "
        "FROM (SELECT model, first_reasoning_ms FROM alicia_answer_reasoning {where}) x "
        "WHERE first_reasoning_ms IS NOT NULL"
        ") ranked WHERE n IN ((total + 1) / 2, (total + 2) / 2) GROUP BY model"
        ") p ON p.model = t.model "
        "ORDER BY t.answers DESC, t.model LIMIT :limit",
        dated="answered_at",
    ),
    "answers": Report(
        "Reasoning per answer (latest first)",
        "SELECT ar.answer_id, ar.model, ar.completion_status, ar.steps, ar.reasoning_chars, "
        "ar.answer_chars, ar.reasoning_tokens, ar.first_reasoning_ms, tl.ms_to_first_step, "
        "tl.ms_to_answer, ar.answered_at "
        "FROM alicia_answer_reasoning ar "
        "LEFT JOIN alicia_turn_latency tl ON tl.user_message_id = ar.user_message_id "
        "{where} ORDER BY ar.answered_at DESC LIMIT :limit",
        dated="ar.answered_at",
    ),
    "turns": Report(
        "Tool calls per turn (latest first)",
        "SELECT tt.user_message_id, tt.tool_calls, tt.succeeded, tt.failed, tt.unfinished, "
        "tt.failure_rate, m.sent_at AS user_at FROM alicia_turn_tools tt "
        "JOIN alicia_messages m ON m.id = tt.user_message_id "
        "{where} ORDER BY m.sent_at DESC LIMIT :limit",
        dated="m.sent_at",
    ),
    "tools": Report(
        "Tools",
        "SELECT tool_name, calls, failed, failure_rate, avg_ms FROM alicia_tool_stats "
        "{where} ORDER BY calls DESC, tool_name LIMIT :limit",
    ),
}
"""Report name -> query."""


def _plain(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    return value


async def fetch(
    url: str, names: Sequence[str], *, limit: int = 20, days: int | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Run the named reports against ``url``; raises :class:`alicia.agent.storage.StorageError`."""
    from sqlalchemy import text

    from .engine import create_engine, is_sqlite
    from .errors import map_error

    params: dict[str, Any] = {"limit": limit}
    if days is not None:
        # Day granularity, from the start of the UTC day ``days`` ago; SQLite stores
        # naive UTC text, so it gets the same instant as text.
        day = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=days)
        start = dt.datetime.combine(day, dt.time(), dt.UTC)
        if is_sqlite(url):
            params.update(since=start.strftime("%Y-%m-%d %H:%M:%S"), since_day=day.isoformat())
        else:
            params.update(since=start, since_day=day)
    engine = create_engine(url, pooled=False)
    out: dict[str, list[dict[str, Any]]] = {}
    try:
        async with engine.connect() as conn:
            for name in names:
                sql = REPORTS[name].query(since="since" in params)
                result = await conn.execute(text(sql), params)
                out[name] = [{k: _plain(v) for k, v in row._mapping.items()} for row in result]
    except Exception as exc:
        raise map_error(exc) from exc
    finally:
        await engine.dispose()
    return out


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:,.1f}"
    return str(value)


NARROW: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    "daily": (
        ("day", "day"),
        ("model", "model"),
        ("answers", "answers"),
        ("avg_steps", "steps"),
        ("avg_ms_to_first_step", "ms to step"),
        ("avg_ms_to_answer", "ms to answer"),
        ("tool_calls", "tools"),
        ("avg_reasoning_tokens", "reas. tok"),
    ),
    "reasoning": (
        ("model", "model"),
        ("answers", "answers"),
        ("reasoning_tokens", "reasoning tokens"),
        ("avg_reasoning_tokens", "avg/answer"),
        ("p50_first_reasoning_ms", "p50 ms to reasoning"),
        ("avg_first_reasoning_ms", "avg ms"),
    ),
    "answers": (
        ("answer_id", "answer"),
        ("model", "model"),
        ("completion_status", "status"),
        ("steps", "steps"),
        ("ms_to_first_step", "ms to step"),
        ("ms_to_answer", "ms to answer"),
        ("answered_at", "answered (UTC)"),
    ),
    "turns": (
        ("user_message_id", "user message"),
        ("tool_calls", "calls"),
        ("succeeded", "ok"),
        ("failed", "failed"),
        ("unfinished", "unfinished"),
        ("failure_rate", "fail rate"),
        ("user_at", "asked (UTC)"),
    ),
}
"""The columns (and short headers) of the default, 100-column tables; ``--wide`` and
``--json`` have every column."""
NARROW_WIDTH: Final = 100


def _narrow_cell(column: str, value: Any) -> str:
    text = _cell(value)
    if column.endswith("_id") and len(text) > 14:
        return text[:13] + "…"
    if column.endswith("_at") and len(text) > 16:
        return text[:16]
    return text


def _print_tables(reports: dict[str, list[dict[str, Any]]], *, wide: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=240 if wide else NARROW_WIDTH)
    for name, rows in reports.items():
        title = f"{REPORTS[name].title} — {name}"
        if not rows:
            console.print(f"[italic]{title}[/italic]: no rows")
            continue
        table = Table(title=title, title_justify="left")
        if wide or name not in NARROW:
            columns = [(c, c) for c in rows[0]]
        else:
            columns = [(c, h) for c, h in NARROW[name] if c in rows[0]]
        for column, header in columns:
            keep = not wide and (column in ("day", "model") or column.endswith("_at"))
            table.add_column(header, overflow="fold", no_wrap=keep)
        for row in rows:
            if wide:
                table.add_row(*(_cell(row[c]) for c, _ in columns))
            else:
                table.add_row(*(_narrow_cell(c, row[c]) for c, _ in columns))
        console.print(table)
    if not wide:
        console.print("[dim](more columns: alicia-stats --wide, or --json)[/dim]")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="alicia-stats", description="Reasoning analytics from the alicia_* views."
    )
    p.add_argument(
        "reports",
        nargs="*",
        metavar="REPORT",
        help=f"reports to print (default all): {', '.join(REPORTS)}",
    )
    p.add_argument("--database-url", help="SQLAlchemy async URL (default: $DATABASE_URL)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead")
    p.add_argument("--wide", action="store_true", help="every column (about 230 columns wide)")
    p.add_argument("--limit", type=int, default=20, help="rows per report (default 20)")
    p.add_argument("--days", type=int, default=None, help="only the last N days")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``alicia-stats``; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    unknown = [r for r in args.reports if r not in REPORTS]
    if unknown:
        parser.error(f"unknown report {unknown[0]!r} (choose from {', '.join(REPORTS)})")
    if args.limit < 1 or (args.days is not None and args.days < 0):
        parser.error("--limit must be >= 1 and --days >= 0")
    url = args.database_url or os.environ.get("DATABASE_URL")
    if not url:
        print("alicia-stats: no database: pass --database-url or set DATABASE_URL", file=sys.stderr)
        return 2
    names = list(dict.fromkeys(args.reports)) or list(REPORTS)
    from .errors import StorageError

    try:
        reports = asyncio.run(fetch(url, names, limit=args.limit, days=args.days))
    except StorageError as exc:
        print(f"alicia-stats: cannot read the analytics views: {exc}", file=sys.stderr)
        print("(is the database reachable and migrated? alembic upgrade head)", file=sys.stderr)
        return 2
    if args.json:
        json.dump(reports, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_tables(reports, wide=args.wide)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
