"""Stanza counters: one per side per conversation (PROTOCOL.md §1.3, our rule).

The client numbers its envelopes 1, 2, 3, …; the server -1, -2, -3, …. A receiver
checks that each id from a sender rises in magnitude above every earlier one.
Both can be seeded from stored marks (``last_client_stanza_id`` /
``last_server_stanza_id``) so a restart continues the sequence.
"""

from __future__ import annotations

import threading
from typing import Literal

from .errors import OrderingError

__all__ = ["StanzaCounter", "StanzaOrder"]

Side = Literal["client", "server"]


class StanzaCounter:
    """Hands out the next stanzaId for one side of one conversation (thread-safe)."""

    def __init__(self, side: Side, *, last: int = 0) -> None:
        """``last`` is the last id this side sent (0 for none; negative for the server)."""
        self._sign = 1 if side == "client" else -1
        if last * self._sign < 0:
            raise ValueError(f"a {side} stanzaId cannot be {last}")
        self._n = abs(last)
        self._lock = threading.Lock()

    @property
    def last(self) -> int:
        """The last id handed out (0 if none)."""
        return self._n * self._sign

    def next(self) -> int:
        """The next stanzaId: 1, 2, 3 … for a client, -1, -2, -3 … for the server."""
        with self._lock:
            self._n += 1
            return self._n * self._sign


class StanzaOrder:
    """Checks the stanzaIds received from one sender; rejects ids that do not rise.

    Gaps are allowed (only the order is checked); thread-safe.
    """

    def __init__(self, side: Side, *, last: int = 0) -> None:
        """``side`` is the *sender's* side; ``last`` its last accepted id (0 for none)."""
        self._sign = 1 if side == "client" else -1
        if last * self._sign < 0:
            raise ValueError(f"a {side} stanzaId cannot be {last}")
        self._n = abs(last)
        self._lock = threading.Lock()

    @property
    def last(self) -> int:
        """The highest id accepted so far, with the sender's sign (0 if none)."""
        return self._n * self._sign

    def check(self, stanza_id: int) -> None:
        """Accept ``stanza_id`` or raise :class:`OrderingError` (wrong sign or not rising)."""
        magnitude = stanza_id * self._sign
        with self._lock:
            if magnitude <= self._n:
                raise OrderingError(stanza_id, self.last)
            self._n = magnitude

    def seen(self, stanza_id: int) -> bool:
        """True if ``stanza_id`` is at or below the high mark (a replayed duplicate)."""
        return 0 < stanza_id * self._sign <= self._n
