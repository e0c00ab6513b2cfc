"""Databases for the tests: one fresh PostgreSQL database (on the session's real server)
or SQLite file per test module, emptied between tests; what is at rest in them
(:func:`pg_dump`), and ``alicia-admin`` on them (:func:`admin`)."""

from __future__ import annotations

import datetime as dt
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import text
from sqlalchemy.engine import make_url

from alicia.agent.storage.engine import create_engine, is_sqlite
from alicia.harness import PostgresServer
from alicia.harness.postgres import pg_bindir

__all__ = [
    "ADMIN",
    "TABLES",
    "admin",
    "clear",
    "execute",
    "fetch",
    "new_database",
    "pg_dump",
    "utc",
]

TABLES = (
    "alicia_remarks",
    "alicia_tool_uses",
    "alicia_reasoning_steps",
    "alicia_sentences",
    "alicia_messages",
    "alicia_conversations",
)

READ_CONNECT_TIMEOUT_S = 30.0
"""A test's own reads and writes wait this long to connect: what the test measures with,
not the code under test (the suite's first minutes load the machine past five)."""


async def new_database(backend: str, pg: PostgresServer | None, tmp: Path, prefix: str) -> str:
    """A fresh, empty database URL on ``backend`` (``postgres`` or ``sqlite``)."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    if backend == "sqlite":
        return f"sqlite+aiosqlite:///{tmp / (name + '.db')}"
    assert pg is not None
    conn = await asyncpg.connect(pg.dsn().rsplit("/", 1)[0] + "/postgres")
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return make_url(pg.url()).set(database=name).render_as_string(hide_password=False)


async def clear(url: str) -> None:
    """Delete every row of the alicia_* tables."""
    engine = create_engine(url, pooled=False, connect_timeout=READ_CONNECT_TIMEOUT_S)
    try:
        async with engine.begin() as conn:
            if is_sqlite(url):
                for t in TABLES:
                    await conn.execute(text(f"DELETE FROM {t}"))
            else:
                await conn.execute(text(f"TRUNCATE {', '.join(TABLES)} CASCADE"))
    finally:
        await engine.dispose()


def utc(value: Any) -> Any:
    """Timestamps as aware UTC datetimes on both backends (SQLite returns naive/text)."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value


async def execute(url: str, sql: str) -> None:
    """Run one statement and commit it."""
    engine = create_engine(url, pooled=False, connect_timeout=READ_CONNECT_TIMEOUT_S)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(sql))
    finally:
        await engine.dispose()


async def fetch(url: str, sql: str, **params: Any) -> list[dict[str, Any]]:
    """Rows of ``sql`` as dicts (JSON decoded, booleans as bool on SQLite too)."""
    import json

    engine = create_engine(url, pooled=False, connect_timeout=READ_CONNECT_TIMEOUT_S)
    try:
        async with engine.connect() as conn:
            result = await conn.execute(text(sql), params)
            rows = [dict(r._mapping) for r in result]
    finally:
        await engine.dispose()
    sqlite = is_sqlite(url)
    for row in rows:
        for k, v in row.items():
            if sqlite and k in ("tool_arguments", "tool_result", "preferences") and v is not None:
                row[k] = json.loads(v)
            elif sqlite and k in ("placeholder", "is_final") and v is not None:
                row[k] = bool(v)
            elif k.endswith("_at"):
                row[k] = utc(v)
    return rows


ADMIN = Path(sys.executable).with_name("alicia-admin")


def admin(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ADMIN), *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )


def pg_dump(dsn: str) -> str:
    """A full plain-SQL dump of the database at ``dsn`` (schema and every row)."""
    done = subprocess.run(
        [str(pg_bindir() / "pg_dump"), "--no-owner", dsn],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout
