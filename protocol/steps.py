"""``stepIndex`` bookkeeping: 1, 2, 3, … per ``previousId`` (PROTOCOL.md §4.3).

Eviction policy (bounded memory):

* :meth:`StepTracker.finish` drops a chain at once (the worker calls it when the
  turn's answer starts or the turn ends).
* A chain not advanced for ``idle_seconds`` (default 1 h) is dropped.
* At most ``max_chains`` (default 10 000) chains are kept; past that the least
  recently advanced chain is dropped.

A dropped chain that is advanced again restarts at 1 unless it is seeded first:
:meth:`StepTracker.seed` sets the last index of a chain (e.g. from stored steps after a
restart) so the chain continues instead of restarting. After ``regenerate`` the same
user message gets a new chain that continues the count (our rule, §6.10): indexes stay
unique per ``previousId`` in storage.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["StepLimitError", "StepTracker"]


class StepLimitError(ValueError):
    """The chain already reached its announced ``totalSteps``."""


class _Chain:
    __slots__ = ("last", "total", "touched")

    def __init__(self, last: int, total: int | None, now: float) -> None:
        self.last = last
        self.total = total
        self.touched = now


class StepTracker:
    """Assigns step indexes per chain; safe to share between threads and tasks."""

    def __init__(
        self,
        *,
        max_chains: int = 10_000,
        idle_seconds: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_chains < 1:
            raise ValueError("max_chains must be at least 1")
        self._max = max_chains
        self._idle = idle_seconds
        self._clock = clock
        self._chains: OrderedDict[str, _Chain] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._chains)

    def __contains__(self, previous_id: object) -> bool:
        return previous_id in self._chains

    def next_index(self, previous_id: str, *, total_steps: int | None = None) -> int:
        """The next ``stepIndex`` of ``previous_id``'s chain (1 for a new chain).

        ``total_steps`` records the plan; going past it raises :class:`StepLimitError`.
        """
        with self._lock:
            now = self._clock()
            chain = self._chains.get(previous_id)
            if chain is None:
                chain = _Chain(0, total_steps, now)
                self._chains[previous_id] = chain
            else:
                self._chains.move_to_end(previous_id)
                if total_steps is not None:
                    chain.total = total_steps
            if chain.total is not None and chain.last >= chain.total:
                raise StepLimitError(
                    f"chain {previous_id!r} already has its {chain.total} planned steps"
                )
            chain.last += 1
            chain.touched = now
            self._evict(now)
            return chain.last

    def last_index(self, previous_id: str) -> int:
        """The last index handed out for the chain (0 if unknown)."""
        chain = self._chains.get(previous_id)
        return 0 if chain is None else chain.last

    def seed(self, previous_id: str, last_index: int) -> None:
        """Continue ``previous_id``'s chain after ``last_index`` (never moves it back)."""
        if last_index < 0:
            raise ValueError("last_index must be >= 0")
        with self._lock:
            now = self._clock()
            chain = self._chains.get(previous_id)
            if chain is None:
                self._chains[previous_id] = _Chain(last_index, None, now)
            else:
                chain.last = max(chain.last, last_index)
                chain.touched = now
                self._chains.move_to_end(previous_id)
            self._evict(now)

    def finish(self, previous_id: str) -> None:
        """Forget a finished chain."""
        with self._lock:
            self._chains.pop(previous_id, None)

    def _evict(self, now: float) -> None:
        chains = self._chains
        while len(chains) > self._max:
            chains.popitem(last=False)
        # Oldest first: stop at the first chain that is still fresh.
        while chains:
            key, oldest = next(iter(chains.items()))
            if now - oldest.touched < self._idle:
                break
            del chains[key]
