"""The writer's PostgreSQL fast path: a batch of steps in one asyncpg transaction."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from alicia.agent.engine.sink import Fenced

from .dialect import Dialect, StepConflictError
from .errors import StorageUnavailableError, _mapped, map_error
from .leases import Fence, fence_check_pg
from .rows import Rows

__all__ = ["write_steps_fenced"]


async def write_steps_fenced(
    engine: AsyncEngine, dialect: Dialect, rows: Rows, fence: Fence | None
) -> None:
    """PostgreSQL fast path for a batch of steps only: one asyncpg transaction (no
    SQLAlchemy statements), conditional on ``fence``. The pool does not see driver errors
    here, so a failed connection is dropped by hand."""
    async with _mapped(), engine.connect() as conn:
        raw = await conn.get_raw_connection()
        apg: Any = raw.driver_connection
        try:
            async with apg.transaction():
                await fence_check_pg(apg, fence)
                await dialect.write_steps(apg, rows)
        except (StepConflictError, Fenced):
            raise  # rolled back; the connection is fine
        except BaseException as exc:
            lost = not isinstance(exc, Exception) or isinstance(
                map_error(exc), StorageUnavailableError
            )
            if lost:
                await conn.invalidate()
            raise
