"""Database errors at the storage boundary, mapped to the writer's exception tree.

SQLAlchemy/asyncpg/sqlite errors never leave :mod:`alicia.agent.storage`: :func:`map_error` turns
them into :class:`StorageUnavailableError` (retry later) or :class:`StorageRejectedError`
(the data itself is refused), by SQLSTATE class where the driver gives one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Final

from sqlalchemy import exc as sa_exc

from .dialect import StepConflictError

__all__ = [
    "StorageError",
    "StorageRejectedError",
    "StorageUnavailableError",
    "map_error",
]


class StorageError(Exception):
    """A database operation failed (see the module docstring for the tree)."""


class StorageUnavailableError(StorageError):
    """The database cannot be reached right now; retrying later may succeed."""


class StorageRejectedError(StorageError):
    """The database refused the data itself (constraint or value); retrying cannot help."""


_UNAVAILABLE_SQLSTATE_CLASSES: Final = ("08", "53", "57", "40", "58", "XX")
_REJECTED_SQLSTATE_CLASSES: Final = ("22", "23")


def _sqlstate(exc: BaseException) -> str | None:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        for attr in ("sqlstate", "pgcode"):
            code = getattr(cur, attr, None)
            if isinstance(code, str) and len(code) == 5:
                return code
        nxt = getattr(cur, "orig", None)
        cur = nxt if isinstance(nxt, BaseException) else cur.__cause__
    return None


def map_error(exc: BaseException) -> StorageError:
    """Translate a driver/SQLAlchemy/OS error into our :class:`StorageError` tree."""
    if isinstance(exc, StorageError):
        return exc
    msg = f"{type(exc).__name__}: {exc}"
    state = _sqlstate(exc)
    if state is not None:
        if state[:2] in _REJECTED_SQLSTATE_CLASSES:
            return StorageRejectedError(msg)
        if state[:2] in _UNAVAILABLE_SQLSTATE_CLASSES:
            return StorageUnavailableError(msg)
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return StorageUnavailableError(msg)
    if isinstance(exc, sa_exc.IntegrityError | sa_exc.DataError):
        return StorageRejectedError(msg)
    if isinstance(exc, sa_exc.StatementError) and not isinstance(exc, sa_exc.DBAPIError):
        return StorageRejectedError(msg)  # a value could not even be bound (e.g. JSON)
    if isinstance(exc, UnicodeError):
        return StorageRejectedError(msg)  # raised by the driver while encoding a value
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.TimeoutError):
        return StorageUnavailableError(msg)
    if isinstance(exc, OSError | TimeoutError | ConnectionError | EOFError):
        return StorageUnavailableError(msg)
    module = type(exc).__module__
    if module.startswith("asyncpg") and (
        "Connection" in type(exc).__name__ or "Interface" in type(exc).__name__
    ):
        return StorageUnavailableError(msg)
    return StorageError(msg)


def _from_database(exc: BaseException) -> bool:
    # Errors of the database layer (mapped); anything else is a bug and propagates as is.
    if isinstance(exc, sa_exc.SQLAlchemyError | OSError | TimeoutError | EOFError | UnicodeError):
        return True
    module = type(exc).__module__
    return module.startswith(("asyncpg", "sqlite3", "aiosqlite", "alembic"))


@contextlib.asynccontextmanager
async def _mapped() -> AsyncIterator[None]:
    try:
        yield
    except (asyncio.CancelledError, KeyboardInterrupt, SystemExit, MemoryError):
        raise
    except StepConflictError:
        raise  # handled by the writer (superseding retry), never seen outside
    except Exception as exc:
        if not _from_database(exc):
            raise
        raise map_error(exc) from exc


# --------------------------------------------------------------------------- options
