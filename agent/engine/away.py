"""Turns whose asker left the room while they ran: each named to it once, in the sent log.

A participant that leaves stops its running turns (:meth:`ProtocolSession.forget`), and
their close goes out while it is away. LiveKit's SDK rejoins a room that was started again
on another node (its node died) as a leave and a join, so the asker comes back, resumes
(§4.9) and would wait for a turn nobody will finish. So as it leaves, a recoverable
ErrorMessage (503) naming each such turn is sent to it: logged like every envelope, it is
replayed when it resumes, here or from storage on the agent that takes the room over (the
agent that saw it leave may die with the node: a 503 only remembered in its memory was
lost with it, and the asker waited for its turn for ever). Each turn once: at most
``KEPT * KEPT`` turns remembered.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from alicia.protocol import ErrorMessage, error_body, new_id
from alicia.protocol import ids as id_prefix

from .participants import TurnCut

if TYPE_CHECKING:
    from .projection import TurnProjection

__all__ = ["KEPT", "CutWhileAway"]

KEPT: Final = 8


class CutWhileAway:
    """The turns already named to their askers as cut (bounded)."""

    def __init__(self) -> None:
        """Nothing noted."""
        self._noted: OrderedDict[str, None] = OrderedDict()

    def note(self, identity: str, turns: Iterable[TurnProjection]) -> list[str]:
        """``identity`` left: the user message ids of its ``turns`` still running that were
        not named before (however often it left while their stop was under way)."""
        mine = [t for t in turns if t.request.requester == identity]
        running = [t.request.user_id for t in mine if not t.ended]
        running = [u for u in running if u not in self._noted][-KEPT:]
        for user_id in running:
            self._noted[user_id] = None
        while len(self._noted) > KEPT * KEPT:
            self._noted.popitem(last=False)
        return running

    @staticmethod
    def error(conversation_id: str, user_id: str) -> ErrorMessage:
        """The recoverable ErrorMessage (503) that names ``user_id``'s turn as cut."""
        return error_body(
            TurnCut("the turn stopped while you were away: regenerate it"),
            id=new_id(id_prefix.ERROR),
            conversation_id=conversation_id,
            originating_id=user_id,
        )
