"""Questions the agent has not yet been heard to receive, and when to send them again.

A data packet can be lost while a link is being rebuilt (the agent's, after its
livekit-server node died, say): LiveKit's reliable delivery holds within one
connection, not across a reconnection. A UserMessage lost so leaves a turn that nobody
starts. So a client repeats each question until the agent shows it has it: anything for
its turn (a step, a tool call, the answer, an error), or an Acknowledgement naming it.

- While the question is still the last envelope this client sent, the repeat is the same
  envelope (same stanzaId): an agent that had it drops it as a resend, silently.
- Once something else went out after it (a resume's Configuration, another question), the
  same body goes out under a new stanzaId (stanzaIds must rise): an agent that had it
  refuses the id (ErrorMessage 204, ``duplicate_id``), which tells the client it has it
  (no more repeats) and is noise otherwise (:meth:`UnheardQuestions.is_noise`; every 204
  about it, a late one for an earlier repeat too).

Whether a repeat is the same envelope is decided as it goes out (:meth:`Repeat.verbatim`):
another question's repeat may have gone out just before.

At most :data:`REPEATS_MAX` repeats per question, one per :data:`REPEAT_INTERVAL_S`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from alicia.protocol import Envelope, ErrorCode, ErrorMessage

__all__ = ["REPEATS_MAX", "REPEAT_INTERVAL_S", "Repeat", "UnheardQuestions"]

REPEAT_INTERVAL_S: Final = 1.0
"""Seconds between repeats of a question the agent has not been heard to receive."""
REPEATS_MAX: Final = 30
"""Repeats of one question before the client stops (the turn's own timeout then says)."""
REASKED_KEPT: Final = 64
"""Questions sent again whose refusal as a duplicate is still expected (oldest dropped)."""


@dataclass(frozen=True, slots=True)
class Repeat:
    """One question to send again: the same ``envelope``, or its body under a new
    stanzaId."""

    message_id: str
    envelope: Envelope[Any]

    def verbatim(self, last_stanza: int) -> bool:
        """The same envelope goes again: it is still the last one sent (``last_stanza``)."""
        return self.envelope.stanza_id == last_stanza


@dataclass(slots=True)
class _Pending:
    envelope: Envelope[Any]
    repeats: int = 0


class UnheardQuestions:
    """The questions sent whose turns have not been heard of yet (see the module)."""

    def __init__(self) -> None:
        self._pending: dict[str, _Pending] = {}
        self._reasked: dict[str, None] = {}
        """Ids sent again under a new stanzaId, oldest first (a set in insertion order)."""

    def __bool__(self) -> bool:
        return bool(self._pending)

    def sent(self, message_id: str, env: Envelope[Any]) -> None:
        """The question ``message_id`` went out in ``env`` (first time, or again under a
        new stanzaId)."""
        pending = self._pending.get(message_id)
        if pending is None:
            self._pending[message_id] = _Pending(env)
        else:
            pending.envelope = env
            self._reasked[message_id] = None
            while len(self._reasked) > REASKED_KEPT:
                del self._reasked[next(iter(self._reasked))]

    def heard(self, message_id: str | None) -> None:
        """The agent has ``message_id`` (an Acknowledgement named it, say): no more repeats."""
        if message_id is not None:
            self._pending.pop(message_id, None)

    def is_noise(self, error: ErrorMessage) -> bool:
        """``error`` is the agent refusing the id of a question sent again: it had it."""
        mid = error.originating_id
        if error.code != ErrorCode.DUPLICATE_ID or mid is None or mid not in self._reasked:
            return False
        self.heard(mid)  # kept in _reasked: a later repeat's 204 may still come
        return True

    def due(self, heard_of: Callable[[str], bool]) -> list[Repeat]:
        """The questions to send again now, dropping those ``heard_of`` (the agent sent
        something for the turn, or it is gone) or repeated :data:`REPEATS_MAX` times."""
        out: list[Repeat] = []
        for mid, pending in list(self._pending.items()):
            if heard_of(mid) or pending.repeats >= REPEATS_MAX:
                del self._pending[mid]
                continue
            pending.repeats += 1
            out.append(Repeat(mid, pending.envelope))
        return out
