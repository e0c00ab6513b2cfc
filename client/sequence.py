"""The server's stanza sequence as one client follows it, across agents (PROTOCOL.md §1.3).

The server numbers its envelopes -1, -2, …; an agent that takes over a conversation
continues the sequence past the old agent's last envelope, so one sequence serves every
agent of the conversation. An envelope is a replayed duplicate when its stanzaId was
accepted before (§4.9: clients de-duplicate by stanzaId; a replay overlaps what arrived).
The ids are remembered as a set, not only as a high mark: after a link came back, what
the agent sent into the link going down can arrive *below* what came through the new one
(lost, then replayed), and a high mark would drop it.

A resume (§4.9) tells the agent ``lastSequenceSeen``: the highest id received before the
link or the agent was lost (:meth:`ServerSequence.lost`), not after, so the replay covers
what the dying link may have dropped; what it sends again that had arrived is dropped here.

An envelope can also arrive before the SDK knows its sender (its data outran the
signalling of the agent's rejoining: LiveKit's SDK then names no participant, and an
envelope no one vouches for is not taken). Its |stanzaId| is a hint, never content:
:meth:`ServerSequence.suspect` lowers the next resume's point below it, and the session
resumes, so the agent sends it again as itself. Only a resume started after the hint
clears it (:attr:`ServerSequence.suspects`): a resume in flight, whose answer was the
envelope dropped, does not. Anyone could send such a packet, so only a plausible id is
taken: above the point the last resume asked from (what it covers needs no hint) and at
most :data:`SUSPECT_AHEAD` above the high mark.

A new agent whose *first* envelope is at or below the high mark did not continue the
sequence (a worker that lost it; every envelope of one that continues it, its replies to
the resume first, is above the mark): the sequence restarts from its numbers, or nothing
it sends would ever be accepted.
"""

from __future__ import annotations

import logging
from typing import Final

__all__ = ["REMEMBERED", "SUSPECT_AHEAD", "ServerSequence"]

logger = logging.getLogger(__name__)

REMEMBERED: Final = 2000
"""Stanza ids remembered below the high mark (twice the largest replay an agent makes,
PROTOCOL.md §4.9's 1000): an older one is taken as seen."""
SUSPECT_AHEAD: Final = 100
"""How far above the high mark an unnamed envelope's id is taken as a hint (the agent's
next few envelopes; a forged -2147483647 is not)."""


class ServerSequence:
    """De-duplication and the resume point of the server's envelopes (see the module)."""

    def __init__(self) -> None:
        """No envelope seen yet."""
        self._high = 0
        self._got: set[int] = set()
        self._mark: int | None = None
        self._numbered_by: str | None = None
        """Identity of the agent whose envelopes were accepted last."""
        self._suspect: int | None = None
        self._asked = 0
        """The lastSequenceSeen of the last resume begun (:meth:`asking`)."""
        self._suspect_id: int | None = None
        """|stanzaId| of the lowest envelope suspected: once it arrives, nothing is."""
        self.suspects = 0
        """Envelopes suspected dropped so far (:meth:`suspect`): a resume clears the hint
        only if none came since it began."""
        self.renumbered = 0
        """New agents that did not continue the sequence."""

    @property
    def last_seen(self) -> int:
        """The highest |stanzaId| accepted (0: none)."""
        return self._high

    @property
    def resume_from(self) -> int:
        """The ``lastSequenceSeen`` of the next resume: the high mark when the link or the
        agent was lost (:meth:`lost`), or the current one; below an envelope suspected
        dropped (:meth:`suspect`)."""
        point = self._high if self._mark is None else self._mark
        return point if self._suspect is None else min(point, self._suspect)

    @property
    def suspected(self) -> bool:
        """An envelope may have been dropped that no resume since has asked for and that
        has not arrived since."""
        return self._suspect is not None

    def asking(self) -> tuple[int, int]:
        """A resume begins: its ``lastSequenceSeen`` (:attr:`resume_from`) and the
        :attr:`suspects` so far (for :meth:`resumed`)."""
        self._asked = self.resume_from
        return self._asked, self.suspects

    def lost(self) -> None:
        """The link or the agent is gone: the next resume asks from what arrived by now."""
        if self._mark is None:
            self._mark = self._high

    def suspect(self, stanza_id: int) -> bool:
        """A server envelope numbered ``stanza_id`` came from a sender no one vouches for:
        if it is not held, the next resume asks from below it. True when that is new."""
        n = -stanza_id
        if n <= max(self._asked, self._high - REMEMBERED) or n > self._high + SUSPECT_AHEAD:
            return False
        if n in self._got:
            return False
        if self._suspect_id is None or n < self._suspect_id:
            self._suspect, self._suspect_id = n - 1, n
        self.suspects += 1
        return True

    def resumed(self, suspects: int | None = None) -> None:
        """A resume was answered: the next one asks from the high mark again, and from
        below a suspected envelope only if one came after the resume began (``suspects``:
        :attr:`suspects` when it began; ``None``: it covered them all)."""
        self._mark = None
        if suspects is None or suspects == self.suspects:
            self._suspect = self._suspect_id = None

    def accept(self, agent: str, stanza_id: int) -> bool:
        """True for a new server envelope (``stanza_id`` < 0) from ``agent``; False for a
        duplicate."""
        n = -stanza_id
        if agent != self._numbered_by:
            if self._numbered_by is not None and 0 < n <= self._high:
                logger.warning(
                    "the new agent did not continue the server's stanza sequence",
                    extra={"agent": agent, "stanza": stanza_id, "mark": -self._high},
                )
                self.renumbered += 1
                self._high, self._mark, self._asked = 0, None, 0
                self._suspect = self._suspect_id = None
                self._got.clear()
            self._numbered_by = agent
        if n <= 0 or n in self._got or n <= self._high - REMEMBERED:
            return False
        self._got.add(n)
        if n == self._suspect_id:  # it came after all, named
            self._suspect = self._suspect_id = None
        if n > self._high:
            self._high = n
            if len(self._got) > 2 * REMEMBERED:
                floor = self._high - REMEMBERED
                self._got = {s for s in self._got if s > floor}
        return True
