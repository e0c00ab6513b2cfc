"""The storage writer's tests: a migrated database per module and backend (PostgreSQL on
the session's real server, SQLite embedded), emptied before every test."""

from __future__ import annotations

from pathlib import Path

import pytest

from alicia.agent.storage.writer import WriterOptions, migrate
from tests.support.db import clear, new_database


@pytest.fixture(scope="module", params=["postgres", "sqlite"])
async def migrated(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh, migrated database for the module, named after the module's
    ``DATABASE_PREFIX`` (default ``storage``)."""
    pg = request.getfixturevalue("postgres_server") if request.param == "postgres" else None
    prefix = getattr(request.module, "DATABASE_PREFIX", "storage")
    url = await new_database(request.param, pg, tmp_path_factory.mktemp("db"), prefix)
    await migrate(url)
    return url


@pytest.fixture
async def url(migrated: str) -> str:
    """The module's database, emptied."""
    await clear(migrated)
    return migrated


@pytest.fixture
def options(tmp_path: Path) -> WriterOptions:
    """Writer options for tests: a spill folder of the test's own, short waits, no
    migration (``migrated`` did it)."""
    return WriterOptions(
        spill_dir=tmp_path / "spill",
        linger_s=0.005,
        retry_initial_s=0.05,
        retry_max_s=0.2,
        close_timeout_s=2.0,
        migrate=False,
    )
