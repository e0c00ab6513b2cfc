"""How a :class:`~alicia.agent.storage.writer.StorageWriter` is tuned, what it counts, and
where it spills."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.engine import make_url

if TYPE_CHECKING:
    from .leases import Fence

__all__ = ["WriterOptions", "WriterStats", "default_spill_root"]


def default_spill_root(url: str) -> Path:
    """``~/.local/state/alicia/spill/<database hash>``: one spill area per database."""
    safe = make_url(url).render_as_string(hide_password=True)
    digest = hashlib.sha256(safe.encode()).hexdigest()[:16]
    return Path.home() / ".local" / "state" / "alicia" / "spill" / digest


@dataclass(frozen=True, slots=True, kw_only=True)
class WriterOptions:
    """Tuning of :class:`StorageWriter`; the defaults suit one worker process."""

    spill_dir: Path | None = None
    """Spill root (default :func:`default_spill_root` of the URL). Writers on the same
    database must share it so a restarted worker replays what the last one left."""
    batch_size: int = 5000
    """Records per transaction at most."""
    linger_s: float = 1.0
    """How long a batch waits to fill once its first record is queued."""
    max_memory_records: int = 100_000
    """Queued records kept in memory before the oldest move to the spill file."""
    max_memory_bytes: int = 64 * 1024 * 1024
    """Approximate text bytes kept in memory before spilling."""
    spill_chunk: int = 10_000
    """Records per spill segment at most."""
    retry_initial_s: float = 0.1
    """First retry delay after a failed write; doubles up to ``retry_max_s``."""
    retry_max_s: float = 5.0
    """Longest delay between retries."""
    close_timeout_s: float = 10.0
    """:meth:`StorageWriter.aclose` writes for at most this long, then spills the rest."""
    query_timeout_s: float = 2.0
    """Time limit of :meth:`StorageWriter.last_step_index`'s database query."""
    copy_min_rows: int = 256
    """PostgreSQL: batches with at least this many steps use COPY, smaller ones unnest."""
    migrate: bool = True
    """Run ``alembic upgrade head`` on the first successful connection."""
    pool_size: int = 5
    """PostgreSQL: connections at most, opened when needed, shared by the writers of one
    event loop on the same database (a thread-executor worker's text rooms: one pool for
    them all; ``ALICIA_DB_POOL_SIZE``). SQLite: the writer's own engine's pool."""
    step_chains: int = 100_000
    """Chains whose last submitted step index is remembered (for seeding)."""
    fence: Fence | None = None
    """Failover: every transaction is conditional on this room's lease epoch; once
    another agent holds the room, nothing more is written (``durable`` raises ``Fenced``)."""

    def __post_init__(self) -> None:
        for name in ("batch_size", "max_memory_records", "max_memory_bytes", "spill_chunk"):
            if getattr(self, name) < 1:
                raise ValueError(f"WriterOptions.{name} must be at least 1")
        if min(self.linger_s, self.retry_initial_s, self.close_timeout_s) < 0:
            raise ValueError("WriterOptions times must not be negative")
        if self.retry_initial_s <= 0:
            raise ValueError("WriterOptions.retry_initial_s must be above 0")
        if self.retry_max_s < self.retry_initial_s or self.query_timeout_s <= 0:
            raise ValueError("WriterOptions: retry_max_s >= retry_initial_s, query_timeout_s > 0")


@dataclass(slots=True)
class WriterStats:
    """Counters of one writer, for tests, logs and benchmarks."""

    submitted: int = 0
    written: int = 0
    batches: int = 0
    retries: int = 0
    spilled: int = 0
    replayed: int = 0
    dead_lettered: int = 0
    last_error: str | None = None
