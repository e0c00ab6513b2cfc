"""The telemetry port: what an operator may see of each turn, without its content.

A :class:`~alicia.agent.engine.session.ProtocolSession` opens a :class:`TurnTrace` per
turn through its :attr:`~alicia.agent.engine.session.ProtocolSession.telemetry` and tells
it, as the turn goes: each reasoning step as it goes out (its index, its length and how
many participants got it at each level; its text only when the telemetry's
:attr:`TurnTelemetry.content` asks for it), each tool call (by name), the answer's start,
and the turn's end (status, token usage, time to first reasoning).
``alicia.agent.telemetry`` implements it with OpenTelemetry; :data:`NO_TELEMETRY` is the
default and does nothing.

The methods are synchronous and must not block: the turn waits for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, Protocol

from .events import TurnStatus, Usage

__all__ = ["NO_TELEMETRY", "NoTelemetry", "TraceContent", "TurnTelemetry", "TurnTrace"]

TraceContent = Literal["none", "summary", "full"]
"""What reasoning a trace may carry: none (the default), each step's summary, or all."""


class TurnTrace(Protocol):
    """One turn, seen by telemetry (see the module docstring)."""

    def step_sent(
        self, index: int, length: int, recipients: Mapping[str, int], text: str | None
    ) -> None:
        """Step ``index`` went out: ``length`` characters, ``recipients`` per level
        (``full``, ``summary``, ``encrypted``); ``text``: what :attr:`TurnTelemetry.content`
        allows of it (None under ``none``)."""
        ...

    def tool_called(self, name: str) -> None:
        """The model called the tool ``name``."""
        ...

    def within(self, parent: object) -> None:
        """The host framework's trace context (opaque here) to nest the turn under, if
        it has one (an AgentSession's LLM request); before the turn's first step."""
        ...

    def answer_started(self) -> None:
        """The answer began."""
        ...

    def ended(
        self, status: TurnStatus, usage: Usage | None, first_reasoning_ms: float | None
    ) -> None:
        """The turn is over; nothing more follows."""
        ...


class TurnTelemetry(Protocol):
    """Opens a :class:`TurnTrace` per turn; counts what a conversation refuses and says."""

    @property
    def content(self) -> TraceContent:
        """What reasoning the traces may carry."""
        ...

    def turn_opened(self, conversation_id: str, answer_id: str, model: str) -> TurnTrace:
        """A turn of ``conversation_id`` began (its answer will be ``answer_id``)."""
        ...

    def refused(self, reason: str) -> None:
        """Input was refused or dropped: an ErrorMessage's code, or why it was dropped."""
        ...

    def remark_spoken(self, level: str) -> None:
        """A progress remark went out, made at ``level`` (``cue`` or ``summary``)."""
        ...


class NoTelemetry:
    """Telemetry off: every call does nothing."""

    @property
    def content(self) -> TraceContent:
        """No reasoning."""
        return "none"

    def turn_opened(self, conversation_id: str, answer_id: str, model: str) -> TurnTrace:
        """A trace that records nothing."""
        return self

    def refused(self, reason: str) -> None:
        """Nothing."""

    def remark_spoken(self, level: str) -> None:
        """Nothing."""

    def step_sent(
        self, index: int, length: int, recipients: Mapping[str, int], text: str | None
    ) -> None:
        """Nothing."""

    def tool_called(self, name: str) -> None:
        """Nothing."""

    def within(self, parent: object) -> None:
        """Nothing."""

    def answer_started(self) -> None:
        """Nothing."""

    def ended(
        self, status: TurnStatus, usage: Usage | None, first_reasoning_ms: float | None
    ) -> None:
        """Nothing."""


NO_TELEMETRY: Final = NoTelemetry()
"""The session's default telemetry."""
