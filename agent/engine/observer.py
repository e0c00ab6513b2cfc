"""The answer observer port: the public side of each turn, for a front end's own conventions.

A :class:`~alicia.agent.engine.session.ProtocolSession` tells every
:class:`AnswerObserver` in its :attr:`~alicia.agent.engine.session.ProtocolSession.observers`
when a turn opens (the model is working), when its answer begins, each answer sentence
and when the turn is closed. The LiveKit worker uses it to speak LiveKit's agent
conventions in text rooms (``agent/rooms/conventions.py``: ``lk.transcription`` streams and
the ``lk.agent.state`` attribute).

Reasoning never passes through this port: an observer sees answer text only, which is
what every participant of the room may read. The methods are synchronous and must not
block: the turn waits for them.
"""

from __future__ import annotations

from typing import Protocol

from .events import TurnStatus
from .participants import TurnRequest

__all__ = ["AnswerObserver"]


class AnswerObserver(Protocol):
    """Sees every turn of a session without its reasoning (see the module docstring)."""

    def turn_opened(self, answer_id: str, request: TurnRequest) -> None:
        """A turn began: the model reads, reasons or calls tools; ``answer_id`` names it."""
        ...

    def answer_opened(self, answer_id: str) -> None:
        """The answer of ``answer_id``'s turn begins (also for an empty answer)."""
        ...

    def answer_sentence(self, answer_id: str, text: str) -> None:
        """One sentence of the answer, in order (never empty)."""
        ...

    def turn_closed(self, answer_id: str, status: TurnStatus) -> None:
        """The turn is over: nothing more of ``answer_id`` follows."""
        ...
