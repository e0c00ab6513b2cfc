"""The port between a protocol session and whatever runs its turns.

A :class:`~alicia.agent.engine.session.ProtocolSession` speaks the Alicia protocol with the
clients of one conversation; a :class:`TurnSource` runs the turns. Two sources exist:
the engine's own :class:`~alicia.agent.engine.runner.TurnRunner` (queue per participant,
:class:`~alicia.agent.engine.turn.Turn`, stop, variations) and the LiveKit AgentSession bridge
(``agent/session/bridge.py``), where the AgentSession runs the turns itself.

The session decides *whether* something may happen (authorisation, ids, rate limits);
the source only does it. A source reports each turn through the session's
:meth:`~alicia.agent.engine.session.ProtocolSession.open_turn` projection, so both sources send
identical protocol traffic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from .participants import Participant, TurnRequest

__all__ = ["TurnSource"]


class TurnSource(Protocol):
    """What runs the turns of a protocol session."""

    @property
    def tool_use(self) -> bool:
        """Tools may run in this source's turns (the ``tool_use`` feature)."""
        ...

    @property
    def speaks(self) -> bool:
        """Answers are also spoken (StartAnswer ``answerType`` ``text+voice``)."""
        ...

    async def submit(self, p: Participant, request: TurnRequest) -> None:
        """Run a turn for ``request`` (asked by ``p``), now or queued; raise a
        :class:`~alicia.protocol.ProtocolError` if it cannot be taken."""
        ...

    def queued_owner(self, user_id: str) -> str | None:
        """Who asked the waiting (not yet started) turn of ``user_id``, if any."""
        ...

    def drop_queued(self, user_id: str) -> bool:
        """Drop the waiting turn of ``user_id``; True if there was one."""
        ...

    def interrupt_speech(self, may_stop: Callable[[str | None], bool]) -> None:
        """Stop what is being said now (ControlStop ``speech``/``all``) if ``may_stop``
        allows it for the participant whose turn it is said for (None: nobody's)."""
        ...

    def forget(self, identity: str) -> None:
        """``identity`` left the room: drop what it still had waiting."""
        ...

    async def aclose(self) -> None:
        """Stop every task of the source and wait for them."""
        ...
