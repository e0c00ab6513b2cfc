"""Engine construction shared by the writer, the stats CLI and the Alembic env.

PostgreSQL via ``postgresql+asyncpg://…`` (production) and SQLite via
``sqlite+aiosqlite:///file`` (embedded). SQLite connections get foreign keys on, WAL
journaling and a busy timeout, so both backends enforce the same constraints.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Final

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

__all__ = [
    "VERSION_TABLE",
    "create_engine",
    "is_postgres",
    "is_sqlite",
    "release_engine",
    "shared_engine",
]

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
    max_overflow: int = 2,
) -> AsyncEngine:
    """An async engine for ``url`` with our connection settings (see module docstring).

    ``pre_ping=False`` skips the liveness query on every checkout, for callers that
    retry anyway (a dead connection fails once and is replaced).
    ``idle_txn_timeout_s`` (PostgreSQL): the server ends a session idle that long inside a
    transaction, so a process stopped mid-write (SIGSTOP) holds no lock for longer.
    ``max_overflow``: connections opened past ``pool_size`` under a burst (closed after).
    """
    kwargs: dict[str, Any] = {}
    if is_postgres(url):
        connect: dict[str, Any] = {"timeout": connect_timeout, "command_timeout": command_timeout}
        if idle_txn_timeout_s is not None:
            ms = str(int(idle_txn_timeout_s * 1000))
            connect["server_settings"] = {"idle_in_transaction_session_timeout": ms}
        kwargs["connect_args"] = connect
        if pooled:
            kwargs.update(pool_size=pool_size, max_overflow=max_overflow, pool_pre_ping=pre_ping)
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


_SHARED: dict[tuple[str, float | None, asyncio.AbstractEventLoop], tuple[AsyncEngine, int]] = {}
"""The shared engines, by (URL, idle-transaction timeout, event loop): engine and users."""
_SHARED_LOCK = threading.Lock()  # a thread-executor worker's voice rooms have loops of their own


def shared_engine(
    url: str, *, pool_size: int, idle_txn_timeout_s: float | None = None
) -> AsyncEngine:
    """A PostgreSQL engine for ``url`` shared by every caller on this event loop with the
    same ``idle_txn_timeout_s``, holding at most ``pool_size`` connections (opened when
    first needed): the text rooms of a thread-executor worker share one loop, and an engine
    per room held a connection per room (100 rooms: Postgres's default ``max_connections``).
    The first caller's ``pool_size`` holds. A SQLite URL gets an engine of its own. Give it
    back with :func:`release_engine`."""
    if not is_postgres(url):
        return create_engine(url, pool_size=pool_size, pre_ping=False)
    key = (url, idle_txn_timeout_s, asyncio.get_running_loop())
    with _SHARED_LOCK:
        engine, users = _SHARED.get(key) or (None, 0)
        if engine is None:
            engine = create_engine(
                url,
                pool_size=pool_size,
                max_overflow=0,
                pre_ping=False,
                idle_txn_timeout_s=idle_txn_timeout_s,
            )
        _SHARED[key] = (engine, users + 1)
    return engine


async def release_engine(engine: AsyncEngine) -> None:
    """Give back an engine of :func:`shared_engine`: disposed (its connections closed) once
    its last user gave it back."""
    with _SHARED_LOCK:
        key = next((k for k, (e, _) in _SHARED.items() if e is engine), None)
        if key is not None:
            users = _SHARED[key][1] - 1
            if users:
                _SHARED[key] = (engine, users)
                return
            del _SHARED[key]
    await engine.dispose()
