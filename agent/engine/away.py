"""Turns whose asker left the room while they ran, remembered to tell it if it comes back.

A participant that leaves stops its running turns (:meth:`ProtocolSession.forget`), and
their close goes out while it is away. LiveKit's SDK rejoins a room that was started again
on another node (its node died) as a leave and a join, so the asker comes back, resumes
(§4.9) and would wait for a turn nobody will finish: on its resume it gets a recoverable
ErrorMessage (503) naming each such turn, so it can regenerate it. Bounded: at most
:data:`KEPT` identities, and :data:`KEPT` turns each.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

from alicia.protocol import error_body, new_id
from alicia.protocol import ids as id_prefix

from .participants import TurnCut

if TYPE_CHECKING:
    from .projection import TurnProjection

Emit = Callable[[Any, list[str], Any], Awaitable[Any]]
"""How an envelope goes out to some identities (:meth:`Outbox.emit`)."""

__all__ = ["KEPT", "CutWhileAway"]

KEPT: Final = 8


class CutWhileAway:
    """Identity -> user message ids of its turns stopped because it left."""

    def __init__(self) -> None:
        """Nothing remembered."""
        self._cut: OrderedDict[str, list[str]] = OrderedDict()
        self._noted: OrderedDict[str, None] = OrderedDict()
        """Every turn noted (bounded): a turn is told once, however often its asker left."""

    def note(self, identity: str, turns: Iterable[TurnProjection]) -> None:
        """``identity`` left: its ``turns`` still running are remembered."""
        mine = [t for t in turns if t.request.requester == identity]
        running = [t.request.user_id for t in mine if not t.ended]
        running = [u for u in running if u not in self._noted]
        if not running:
            return
        for user_id in running:
            self._noted[user_id] = None
        while len(self._noted) > KEPT * KEPT:
            self._noted.popitem(last=False)
        cut = self._cut.setdefault(identity, [])
        cut[:] = [*cut, *running][-KEPT:]
        self._cut.move_to_end(identity)
        while len(self._cut) > KEPT:
            self._cut.popitem(last=False)

    async def tell(self, identity: str, conversation_id: str, emit: Emit) -> None:
        """Send ``identity``, as it resumes, one recoverable ErrorMessage (503) per turn of
        its that stopped while it was away (each once)."""
        for user_id in self._cut.pop(identity, []):
            body = error_body(
                TurnCut("the turn stopped while you were away: regenerate it"),
                id=new_id(id_prefix.ERROR),
                conversation_id=conversation_id,
                originating_id=user_id,
            )
            await emit(body, [identity], None)
