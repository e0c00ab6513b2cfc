"""Async Alembic environment for the ``alicia_*`` schema (target: ``alicia.agent.storage.tables``).

The URL comes from, in order: a connection handed over by the caller
(``config.attributes["connection"]``, used by :func:`alicia.agent.storage.migrate`),
``alembic -x url=…``, ``sqlalchemy.url`` in ``alembic.ini``, then ``DATABASE_URL``.
On PostgreSQL every upgrade/downgrade runs in one transaction holding an advisory lock,
so workers starting together do not race on the schema.
"""

from __future__ import annotations

import asyncio
import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection

from alicia.agent.storage.engine import MIGRATION_LOCK_KEY, VERSION_TABLE, create_engine
from alicia.agent.storage.tables import Base

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    url = url or os.environ.get("DATABASE_URL")
    if not url:
        raise RuntimeError("no database URL: pass -x url=..., set sqlalchemy.url or DATABASE_URL")
    return url


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )


def do_run_migrations(connection: Connection) -> None:
    """Run the migrations on a synchronous connection (inside ``run_sync``)."""
    _configure(connection)
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(text(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})"))
        context.run_migrations()


async def _run_async() -> None:
    engine = create_engine(_url(), pooled=False)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(do_run_migrations)
    finally:
        await engine.dispose()


def run_migrations_offline() -> None:
    """Emit the SQL instead of running it (``alembic upgrade head --sql``)."""
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run against a live database: a shared connection if given, else a new engine."""
    connection = config.attributes.get("connection")
    if connection is None:
        asyncio.run(_run_async())
    else:
        do_run_migrations(connection)


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
