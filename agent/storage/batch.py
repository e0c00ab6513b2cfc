"""One batch of the writer in one transaction, conditional on its fence; on PostgreSQL a
batch of steps only takes the fast path (one asyncpg transaction, no SQLAlchemy)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Final

from sqlalchemy.ext.asyncio import AsyncEngine

from alicia.agent.engine.sink import Fenced

from .dialect import Dialect, StepConflictError
from .errors import StorageRejectedError, StorageUnavailableError, _mapped, map_error
from .leases import Fence, fence_check, fence_check_pg
from .rows import Rows, build_rows
from .spill import Item

__all__ = ["write_batch", "write_steps_fenced"]

_KNOWN_MESSAGES: Final = 20_000


async def write_batch(
    engine: AsyncEngine,
    dialect: Dialect,
    items: Sequence[Item],
    fence: Fence | None,
    known: OrderedDict[str, None],
) -> None:
    """Store ``items`` in one transaction conditional on ``fence`` (raises ``Fenced``).
    ``known``: message ids stored by earlier batches (no placeholder needed), updated."""
    rows = build_rows(items)
    referenced = list(rows.holders)
    for mid in referenced:
        if mid in known:  # stored by an earlier batch: no placeholder needed
            del rows.holders[mid]
    supersede = False
    while True:
        try:
            if not supersede and dialect.only_steps(rows):
                await write_steps_fenced(engine, dialect, rows, fence)
            else:
                async with _mapped(), engine.begin() as conn:
                    await fence_check(conn, fence, postgres=dialect.postgres)
                    await dialect.write(conn, rows, supersede=supersede)
            break
        except StepConflictError:
            if supersede:
                raise
            supersede = True
        except StorageRejectedError:
            if len(rows.holders) == len(referenced):
                raise
            # A message we took as stored may have been deleted meanwhile: forget
            # what we know and try once more with every placeholder.
            known.clear()
            rows = build_rows(items)
    for mid in referenced:
        known[mid] = None
        known.move_to_end(mid)
    while len(known) > _KNOWN_MESSAGES:
        known.popitem(last=False)


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
