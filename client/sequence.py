"""The server's stanza sequence as one client follows it, across agents (PROTOCOL.md §1.3).

The server numbers its envelopes -1, -2, …; an agent that takes over a conversation
continues the sequence past the old agent's last envelope, so one high mark serves every
agent of the conversation: an envelope at or below it is a replayed duplicate, and the
mark is the ``lastSequenceSeen`` of a resume (§4.9).

A new agent whose *first* envelope is at or below the mark did not continue the sequence
(a worker that lost it; every envelope of one that continues it, its replies to the
resume first, is above the mark): the mark restarts from its numbers, or nothing it sends
would ever be accepted.
"""

from __future__ import annotations

import logging

from alicia.protocol import StanzaOrder

__all__ = ["ServerSequence"]

logger = logging.getLogger(__name__)


class ServerSequence:
    """High mark and de-duplication of the server's envelopes (see the module docstring)."""

    def __init__(self) -> None:
        """No envelope seen yet."""
        self._order = StanzaOrder("server")
        self._numbered_by: str | None = None
        """Identity of the agent whose envelopes set the mark last."""
        self.renumbered = 0
        """New agents that did not continue the sequence."""

    @property
    def last_seen(self) -> int:
        """The highest |stanzaId| accepted (0: none)."""
        return abs(self._order.last)

    def accept(self, agent: str, stanza_id: int) -> bool:
        """True for a new server envelope from ``agent``; False for a duplicate."""
        if agent != self._numbered_by:
            if self._numbered_by is not None and self._order.seen(stanza_id):
                logger.warning(
                    "the new agent did not continue the server's stanza sequence",
                    extra={"agent": agent, "stanza": stanza_id, "mark": self._order.last},
                )
                self.renumbered += 1
                self._order = StanzaOrder("server")
            self._numbered_by = agent
        if self._order.seen(stanza_id):
            return False
        self._order.check(stanza_id)
        return True
