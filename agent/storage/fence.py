"""What one agent's writes are conditional on (failover): the room's lease epoch and holder.

Its own module so that what carries a fence (spill segments, the lease table, the writer)
imports it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["NO_EPOCH", "Fence"]

NO_EPOCH: Final = 0
"""An epoch no lease has (claims start at 1): a fence at it holds only while nobody ever
claimed the room (a hold that lost its late claim; a spilled segment of an agent that
never claimed)."""


@dataclass(slots=True)
class Fence:
    """What one agent's writes are conditional on: ``room``'s lease still at ``epoch``,
    held by ``identity`` (when given).

    ``epoch`` None: not claimed (the database was away when the agent started), so
    nothing is fenced yet."""

    room: str
    epoch: int | None = None
    identity: str | None = None

    def for_adoption(self) -> Fence:
        """The fence another process's writer checks for records spilled under this one:
        the epoch only (a lease released or forgotten keeps its epoch and loses its
        holder, and no other agent took the room then); never claimed: :data:`NO_EPOCH`."""
        return Fence(self.room, NO_EPOCH if self.epoch is None else self.epoch)
