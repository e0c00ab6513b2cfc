"""Optional persistence of protocol traffic (SQLAlchemy async: asyncpg or aiosqlite).

* ``tables.py``: the ``alicia_*`` tables (Alembic's target, ``migrations/``).
* ``writer.py``: :class:`~alicia.agent.storage.writer.StorageWriter`, the engine's
  :class:`~alicia.agent.engine.sink.StepSink` on a database: bounded queue, batched COPY, spill
  files during outages; ``migrate``.
* ``rows.py``: envelopes to table rows. ``dialect.py``: the SQL for Postgres and SQLite.
* ``spill.py``: fsync'd spill segments, each with the fence it was queued under.
* ``batch.py``: one batch in one fenced transaction. ``engine.py``: engine and URL checks.
* ``stats.py``: ``alicia-stats``, analytics from the views.
"""
