"""Schema migrations (Alembic, ``migrations/``) on a URL or an engine."""

from __future__ import annotations

import asyncio
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


async def migrate_once(engine: AsyncEngine) -> None:
    """``migrate(engine)`` unless this process already did it for the engine's database:
    a worker opens a writer per room, and each would otherwise run Alembic again (and
    Alembic cannot run twice at once in one process)."""
    key = engine.url.render_as_string(hide_password=True)
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
