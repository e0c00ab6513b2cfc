"""Schema migrations (Alembic, ``migrations/``) on a URL or an engine."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from pathlib import Path
from typing import Any, Final

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from .engine import create_engine
from .errors import _mapped

__all__ = ["MIGRATIONS_DIR", "migrate", "migrate_once"]

MIGRATIONS_DIR: Final = Path(__file__).resolve().parents[2] / "migrations"


def _upgrade_sync(connection: Any, revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    cfg.attributes["configure_logger"] = False
    command.upgrade(cfg, revision)


def _downgrade_sync(connection: Any, revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    cfg.attributes["configure_logger"] = False
    command.downgrade(cfg, revision)


async def migrate(
    target: str | AsyncEngine, revision: str = "head", *, downgrade: bool = False
) -> None:
    """Run ``alembic upgrade <revision>`` (or ``downgrade``) on a URL or engine."""
    engine = create_engine(target, pooled=False) if isinstance(target, str) else target
    try:
        async with _mapped(), engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                # Writers' and leases' engines end a transaction idle for half a second
                # (IDLE_TXN_TIMEOUT_S); Alembic reads its scripts between statements,
                # which on a loaded machine takes longer: not for this transaction.
                await conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))
            await conn.run_sync(_downgrade_sync if downgrade else _upgrade_sync, revision)
    finally:
        if isinstance(target, str):
            await engine.dispose()


_MIGRATED: set[str] = set()
"""Database URLs this process brought to ``head`` (writers, keys, leases: once each)."""
_ONE_AT_A_TIME = threading.Lock()
"""Alembic keeps its running context in module globals: one migration per process."""
_RUNNING: dict[str, concurrent.futures.Future[None]] = {}
"""The migration under way per database URL, which every caller waits for."""
_RUNNING_LOCK = threading.Lock()


async def migrate_once(engine: AsyncEngine) -> None:
    """``migrate(engine)`` unless this process already did it for the engine's database:
    a worker opens a writer per room, and each would otherwise run Alembic again (and
    Alembic cannot run twice at once in one process).

    It runs on a thread of its own, with its own loop and connection: Alembic's imports
    and script reading are synchronous, and on the caller's loop they held up everything
    else it serves (a room's first turn, a job request) for seconds on a loaded machine.
    Cancelling the caller leaves the migration running for the next one. SQLite (for
    development) is migrated in place: an in-memory database lives in the engine's own
    connection, and aiosqlite's thread calls back into the loop that opened it."""
    key = engine.url.render_as_string(hide_password=True)
    if key in _MIGRATED:
        return
    if engine.url.get_backend_name() == "sqlite":
        while key not in _MIGRATED:
            if not _ONE_AT_A_TIME.acquire(blocking=False):  # other loops may hold it too
                await asyncio.sleep(0.01)
                continue
            try:
                if key not in _MIGRATED:
                    await migrate(engine)
                    _MIGRATED.add(key)
            finally:
                _ONE_AT_A_TIME.release()
        return
    with _RUNNING_LOCK:
        running = _RUNNING.get(key)
        if running is None:
            running = _RUNNING[key] = concurrent.futures.Future()
            url = engine.url.render_as_string(hide_password=False)
            threading.Thread(
                target=_migrate_on_thread, args=(url, key, running), name="alicia-migrate",
                daemon=True,
            ).start()  # fmt: skip
    await asyncio.shield(asyncio.wrap_future(running))


def _migrate_on_thread(url: str, key: str, done: concurrent.futures.Future[None]) -> None:
    """Bring ``url`` to ``head`` on this thread's own loop; ``done`` tells every caller."""
    try:
        with _ONE_AT_A_TIME:
            if key not in _MIGRATED:
                asyncio.run(migrate(url))
                _MIGRATED.add(key)
    except Exception as exc:
        done.set_exception(exc)
    except BaseException as exc:  # not the callers' own cancellation or exit: a failure
        done.set_exception(RuntimeError(f"migration thread ended: {exc!r}"))
        raise
    else:
        done.set_result(None)
    finally:
        with _RUNNING_LOCK:
            _RUNNING.pop(key, None)
