"""Engine construction shared by the writer, the stats CLI and the Alembic env.

PostgreSQL via ``postgresql+asyncpg://…`` (production) and SQLite via
``sqlite+aiosqlite:///file`` (embedded). SQLite connections get foreign keys on, WAL
journaling and a busy timeout, so both backends enforce the same constraints.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

__all__ = ["VERSION_TABLE", "create_engine", "is_postgres", "is_sqlite"]

VERSION_TABLE: Final = "alicia_alembic_version"
"""Alembic's version table (prefixed so the schema can share a database)."""

MIGRATION_LOCK_KEY: Final = 0x616C6963  # "alic": pg_advisory_xact_lock key for upgrades


def is_postgres(url: str) -> bool:
    """True for a ``postgresql[+driver]://`` URL."""
    return make_url(url).get_backend_name() == "postgresql"


def is_sqlite(url: str) -> bool:
    """True for a ``sqlite[+driver]://`` URL."""
    return make_url(url).get_backend_name() == "sqlite"


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


IDLE_TXN_TIMEOUT_S: Final = 2.0
"""Fenced writers' and leases' connections: a transaction left idle this long (its
process was stopped mid-write) is ended by the server, so it holds no lock a takeover
waits on. Not shorter: a busy process's event loop can leave a live transaction idle
between two statements for half a second (its writes were then ended again and again)."""


def create_engine(
    url: str,
    *,
    pool_size: int = 3,
    connect_timeout: float = 5.0,
    command_timeout: float = 30.0,
    pooled: bool = True,
    pre_ping: bool = True,
    idle_txn_timeout_s: float | None = None,
) -> AsyncEngine:
    """An async engine for ``url`` with our connection settings (see module docstring).

    ``pre_ping=False`` skips the liveness query on every checkout, for callers that
    retry anyway (a dead connection fails once and is replaced).
    ``idle_txn_timeout_s`` (PostgreSQL): the server ends a session idle that long inside a
    transaction, so a process stopped mid-write (SIGSTOP) holds no lock for longer.
    """
    kwargs: dict[str, Any] = {}
    if is_postgres(url):
        connect: dict[str, Any] = {"timeout": connect_timeout, "command_timeout": command_timeout}
        if idle_txn_timeout_s is not None:
            ms = str(int(idle_txn_timeout_s * 1000))
            connect["server_settings"] = {"idle_in_transaction_session_timeout": ms}
        kwargs["connect_args"] = connect
        if pooled:
            kwargs.update(pool_size=pool_size, max_overflow=2, pool_pre_ping=pre_ping)
        else:
            kwargs["poolclass"] = NullPool
    elif is_sqlite(url):
        kwargs["connect_args"] = {"timeout": command_timeout}
        if not pooled:
            kwargs["poolclass"] = NullPool
    engine = create_async_engine(url, **kwargs)
    if is_sqlite(url):
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    return engine
