"""What one agent's writes are conditional on (failover): the room's lease epoch and holder.

Its own module so that what carries a fence (spill segments, the lease table, the writer)
imports it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Fence"]


@dataclass(slots=True)
class Fence:
    """What one agent's writes are conditional on: ``room``'s lease still at ``epoch``,
    held by ``identity`` (when given).

    ``epoch`` None: not claimed (the database was away when the agent started), so
    nothing is fenced yet."""

    room: str
    epoch: int | None = None
    identity: str | None = None
